"""Run by run_frameworks.py under INSPECT_PYTHON: Inspect's own entry-point loading and registry find the
``roboguide`` provider, then every test of Inspect's ``self_check`` runs against one of its sandboxes.
One JSON line per check; exit 3 when inspect_ai cannot be imported."""

from __future__ import annotations

import asyncio
import importlib
import importlib.abc
import importlib.util
import types
import json
import os
import sys
import traceback

# Load shims: libraries Inspect imports at load time but that its sandbox code never calls (log files, the TUI,
# version parsing) stand in as placeholder modules when they are not installed; a real use of one fails loudly.
SHIMMED = ["shortuuid", "jsonlines", "ijson", "semver", "textual"]


class _Missing:
    def __init__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("this library is not installed (load shim of the framework runner)")

    def __init_subclass__(cls, **kwargs: object) -> None:
        return None


class _Shim(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, roots: set[str]) -> None:
        self.roots = roots

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> object:
        if fullname.split(".", 1)[0] in self.roots:
            return importlib.util.spec_from_loader(fullname, self, is_package=True)
        return None

    def create_module(self, spec: object) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        module.__path__ = []  # type: ignore[attr-defined]
        module.__getattr__ = lambda name: _Missing if not name.startswith("__") else (_ for _ in ()).throw(AttributeError(name))  # type: ignore[attr-defined]


_missing: set[str] = set()
for _name in SHIMMED:
    try:
        importlib.import_module(_name)
    except ImportError:
        _missing.add(_name)
_shim = _Shim(_missing)
sys.meta_path.append(_shim)

for _attempt in range(40):
    try:
        from inspect_ai._util.entrypoints import ensure_entry_points  # type: ignore[import-not-found]
        from inspect_ai.util._sandbox import self_check  # type: ignore[import-not-found]
        from inspect_ai.util._sandbox.registry import registry_find_sandboxenv  # type: ignore[import-not-found]

        break
    except ModuleNotFoundError as err:
        top = (err.name or "").split(".", 1)[0]
        if not top or top == "inspect_ai" or top in _shim.roots:
            print(f"import failed: {type(err).__name__}: {err}")
            sys.exit(3)
        _shim.roots.add(top)  # a third-party library Inspect imports at load time but is not installed here
        for mod in [m for m in sys.modules if m == "inspect_ai" or m.startswith("inspect_ai.")]:
            del sys.modules[mod]
    except Exception as err:  # noqa: BLE001
        print(f"import failed: {type(err).__name__}: {err}")
        sys.exit(3)
else:
    print("import failed: too many missing libraries")
    sys.exit(3)
print(f"load shims: {sorted(_shim.roots)}", file=sys.stderr)


def row(check: str, ok: bool, detail: str = "") -> None:
    print(json.dumps({"check": check, "ok": ok, "detail": detail[:300]}), flush=True)


async def main() -> None:
    try:
        ensure_entry_points()
        provider = registry_find_sandboxenv("roboguide")
        row("found through the inspect_ai entry point and Inspect's registry", provider.__name__ == "RoboguideSandboxEnvironment", provider.__name__)
    except Exception as err:  # noqa: BLE001
        row("found through the inspect_ai entry point and Inspect's registry", False, f"{type(err).__name__}: {err}")
        return
    try:
        config = provider.config_deserialize({"image": os.environ["RG_IMAGE"], "user": os.environ.get("RG_INSPECT_USER", "agent") or None, "workdir": "/home/agent"})
        envs = await provider.sample_init("rg-frameworks", config, {})
        row("sample_init (session as user agent, workdir /home/agent)", True)
    except Exception as err:  # noqa: BLE001
        row("sample_init (session as user agent, workdir /home/agent)", False, f"{type(err).__name__}: {err}")
        return
    try:
        results = await self_check.self_check(envs["default"])
        for name, outcome in results.items():
            row(f"self_check {name}", outcome is True, "" if outcome is True else str(outcome))
    except Exception:  # noqa: BLE001
        row("self_check ran", False, traceback.format_exc()[-300:])
    finally:
        await provider.sample_cleanup("rg-frameworks", config, envs, False)
    from roboguide_eval import Client

    left = [s for s in Client(os.environ["ROBOGUIDE_EVAL_SOCKET"]).list_sessions() if "inspect.sample" in (s.get("labels") or {})]
    row("sample_cleanup deleted the sandbox", not left, str(left))


if __name__ == "__main__":
    asyncio.run(main())
