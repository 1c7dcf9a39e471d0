"""``npm run test:frameworks``: the adapters driven by the REAL framework code, against a real server and engine.

HARBOR_SRC (a checkout of Harbor), SFORGE_SRC (a checkout of EdgeBench, which holds SForge) and INSPECT_SRC (a
checkout of inspect_ai) point at the frameworks' sources; each one that is unset is reported as SKIPPED. The sources
are copied to a temporary folder at run time and only load shims are applied there (never to the checkout, never
committed here): Harbor's ``harbor/__init__.py`` emptied, ``TypedDict``/``NotRequired`` taken from
``typing_extensions`` (pydantic on Python < 3.12), f-string fields split over lines joined (Python < 3.12), and
placeholder modules for ``litellm``, ``shortuuid``, ``toml`` and ``dirhash`` when they are not installed (litellm's
names fail when used, its model tables are empty; shortuuid's ids, toml's reading and dirhash's directory hash
come from the standard library); other Harbor dependencies (pydantic, rich, tenacity, …) must be installed:
FRAMEWORKS_PYTHON picks the interpreter ``npm run test:frameworks`` uses; Inspect's
``inspect_ai/__init__.py`` emptied. Inspect needs its own dependencies (anyio, httpx, rich, …): set
INSPECT_PYTHON to a Python that has them (default: this one); without them Inspect is reported as SKIPPED with
the missing module named.

Prints a table framework × check → pass/FAIL and the counts; exits 1 when a check failed.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.abc
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types
import uuid
import warnings
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
PY_ROOT = HERE.parent
sys.path.insert(0, str(PY_ROOT))

from tests.serverkit import ServerFixture, containers_labelled, docker_inspect, ensure_test_image  # noqa: E402

RESULTS: list[tuple[str, str, bool, str]] = []
SKIPPED: list[tuple[str, str]] = []
NOTES: list[str] = []


def check(framework: str, name: str, fn: Callable[[], Any]) -> Any:
    try:
        value = fn()
        RESULTS.append((framework, name, True, ""))
        return value
    except Exception as err:  # noqa: BLE001 - one row per check
        detail = f"{type(err).__name__}: {err}".replace("\n", " ")[:300]
        RESULTS.append((framework, name, False, detail))
        if os.environ.get("FRAMEWORKS_VERBOSE"):
            traceback.print_exc()
        return None


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


# --- load shims (applied to a temporary copy only) ---


def _join_split_fstrings(path: Path) -> None:
    for _ in range(200):
        text = path.read_text()
        try:
            compile(text, str(path), "exec")
            return
        except SyntaxError as err:
            if "unterminated" not in str(err.msg) or err.lineno is None:
                raise
            lines = text.split("\n")
            start = err.lineno - 1
            end = start + 1
            while end < len(lines) and not lines[end].lstrip().startswith("}"):
                end += 1
            joined = " ".join([lines[start].rstrip(), *(part.strip() for part in lines[start + 1 : end + 1])])
            lines[start : end + 1] = [joined]
            path.write_text("\n".join(lines))


_TYPING_IMPORT = re.compile(r"^from typing import (\([^)]*\)|[^\n]*)", re.MULTILINE)


def _typing_extensions(path: Path) -> None:
    text = path.read_text()
    if "TypedDict" not in text and "NotRequired" not in text:
        return

    def fix(match: re.Match[str]) -> str:
        names = [n.strip() for n in match.group(1).strip("()").replace("\n", " ").split(",") if n.strip()]
        moved = [n for n in names if n in ("TypedDict", "NotRequired")]
        if not moved:
            return match.group(0)
        kept = [n for n in names if n not in moved]
        out = f"from typing_extensions import {', '.join(moved)}"
        return (f"from typing import {', '.join(kept)}\n" if kept else "") + out

    path.write_text(_TYPING_IMPORT.sub(fix, text))


_STUBS = {
    # Names a framework imports at load time resolve to a placeholder that fails only if it is really used.
    "": (
        "# load shim of the framework runner: this library is not installed here\n"
        "class _Missing:\n"
        "    def __init__(self, *a, **k):\n"
        "        raise RuntimeError(f'{__name__} is not installed (load shim of the framework runner)')\n"
        "import collections as _collections\n"
        "def __getattr__(name):\n"
        "    if name.startswith('__'):\n"
        "        raise AttributeError(name)\n"
        "    if name.endswith('_models'):\n"
        "        return set()  # model tables: empty, as with no provider known\n"
        "    if name.startswith('models_by_'):\n"
        "        return _collections.defaultdict(set)\n"
        "    return _Missing\n"
    ),
    "shortuuid": (
        "# load shim of the framework runner: shortuuid's random ids from the standard library\n"
        "import uuid as _uuid\n"
        "class ShortUUID:\n"
        "    def __init__(self, alphabet=None):\n"
        "        pass\n"
        "    def random(self, length=22):\n"
        "        return _uuid.uuid4().hex[:length]\n"
        "    def uuid(self, name=None, pad_length=None):\n"
        "        return _uuid.uuid4().hex[:22]\n"
        "def uuid(name=None, pad_length=None):\n"
        "    return _uuid.uuid4().hex[:22]\n"
        "def random(length=22):\n"
        "    return _uuid.uuid4().hex[:length]\n"
    ),
    "dirhash": (
        "# load shim of the framework runner: a content hash of a directory from the standard library\n"
        "import hashlib as _hashlib, os as _os\n"
        "def dirhash(directory, algorithm='sha256', **kwargs):\n"
        "    h = _hashlib.new(algorithm)\n"
        "    for root, dirs, files in sorted(_os.walk(directory)):\n"
        "        dirs.sort()\n"
        "        for name in sorted(files):\n"
        "            path = _os.path.join(root, name)\n"
        "            h.update(_os.path.relpath(path, directory).encode())\n"
        "            with open(path, 'rb') as fh:\n"
        "                h.update(_hashlib.new(algorithm, fh.read()).digest())\n"
        "    return h.hexdigest()\n"
    ),
    "toml": (
        "# load shim of the framework runner: reading through the standard library's tomllib\n"
        "import tomllib as _tomllib\n"
        "def loads(text):\n"
        "    return _tomllib.loads(text)\n"
        "def load(f):\n"
        "    return _tomllib.loads(f.read() if hasattr(f, 'read') else open(f).read())\n"
        "def dumps(obj):\n"
        "    raise RuntimeError('toml.dumps is not available (load shim of the framework runner)')\n"
    ),
}


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Submodules of a stubbed library (``litellm.utils``…) as placeholder modules too."""

    def __init__(self, roots: set[str]):
        self.roots = roots

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if "." in fullname and fullname.split(".", 1)[0] in self.roots:
            return importlib.util.spec_from_loader(fullname, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> Any:
        return None

    def exec_module(self, module: Any) -> None:
        module.__path__ = []
        exec(_STUBS[""], module.__dict__)


def _stub_modules(root: Path, names: list[str]) -> list[str]:
    made = []
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError:
            (root / name).mkdir()
            (root / name / "__init__.py").write_text(_STUBS.get(name, _STUBS[""]))
            made.append(name)
    if made and os.environ.get("FRAMEWORKS_NO_SUBMODULE_STUBS") is None and made:
        sys.meta_path.append(_StubFinder(set(made)))
    return made


def load_harbor(src: Path, into: Path) -> None:
    pkg = src / "src" / "harbor" if (src / "src" / "harbor").is_dir() else src / "harbor"
    shutil.copytree(pkg, into / "harbor")
    (into / "harbor" / "__init__.py").write_text("")
    for path in (into / "harbor").rglob("*.py"):
        _typing_extensions(path)
        _join_split_fstrings(path)
    _stub_modules(into, ["litellm", "shortuuid", "toml", "dirhash"])
    sys.path.insert(0, str(into))


def load_sforge(src: Path, into: Path) -> None:
    pkg = src / "sforge" if (src / "sforge").is_dir() else src
    shutil.copytree(pkg, into / "sforge")
    for path in (into / "sforge").rglob("*.py"):
        _join_split_fstrings(path)
    sys.path.insert(0, str(into))


# --- Harbor ---


TEST_SH = """#!/bin/bash
set -o pipefail
ok=1
[ "$(cat /app/hello.txt)" = "Hello, world!" ] || ok=0
[ "$(cat /app/shipped.txt 2>/dev/null)" = "from environment/" ] || [ "$EXPECT_SHIPPED" = "no" ] || ok=0
echo "pwd=$(pwd)" > /logs/verifier/where.txt
echo $ok > /logs/verifier/reward.txt
"""

SOLVE_SH = """#!/bin/bash
echo "Hello, world!" > hello.txt
echo "Done!"
"""


def write_task(root: Path, name: str, *, image: str | None, dockerfile: str | None, shipped: bool) -> Path:
    task = root / name
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "solution").mkdir()
    env_lines = ["[environment]", "build_timeout_sec = 600.0", "cpus = 1", "memory_mb = 512", 'workdir = "/app"']
    if image:
        env_lines.append(f'docker_image = "{image}"')
    (task / "task.toml").write_text("\n".join(['version = "1.0"', "", "[verifier]", "timeout_sec = 120.0", "", "[verifier.env]",
                                                f'EXPECT_SHIPPED = "{"yes" if shipped else "no"}"', "", "[agent]", "timeout_sec = 120.0", "",
                                                *env_lines, ""]))
    (task / "instruction.md").write_text('Create a file called hello.txt with "Hello, world!" as the content.\n')
    (task / "tests" / "test.sh").write_text(TEST_SH)
    (task / "solution" / "solve.sh").write_text(SOLVE_SH)
    if dockerfile:
        (task / "environment" / "Dockerfile").write_text(dockerfile)
    if shipped:
        (task / "environment" / "shipped.txt").write_text("from environment/")
    return task


