"""Harbor's environment (``roboguide_eval.harbor.RoboguideEnvironment``) against a real ``roboguide-eval serve`` and
the real Docker engine: the parts ``test_adapters.py``'s trial sequence does not reach (the task definition it
accepts, the limits and labels a session gets, default users, and a stop that is safe to repeat).

Run from the repository root after ``npm run build``: ``npm run test:python``.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
import unittest
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from roboguide_eval.harbor import RoboguideEnvironment  # noqa: E402
from tests.serverkit import ServerFixture, containers_labelled, docker_inspect, ensure_test_image  # noqa: E402

RUN = f"py-harbor-{uuid.uuid4().hex[:8]}"
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
    leaked = containers_labelled(f"harbor.session={RUN}")
    for cid in leaked:
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True)
    if left or leaked:
        raise AssertionError(f"sessions left: {left}, containers left: {leaked}")


def config(**fields: Any) -> SimpleNamespace:
    base = {"docker_image": IMAGE, "workdir": "/app", "cpus": 1, "memory_mb": 512, "gpus": 0, "gpu_types": None, "env": {}}
    return SimpleNamespace(**{**base, **fields})


def make(task: Path, conf: SimpleNamespace, **kwargs: Any) -> RoboguideEnvironment:
    return RoboguideEnvironment(task / "environment", "hello", RUN, None, conf, socket_path=server.socket, **kwargs)


class DefinitionTest(unittest.TestCase):
    def test_compose_tasks_and_tasks_without_a_definition_are_refused_at_construction(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            task = Path(tmp, "task")
            (task / "environment").mkdir(parents=True)
            before = len(server.client.list_sessions())
            with self.assertRaises(FileNotFoundError) as none:
                make(task, config(docker_image=None))
            self.assertIn("no environment definition", str(none.exception))
            (task / "environment" / "docker-compose.yaml").write_text("services: {}\n")
            with self.assertRaises(ValueError) as compose:
                make(task, config())
            self.assertIn("Docker Compose tasks are not supported", str(compose.exception))
            self.assertEqual(len(server.client.list_sessions()), before)

    def test_an_image_given_to_the_environment_wins_over_the_task(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            task = Path(tmp, "task")
            (task / "environment").mkdir(parents=True)
            env = make(task, config(docker_image="roboguide-test/never-pulled:1"), image=IMAGE)

            async def trial() -> None:
                await env.start(force_build=False)
                try:
                    container = server.client.get_session(env.session)["container_id"]
                    self.assertEqual(docker_inspect(container)["Config"]["Image"], IMAGE)
                finally:
                    await env.stop(delete=True)

            asyncio.run(trial())


class SessionTest(unittest.TestCase):
    def test_limits_labels_and_environment_reach_the_container(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            task = Path(tmp, "task")
            (task / "environment").mkdir(parents=True)
            env = make(task, config(env={"TASK_VAR": "from-task"}), override_memory_mb=256, persistent_env={"RUN_VAR": "from-run"})

            async def trial() -> None:
                await env.start(force_build=False)
                try:
                    inspected = docker_inspect(server.client.get_session(env.session)["container_id"])
                    self.assertEqual(inspected["HostConfig"]["Memory"], 256 * 1024 * 1024)
                    self.assertEqual(inspected["HostConfig"]["NanoCpus"], 10**9)
                    self.assertEqual(inspected["Config"]["Labels"].get("harbor.session"), RUN)
                    r = await env.exec('echo "$TASK_VAR $RUN_VAR $CALL_VAR"', env={"CALL_VAR": "from-call"})
                    self.assertEqual(r.stdout, "from-task from-run from-call\n")
                finally:
                    await env.stop(delete=True)

            asyncio.run(trial())
            self.assertEqual(containers_labelled(f"harbor.session={RUN}"), [])

    def test_default_user_applies_to_exec_and_stop_is_safe_to_repeat(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            task = Path(tmp, "task")
            (task / "environment").mkdir(parents=True)
            env = make(task, config())

            async def trial() -> None:
                await env.stop(delete=True)  # never started: nothing to do
                await env.start(force_build=False)
                container = server.client.get_session(env.session)["container_id"]
                try:
                    self.assertEqual((await env.exec("id -u")).stdout, "0\n")
                    with env.with_default_user("agent"):
                        self.assertEqual((await env.exec("id -un")).stdout, "agent\n")
                    self.assertEqual((await env.exec("id -u", user=65534)).stdout, "65534\n")
                finally:
                    await env.stop(delete=False)  # a session keeps no stopped state: deleted either way
                await env.stop(delete=True)
                self.assertEqual(subprocess.run(["docker", "inspect", container], capture_output=True).returncode, 1)
                with self.assertRaises(RuntimeError):
                    env.session  # noqa: B018 - the property refuses once stopped

            asyncio.run(trial())


if __name__ == "__main__":
    unittest.main()
