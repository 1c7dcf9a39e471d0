"""Harbor's environment, made by Harbor's ``EnvironmentFactory`` from the import path, method by method: capabilities,
network modes, workdir, logs, upload/download, exec timeouts, cancellation, concurrency, users, secrets."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path
from typing import Any

from fwreport import acheck, check, expect
from roboguide_eval.harbor import egress_of as rg_egress_of
from tests.serverkit import ServerFixture, containers_labelled

F = "harbor"
IMPORT_PATH = "roboguide_eval.harbor:RoboguideEnvironment"

def run_environment_checks(server: ServerFixture, tmp: Path, task_dir: Path) -> None:
    from harbor.environments.capabilities import EnvironmentCapabilities  # type: ignore[import-not-found]
    from harbor.environments.factory import EnvironmentFactory  # type: ignore[import-not-found]
    from harbor.models.task.config import NetworkMode, NetworkPolicy  # type: ignore[import-not-found]
    from harbor.models.task.task import Task  # type: ignore[import-not-found]
    from harbor.models.trial.paths import TrialPaths  # type: ignore[import-not-found]

    task = Task(task_dir)

    def make(policy: Any = None, **kwargs: Any) -> Any:
        paths = TrialPaths(trial_dir=tmp / "env-trials" / uuid.uuid4().hex[:8])
        paths.mkdir()
        return EnvironmentFactory.create_environment_from_import_path(IMPORT_PATH, environment_dir=task.paths.environment_dir, environment_name="hello",
                                                                       session_id=f"rg-fw-{uuid.uuid4().hex[:8]}", trial_paths=paths,
                                                                       task_env_config=task.config.environment.model_copy(deep=True),
                                                                       network_policy=policy, **kwargs)

    env = check(F, "EnvironmentFactory.create_environment_from_import_path", lambda: make())
    if env is None:
        return
    check(F, "capabilities is Harbor's EnvironmentCapabilities (gpus, disable_internet, network_allowlist, dynamic_network_policy)",
          lambda: expect(isinstance(env.capabilities, EnvironmentCapabilities) and env.capabilities.gpus and env.capabilities.disable_internet
                         and env.capabilities.network_allowlist and env.capabilities.dynamic_network_policy, repr(env.capabilities)))
    allow = NetworkPolicy(network_mode=NetworkMode.ALLOWLIST, allowed_hosts=["api.openai.com", "*.anthropic.com"])
    check(F, "an allowlist NetworkPolicy passes Harbor's validate_network_policy_support and maps onto the session's egress",
          lambda: (env.validate_network_policy_support(allow),
                   expect(rg_egress_of(allow) == {"mode": "allowlist", "allow": ["api.openai.com", "*.anthropic.com"]}, "egress")))
    check(F, "a GPU task passes Harbor's GPU validation", lambda: make(override_gpus=1))

    async def flow() -> None:
        await env.start(force_build=False)
        try:
            await _method_checks(env, tmp, NetworkPolicy, NetworkMode)
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


async def _method_checks(env: Any, tmp: Path, NetworkPolicy: Any, NetworkMode: Any) -> None:

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
        # No clock bound (a loaded CI machine): the quick exec must come back while all 6 long ones still run.
        slow = [asyncio.create_task(env.exec("sleep 120")) for _ in range(6)]
        await asyncio.sleep(0.5)
        try:
            await env.exec("true")
            expect(not any(task.done() for task in slow), "the quick exec came back only after a long one ended")
        finally:
            for task in slow:
                task.cancel()  # cancellation closes each request: the server kills its command
            await asyncio.gather(*slow, return_exceptions=True)

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
        # Harbor's own phase switch (Trial._phase_network_policy: set_network_policy to the phase's policy, back to the
        # baseline after), on the live session: the agent phase has no network, the baseline's comes back.
        from harbor.trial.trial import Trial  # type: ignore[import-not-found]

        public, none = NetworkPolicy(network_mode=NetworkMode.PUBLIC), NetworkPolicy(network_mode=NetworkMode.NO_NETWORK)
        await env.set_network_policy(public)  # the same policy: nothing to do
        async with Trial._phase_network_policy(None, env, baseline_policy=public, phase_policy=none):  # uses no trial state
            r = await env.exec("ls /sys/class/net")
            expect(r.stdout.split() == ["lo"], f"agent phase interfaces: {r.stdout!r}")
            expect(env._client.get_session(env.session)["egress"] == {"mode": "none"}, "GET shows mode none")
        r = await env.exec("ls /sys/class/net")
        expect(len(r.stdout.split()) > 1, f"baseline interfaces: {r.stdout!r}")
        expect(env._client.get_session(env.session)["egress"] == {"mode": "open"}, "GET shows mode open")

    async def user() -> None:
        with env.with_default_user("nobody"):
            r = await env.exec("id -u")
        expect(r.stdout.strip() == "65534", repr(r.stdout))

    async def kinds() -> None:
        expect(await env.is_dir("/logs") and await env.is_file("/app/shipped.txt") and not await env.is_file("/nope"), "is_dir/is_file")

    for name, fn in (("network_mode public (default): a network interface", public), ("task workdir: pwd is /app", workdir),
                     ("/logs/agent and /logs/verifier made, writable by any user", logs), ("environment/ uploaded into the workdir", shipped),
                     ("exec runs bash -c (set -o pipefail works)", bash), ("exec timeout raises RuntimeError('Command timed out…')", timeout),
                     ("asyncio.wait_for cancel kills the command", cancel), ("a quick exec comes back while 6 long ones run", concurrency),
                     ("truncated surfaced on ExecResult", truncated), ("symlinks and modes kept on upload_dir/download_dir", links),
                     ("Trial._phase_network_policy: public → no-network (only lo) → public, on the live session", policy), ("exec as a user (with_default_user)", user),
                     ("is_dir/is_file (Harbor's base)", kinds)):
        await acheck(F, name, fn)