def run_harbor(server: ServerFixture, image: str, tmp: Path) -> None:
    F = "harbor"
    os.environ["ROBOGUIDE_EVAL_SOCKET"] = server.socket
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rg_harbor = importlib.import_module("roboguide_eval.harbor")
    from harbor.environments.base import BaseEnvironment  # type: ignore[import-not-found]
    from harbor.environments.capabilities import EnvironmentCapabilities  # type: ignore[import-not-found]
    from harbor.environments.factory import EnvironmentFactory  # type: ignore[import-not-found]
    from harbor.models.task.config import NetworkMode, NetworkPolicy  # type: ignore[import-not-found]
    from harbor.models.task.task import Task  # type: ignore[import-not-found]
    from harbor.models.trial.config import AgentConfig, EnvironmentConfig, TaskConfig, TrialConfig  # type: ignore[import-not-found]
    from harbor.models.trial.paths import TrialPaths  # type: ignore[import-not-found]
    from harbor.trial.trial import Trial  # type: ignore[import-not-found]

    import_path = "roboguide_eval.harbor:RoboguideEnvironment"
    check(F, "adapter built on Harbor's own BaseEnvironment", lambda: expect(rg_harbor.HARBOR_INSTALLED and issubclass(rg_harbor.RoboguideEnvironment, BaseEnvironment), "not a subclass"))
    check(F, "no DeprecationWarning at import (no legacy capability properties)",
          lambda: expect(not [w for w in caught if issubclass(w.category, DeprecationWarning) and "capability" in str(w.message)], str([str(w.message) for w in caught])))
    check(F, "EnvironmentFactory.run_preflight(import_path)", lambda: EnvironmentFactory.run_preflight(None, import_path))
    check(F, "resource_capabilities via the factory (cpu/memory limits)",
          lambda: expect(EnvironmentFactory.resource_capabilities(None, import_path).memory_limit is True, "memory_limit"))

    prebuilt = write_task(tmp / "tasks", "hello-prebuilt", image=image, dockerfile=None, shipped=True)
    built = write_task(tmp / "tasks", "hello-built", image=None, dockerfile=f"FROM {image}\nWORKDIR /app\n", shipped=False)

    async def trial(task_dir: Path) -> Any:
        config = TrialConfig(task=TaskConfig(path=task_dir), trials_dir=tmp / "trials", agent=AgentConfig(name="oracle"),
                             environment=EnvironmentConfig(import_path=import_path))
        t = await Trial.create(config)
        result = await t.run()
        return t, result

    for label, task_dir in (("prebuilt image + environment/ upload", prebuilt), ("Dockerfile built by POST /v1/images", built)):
        outcome = check(F, f"trial ({label}): Trial.run() with OracleAgent and Verifier ends without exception",
                        lambda d=task_dir: _trial_ok(asyncio.run(trial(d))))
        if outcome is None:
            continue
        t, result = outcome
        check(F, f"trial ({label}): reward 1.0", lambda r=result: expect((r.verifier_result.rewards or {}).get("reward") == 1.0, f"rewards={r.verifier_result.rewards}"))
        check(F, f"trial ({label}): verifier ran in the task workdir /app and /logs/verifier came back",
              lambda tt=t: expect((tt.paths.verifier_dir / "where.txt").read_text().strip() == "pwd=/app", (tt.paths.verifier_dir / "where.txt").read_text()))
        check(F, f"trial ({label}): agent logs downloaded (/logs/agent)", lambda tt=t: expect(any(tt.paths.agent_dir.iterdir()), "empty agent dir"))
        check(F, f"trial ({label}): session deleted at stop", lambda: expect(not [s for s in server.client.list_sessions() if "harbor.session" in (s.get("labels") or {})], "sessions left"))

    task = Task(prebuilt)

    def make(policy: Any = None, **kwargs: Any) -> Any:
        paths = TrialPaths(trial_dir=tmp / "env-trials" / uuid.uuid4().hex[:8])
        paths.mkdir()
        return EnvironmentFactory.create_environment_from_import_path(import_path, environment_dir=task.paths.environment_dir, environment_name="hello",
                                                                       session_id=f"rg-fw-{uuid.uuid4().hex[:8]}", trial_paths=paths,
                                                                       task_env_config=task.config.environment.model_copy(deep=True),
                                                                       network_policy=policy, **kwargs)

    env = check(F, "EnvironmentFactory.create_environment_from_import_path", lambda: make())
    if env is None:
        return
    check(F, "capabilities is Harbor's EnvironmentCapabilities (gpus, disable_internet)",
          lambda: expect(isinstance(env.capabilities, EnvironmentCapabilities) and env.capabilities.gpus and env.capabilities.disable_internet, repr(env.capabilities)))
    check(F, "a GPU task passes Harbor's GPU validation", lambda: make(override_gpus=1))

    async def flow() -> None:
        await env.start(force_build=False)
        try:
            await _harbor_env_checks(F, env, server, tmp, NetworkPolicy, NetworkMode)
        finally:
            await env.stop(delete=True)

    check(F, "start (default network policy) and stop", lambda: asyncio.run(flow()))
    check(F, "stop removed the container", lambda: expect(containers_labelled(f"harbor.session={env.session_id}") == [], "container left"))

    keyed = make(persistent_env={"ANTHROPIC_API_KEY": "sk-ant-rgfw-0123456789abcdef0123"})

    async def secrets() -> None:
        await keyed.start(force_build=False)
        try:
            r = await keyed.exec('echo "a=$ANTHROPIC_API_KEY o=$OPENAI_API_KEY"', env={"OPENAI_API_KEY": "sk-proj-rgfw-abcdef0123456789abcdef"})
            expect(r.return_code == 0 and "sk-ant-rgfw" not in r.stdout and "sk-proj-rgfw" not in r.stdout and "a=" in r.stdout, repr(r.stdout))
        finally:
            await keyed.stop(delete=True)

    check(F, "literal secrets in persistent_env (installed agents) and exec env: accepted and masked", lambda: asyncio.run(secrets()))

    quiet = make(NetworkPolicy(network_mode=NetworkMode.NO_NETWORK))

    async def no_network() -> None:
        await quiet.start(force_build=False)
        try:
            r = await quiet.exec("ls /sys/class/net")
            expect(r.stdout.split() == ["lo"], f"interfaces: {r.stdout!r}")
        finally:
            await quiet.stop(delete=True)

    check(F, "network_mode no-network: only lo", lambda: asyncio.run(no_network()))


