"""Egress policy in the Python adapters (issue 42): the client's ``set_egress`` against a real server (none ↔ open:
the switch that needs no proxy), and what Harbor's, SForge's and Inspect's adapters ask of the server, on a client
that records the calls (the allowlist's enforcement is proven by ``test/integration/session-egress.int.test.ts`` on a
throwaway engine; a shared engine gets no egress proxy from tests).

Run from the repository root after ``npm run build``: ``npm run test:python``.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import unittest
from pathlib import Path
from types import SimpleNamespace
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from roboguide_eval import BadRequestError, Client  # noqa: E402
from roboguide_eval.harbor import RoboguideEnvironment, egress_of  # noqa: E402
from roboguide_eval.sforge import RoboguideBackend, RoboguideHandle, egress_allow_entries  # noqa: E402
from tests.serverkit import ServerFixture, ensure_test_image  # noqa: E402


class RecordingClient(Client):
    """A client whose session calls are recorded and answered as the server answers them (no server)."""

    def __init__(self, egress: dict[str, Any] | None = None) -> None:
        super().__init__("/nonexistent.sock")
        self.calls: list[tuple[str, Any]] = []
        self.egress = egress or {"mode": "open"}

    def set_egress(self, session_id: str, mode: str, allow: list[str] | None = None, methods: list[str] | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"mode": mode, **({"allow": allow} if allow is not None else {}), **({"methods": methods} if methods is not None else {})}
        self.calls.append(("set_egress", (session_id, body)))
        self.egress = body
        return body

    def get_session(self, session_id: str) -> dict[str, Any]:
        self.calls.append(("get_session", session_id))
        return {"session_id": session_id, "egress": dict(self.egress)}


def policy(mode: str, hosts: list[str] | None = None) -> Any:
    return SimpleNamespace(network_mode=SimpleNamespace(value=mode), allowed_hosts=hosts or [])


class HarborEgressTest(unittest.TestCase):
    def test_network_policy_maps_onto_egress(self) -> None:
        self.assertEqual(egress_of(None), {"mode": "open"})
        self.assertEqual(egress_of(policy("public")), {"mode": "open"})
        self.assertEqual(egress_of(policy("no-network")), {"mode": "none"})
        self.assertEqual(egress_of(policy("allowlist", ["api.openai.com", "*.anthropic.com"])),
                         {"mode": "allowlist", "allow": ["api.openai.com", "*.anthropic.com"]})
        with self.assertRaises(ValueError):
            egress_of(policy("allowlist", []))
        with self.assertRaises(ValueError):
            egress_of(policy("something-else"))

    def test_declares_allowlist_and_dynamic_policy_and_switches_the_live_session(self) -> None:
        client = RecordingClient()
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "Dockerfile").write_text("FROM scratch\n")
            env = RoboguideEnvironment(Path(tmp), "t", "trial-1", None, SimpleNamespace(docker_image=None, env={}), client=client,
                                       network_policy=policy("public"))
        caps = env.capabilities
        self.assertTrue(caps.network_allowlist)
        self.assertTrue(caps.dynamic_network_policy)
        env._session = "s-1"
        asyncio.run(env.set_network_policy(policy("allowlist", ["api.openai.com"])))
        self.assertEqual(client.calls, [("set_egress", ("s-1", {"mode": "allowlist", "allow": ["api.openai.com"]}))])
        asyncio.run(env.set_network_policy(policy("public")))
        self.assertEqual(client.calls[-1], ("set_egress", ("s-1", {"mode": "open"})))


class SForgeEgressTest(unittest.TestCase):
    def test_endpoints_become_allow_entries_by_name_else_address(self) -> None:
        endpoints = [
            SimpleNamespace(ip="203.0.113.7", port=8443, hostname="judge.internal"),
            SimpleNamespace(ip="203.0.113.8", port=8443, hostname="judge.internal"),
            SimpleNamespace(ip="172.17.0.1", port=9000, hostname=None),
            SimpleNamespace(ip="2001:db8::1", port=443, hostname=None),
        ]
        self.assertEqual(egress_allow_entries(endpoints), ["judge.internal:8443", "172.17.0.1:9000", "[2001:db8::1]:443"])
        with self.assertRaises(ValueError):
            egress_allow_entries([SimpleNamespace(ip="", port=80, hostname=None)])

    def test_apply_switches_to_the_allowlist_and_cleanup_puts_back_the_policy_before(self) -> None:
        client = RecordingClient({"mode": "open"})
        backend = RoboguideBackend(client=client)
        handle = RoboguideHandle(client, "s-2", "agent", "c-2")
        isolation = backend.create_network_isolation(handle, [SimpleNamespace(ip="198.18.1.10", port=443, hostname="api.test")], None)
        isolation.apply()
        self.assertEqual(client.calls[-1], ("set_egress", ("s-2", {"mode": "allowlist", "allow": ["api.test:443"]})))
        isolation.cleanup()
        self.assertEqual(client.calls[-1], ("set_egress", ("s-2", {"mode": "open"})))


class ClientSetEgressTest(unittest.TestCase):
    """``set_egress`` on a real server: none → open → none (moving the container between networks), and a refusal."""

    def test_set_egress_switches_and_get_session_shows_it(self) -> None:
        server = ServerFixture()
        try:
            image = ensure_test_image()
            created = server.client.create_session(image, ttl_seconds=300)
            sid = created["session_id"]
            self.assertEqual(server.client.get_session(sid)["egress"], {"mode": "none"})
            self.assertEqual(server.client.set_egress(sid, "open"), {"mode": "open"})
            detail = server.client.get_session(sid)
            self.assertEqual((detail["egress"], detail["network"]), ({"mode": "open"}, "bridge"))
            self.assertIsNotNone(detail["ip_address"])
            self.assertEqual(server.client.set_egress(sid, "none"), {"mode": "none"})
            self.assertIsNone(server.client.get_session(sid)["ip_address"])
            with self.assertRaises(BadRequestError) as refused:
                server.client.set_egress(sid, "allowlist", ["*.com"])
            self.assertIn("allow[0]", str(refused.exception))
            server.client.delete_session(sid)
        finally:
            server.close()


if __name__ == "__main__":
    unittest.main()
