"""Conformance of the Python package against a real ``roboguide-eval serve`` and the real Docker engine.

Written from what Harbor, SForge and Inspect do with an environment (call sequences, arguments, results read in
their sources; ``npm run test:frameworks`` runs the frameworks' own code). No stand-in of a framework class decides
an outcome here: every assertion is on what the server and the container did.

Run from the repository root after ``npm run build``: ``npm run test:python``.
"""

from __future__ import annotations

import asyncio
import errno
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import unittest
import uuid
import zipfile
from pathlib import Path, PurePosixPath
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from roboguide_eval import (  # noqa: E402
    DEFAULT_TIMEOUT,
    ApiError,
    BadRequestError,
    Cancel,
    Client,
    GoneError,
    NotFoundError,
    PayloadTooLargeError,
    TransportError,
)
from roboguide_eval.harbor import RoboguideEnvironment  # noqa: E402
from roboguide_eval.sforge import RoboguideBackend  # noqa: E402
from tests.serverkit import ServerFixture, containers_labelled, docker_inspect, ensure_test_image  # noqa: E402

RUN = f"py-{uuid.uuid4().hex[:8]}"
SECRET = f"sk-ant-{uuid.uuid4().hex}"
server: ServerFixture
IMAGE: str


def setUpModule() -> None:  # noqa: N802
    global server, IMAGE
    IMAGE = ensure_test_image()
    server = ServerFixture()


def tearDownModule() -> None:  # noqa: N802
    left = [s["session_id"] for s in server.client.list_sessions()]
    for sid in left:
        server.client.delete_session(sid)
    server.close()
    leaked = containers_labelled(f"rg.py.run={RUN}") + containers_labelled(f"harbor.session={RUN}") + containers_labelled(f"sforge.name={RUN}-box")
    for cid in leaked:
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True)
    if left or leaked:
        raise AssertionError(f"sessions left: {left}, containers left: {leaked}")


class Session:
    def __init__(self, **fields: object) -> None:
        self.client = server.client
        self.id = self.client.create_session(IMAGE, labels={"rg.py.run": RUN}, **fields)["session_id"]

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        record = self.client.delete_session(self.id)
        assert record["verified_absent"], record


class PackageTest(unittest.TestCase):
    def test_wheel_builds_offline_with_py_typed_and_the_inspect_entry_point(self) -> None:
        with tempfile.TemporaryDirectory() as out:
            subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", out, str(HERE.parent)],
                           check=True, capture_output=True)
            wheel = next(Path(out).glob("roboguide_eval-*-py3-none-any.whl"))
            names = zipfile.ZipFile(wheel).namelist()
            self.assertIn("roboguide_eval/py.typed", names)
            self.assertIn("roboguide_eval/inspect.py", names)
            entry = next(n for n in names if n.endswith("entry_points.txt"))
            self.assertIn("[inspect_ai]\nroboguide_eval = roboguide_eval.inspect", zipfile.ZipFile(wheel).read(entry).decode())
            self.assertFalse([n for n in names if n.startswith("tests/") or "__pycache__" in n])

    def test_inspect_provider_refuses_to_import_without_inspect_ai(self) -> None:
        try:
            import inspect_ai  # type: ignore[import-not-found] # noqa: F401

            self.skipTest("inspect_ai is installed here")
        except ImportError:
            pass
        out = subprocess.run([sys.executable, "-c", "import roboguide_eval.inspect"], cwd=HERE.parent, capture_output=True, text=True)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("needs inspect_ai", out.stderr)


