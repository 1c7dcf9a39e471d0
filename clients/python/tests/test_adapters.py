"""The Python adapters against a real ``roboguide-eval serve`` and the real Docker engine.

Run from the repository root after ``npm run build``:
    python3 -m unittest discover -s clients/python/tests -t clients/python -v
Needs the engine and the image ``roboguide/pair-driver:1`` (the integration set-up builds it).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest
import uuid
from pathlib import Path, PurePosixPath
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent.parent
sys.path.insert(0, str(HERE.parent))

from roboguide_eval import ApiError, Client  # noqa: E402
from roboguide_eval.harbor import HARBOR_INSTALLED, RoboguideEnvironment  # noqa: E402
from roboguide_eval.sforge import RoboguideBackend  # noqa: E402

IMAGE = "roboguide/pair-driver:1"
SECRET = f"s3cr3t-py-{uuid.uuid4()}"
RUN = f"py-{uuid.uuid4().hex[:8]}"


def node_binary() -> str:
    pinned = ROOT / "node_modules" / ".bin" / "node"
    return os.environ.get("ROBOGUIDE_NODE") or (str(pinned) if pinned.exists() else "node")


def containers_labelled(label: str) -> list[str]:
    out = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={label}"], check=True, capture_output=True, text=True).stdout
    return out.split()


class ServerFixture:
    def __init__(self) -> None:
        self.work = tempfile.mkdtemp(prefix="rg-py-")
        self.socket = os.path.join(self.work, "api.sock")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", self.work), "RG_PY_SECRET": SECRET}
        if os.environ.get("DOCKER_HOST"):
            env["DOCKER_HOST"] = os.environ["DOCKER_HOST"]
        self.process = subprocess.Popen(
            [node_binary(), str(ROOT / "bin" / "run.js"), "serve", "--socket", self.socket, "--data-dir", os.path.join(self.work, "data"),
             "--registry", os.path.join(self.work, "registry.db"), "--allow-env", "RG_PY_SECRET"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        line = self.process.stdout.readline() if self.process.stdout else ""
        if not line:
            raise RuntimeError(f"serve did not start: {self.process.stderr.read() if self.process.stderr else ''}")
        self.started = json.loads(line)
        self.client = Client(self.socket)

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=120)
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()
        shutil.rmtree(self.work, ignore_errors=True)


server: ServerFixture


def setUpModule() -> None:  # noqa: N802
    global server
    server = ServerFixture()


def tearDownModule() -> None:  # noqa: N802
    server.close()
    left = containers_labelled(f"rg.py.run={RUN}") + containers_labelled(f"harbor.session={RUN}-trial") + containers_labelled(f"sforge.name={RUN}-box")
    for cid in left:
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True)
    if left:
        raise AssertionError(f"containers left: {left}")


class ClientTest(unittest.TestCase):
    def test_health(self) -> None:
        health = server.client.health()
        self.assertTrue(health["ok"])
        self.assertTrue(health["engine"]["reachable"])

    def test_session_exec_files_delete(self) -> None:
        c = server.client
        s = c.create_session(IMAGE, environment={"API_KEY": "${RG_PY_SECRET}"}, labels={"rg.py.run": RUN})
        sid = s["session_id"]
        try:
            out = c.exec(sid, ["sh", "-c", 'echo "k=$API_KEY"; echo e >&2; exit 4'])
            self.assertEqual(out["stdout"], "k=[REDACTED]\n")
            self.assertEqual(out["stderr"], "e\n")
            self.assertEqual(out["return_code"], 4)
            timed = c.exec(sid, command="sleep 300 & sleep 301", timeout_sec=1)
            self.assertEqual((timed["return_code"], timed["timed_out"]), (124, True))
            self.assertNotIn("sleep 30", c.exec(sid, ["ps"])["stdout"])
            events = list(c.exec_stream(sid, command="echo a; echo b >&2"))
            self.assertIn({"stream": "stdout", "data": "a\n"}, events)
            self.assertEqual(events[-1]["exit"]["return_code"], 0)
            with tempfile.TemporaryDirectory() as tmp:
                src = Path(tmp, "src")
                (src / "sub").mkdir(parents=True)
                (src / "a.txt").write_text("alpha")
                (src / "sub" / "b.txt").write_text("beta")
                c.upload(sid, src, "/work/in", contents_only=True)
                self.assertEqual(c.exec(sid, command="cat /work/in/a.txt /work/in/sub/b.txt")["stdout"], "alphabeta")
                c.exec(sid, command='echo "secret $API_KEY" > /work/in/s.txt')
                c.download(sid, "/work/in", Path(tmp, "back"))
                self.assertEqual(Path(tmp, "back", "sub", "b.txt").read_text(), "beta")
                self.assertEqual(Path(tmp, "back", "s.txt").read_text(), "secret [REDACTED]\n")
                c.download(sid, "/work/in/a.txt", Path(tmp, "one.txt"))
                self.assertEqual(Path(tmp, "one.txt").read_text(), "alpha")
            with self.assertRaises(ApiError) as missing:
                c.get_archive(sid, "/nope")
            self.assertEqual(missing.exception.status, 404)
        finally:
            first = c.delete_session(sid)
        self.assertTrue(first["verified_absent"])
        self.assertTrue(first["slot_released"])
        self.assertEqual(c.delete_session(sid), first)
        self.assertEqual(containers_labelled(f"rg.py.run={RUN}"), [])
        with self.assertRaises(ApiError) as gone:
            c.exec(sid, ["true"])
        self.assertEqual(gone.exception.status, 404)

    def test_bad_request_names_the_field(self) -> None:
        with self.assertRaises(ApiError) as err:
            server.client.create_session(IMAGE, network="host")
        self.assertEqual(err.exception.status, 400)
        self.assertEqual(err.exception.issues[0]["path"], "network")


class HarborEnvironmentTest(unittest.TestCase):
    def test_trial_lifecycle(self) -> None:
        config = SimpleNamespace(docker_image=IMAGE, gpus=0, allow_internet=False, cpus=1, memory_mb=256)
        env = RoboguideEnvironment(Path("."), "task", f"{RUN}-trial", None, config, socket_path=server.socket)
        self.assertTrue(env.capabilities.gpus)
        self.assertTrue(env.capabilities.disable_internet)
        self.assertTrue(env.supports_gpus and env.can_disable_internet)
        os.environ["ROBOGUIDE_EVAL_SOCKET"] = server.socket
        try:
            self.assertIsNone(RoboguideEnvironment.preflight())
        finally:
            del os.environ["ROBOGUIDE_EVAL_SOCKET"]
        self.assertIsInstance(HARBOR_INSTALLED, bool)

        async def trial() -> None:
            await env.start(force_build=False)
            try:
                result = await env.exec("echo hi; pwd", cwd="/tmp", env={"X": "1"})
                self.assertEqual((result.stdout, result.return_code), ("hi\n/tmp\n", 0))
                slow = await env.exec("sleep 100", timeout_sec=1)
                self.assertEqual(slow.return_code, 124)
                with tempfile.TemporaryDirectory() as tmp:
                    Path(tmp, "f.txt").write_text("file")
                    Path(tmp, "d").mkdir()
                    Path(tmp, "d", "g.txt").write_text("dir")
                    await env.upload_file(Path(tmp, "f.txt"), "/logs/f.txt")
                    await env.upload_dir(Path(tmp, "d"), "/logs/d")
                    self.assertTrue(await env.is_file("/logs/f.txt"))
                    self.assertTrue(await env.is_dir("/logs/d"))
                    await env.download_file("/logs/f.txt", Path(tmp, "out.txt"))
                    await env.download_dir("/logs/d", Path(tmp, "outd"))
                    self.assertEqual(Path(tmp, "out.txt").read_text(), "file")
                    self.assertEqual(Path(tmp, "outd", "g.txt").read_text(), "dir")
                net = await env.exec("ip -o link | grep -v ' lo:' | wc -l")
                self.assertEqual(net.stdout.strip(), "0")
            finally:
                await asyncio.shield(env.stop(delete=True))

        asyncio.run(trial())
        self.assertEqual(containers_labelled(f"harbor.session={RUN}-trial"), [])


class SForgeBackendTest(unittest.TestCase):
    def test_backend_methods(self) -> None:
        backend = RoboguideBackend(server.socket)
        self.assertEqual(backend.backend_name, "roboguide")
        self.assertTrue(backend.image_exists(IMAGE))
        self.assertFalse(backend.image_exists("roboguide/does-not-exist:0"))
        handle = backend.create_container(IMAGE, f"{RUN}-box", environment={"TOKEN": "${RG_PY_SECRET}"}, mem_limit="256m", cpu_limit=1)
        try:
            backend.start_container(handle)
            self.assertTrue(backend.container_exists(f"{RUN}-box"))
            r = backend.exec_run(handle, 'echo "$TOKEN" out')
            self.assertEqual((r.output, r.exit_code), ("[REDACTED] out\n", 0))
            chunks: list[bytes] = []
            with tempfile.TemporaryDirectory() as tmp:
                log = Path(tmp, "exec.log")
                t = backend.exec_run_with_timeout(handle, ["sh", "-c", "echo start; sleep 100"], timeout=1, log_file=log, on_chunk=chunks.append)
                self.assertTrue(t.timed_out)
                self.assertEqual(t.exit_code, 124)
                self.assertEqual(t.output, "start\n")
                self.assertEqual(log.read_text(), "start\n")
                self.assertEqual(b"".join(chunks), b"start\n")
                stop = threading.Event()
                stop.set()
                backend.exec_run_with_timeout(handle, "echo x; sleep 200", timeout=300, shutdown_event=stop)
                backend.write_to_container(handle, "written", PurePosixPath("/w/a.txt"))
                self.assertEqual(backend.copy_from_container(handle, PurePosixPath("/w/a.txt")), b"written")
                Path(tmp, "c.txt").write_text("copied")
                backend.copy_to_container(handle, Path(tmp, "c.txt"), PurePosixPath("/w/c.txt"))
                self.assertEqual(backend.exec_run_with_exit_code(handle, "cat /w/c.txt").output, "copied")
            ec = backend.exec_run_with_exit_code(handle, "exit 3")
            self.assertEqual((ec.exit_code, ec.timed_out), (3, False))
        finally:
            backend.cleanup_container(handle)
        self.assertFalse(backend.container_exists(f"{RUN}-box"))
        self.assertEqual(containers_labelled(f"sforge.name={RUN}-box"), [])


if __name__ == "__main__":
    unittest.main()
