"""Harbor, driven as a Harbor user drives it: ``Trial`` runs (Oracle agent, the Verifier, task folders of the test's
own) with the environment chosen through Harbor's own ``TrialConfig.environment.import_path`` → ``EnvironmentFactory``,
a GPU task included; then the environment's methods one by one (``harbor_env.py``)."""

from __future__ import annotations

import asyncio
import importlib
import os
import warnings
from pathlib import Path
from typing import Any

from fwreport import check, expect
from harbor_env import run_environment_checks
from tests.serverkit import ServerFixture, containers_labelled

F = "harbor"
IMPORT_PATH = "roboguide_eval.harbor:RoboguideEnvironment"

TEST_SH = """#!/bin/bash
set -o pipefail
ok=1
[ "$(cat /app/hello.txt)" = "Hello, world!" ] || ok=0
[ "$(cat /app/shipped.txt 2>/dev/null)" = "from environment/" ] || [ "$EXPECT_SHIPPED" = "no" ] || ok=0
[ "$EXPECT_GPU" = "no" ] || [ -n "$NVIDIA_VISIBLE_DEVICES" ] || ok=0
echo "pwd=$(pwd) gpu=${NVIDIA_VISIBLE_DEVICES:-none}" > /logs/verifier/where.txt
echo $ok > /logs/verifier/reward.txt
"""

SOLVE_SH = """#!/bin/bash
echo "Hello, world!" > hello.txt
echo "Done!"
"""


def write_task(root: Path, name: str, *, image: str | None, dockerfile: str | None, shipped: bool, gpus: int = 0) -> Path:
    """A task folder as Harbor's docs lay it out: task.toml, instruction.md, environment/, tests/test.sh, solution/."""
    task = root / name
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "solution").mkdir()
    env_lines = ["[environment]", "build_timeout_sec = 600.0", "cpus = 1", "memory_mb = 512", 'workdir = "/app"']
    if image:
        env_lines.append(f'docker_image = "{image}"')
    if gpus:
        env_lines.append(f"gpus = {gpus}")
    (task / "task.toml").write_text("\n".join(['version = "1.0"', "", "[verifier]", "timeout_sec = 120.0", "", "[verifier.env]",
                                                f'EXPECT_SHIPPED = "{"yes" if shipped else "no"}"', f'EXPECT_GPU = "{"yes" if gpus else "no"}"',
                                                "", "[agent]", "timeout_sec = 120.0", "", *env_lines, ""]))
    (task / "instruction.md").write_text('Create a file called hello.txt with "Hello, world!" as the content.\n')
    (task / "tests" / "test.sh").write_text(TEST_SH)
    (task / "solution" / "solve.sh").write_text(SOLVE_SH)
    if dockerfile:
        (task / "environment" / "Dockerfile").write_text(dockerfile)
    if shipped:
        (task / "environment" / "shipped.txt").write_text("from environment/")
    return task


async def _trial(task_dir: Path, trials_dir: Path) -> Any:
    """What ``harbor trials start -p TASK --agent oracle --environment-import-path …`` builds: a TrialConfig, then
    ``Trial.create`` (Harbor's EnvironmentFactory makes the environment from the config's import path) and ``run``."""
    from harbor.models.trial.config import AgentConfig, EnvironmentConfig, TaskConfig, TrialConfig  # type: ignore[import-not-found]
    from harbor.trial.trial import Trial  # type: ignore[import-not-found]

    config = TrialConfig(task=TaskConfig(path=task_dir), trials_dir=trials_dir, agent=AgentConfig(name="oracle"),
                         environment=EnvironmentConfig(import_path=IMPORT_PATH))
    t = await Trial.create(config)
    result = await t.run()
    return t, result


def _sessions_left(server: ServerFixture) -> list[str]:
    return [s["session_id"] for s in server.client.list_sessions() if "harbor.session" in (s.get("labels") or {})]


