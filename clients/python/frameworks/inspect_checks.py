"""Run by run_frameworks.py under INSPECT_PYTHON: Inspect's own entry-point loading and registry find the
``roboguide`` provider, then every test of Inspect's ``self_check`` runs against one of its sandboxes.
One JSON line per check; exit 3 when inspect_ai cannot be imported."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import traceback

try:
    from inspect_ai._util.entrypoints import ensure_entry_points  # type: ignore[import-not-found]
    from inspect_ai.util._sandbox import self_check  # type: ignore[import-not-found]
    from inspect_ai.util._sandbox.registry import registry_find_sandboxenv  # type: ignore[import-not-found]
except Exception as err:  # noqa: BLE001
    print(f"import failed: {type(err).__name__}: {err}")
    sys.exit(3)


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
    config = provider.config_deserialize({"image": os.environ["RG_IMAGE"], "user": "agent", "workdir": "/home/agent"})
    envs = await provider.sample_init("rg-frameworks", config, {})
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
