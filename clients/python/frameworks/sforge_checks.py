"""SForge, through its own factory (``create_backend('roboguide')`` after ``register()``), its ``ContainerBackend``
contract as ``run_agent`` calls it, its own ``_install_tools`` and ``_extract_archive_from_container``, and its CLI
through ``python -m roboguide_eval.sforge_cli`` as a user runs it."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import threading
import time
import types
import uuid
from pathlib import Path
from typing import Any

from fwreport import SKIPPED, Skip, check, expect
from tests.serverkit import ServerFixture, containers_labelled, docker_inspect

F = "sforge"

def run_sforge(server: ServerFixture, image: str, tmp: Path) -> None:
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

        def interleaved() -> None:
            # docker's combined stream keeps the order the writes were made in, with no pause between them either
            for _ in range(20):
                out = backend.exec_run(handle, ["/bin/sh", "-c", "echo a; echo b >&2; echo c"]).output
                expect(out == "a\nb\nc\n", repr(out))

        check(F, "exec_run of `echo a; echo b >&2; echo c`: a b c, as docker's combined stream (20 runs)", interleaved)

        def detach() -> None:
            started = time.monotonic()
            r = backend.exec_run(handle, "sleep 77", detach=True)
            expect(r.exit_code == 0 and time.monotonic() - started < 60, "detach waited for the command (77 s)")
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
            expect(r.timed_out and r.exit_code == -1 and took < 60, f"{r!r} after {took:.1f}s (the command sleeps 120 s)")

        check(F, "shutdown_event stops a silent command (timeout=0 = no limit)", shutdown)
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
    _install_tools(backend, image, tmp)
    _cli(server, tmp)
    _run_agent_flow(image)


def _install_tools(backend: Any, image: str, tmp: Path) -> None:
    """SForge's own ``_install_tools`` (copy sforge-submit into /usr/local/bin, then ``chmod`` as root) in a container
    created with ``user="1000"``: docker's ``put_archive`` writes as root whatever the container's user."""
    import logging

    from sforge.harness import run_agent as sforge_run_agent  # type: ignore[import-not-found]

    name = f"sforge.tools.{uuid.uuid4().hex[:8]}"
    handle = backend.create_container(image, name, user="1000")
    try:
        backend.start_container(handle)
        log_dir = tmp / "sforge-tools"
        log_dir.mkdir(parents=True, exist_ok=True)

        def install() -> None:
            sforge_run_agent._install_tools(backend, handle, None, None, log_dir, logging.getLogger("sforge-tools"), disable_stop_hook=True)
            out = backend.exec_run(handle, ["/bin/sh", "-c", "id -u; ls -ln /usr/local/bin/sforge-submit | cut -c1-10; head -c 2 /usr/local/bin/sforge-submit"]).output
            expect(out.split("\n")[:3] == ["1000", "-rwxr-xr-x", "#!"], repr(out))

        check(F, "run_agent._install_tools in a container of user 1000: sforge-submit copied into root-owned /usr/local/bin, chmod a+x", install)

        def own_files_stay_theirs() -> None:
            src = tmp / "note.txt"
            src.write_text("mine\n")
            backend.copy_to_container(handle, src, Path("/home/agent/.sforge/note.txt"))
            out = backend.exec_run(handle, ["/bin/sh", "-c", "stat -c %u /home/agent/.sforge /home/agent/.sforge/note.txt"]).output.split()
            expect(out == ["1000", "1000"], repr(out))

        check(F, "copy_to_container where the user may write: folder and file stay the user's", own_files_stay_theirs)
    finally:
        backend.cleanup_container(handle, None)


def _cli(server: ServerFixture, tmp: Path) -> None:
    """``python -m roboguide_eval.sforge_cli`` as a user runs it: SForge's own CLI, the roboguide backend registered."""
    env = {**os.environ, "ROBOGUIDE_EVAL_SOCKET": server.socket, "SFORGE_BACKEND": "roboguide"}
    done = subprocess.run([sys.executable, "-m", "roboguide_eval.sforge_cli", "--help"], env=env, capture_output=True, text=True, timeout=120)
    check(F, "python -m roboguide_eval.sforge_cli --help: SForge's own CLI answers",
          lambda: expect(done.returncode == 0 and "run" in done.stdout and "eval" in done.stdout, f"rc={done.returncode} {done.stderr[-300:]}"))
    probe = ("import sys, runpy; from roboguide_eval.sforge import register; register(); "
             "from sforge.harness.config import SForgeConfig, create_backend_from_config; "
             "b = create_backend_from_config(SForgeConfig(backend='roboguide')); print(type(b).__name__, b.backend_name)")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    check(F, "SForge's create_backend_from_config(backend='roboguide') after register(): RoboguideBackend",
          lambda: expect(out.returncode == 0 and out.stdout.startswith("RoboguideBackend"), f"{out.stdout.strip()} {out.stderr[-300:]}"))


def _run_agent_flow(image: str) -> None:
    """SForge's ``run_agent`` with internet off (run_agent.py ~L485-503): ``build_allowed_endpoints(judge_url, api_url,
    gateway_ip)`` then ``backend.create_network_isolation(handle, endpoints).apply()``, SForge's own code and ours on a
    live session. On this runner's engine the server has no egress proxy (the engine's own bridge: a shared engine's
    firewall is not ours to change), so the allowlist SForge asks for is refused by name (409 E_EGRESS_UNAVAILABLE)
    and the session keeps its policy: fail closed, never silently open. Its enforcement is proven on a throwaway
    engine by test/integration/session-egress.int.test.ts."""
    import logging

    from sforge.harness.network_isolation import build_allowed_endpoints  # type: ignore[import-not-found]

    from roboguide_eval.errors import ConflictError

    rg_sforge = importlib.import_module("roboguide_eval.sforge")
    logger = logging.getLogger("sforge-isolation")
    server = ServerFixture(env={"ROBOGUIDE_PAIRS_NETWORK": "engine-bridge"})
    try:
        backend = rg_sforge.RoboguideBackend(server.socket)
        handle = backend.create_container(image, f"sforge.isolate.{uuid.uuid4().hex[:6]}", extra_hosts={"host.docker.internal": "host-gateway"})
        try:
            gateway = backend.get_container_gateway_ip(handle) or ""
            endpoints = build_allowed_endpoints("http://host.docker.internal:8080", "http://198.18.5.5:8000/v1", gateway, logger)
            isolation = backend.create_network_isolation(handle, endpoints, logger)
            check(F, "run_agent internet off: build_allowed_endpoints → create_network_isolation allows the judge (gateway:port) and the API (address:port)",
                  lambda: expect(bool(gateway) and isolation.allow == [f"{gateway}:8080", "198.18.5.5:8000"], f"{isolation.allow} gateway={gateway}"))

            def refused() -> None:
                try:
                    isolation.apply()
                except ConflictError as err:
                    expect(err.code == "E_EGRESS_UNAVAILABLE", str(err))
                    expect(server.client.get_session(handle.session_id)["egress"] == {"mode": "open"}, "policy changed")
                    return
                raise AssertionError("apply() succeeded on a server without the egress proxy")

            check(F, "run_agent internet off: .apply() on a server without the egress proxy is refused by name; the session keeps its policy", refused)
        finally:
            backend.cleanup_container(handle, None)
    finally:
        server.close()


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