def run_harbor(server: ServerFixture, image: str, tmp: Path, *, gpu_host: bool) -> None:
    os.environ["ROBOGUIDE_EVAL_SOCKET"] = server.socket
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rg_harbor = importlib.import_module("roboguide_eval.harbor")
    from harbor.environments.base import BaseEnvironment  # type: ignore[import-not-found]
    from harbor.environments.factory import EnvironmentFactory  # type: ignore[import-not-found]

    check(F, "adapter built on Harbor's own BaseEnvironment", lambda: expect(rg_harbor.HARBOR_INSTALLED and issubclass(rg_harbor.RoboguideEnvironment, BaseEnvironment), "not a subclass"))
    check(F, "no DeprecationWarning at import (no legacy capability properties)",
          lambda: expect(not [w for w in caught if issubclass(w.category, DeprecationWarning) and "capability" in str(w.message)], str([str(w.message) for w in caught])))
    check(F, "EnvironmentFactory.run_preflight(import_path)", lambda: EnvironmentFactory.run_preflight(None, IMPORT_PATH))
    check(F, "resource_capabilities via the factory (cpu/memory limits)",
          lambda: expect(EnvironmentFactory.resource_capabilities(None, IMPORT_PATH).memory_limit is True, "memory_limit"))

    prebuilt = write_task(tmp / "tasks", "hello-prebuilt", image=image, dockerfile=None, shipped=True)
    built = write_task(tmp / "tasks", "hello-built", image=None, dockerfile=f"FROM {image}\nWORKDIR /app\n", shipped=False)
    for label, task_dir in (("prebuilt image + environment/ upload", prebuilt), ("Dockerfile built by POST /v1/images", built)):
        outcome = check(F, f"trial ({label}): Trial.run() with OracleAgent and Verifier ends without exception",
                        lambda d=task_dir: _trial_ok(asyncio.run(_trial(d, tmp / "trials"))))
        if outcome is None:
            continue
        t, result = outcome
        check(F, f"trial ({label}): reward 1.0", lambda r=result: expect((r.verifier_result.rewards or {}).get("reward") == 1.0, f"rewards={r.verifier_result.rewards}"))
        check(F, f"trial ({label}): verifier ran in the task workdir /app and /logs/verifier came back",
              lambda tt=t: expect((tt.paths.verifier_dir / "where.txt").read_text().startswith("pwd=/app "), (tt.paths.verifier_dir / "where.txt").read_text()))
        check(F, f"trial ({label}): agent logs downloaded (/logs/agent)", lambda tt=t: expect(any(tt.paths.agent_dir.iterdir()), "empty agent dir"))
        check(F, f"trial ({label}): session deleted at stop", lambda: expect(not _sessions_left(server), "sessions left"))

    gpu_task = write_task(tmp / "tasks", "hello-gpu", image=image, dockerfile=None, shipped=False, gpus=1)
    if gpu_host:
        outcome = check(F, "GPU trial (gpus = 1, an engine with the NVIDIA runtime): ends without exception",
                        lambda: _trial_ok(asyncio.run(_trial(gpu_task, tmp / "trials"))))
        if outcome is not None:
            t, result = outcome
            check(F, "GPU trial: reward 1.0, the verifier saw NVIDIA_VISIBLE_DEVICES",
                  lambda: expect((result.verifier_result.rewards or {}).get("reward") == 1.0, (t.paths.verifier_dir / "where.txt").read_text()))
    else:
        made: list[str] = []

        def refused() -> None:
            t, result = asyncio.run(_trial(gpu_task, tmp / "trials"))
            made.append(t.config.trial_name)
            info = result.exception_info
            expect(info is not None, "a GPU trial on an engine without the NVIDIA runtime ended without an exception")
            expect("E_NVIDIA_RUNTIME_MISSING" in info.exception_message or "NVIDIA runtime" in info.exception_message, info.exception_message[:300])
            expect(result.verifier_result is None, "the verifier ran")

        check(F, "GPU trial (gpus = 1) on an engine without the NVIDIA runtime: refused at start, the error names it, no reward", refused)
        check(F, "GPU trial: nothing left (session and container removed)",
              lambda: expect(made and not _sessions_left(server) and not containers_labelled(f"harbor.session={made[0]}"), f"left: {made}"))
    run_environment_checks(server, tmp, prebuilt)


def _trial_ok(outcome: Any) -> Any:
    t, result = outcome
    expect(result.exception_info is None, f"exception: {result.exception_info and result.exception_info.exception_message}")
    return outcome
