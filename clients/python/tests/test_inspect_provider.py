"""The Inspect sandbox provider (``roboguide_eval.inspect``) against a real ``roboguide-eval serve`` and the real
Docker engine: what Inspect's ``SandboxEnvironment`` contract asks of a sandbox (sample init and cleanup, exec with
input, cwd, user and timeout, file reads and writes as the sandbox's user, the errors Inspect expects).

Inspect itself is not installed here (no PyPI). When ``inspect_ai`` is missing, this file puts a stand-in of the six
names the provider imports from ``inspect_ai.util`` into ``sys.modules``: plain holders (a result record, an error,
an empty base class, a registering decorator, the two size limits), none of which decides anything; every outcome
asserted below is what the server and the container did. With ``inspect_ai`` installed, the real names are used.

Run from the repository root after ``npm run build``: ``npm run test:python``.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import types
import unittest
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

REGISTERED: dict[str, type] = {}


def _install_inspect_stand_in() -> bool:
    """``inspect_ai.util`` as the provider imports it, when the real package is absent; True when installed."""
    try:
        import inspect_ai.util  # type: ignore[import-not-found] # noqa: F401

        return False
    except ImportError:
        pass
    T = TypeVar("T")

    @dataclass
    class ExecResult(Generic[T]):
        success: bool
        returncode: int
        stdout: T
        stderr: T

    class OutputLimitExceededError(Exception):
        def __init__(self, limit_str: str, truncated_output: str | None) -> None:
            super().__init__(f"output limit {limit_str} exceeded")
            self.limit_str = limit_str
            self.truncated_output = truncated_output

    class SandboxEnvironment:
        pass

    class SandboxEnvironmentLimits:
        MAX_EXEC_OUTPUT_SIZE = 10 * 1024 * 1024
        MAX_EXEC_OUTPUT_SIZE_STR = "10 MiB"
        MAX_READ_FILE_SIZE = 100 * 1024 * 1024
        MAX_READ_FILE_SIZE_STR = "100 MiB"

    def sandboxenv(name: str) -> Any:
        def register(cls: type) -> type:
            REGISTERED[name] = cls
            return cls

        return register

    util = types.ModuleType("inspect_ai.util")
    util.ExecResult = ExecResult  # type: ignore[attr-defined]
    util.OutputLimitExceededError = OutputLimitExceededError  # type: ignore[attr-defined]
    util.SandboxEnvironment = SandboxEnvironment  # type: ignore[attr-defined]
    util.SandboxEnvironmentConfigType = Any  # type: ignore[attr-defined]
    util.SandboxEnvironmentLimits = SandboxEnvironmentLimits  # type: ignore[attr-defined]
    util.sandboxenv = sandboxenv  # type: ignore[attr-defined]
    package = types.ModuleType("inspect_ai")
    package.util = util  # type: ignore[attr-defined]
    sys.modules["inspect_ai"] = package
    sys.modules["inspect_ai.util"] = util
    return True


STAND_IN = _install_inspect_stand_in()

from roboguide_eval.inspect import PROVIDER_NAME, RoboguideSandboxConfig, RoboguideSandboxEnvironment  # noqa: E402
from tests.serverkit import ServerFixture, containers_labelled, ensure_test_image  # noqa: E402

RUN = f"py-inspect-{uuid.uuid4().hex[:8]}"
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
    if left:
        raise AssertionError(f"sessions left: {left}")


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def config(**fields: Any) -> dict[str, Any]:
    return {"image": IMAGE, "socket": server.socket, **fields}


def container_of(session_id: str) -> str:
    return server.client.get_session(session_id)["container_id"]


def engine_has(container_id: str) -> bool:
    return subprocess.run(["docker", "inspect", container_id], capture_output=True).returncode == 0


class SampleLifecycleTest(unittest.TestCase):
    def test_registers_under_its_provider_name(self) -> None:
        if STAND_IN:
            self.assertIs(REGISTERED[PROVIDER_NAME], RoboguideSandboxEnvironment)
        self.assertEqual(PROVIDER_NAME, "roboguide")

    def test_sample_init_opens_a_labelled_session_with_user_and_workdir_and_cleanup_removes_it(self) -> None:
        task = f"{RUN}-task"
        envs = run(RoboguideSandboxEnvironment.sample_init(task, config(user="agent", workdir="/home/agent"), {}))
        sandbox = envs["default"]
        container = container_of(sandbox.session_id)
        try:
            labels = server.client.get_session(sandbox.session_id).get("labels") or {}
            self.assertEqual(labels.get("inspect.task"), task)
            self.assertRegex(labels.get("inspect.sample", ""), r"^[0-9a-f]{32}$")
            who = run(sandbox.exec(["sh", "-c", "id -un; pwd"]))
            self.assertEqual((who.success, who.stdout), (True, "agent\n/home/agent\n"))
        finally:
            run(RoboguideSandboxEnvironment.sample_cleanup(task, None, envs, False))
        self.assertFalse(engine_has(container), "the sample's container outlived its cleanup")
        self.assertNotIn(sandbox.session_id, [s["session_id"] for s in server.client.list_sessions()])

    def test_sample_init_without_an_image_is_refused_before_any_session(self) -> None:
        before = len(server.client.list_sessions())
        with self.assertRaises(ValueError) as refused:
            run(RoboguideSandboxEnvironment.sample_init("t", {"image": "", "socket": server.socket}, {}))
        self.assertIn("no image", str(refused.exception))
        self.assertEqual(len(server.client.list_sessions()), before)

    def test_cli_cleanup_removes_inspect_sessions_only(self) -> None:
        envs = run(RoboguideSandboxEnvironment.sample_init(f"{RUN}-cli", config(), {}))
        other = server.client.create_session(IMAGE, labels={"rg.py.run": RUN})["session_id"]
        try:
            old = os.environ.get("ROBOGUIDE_EVAL_SOCKET")
            os.environ["ROBOGUIDE_EVAL_SOCKET"] = server.socket
            try:
                run(RoboguideSandboxEnvironment.cli_cleanup(None))
            finally:
                if old is None:
                    del os.environ["ROBOGUIDE_EVAL_SOCKET"]
                else:
                    os.environ["ROBOGUIDE_EVAL_SOCKET"] = old
            ids = [s["session_id"] for s in server.client.list_sessions()]
            self.assertNotIn(envs["default"].session_id, ids)
            self.assertIn(other, ids)
        finally:
            server.client.delete_session(other)
        self.assertEqual(containers_labelled(f"rg.py.run={RUN}"), [])

    def test_a_config_with_an_environment_is_hashable_and_round_trips(self) -> None:
        conf = RoboguideSandboxConfig(image=IMAGE, environment={"A": "1"})
        self.assertEqual(hash(conf), hash(RoboguideSandboxConfig(image=IMAGE, environment={"A": "1"})))
        self.assertEqual(RoboguideSandboxEnvironment.config_deserialize(conf.model_dump()), conf)


class SandboxTest(unittest.TestCase):
    """One sandbox (as the user ``agent``, in ``/home/agent``) for the exec and file behaviour."""

    envs: dict[str, Any]
    sandbox: Any

    @classmethod
    def setUpClass(cls) -> None:
        cls.envs = run(RoboguideSandboxEnvironment.sample_init(f"{RUN}-sandbox", config(user="agent", workdir="/home/agent"), {}))
        cls.sandbox = cls.envs["default"]

    @classmethod
    def tearDownClass(cls) -> None:
        run(RoboguideSandboxEnvironment.sample_cleanup(f"{RUN}-sandbox", None, cls.envs, False))

    def test_exec_takes_text_and_bytes_input_env_and_a_relative_cwd(self) -> None:
        self.assertEqual(run(self.sandbox.exec(["cat"], input="text in\n")).stdout, "text in\n")
        self.assertEqual(run(self.sandbox.exec(["wc", "-c"], input=bytes(range(256)) * 4)).stdout.strip(), "1024")
        self.assertEqual(run(self.sandbox.exec(["sh", "-c", "echo $GREETING"], env={"GREETING": "hi"})).stdout, "hi\n")
        run(self.sandbox.exec(["mkdir", "-p", "sub"]))
        self.assertEqual(run(self.sandbox.exec(["pwd"], cwd="sub")).stdout, "/home/agent/sub\n")

    def test_exec_reports_failure_as_a_result_and_runs_as_another_user_when_asked(self) -> None:
        failed = run(self.sandbox.exec(["sh", "-c", "echo out; echo err >&2; exit 3"]))
        self.assertEqual((failed.success, failed.returncode, failed.stdout, failed.stderr), (False, 3, "out\n", "err\n"))
        self.assertEqual(run(self.sandbox.exec(["id", "-u"], user="root")).stdout, "0\n")
        unknown = run(self.sandbox.exec(["true"], user="no-such-user"))
        self.assertEqual((unknown.success, unknown.returncode), (False, 126))

    def test_exec_timeout_raises_and_kills_the_command(self) -> None:
        marker = uuid.uuid4().hex[:12]
        with self.assertRaises(TimeoutError):
            run(self.sandbox.exec(["sh", "-c", f"sleep 300 # {marker}"], timeout=1))
        self.assertNotIn(marker, run(self.sandbox.exec(["ps", "-o", "args"], user="root")).stdout)

    def test_a_command_that_is_not_executable_raises_permission_error(self) -> None:
        run(self.sandbox.write_file("not-exec.sh", "#!/bin/sh\necho no\n"))
        with self.assertRaises(PermissionError):
            run(self.sandbox.exec(["./not-exec.sh"]))

    def test_files_round_trip_as_the_sandbox_user_with_parents_made(self) -> None:
        run(self.sandbox.write_file("deep/er/notes.txt", "héllo\n"))
        self.assertEqual(run(self.sandbox.read_file("deep/er/notes.txt")), "héllo\n")
        blob = bytes(range(256))
        run(self.sandbox.write_file("/home/agent/blob.bin", blob))
        self.assertEqual(run(self.sandbox.read_file("/home/agent/blob.bin", text=False)), blob)
        owner = run(self.sandbox.exec(["stat", "-c", "%u", "/home/agent/blob.bin"])).stdout.strip()
        self.assertEqual(owner, "1000")

    def test_file_errors_are_the_ones_inspect_expects(self) -> None:
        with self.assertRaises(FileNotFoundError):
            run(self.sandbox.read_file("missing.txt"))
        with self.assertRaises(IsADirectoryError):
            run(self.sandbox.read_file("/home/agent"))
        run(self.sandbox.exec(["mkdir", "-p", "a-dir"]))
        with self.assertRaises(IsADirectoryError):
            run(self.sandbox.write_file("a-dir", "x"))
        with self.assertRaises(PermissionError):
            run(self.sandbox.write_file("/etc/passwd", "agent owns nothing here\n"))
        with self.assertRaises(PermissionError):
            run(self.sandbox.write_file("/usr/local/bin/x", "x"))  # root-owned folder: no new file for agent
        self.assertIn("root:x:0:0", run(self.sandbox.read_file("/etc/passwd")))


if __name__ == "__main__":
    unittest.main()