def _trial_ok(outcome: Any) -> Any:
    t, result = outcome
    expect(result.exception_info is None, f"exception: {result.exception_info and result.exception_info.exception_message}")
    return outcome


async def _harbor_env_checks(F: str, env: Any, server: ServerFixture, tmp: Path, NetworkPolicy: Any, NetworkMode: Any) -> None:
    async def acheck(name: str, coro_fn: Callable[[], Any]) -> None:
        try:
            await coro_fn()
            RESULTS.append((F, name, True, ""))
        except Exception as err:  # noqa: BLE001
            RESULTS.append((F, name, False, f"{type(err).__name__}: {err}".replace("\n", " ")[:300]))
            if os.environ.get("FRAMEWORKS_VERBOSE"):
                traceback.print_exc()

    async def public() -> None:
        r = await env.exec("ls /sys/class/net")
        expect("eth0" in r.stdout.split(), f"interfaces: {r.stdout!r}")

    async def workdir() -> None:
        r = await env.exec("pwd")
        expect(r.stdout.strip() == "/app", repr(r.stdout))

    async def logs() -> None:
        r = await env.exec("test -d /logs/agent && test -d /logs/verifier && touch /logs/agent/x /logs/verifier/x", user="nobody")
        expect(r.return_code == 0, f"rc={r.return_code} {r.stderr}")

    async def shipped() -> None:
        r = await env.exec("cat /app/shipped.txt")
        expect(r.stdout == "from environment/", repr(r.stdout))

    async def bash() -> None:
        r = await env.exec('set -o pipefail; false | true; echo "rc=$? bash=$RG_VIA_BASH"')  # the test image's bash exports RG_VIA_BASH
        expect(r.stdout.strip() == "rc=1 bash=1", repr(r.stdout))

    async def timeout() -> None:
        try:
            await env.exec("sleep 30; :", timeout_sec=1)
        except RuntimeError as err:
            expect("timed out" in str(err), str(err))
            return
        raise AssertionError("no exception on timeout")

    async def cancel() -> None:
        marker = f"rgcancel{uuid.uuid4().hex[:8]}"
        try:
            await asyncio.wait_for(env.exec(f"sleep 300 # {marker}\n:"), timeout=1)
        except asyncio.TimeoutError:
            pass
        await asyncio.sleep(2)
        r = await env.exec(f"ps | grep {marker} | grep -v grep || true")
        expect(marker not in (r.stdout or ""), f"still running: {r.stdout!r}")

    async def concurrency() -> None:
        slow = [asyncio.create_task(env.exec("sleep 20")) for _ in range(6)]
        await asyncio.sleep(0.5)
        started = time.monotonic()
        await env.exec("true")
        waited = time.monotonic() - started
        await asyncio.gather(*slow)
        expect(waited < 10.0, f"quick exec waited {waited:.1f}s behind 6 long ones (20 s each)")

    async def truncated() -> None:
        r = await env.exec("head -c 17825792 /dev/zero | tr '\\0' a")
        expect(getattr(r, "truncated", None) is True, f"truncated={getattr(r, 'truncated', None)}")

    async def links() -> None:
        src = tmp / f"links-{uuid.uuid4().hex[:6]}"
        (src / "sub").mkdir(parents=True)
        (src / "sub" / "run.sh").write_text("#!/bin/sh\necho ran\n")
        (src / "sub" / "run.sh").chmod(0o755)
        os.symlink("sub/run.sh", src / "link.sh")
        await env.upload_dir(src, "/tmp/up")
        r = await env.exec("readlink /tmp/up/link.sh; /tmp/up/link.sh")
        expect(r.stdout == "sub/run.sh\nran\n", repr(r.stdout))
        back = tmp / f"back-{uuid.uuid4().hex[:6]}"
        await env.download_dir("/tmp/up", back)
        expect(os.readlink(back / "link.sh") == "sub/run.sh", "link not kept on download")
        expect(((back / "sub" / "run.sh").stat().st_mode & 0o777) == 0o755, oct((back / "sub" / "run.sh").stat().st_mode))

    async def policy() -> None:
        await env.set_network_policy(NetworkPolicy(network_mode=NetworkMode.PUBLIC))
        try:
            await env.set_network_policy(NetworkPolicy(network_mode=NetworkMode.NO_NETWORK))
        except ValueError:
            return
        raise AssertionError("a policy change after start was accepted")

    async def user() -> None:
        with env.with_default_user("nobody"):
            r = await env.exec("id -u")
        expect(r.stdout.strip() == "65534", repr(r.stdout))

    async def kinds() -> None:
        expect(await env.is_dir("/logs") and await env.is_file("/app/shipped.txt") and not await env.is_file("/nope"), "is_dir/is_file")

    for name, fn in (("network_mode public (default): a network interface", public), ("task workdir: pwd is /app", workdir),
                     ("/logs/agent and /logs/verifier made, writable by any user", logs), ("environment/ uploaded into the workdir", shipped),
                     ("exec runs bash -c (set -o pipefail works)", bash), ("exec timeout raises RuntimeError('Command timed out…')", timeout),
                     ("asyncio.wait_for cancel kills the command", cancel), ("a quick exec does not wait behind 6 long ones", concurrency),
                     ("truncated surfaced on ExecResult", truncated), ("symlinks and modes kept on upload_dir/download_dir", links),
                     ("set_network_policy: same accepted, change refused (ValueError)", policy), ("exec as a user (with_default_user)", user),
                     ("is_dir/is_file (Harbor's base)", kinds)):
        await acheck(name, fn)


