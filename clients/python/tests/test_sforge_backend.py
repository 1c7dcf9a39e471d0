"""SForge's ``ContainerBackend`` (``roboguide_eval.sforge.RoboguideBackend``) against a real ``roboguide-eval serve``
and the real Docker engine: the parts ``test_adapters.py``'s run-agent sequence does not reach (names held by one
container, removal by name, cleanup that reports instead of raising, docker-py's ``mem_limit`` units, image presence).

Run from the repository root after ``npm run build``: ``npm run test:python``.
"""

from __future__ import annotations

import io
import logging
import subprocess
import sys
import unittest
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from roboguide_eval import ConflictError  # noqa: E402
from roboguide_eval.sforge import RoboguideBackend, RoboguideHandle, _memory_mib  # noqa: E402
from tests.serverkit import ServerFixture, containers_labelled, ensure_test_image  # noqa: E402

RUN = f"py-sforge-{uuid.uuid4().hex[:8]}"
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
    leaked = containers_labelled(f"sforge.name={RUN}-a") + containers_labelled(f"sforge.name={RUN}-b")
    for cid in leaked:
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True)
    if left or leaked:
        raise AssertionError(f"sessions left: {left}, containers left: {leaked}")


def engine_has(container_id: str) -> bool:
    return subprocess.run(["docker", "inspect", container_id], capture_output=True).returncode == 0


def captured() -> tuple[logging.Logger, io.StringIO]:
    out = io.StringIO()
    logger = logging.getLogger(f"sforge-test-{uuid.uuid4().hex[:6]}")
    logger.addHandler(logging.StreamHandler(out))
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return logger, out


class NamesTest(unittest.TestCase):
    def test_a_name_is_held_by_one_container_until_it_is_removed_by_name(self) -> None:
        backend = RoboguideBackend(server.socket, network="none")
        name = f"{RUN}-a"
        first = backend.create_container(IMAGE, name)
        self.assertTrue(engine_has(first.id))
        with self.assertRaises(ConflictError) as taken:
            backend.create_container(IMAGE, name)
        self.assertEqual((taken.exception.status, taken.exception.code), (409, "E_NAME_IN_USE"))
        self.assertEqual(len(containers_labelled(f"sforge.name={name}")), 1, "the refused create made a container")
        backend.remove_container_by_name(name)
        self.assertFalse(backend.container_exists(name))
        self.assertFalse(engine_has(first.id))
        backend.remove_container_by_name(name)  # nothing left: not an error
        second = backend.create_container(IMAGE, name)
        backend.cleanup_container(second, None)
        self.assertFalse(engine_has(second.id))

    def test_cleanup_reports_rather_than_raises(self) -> None:
        backend = RoboguideBackend(server.socket, network="none")
        backend.cleanup_container(None)  # SForge calls it with no handle when creation failed
        handle = backend.create_container(IMAGE, f"{RUN}-b")
        logger, out = captured()
        backend.cleanup_container(handle, logger)
        self.assertIn(f"Container {RUN}-b removed.", out.getvalue())
        self.assertFalse(engine_has(handle.id))
        logger, out = captured()
        backend.cleanup_container(handle, logger)  # a second cleanup: the server's delete is idempotent
        self.assertIn(f"Container {RUN}-b removed.", out.getvalue())
        unknown = RoboguideHandle(server.client, f"ses-{uuid.uuid4().hex}", f"{RUN}-b", "no-such-container")
        logger, out = captured()
        backend.cleanup_container(unknown, logger)  # the server never had it: said, never raised
        self.assertIn(f"Failed to remove container {RUN}-b", out.getvalue())


class LimitsTest(unittest.TestCase):
    def test_mem_limit_units_as_docker_py_gives_them(self) -> None:
        self.assertEqual(
            [_memory_mib(v) for v in (None, 512 * 1024 * 1024, "512m", "1g", "1.5g", "2048k", "3", " 64M ")],
            [None, 512, 512, 1024, 1536, 2, 1, 64],
        )
        with self.assertRaises(ValueError) as bad:
            _memory_mib("lots")
        self.assertIn("mem_limit", str(bad.exception))

    def test_limits_reach_the_container(self) -> None:
        backend = RoboguideBackend(server.socket, network="none")
        handle = backend.create_container(IMAGE, f"{RUN}-a", cpu_limit=1, mem_limit="256m")
        try:
            out = subprocess.run(["docker", "inspect", "-f", "{{.HostConfig.Memory}} {{.HostConfig.NanoCpus}}", handle.id],
                                 check=True, capture_output=True, text=True).stdout.split()
            self.assertEqual(out, [str(256 * 1024 * 1024), str(10**9)])
        finally:
            backend.cleanup_container(handle, None)

    def test_image_presence_is_the_engine_s(self) -> None:
        backend = RoboguideBackend(server.socket)
        self.assertTrue(backend.image_exists(IMAGE))
        self.assertFalse(backend.image_exists(f"roboguide-test/absent-{uuid.uuid4().hex[:8]}:1"))


if __name__ == "__main__":
    unittest.main()
