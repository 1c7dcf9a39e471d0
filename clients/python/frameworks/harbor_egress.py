"""A Harbor ``Trial`` whose agent phase is allowlisted, run through Harbor's REAL classes against a roboguide serve.

Driven by ``test/integration/harbor-egress.int.test.ts`` (issue 42): that test starts a throwaway engine with an
"internet" of its own and a ``serve`` on it, then runs this script. Two stages, as ``run_frameworks.py``: under any
Python 3.11 the frameworks' cached environment is made (``fwvenv.py``, the same requirement list as the runner, so the
same cache), then the script runs itself again inside it and runs one trial:

- the task (``task.toml``) leaves the environment public and declares ``[agent] network_mode = "allowlist"`` with
  ``allowed_hosts`` from ``RG_ALLOWED_HOSTS``; Harbor's ``Trial.run`` resolves that plan, validates it against the
  environment's capabilities (``network_allowlist``, ``dynamic_network_policy``) and switches the policy with
  ``_phase_network_policy`` around ``agent.run``;
- the agent is an agent class of this file (``AgentConfig.import_path``): ``setup`` (public) and ``run`` (the agent
  phase) run the shell probes given in ``RG_PROBES`` (``{"setup": {name: script}, "agent": {...}}``) through the
  environment's ``exec`` and record each answer together with the session's egress as ``GET /v1/sessions/{id}``
  shows it; the verifier (``tests/test.sh``, from ``RG_VERIFIER``) runs back at the baseline.

Prints one JSON line: ``{"skip": reason}``, or the session, the probes' answers, the verifier's output, the trial's
exception and reward. ``--probe`` prints only whether it would skip (no Harbor sources, no wheels) and the image to
use (the runner's test image, built on this engine when missing).
Environment: ``ROBOGUIDE_EVAL_SOCKET`` (the serve), ``RG_IMAGE`` (the task's image).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PY_ROOT = HERE.parent
sys.path.insert(0, str(HERE))

try:  # as Harbor imports this module (AgentConfig.import_path), Harbor is loaded; the two stages' __main__ need no agent
    from harbor.agents.base import BaseAgent  # type: ignore[import-not-found]
except ImportError:
    BaseAgent = object

RECORD = Path(os.environ.get("RG_PROBE_RECORD", "/nonexistent"))


class ProbeAgent(BaseAgent):  # type: ignore[misc,valid-type]
    """An agent that runs the test's probes: ``setup`` in the set-up phase, ``run`` in the agent phase."""

    @staticmethod
    def name() -> str:
        return "rg-egress-probe"

    def version(self) -> str | None:
        return "1"

    async def _probe(self, environment: Any, phase: str) -> None:
        probes = json.loads(os.environ["RG_PROBES"]).get(phase, {})
        done = json.loads(RECORD.read_text()) if RECORD.is_file() else {}
        session = environment.session
        egress = environment._client.get_session(session)["egress"]
        answers = {}
        for name, script in probes.items():
            r = await environment.exec(script, timeout_sec=60)
            answers[name] = {"rc": r.return_code, "stdout": r.stdout or "", "stderr": r.stderr or ""}
        done[phase] = {"session": session, "egress": egress, "answers": answers}
        RECORD.write_text(json.dumps(done))

    async def setup(self, environment: Any) -> None:
        await self._probe(environment, "setup")

    async def run(self, instruction: str, environment: Any, context: Any) -> None:
        await self._probe(environment, "agent")


def write_task(root: Path, image: str, allowed: list[str], verifier: str) -> Path:
    task = root / "egress-task"
    for sub in ("environment", "tests", "solution"):
        (task / sub).mkdir(parents=True)
    hosts = ", ".join(json.dumps(h) for h in allowed)
    (task / "task.toml").write_text("\n".join([
        'version = "1.0"', "", "[verifier]", "timeout_sec = 120.0", "", "[agent]", "timeout_sec = 300.0",
        'network_mode = "allowlist"', f"allowed_hosts = [{hosts}]", "", "[environment]", "build_timeout_sec = 600.0",
        "cpus = 1", "memory_mb = 512", f'docker_image = "{image}"', ""]))
    (task / "instruction.md").write_text("Reach the allowed host.\n")
    (task / "tests" / "test.sh").write_text(f"#!/bin/sh\n{verifier}\necho 1 > /logs/verifier/reward.txt\n")
    (task / "solution" / "solve.sh").write_text("#!/bin/sh\ntrue\n")
    return task