class ClientTest(unittest.TestCase):
    def test_errors_per_status_family_keep_code_and_issues(self) -> None:
        with self.assertRaises(BadRequestError) as bad:
            server.client.create_session(IMAGE, network="host")
        self.assertEqual((bad.exception.status, bad.exception.code), (400, "E_REQUEST_INVALID"))
        self.assertEqual(bad.exception.issues[0]["path"], "network")
        with self.assertRaises(NotFoundError) as missing:
            server.client.exec("s-00000000-0000-0000-0000-000000000000", ["true"])
        self.assertEqual(missing.exception.status, 404)
        self.assertIsInstance(missing.exception, ApiError)

    def test_an_ended_session_raises_gone_and_a_large_body_gets_its_413(self) -> None:
        # A session whose main command exits ends with it (issue 39): 410, a NotFoundError too.
        sid = server.client.create_session(IMAGE, labels={"rg.py.run": RUN}, command=["true"])["session_id"]
        deadline = time.monotonic() + 60
        while True:
            try:
                server.client.get_session(sid)
            except GoneError as gone:
                self.assertEqual((gone.status, gone.code), (410, "E_SESSION_ENDED"))
                self.assertIsInstance(gone, NotFoundError)
                break
            self.assertLess(time.monotonic(), deadline, "the session never ended")
            time.sleep(0.2)
        self.assertEqual(server.client.delete_session(sid)["reason"], "exited")
        # A JSON body past the server's cap: the client (which sends the whole body first) gets the 413, not a reset.
        with self.assertRaises(PayloadTooLargeError) as large:
            server.client.create_session(IMAGE, labels={"x" * 8: "y" * (5 * 1024 * 1024)})
        self.assertEqual(large.exception.code, "E_TOO_LARGE")

    def test_https_is_refused_and_timeouts_are_on_by_default(self) -> None:
        with self.assertRaisesRegex(ValueError, "https is not supported"):
            Client(url="https://127.0.0.1:8443")
        self.assertEqual(Client(server.socket).timeout, DEFAULT_TIMEOUT)
        self.assertGreater(DEFAULT_TIMEOUT, 0)
        with self.assertRaises(TransportError):
            Client(os.path.join(tempfile.gettempdir(), f"none-{uuid.uuid4().hex}.sock")).health()

    def test_exec_stdin_text_binary_and_large_streamed(self) -> None:
        with Session() as s:
            c = s.client
            self.assertEqual(c.exec(s.id, ["cat"], stdin="a\nb\n")["stdout"], "a\nb\n")
            payload = b"\xc3\x28\x00\xff\x01bytes"
            self.assertEqual(c.exec(s.id, ["sh", "-c", "cat > /tmp/bin"], stdin=payload)["return_code"], 0)
            self.assertEqual(c.read_file(s.id, "/tmp/bin"), payload)
            big = 20 * 1024 * 1024  # past the 16 MiB JSON body cap: sent as the streamed exec form
            self.assertEqual(c.exec(s.id, ["wc", "-c"], stdin=b"a" * big)["stdout"].strip(), str(big))

    def test_cancel_ends_the_request_and_the_command(self) -> None:
        with Session() as s:
            marker = f"rgcancel{uuid.uuid4().hex[:8]}"
            cancel = Cancel()
            threading.Timer(1.0, cancel.cancel).start()
            started = time.monotonic()
            with self.assertRaises(TransportError) as ended:
                s.client.exec(s.id, ["sh", "-c", f"sleep 300 # {marker}\n:"], cancel=cancel)
            self.assertLess(time.monotonic() - started, 10)
            self.assertEqual(ended.exception.code, "E_CANCELLED")
            time.sleep(2)
            self.assertNotIn(marker, s.client.exec(s.id, ["ps"])["stdout"])

    def test_files_errors_modes_links_and_relative_paths(self) -> None:
        with Session(workdir="/app") as s:
            c = s.client
            c.write_file(s.id, "run.sh", "#!/bin/sh\necho ran\n", mode=0o755)  # relative: against the workdir
            self.assertEqual(c.exec(s.id, ["/app/run.sh"])["stdout"], "ran\n")
            with tempfile.TemporaryDirectory() as tmp:
                c.download(s.id, "/app/run.sh", Path(tmp, "run.sh"))
                self.assertEqual(Path(tmp, "run.sh").stat().st_mode & 0o777, 0o755)
                src = Path(tmp, "src")
                src.mkdir()
                Path(src, "t.txt").write_text("target")
                os.symlink("t.txt", src / "l.txt")
                c.upload(s.id, src, "/app/tree", contents_only=True)
                self.assertEqual(c.exec(s.id, ["readlink", "/app/tree/l.txt"])["stdout"], "t.txt\n")
                c.download(s.id, "/app/tree", Path(tmp, "back"))
                self.assertEqual(os.readlink(Path(tmp, "back", "l.txt")), "t.txt")
            with self.assertRaises(FileNotFoundError):
                c.read_file(s.id, "/app/missing.txt")
            with self.assertRaises(IsADirectoryError):
                c.read_file(s.id, "/app/tree")
            with self.assertRaises(IsADirectoryError):
                c.write_file(s.id, "/app/tree", "not over a directory")
            self.assertEqual(c.exec(s.id, ["ls", "/app/tree"])["stdout"], "l.txt\nt.txt\n")  # the directory is intact
            # A file larger than the container's /dev/shm (64 MiB): Python's own OSError with ENOSPC (507), not E_FILE_IO.
            shm = int(c.exec(s.id, ["sh", "-c", "df -k /dev/shm | tail -1 | awk '{print $2}'"])["stdout"].strip())
            with self.assertRaises(OSError) as full:
                c.write_file(s.id, "/dev/shm/big", b"x" * ((shm + 1024) * 1024))
            self.assertEqual((full.exception.errno, getattr(full.exception, "status", None)), (errno.ENOSPC, 507))
            self.assertEqual(getattr(full.exception, "code", None), "E_CONTAINER_FULL")

    def test_file_io_as_a_user_honours_permissions(self) -> None:
        with Session() as s:
            c = s.client
            c.write_file(s.id, "/tmp/private", "root only", mode=0o600)
            with self.assertRaises(PermissionError):
                c.read_file(s.id, "/tmp/private", user="nobody")
            self.assertEqual(c.read_file(s.id, "/tmp/private"), b"root only")

    def test_literal_secret_values_are_accepted_and_masked(self) -> None:
        with Session(environment={"ANTHROPIC_API_KEY": SECRET}) as s:
            out = s.client.exec(s.id, ["sh", "-c", 'echo "$ANTHROPIC_API_KEY $MY_TOKEN"'], env={"MY_TOKEN": "tok-" + SECRET[-12:]})
            self.assertNotIn(SECRET, out["stdout"])
            self.assertNotIn("tok-" + SECRET[-12:], out["stdout"])
            self.assertIn("[REDACTED]", out["stdout"])