# --- SForge ---


def run_sforge(server: ServerFixture, image: str, tmp: Path) -> None:
    F = "sforge"
    import shlex as _shlex

    from sforge.harness.backend import factory  # type: ignore[import-not-found]
    from sforge.harness.backend.base import ContainerBackend  # type: ignore[import-not-found]
    from sforge.harness import run_agent as sforge_run_agent  # type: ignore[import-not-found]

    rg_sforge = importlib.import_module("roboguide_eval.sforge")
    os.environ["ROBOGUIDE_EVAL_SOCKET"] = server.socket
    rg_sforge.register(socket_path=server.socket)
    backend = check(F, "create_backend('roboguide') from SForge's factory after register()", lambda: factory.create_backend("roboguide"))
    if backend is None:
        return
    check(F, "is SForge's ContainerBackend (all abstract methods implemented)", lambda: expect(isinstance(backend, ContainerBackend), "not a ContainerBackend"))
    check(F, "the factory still knows docker/k8s (other names untouched)", lambda: expect(factory.create_backend.__roboguide_original__ is not None, "no original"))
    check(F, "image_exists", lambda: expect(backend.image_exists(image) and not backend.image_exists("roboguide/none:0"), "image_exists"))

    # A judge on the host, reached as host.docker.internal (SForge's extra_hosts host-gateway).
    import http.server

    class Judge(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = b"judge-ok"
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            return None

    judge = http.server.ThreadingHTTPServer(("0.0.0.0", 0), Judge)
    threading.Thread(target=judge.serve_forever, daemon=True).start()
    run_id = uuid.uuid4().hex[:8]
    name = f"sforge.run.task-1.{run_id}"
    token = f"sforge-tok-{uuid.uuid4().hex}"
    handle = None
    try:
        backend.remove_container_by_name(name)
        handle = check(F, "create_container with SForge's run_agent arguments (SFORGE_TOKEN literal, extra_hosts host-gateway, cap_drop)",
                       lambda: backend.create_container(image, name, environment={"SFORGE_TOKEN": token, "SFORGE_JUDGE_URL": "http://host.docker.internal:8080",
                                                                                   "SFORGE_PATCH_DIR": "/app"},
                                                        extra_hosts={"host.docker.internal": "host-gateway"}, cap_drop=["NET_RAW"], cpu_limit=1, mem_limit="512m"))
        if handle is None:
            return
        backend.start_container(handle)
        check(F, "container_exists exact name (a/b-X is not a-b-X)",
              lambda: expect(backend.container_exists(name) and not backend.container_exists(name.replace(".", "/")), "exists"))
        check(F, "SFORGE_TOKEN masked in output", lambda: expect(token not in backend.exec_run(handle, ["/bin/sh", "-c", "echo $SFORGE_TOKEN"]).output, "token shown"))
        probe = f"printf 'GET / HTTP/1.0\\r\\n\\r\\n' | timeout 5 nc host.docker.internal {judge.server_address[1]} 2>&1"  # busybox wget crashes here
        check(F, "default guarded network: the host refused even with host-gateway (by design, docs/serve.md)",
              lambda: expect("judge-ok" not in (out := backend.exec_run(handle, ["/bin/sh", "-c", probe]).output), out.strip()[:200]))
        check(F, "judge on the host reachable via host.docker.internal (server with ROBOGUIDE_PAIRS_NETWORK=engine-bridge)",
              lambda: _judge_on_engine_bridge(image, probe))
        check(F, "cap_drop NET_RAW applied", lambda: _cap_dropped(backend, handle, 13))
        check(F, "get_container_ip / get_container_gateway_ip",
              lambda: expect(re.match(r"^\d+\.\d+\.\d+\.\d+$", backend.get_container_ip(handle) or "") and backend.get_container_gateway_ip(handle), "no ip"))

        def install() -> None:
            r = backend.exec_run_with_exit_code(handle, f"/bin/bash -c {_shlex.quote('echo installing && exit 3')}", timeout=600)
            expect((r.output, r.exit_code, r.timed_out) == ("installing\n", 3, False), repr(r))

        check(F, "install step: exec_run_with_exit_code('/bin/bash -c …')", install)
        check(F, "exec_run string split like docker-py (no shell)", lambda: expect(backend.exec_run(handle, "echo 'a  b' $HOME").output == "a  b $HOME\n", "split"))
        check(F, "exec_run: stdout and stderr in one stream, in order",
              lambda: expect(backend.exec_run(handle, ["/bin/sh", "-c", "echo 1; sleep 0.3; echo 2 >&2; sleep 0.3; echo 3"]).output == "1\n2\n3\n", "order"))

        def detach() -> None:
            started = time.monotonic()
            r = backend.exec_run(handle, "sleep 77", detach=True)
            expect(r.exit_code == 0 and time.monotonic() - started < 5, "detach blocked")
            expect("sleep 77" in backend.exec_run(handle, ["ps"]).output, "detached command not running")

        check(F, "exec_run detach=True returns at once, command keeps running", detach)

        def timed_out() -> None:
            log = tmp / "runs" / run_id / "task-1" / "agent_output.txt"
            chunks: list[bytes] = []
            r = backend.exec_run_with_timeout(handle, ["/bin/bash", "-c", "echo start; sleep 60"], timeout=2, log_file=log, workdir="/app", on_chunk=chunks.append)
            expect((r.exit_code, r.timed_out, r.output) == (-1, True, "start\n"), repr(r))
            expect(log.read_bytes() == b"start\n" and b"".join(chunks) == b"start\n", "log/on_chunk")
            expect("sleep 60" not in backend.exec_run(handle, ["ps"]).output, "still running after timeout")

        check(F, "exec_run_with_timeout: timeout → exit -1, timed_out, log_file folder created, killed", timed_out)

        def shutdown() -> None:
            event = threading.Event()
            threading.Timer(1.0, event.set).start()
            started = time.monotonic()
            r = backend.exec_run_with_timeout(handle, ["sleep", "120"], timeout=0, shutdown_event=event)
            took = time.monotonic() - started
            expect(r.timed_out and r.exit_code == -1 and took < 4.0, f"{r!r} after {took:.1f}s")

        check(F, "shutdown_event polled within a second while silent (timeout=0 = no limit)", shutdown)
        check(F, "timeout=0 runs to the end", lambda: expect(backend.exec_run_with_timeout(handle, ["sh", "-c", "sleep 2; echo done"], timeout=0).output == "done\n", "timeout=0"))

        def archive() -> None:
            task_spec = types.SimpleNamespace(cwd="/app", submit_paths=["sol.py"], submit_exclude=["*.pyc"])
            # busybox tar has no --exclude (SForge always passes --exclude=.git; it ignores that command's exit code):
            # the archive SForge's command would write is made here without it, then SForge's function reads it back.
            backend.exec_run(handle, ["/bin/sh", "-c", "echo 'print(1)' > /app/sol.py && cd /app && tar czf /tmp/final.tar.gz sol.py"])
            data = sforge_run_agent._extract_archive_from_container(backend, handle, task_spec)
            import io
            import tarfile

            with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
                expect(tar.getnames() == ["sol.py"], str(tar.getnames()))

        check(F, "run_agent._extract_archive_from_container: copy_from_container gives docker's tar", archive)

        def copy_write() -> None:
            src = tmp / "prompt.md"
            src.write_text("# task\n")
            backend.copy_to_container(handle, src, Path("/tmp/deep/agent_prompt.md"))
            backend.write_to_container(handle, "written", Path("/tmp/w.txt"))
            out = backend.exec_run(handle, ["cat", "/tmp/deep/agent_prompt.md", "/tmp/w.txt"]).output
            expect(out == "# task\nwritten\n", repr(out))

        check(F, "copy_to_container (parent made) and write_to_container", copy_write)
    finally:
        if handle is not None:
            backend.cleanup_container(handle, None)
        judge.shutdown()
    check(F, "cleanup_container: gone, container removed", lambda: expect(not backend.container_exists(name) and containers_labelled(f"sforge.name={name}") == [], "left"))

    other = f"sforge.judge.{run_id}"
    h2 = check(F, "create_container with user, command, annotations",
               lambda: backend.create_container(image, other, command="sleep 1000", user="65534", annotations={"sforge.io/run": run_id}))
    if h2 is not None:
        try:
            check(F, "user applied (id -u)", lambda: expect(backend.exec_run(h2, ["id", "-u"]).output.strip() == "65534", "user"))
            check(F, "command is the main process", lambda: expect("sleep 1000" in backend.exec_run(h2, ["cat", "/proc/1/cmdline"]).output.replace("\0", " "), "cmd"))
            check(F, "annotations stored on the container", lambda: expect(run_id in json.dumps(docker_inspect(h2.id).get("Config", {}).get("Labels", {})) or run_id in json.dumps(docker_inspect(h2.id).get("HostConfig", {}).get("Annotations", {})), "annotations"))
            backend.remove_container_by_name(other)
            check(F, "remove_container_by_name", lambda: expect(not backend.container_exists(other), "left"))
        finally:
            backend.remove_container_by_name(other)


def _judge_on_engine_bridge(image: str, probe: str) -> None:
    rg_sforge = importlib.import_module("roboguide_eval.sforge")
    open_server = ServerFixture(env={"ROBOGUIDE_PAIRS_NETWORK": "engine-bridge"})
    try:
        backend = rg_sforge.RoboguideBackend(open_server.socket)
        handle = backend.create_container(image, f"sforge.judge-probe.{uuid.uuid4().hex[:6]}", extra_hosts={"host.docker.internal": "host-gateway"})
        try:
            out = backend.exec_run(handle, ["/bin/sh", "-c", probe]).output
            expect("judge-ok" in out, out.strip()[:200])
        finally:
            backend.cleanup_container(handle, None)
    finally:
        open_server.close()


def _cap_dropped(backend: Any, handle: Any, bit: int) -> None:
    status = backend.exec_run(handle, ["cat", "/proc/1/status"]).output
    bnd = int(next(line.split()[1] for line in status.splitlines() if line.startswith("CapBnd")), 16)
    expect(not bnd & (1 << bit), f"CapBnd {bnd:x}")


# --- Inspect (a separate interpreter: INSPECT_PYTHON) ---


def run_inspect(server: ServerFixture, image: str, src: Path, tmp: Path) -> None:
    python = os.environ.get("INSPECT_PYTHON") or sys.executable
    copy = tmp / "inspect"
    pkg = src / "src" / "inspect_ai" if (src / "src" / "inspect_ai").is_dir() else src / "inspect_ai"
    shutil.copytree(pkg, copy / "inspect_ai")
    (copy / "inspect_ai" / "__init__.py").write_text("")
    dist = tmp / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", str(dist), str(PY_ROOT)], check=True, capture_output=True)
    wheel = next(dist.glob("*.whl"))
    installed = tmp / "site"
    import zipfile

    zipfile.ZipFile(wheel).extractall(installed)
    env = {**os.environ, "PYTHONPATH": f"{installed}{os.pathsep}{copy}", "ROBOGUIDE_EVAL_SOCKET": server.socket, "RG_IMAGE": image}
    out = subprocess.run([python, str(HERE / "inspect_checks.py")], env=env, capture_output=True, text=True, timeout=1200)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode == 3 or not lines:
        reason = [line for line in out.stdout.splitlines() if line.startswith("import failed")] or (out.stderr.strip().splitlines()[-1:] or ["no output"])
        SKIPPED.append(("inspect", f"cannot load inspect_ai with {python}: {reason[0]} (set INSPECT_PYTHON to a Python with inspect_ai's dependencies)"))
        return
    shims = [line for line in out.stderr.splitlines() if line.startswith("load shims:")]
    if shims:
        NOTES.append(f"inspect {shims[0]}")
    for line in lines:
        row = json.loads(line)
        RESULTS.append(("inspect", row["check"], row["ok"], row.get("detail", "")))


def main() -> int:
    sources = {name: os.environ.get(var) for name, var in (("harbor", "HARBOR_SRC"), ("sforge", "SFORGE_SRC"), ("inspect", "INSPECT_SRC"))}
    for name, var in (("harbor", "HARBOR_SRC"), ("sforge", "SFORGE_SRC"), ("inspect", "INSPECT_SRC")):
        if not sources[name]:
            SKIPPED.append((name, f"{var} is not set"))
    if not any(sources.values()):
        print("test:frameworks SKIPPED: set HARBOR_SRC, SFORGE_SRC and/or INSPECT_SRC to checkouts of Harbor, EdgeBench (SForge) and inspect_ai")
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="rg-frameworks-"))
    server = ServerFixture()
    image = ensure_test_image()
    try:
        if sources["harbor"]:
            if check("harbor", "Harbor's code loads (with the load shims)", lambda: (load_harbor(Path(sources["harbor"]), tmp / "harbor-src"),
                                                                                 importlib.import_module("harbor.trial.trial"))):
                run_harbor(server, image, tmp)
        if sources["sforge"]:
            if check("sforge", "SForge's code loads", lambda: (load_sforge(Path(sources["sforge"]), tmp / "sforge-src"),
                                                               importlib.import_module("sforge.harness.run_agent"))):
                run_sforge(server, image, tmp)
        if sources["inspect"]:
            run_inspect(server, image, Path(sources["inspect"]), tmp)
    finally:
        left = [s["session_id"] for s in server.client.list_sessions()]
        for sid in left:
            server.client.delete_session(sid)
        server.close()
        shutil.rmtree(tmp, ignore_errors=True)
    width = max((len(r[1]) for r in RESULTS), default=10)
    print(f"\n{'framework':<9}  {'check':<{width}}  result")
    for framework, name, ok, detail in RESULTS:
        print(f"{framework:<9}  {name:<{width}}  {'pass' if ok else 'FAIL  ' + detail}")
    for framework, reason in SKIPPED:
        print(f"{framework:<9}  SKIPPED: {reason}")
    print()
    for framework in ("harbor", "sforge", "inspect"):
        rows = [r for r in RESULTS if r[0] == framework]
        if rows:
            print(f"{framework}: {sum(1 for r in rows if r[2])} of {len(rows)} checks pass")
    for note in NOTES:
        print(note)
    if left:
        print(f"sessions left at the end (deleted): {left}")
    return 1 if any(not r[2] for r in RESULTS) or left else 0


if __name__ == "__main__":
    sys.exit(main())