async def trial(task_dir: Path, trials_dir: Path) -> Any:
    from harbor.models.trial.config import AgentConfig, EnvironmentConfig, TaskConfig, TrialConfig  # type: ignore[import-not-found]
    from harbor.trial.trial import Trial  # type: ignore[import-not-found]

    config = TrialConfig(task=TaskConfig(path=task_dir), trials_dir=trials_dir, agent=AgentConfig(import_path="harbor_egress:ProbeAgent"),
                         environment=EnvironmentConfig(import_path="roboguide_eval.harbor:RoboguideEnvironment"))
    t = await Trial.create(config)
    return t, await t.run()


def inside() -> int:
    import fwload

    state = json.loads(os.environ["RG_EGRESS_STATE"])
    tmp = Path(state["tmp"])
    fwload.install_stand_ins(state["missing"])
    fwload.load_harbor(Path(state["harbor"]), tmp / "harbor-src")
    sys.path.append(str(PY_ROOT))
    global RECORD
    RECORD = tmp / "probes.json"
    os.environ["RG_PROBE_RECORD"] = str(RECORD)
    allowed = json.loads(os.environ["RG_ALLOWED_HOSTS"])
    task = write_task(tmp / "tasks", os.environ["RG_IMAGE"], allowed, os.environ.get("RG_VERIFIER", "true"))
    t, result = asyncio.run(trial(task, tmp / "trials"))
    verifier_dir = t.paths.verifier_dir
    out = {
        "probes": json.loads(RECORD.read_text()) if RECORD.is_file() else {},
        "exception": result.exception_info and result.exception_info.exception_message,
        "reward": (result.verifier_result.rewards or {}).get("reward") if result.verifier_result else None,
        "verifier": {p.name: p.read_text() for p in verifier_dir.iterdir() if p.is_file()} if verifier_dir.is_dir() else {},
        "seconds": {name: round((timing.finished_at - timing.started_at).total_seconds(), 1)
                    for name in ("environment_setup", "agent_setup", "agent_execution", "verifier")
                    if (timing := getattr(result, name, None)) is not None and timing.started_at and timing.finished_at},
        "trial_seconds": round((result.finished_at - result.started_at).total_seconds(), 1) if result.finished_at and result.started_at else None,
    }
    print(json.dumps(out))
    return 0


def skip_reason() -> tuple[str | None, dict[str, str], Path]:
    import run_frameworks

    sources, looked = {}, {}
    for name, (var, folder) in run_frameworks.SOURCES.items():
        src = looked[name] = Path(os.environ.get(var) or run_frameworks.SHARED / folder).resolve()
        if (src / run_frameworks.LAYOUT[name]).is_dir():
            sources[name] = str(src)
    wheelhouse = Path(os.environ.get("FRAMEWORKS_WHEELS", "/opt/pypi/files"))
    if "harbor" not in sources:
        return f"no Harbor sources (src/harbor) under {looked['harbor']} (set HARBOR_SRC or FRAMEWORKS_DIR)", sources, wheelhouse
    if not any(wheelhouse.glob("*.whl")):
        return f"no wheels in {wheelhouse} (set FRAMEWORKS_WHEELS)", sources, wheelhouse
    return None, sources, wheelhouse


def outer(probe_only: bool) -> int:
    import fwvenv

    reason, sources, wheelhouse = skip_reason()
    if reason is not None or probe_only:
        image = None
        if reason is None:  # the runner's test image (bash, /etc/passwd with root: Harbor's verifier chmods as root)
            sys.path.append(str(PY_ROOT))
            from tests.serverkit import ensure_test_image

            image = ensure_test_image()
        print(json.dumps({"skip": reason, "image": image}))
        return 0
    # The runner's requirement list (every framework present), so the runner's cached environment is the one used.
    plan = fwvenv.plan({k: Path(v) for k, v in sources.items()}, wheelhouse)
    python, _ = fwvenv.ensure(plan, wheelhouse, log=lambda line: print(line, file=sys.stderr))
    with tempfile.TemporaryDirectory(prefix="rg-harbor-egress-") as tmp:
        state = {"tmp": tmp, "missing": list(plan.missing), "harbor": sources["harbor"]}
        env = {**os.environ, "RG_EGRESS_STATE": json.dumps(state), "PYTHONPATH": os.pathsep.join([str(HERE), str(PY_ROOT)]),
               "PYTHONDONTWRITEBYTECODE": "1"}
        return subprocess.run([str(python), str(HERE / "harbor_egress.py"), "--inside"], env=env).returncode


if __name__ == "__main__":
    sys.exit(inside() if "--inside" in sys.argv else outer("--probe" in sys.argv))