class HarborEnvironmentTest(unittest.TestCase):
    """The calls Harbor's Trial, OracleAgent, Verifier and installed agents make on an environment."""

    def make(self, task_dir: Path, **kwargs: object) -> RoboguideEnvironment:
        config = SimpleNamespace(docker_image=kwargs.pop("docker_image", IMAGE), workdir="/app", cpus=1, memory_mb=512, gpus=0, gpu_types=None, env={})
        return RoboguideEnvironment(task_dir / "environment", "hello", f"{RUN}", None, config, socket_path=server.socket, **kwargs)  # type: ignore[arg-type]

    def test_trial_sequence(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            task = Path(tmp, "task")
            (task / "environment").mkdir(parents=True)
            (task / "environment" / "shipped.txt").write_text("from environment/")
            env = self.make(task, persistent_env={"ANTHROPIC_API_KEY": SECRET})
            self.assertTrue(env.capabilities.gpus and env.capabilities.disable_internet)
            self.assertTrue(env.capabilities.network_allowlist and env.capabilities.dynamic_network_policy)
            self.assertFalse(env.capabilities.mounted)

            async def trial() -> None:
                await env.start(force_build=False)
                try:
                    r = await env.exec("pwd; cat shipped.txt; ls /sys/class/net")
                    self.assertEqual(r.stdout, "/app\nfrom environment/eth0\nlo\n")  # workdir, environment/ upload, network public
                    self.assertEqual((await env.exec('set -o pipefail; false | true; echo "$? $RG_VIA_BASH"')).stdout, "1 1\n")  # bash -c
                    made = await env.exec("touch /logs/agent/a /logs/verifier/v && echo ok", user="nobody")
                    self.assertEqual(made.stdout, "ok\n")
                    with self.assertRaisesRegex(RuntimeError, "Command timed out after 1 seconds"):
                        await env.exec("sleep 30; :", timeout_sec=1)
                    secret = await env.exec('echo "k=$ANTHROPIC_API_KEY"')
                    self.assertNotIn(SECRET, secret.stdout or "")
                    marker = f"rgc{uuid.uuid4().hex[:8]}"
                    with self.assertRaises(asyncio.TimeoutError):
                        await asyncio.wait_for(env.exec(f"sleep 300 # {marker}\n:"), timeout=1)
                    await asyncio.sleep(2)
                    self.assertNotIn(marker, (await env.exec("ps")).stdout or "")
                    slow = [asyncio.create_task(env.exec("sleep 15")) for _ in range(6)]
                    await asyncio.sleep(0.5)
                    started = time.monotonic()
                    await env.exec("true")
                    self.assertLess(time.monotonic() - started, 8.0)  # not behind the 15 s ones (a shared pool would queue it)
                    await asyncio.gather(*slow)
                    big = await env.exec("head -c 17825792 /dev/zero | tr '\\0' a")
                    self.assertTrue(big.truncated)  # type: ignore[attr-defined]
                    solution = Path(tmp, "solution")
                    solution.mkdir()
                    Path(solution, "solve.sh").write_text("#!/bin/bash\necho 'Hello, world!' > hello.txt\n")
                    Path(solution, "solve.sh").chmod(0o755)
                    os.symlink("solve.sh", solution / "link.sh")
                    await env.upload_dir(solution, "/solution")  # OracleAgent
                    self.assertEqual((await env.exec("/solution/link.sh && cat hello.txt")).stdout, "Hello, world!\n")
                    await env.exec("echo 1 > /logs/verifier/reward.txt")
                    await env.download_dir("/logs/verifier", Path(tmp, "verifier"))  # Verifier, not mounted
                    self.assertEqual(Path(tmp, "verifier", "reward.txt").read_text(), "1\n")
                    await env.download_dir("/solution", Path(tmp, "back"))
                    self.assertEqual(os.readlink(Path(tmp, "back", "link.sh")), "solve.sh")
                    self.assertEqual(Path(tmp, "back", "solve.sh").stat().st_mode & 0o777, 0o755)
                finally:
                    await env.stop(delete=True)

            asyncio.run(trial())
            self.assertEqual(containers_labelled(f"harbor.session={RUN}"), [])

    def test_no_network_and_dockerfile_build(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            task = Path(tmp, "task")
            (task / "environment").mkdir(parents=True)
            (task / "environment" / "Dockerfile").write_text(f"FROM {IMAGE}\nRUN echo built > /built.txt\n")
            env = self.make(task, docker_image=None, network_policy="no-network")

            async def run() -> None:
                await env.start(force_build=False)
                try:
                    r = await env.exec("cat /built.txt; ls /sys/class/net")
                    self.assertEqual(r.stdout, "built\nlo\n")
                finally:
                    await env.stop(delete=True)

            asyncio.run(run())


class SForgeBackendTest(unittest.TestCase):
    """The calls SForge's run_agent and run_evaluation make on a ContainerBackend, with DockerBackend's results."""

    def test_run_agent_sequence(self) -> None:
        backend = RoboguideBackend(server.socket)
        name = f"{RUN}-box"
        backend.remove_container_by_name(name)
        handle = backend.create_container(IMAGE, name, environment={"SFORGE_TOKEN": SECRET}, extra_hosts={"host.docker.internal": "host-gateway"},
                                          cap_drop=["NET_RAW"], cpu_limit=1, mem_limit="512m")
        try:
            backend.start_container(handle)
            self.assertTrue(backend.container_exists(name))
            self.assertFalse(backend.container_exists(name.replace("-", "/", 1)))
            inspected = docker_inspect(handle.id)
            self.assertIn("host.docker.internal:host-gateway", inspected["HostConfig"]["ExtraHosts"] or [])
            self.assertTrue({"NET_RAW", "ALL"} & set(inspected["HostConfig"]["CapDrop"] or []), inspected["HostConfig"]["CapDrop"])
            self.assertNotIn(SECRET, backend.exec_run(handle, ["sh", "-c", "echo $SFORGE_TOKEN"]).output)
            self.assertEqual(backend.exec_run(handle, "echo 'a  b' $HOME").output, "a  b $HOME\n")  # shlex, no shell
            self.assertEqual(backend.exec_run(handle, ["sh", "-c", "echo 1; sleep 0.3; echo 2 >&2; sleep 0.3; echo 3"]).output, "1\n2\n3\n")
            install = backend.exec_run_with_exit_code(handle, "/bin/bash -c 'echo installing && exit 3'", timeout=600)
            self.assertEqual((install.output, install.exit_code, install.timed_out), ("installing\n", 3, False))
            started = time.monotonic()
            self.assertEqual(backend.exec_run(handle, "sleep 77", detach=True).exit_code, 0)
            self.assertLess(time.monotonic() - started, 5)
            self.assertIn("sleep 77", backend.exec_run(handle, ["ps"]).output)
            with tempfile.TemporaryDirectory() as tmp:
                log = Path(tmp, "runs", "r1", "task", "agent_output.txt")
                chunks: list[bytes] = []
                r = backend.exec_run_with_timeout(handle, ["/bin/bash", "-c", "echo start; sleep 60"], timeout=2, log_file=log, on_chunk=chunks.append)
                self.assertEqual((r.exit_code, r.timed_out, r.output), (-1, True, "start\n"))
                self.assertEqual((log.read_bytes(), b"".join(chunks)), (b"start\n", b"start\n"))
                self.assertNotIn("sleep 60", backend.exec_run(handle, ["ps"]).output)
                stop = threading.Event()
                threading.Timer(1.0, stop.set).start()
                started = time.monotonic()
                r = backend.exec_run_with_timeout(handle, ["sleep", "120"], timeout=0, shutdown_event=stop)
                self.assertTrue(r.timed_out and r.exit_code == -1)
                self.assertLess(time.monotonic() - started, 4.0)
                self.assertEqual(backend.exec_run_with_timeout(handle, ["sh", "-c", "sleep 1.5; echo done"], timeout=0).output, "done\n")
                Path(tmp, "prompt.md").write_text("# task\n")
                backend.copy_to_container(handle, Path(tmp, "prompt.md"), PurePosixPath("/tmp/deep/agent_prompt.md"))
            backend.write_to_container(handle, "written", PurePosixPath("/tmp/w.txt"))
            self.assertEqual(backend.exec_run(handle, ["cat", "/tmp/deep/agent_prompt.md", "/tmp/w.txt"]).output, "# task\nwritten\n")
            backend.exec_run(handle, ["sh", "-c", "cd /tmp && tar czf /tmp/final.tar.gz w.txt"])
            outer = tarfile.open(fileobj=io.BytesIO(backend.copy_from_container(handle, PurePosixPath("/tmp/final.tar.gz"))))
            member = outer.getmembers()[0]  # run_agent's reading of docker's archive
            self.assertEqual(member.name, "final.tar.gz")
            inner = tarfile.open(fileobj=io.BytesIO(outer.extractfile(member).read()), mode="r:gz")  # type: ignore[union-attr]
            self.assertEqual(inner.getnames(), ["w.txt"])
            self.assertRegex(backend.get_container_ip(handle), r"^\d+\.\d+\.\d+\.\d+$")
            self.assertRegex(backend.get_container_gateway_ip(handle) or "", r"^\d+\.\d+\.\d+\.\d+$")
        finally:
            backend.cleanup_container(handle, None)
        self.assertFalse(backend.container_exists(name))
        self.assertEqual(containers_labelled(f"sforge.name={name}"), [])

    def test_user_command_annotations(self) -> None:
        backend = RoboguideBackend(server.socket, network="none")
        name = f"{RUN}-box"
        handle = backend.create_container(IMAGE, name, command="sleep 1000", user="65534", annotations={"run": RUN})
        try:
            self.assertEqual(backend.exec_run(handle, ["id", "-u"]).output, "65534\n")
            self.assertIn("sleep 1000", backend.exec_run(handle, ["cat", "/proc/1/cmdline"]).output.replace("\0", " "))
            inspected = docker_inspect(handle.id)
            self.assertIn(RUN, str(inspected["Config"].get("Labels")) + str(inspected["HostConfig"].get("Annotations")))
            with self.assertRaises(RuntimeError):
                backend.get_container_ip(handle)  # network none: no address, as Docker's backend says
        finally:
            backend.remove_container_by_name(name)
        self.assertFalse(backend.container_exists(name))

    def test_combined_stream_order_and_root_copy_in_a_user_container(self) -> None:
        """Issue 41: exec_run's one stream keeps the order written (two pipes cannot: the command's stderr goes to its
        stdout), and copy_to_container writes where only root may, as docker's put_archive does (SForge's
        _install_tools copies sforge-submit into /usr/local/bin, then chmods it as root)."""
        backend = RoboguideBackend(server.socket, network="none")
        name = f"{RUN}-user"
        handle = backend.create_container(IMAGE, name, user="1000")
        try:
            outputs = {backend.exec_run(handle, ["/bin/sh", "-c", "echo a; echo b >&2; echo c"]).output for _ in range(20)}
            self.assertEqual(outputs, {"a\nb\nc\n"})
            self.assertEqual(backend.exec_run(handle, ["sh", "-c", "exit 7"]).exit_code, 7)
            with tempfile.TemporaryDirectory() as tmp:
                Path(tmp, "submit.sh").write_text("#!/bin/sh\necho submitted\n")
                backend.copy_to_container(handle, Path(tmp, "submit.sh"), PurePosixPath("/usr/local/bin/sforge-submit"))
                backend.exec_run(handle, "chmod a+x /usr/local/bin/sforge-submit", user="root")
                self.assertEqual(backend.exec_run(handle, ["/usr/local/bin/sforge-submit"]).output, "submitted\n")
                Path(tmp, "note.txt").write_text("mine\n")
                backend.copy_to_container(handle, Path(tmp, "note.txt"), PurePosixPath("/home/agent/.cfg/note.txt"))
            owners = backend.exec_run(handle, ["stat", "-c", "%u", "/usr/local/bin/sforge-submit", "/home/agent/.cfg", "/home/agent/.cfg/note.txt"])
            self.assertEqual(owners.output.split(), ["0", "1000", "1000"])  # root only where the user may not write
        finally:
            backend.remove_container_by_name(name)
        self.assertFalse(backend.container_exists(name))


if __name__ == "__main__":
    unittest.main()
