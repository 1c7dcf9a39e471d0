"""Run by run_frameworks.py in the frameworks' environment (a process of its own: Inspect's global state stays out of
the Harbor and SForge checks). Inspect's own entry-point loading and registry find the ``roboguide`` provider; every
test of Inspect's ``self_check`` runs against one of its sandboxes between ``sample_init`` and ``sample_cleanup``;
then ``inspect_ai.eval()`` runs a task of this file's own with ``sandbox=("roboguide", …)``, model ``mockllm/model``
(Inspect's offline mock model: no network, no key), as an Inspect user runs it.

Prints one JSON line per check. Environment: FRAMEWORKS_MISSING (JSON list of distributions without a wheel: their
stand-ins), ROBOGUIDE_EVAL_SOCKET, RG_IMAGE, FRAMEWORKS_TMP."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import traceback
from pathlib import Path

import fwload

STAND_INS = fwload.install_stand_ins(json.loads(os.environ.get("FRAMEWORKS_MISSING", "[]")))


def row(check: str, ok: bool, detail: str = "") -> None:
    print(json.dumps({"check": check, "ok": ok, "detail": detail[:300]}), flush=True)


def failure(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}".replace("\n", " ")


async def self_check_run() -> None:
    from inspect_ai._util.entrypoints import ensure_entry_points
    from inspect_ai.util._sandbox import self_check
    from inspect_ai.util._sandbox.registry import registry_find_sandboxenv

    try:
        ensure_entry_points()
        provider = registry_find_sandboxenv("roboguide")
        row("found through the inspect_ai entry point and Inspect's registry", provider.__name__ == "RoboguideSandboxEnvironment", provider.__name__)
    except Exception as err:  # noqa: BLE001
        row("found through the inspect_ai entry point and Inspect's registry", False, failure(err))
        return
    try:
        config = provider.config_deserialize({"image": os.environ["RG_IMAGE"], "user": "agent", "workdir": "/home/agent"})
        envs = await provider.sample_init("rg-frameworks", config, {})
        row("sample_init (session as user agent, workdir /home/agent)", True)
    except Exception as err:  # noqa: BLE001
        row("sample_init (session as user agent, workdir /home/agent)", False, failure(err))
        return
    try:
        results = await self_check.self_check(envs["default"])
        for name, outcome in results.items():
            row(f"self_check {name}", outcome is True, "" if outcome is True else str(outcome))
    except Exception:  # noqa: BLE001
        row("self_check ran", False, traceback.format_exc()[-300:])
    finally:
        await provider.sample_cleanup("rg-frameworks", config, envs, False)
    from roboguide_eval import Client

    left = [s for s in Client(os.environ["ROBOGUIDE_EVAL_SOCKET"]).list_sessions() if "inspect.sample" in (s.get("labels") or {})]
    row("sample_cleanup deleted the sandbox", not left, str(left))


def eval_run() -> None:
    """A task as an Inspect user writes one: a solver works in the sandbox, a scorer reads the sandbox's file back;
    ``eval()`` with the sandbox set to ours. The model is Inspect's ``mockllm/model`` and no step calls it (Inspect's
    token counting would fetch tiktoken's tables from the internet)."""
    from inspect_ai import Task, eval, task
    from inspect_ai.dataset import Sample
    from inspect_ai.scorer import Score, Target, accuracy, scorer
    from inspect_ai.solver import Generate, TaskState, solver
    from inspect_ai.util import sandbox

    @solver
    def work_in_sandbox():  # type: ignore[no-untyped-def]
        async def solve(state: TaskState, generate: Generate) -> TaskState:
            r = await sandbox().exec(["sh", "-c", "echo 42 > answer.txt && id -un && pwd"])
            state.metadata["where"] = r.stdout
            return state

        return solve

    @scorer(metrics=[accuracy()])
    def answer_file():  # type: ignore[no-untyped-def]
        async def score(state: TaskState, target: Target) -> Score:
            text = await sandbox().read_file("answer.txt")
            return Score(value="C" if text.strip() == target.text else "I", answer=text.strip(), explanation=state.metadata.get("where", ""))

        return score

    @task
    def roboguide_hello() -> Task:
        return Task(dataset=[Sample(input="Write 42 to answer.txt", target="42"), Sample(input="again", target="42")],
                    solver=[work_in_sandbox()], scorer=answer_file(),
                    sandbox=("roboguide", {"image": os.environ["RG_IMAGE"], "user": "agent", "workdir": "/home/agent"}))

    log_dir = Path(os.environ.get("FRAMEWORKS_TMP", "/tmp")) / "inspect-logs"
    try:
        logs = eval(roboguide_hello(), model="mockllm/model", log_dir=str(log_dir), display="none")
        log = logs[0]
        row("eval(task, sandbox=('roboguide', …), model='mockllm/model'): status success", log.status == "success",
            f"status={log.status} error={log.error.message if log.error else None}")
        metric = log.results.scores[0].metrics["accuracy"].value if log.results else None
        row("eval(): both samples scored C from the sandbox's own file (accuracy 1.0)", metric == 1.0, f"accuracy={metric}")
        where = [s.scores["answer_file"].explanation for s in (log.samples or [])]
        row("eval(): the solver ran as user agent in /home/agent", all(w.split() == ["agent", "/home/agent"] for w in where) and len(where) == 2, repr(where))
        row("eval(): a log file was written", any(log_dir.glob("*.eval")), str(sorted(p.name for p in log_dir.glob("*"))))
    except Exception as err:  # noqa: BLE001
        row("eval(): ran to its end", False, failure(err) + traceback.format_exc()[-200:])
    from roboguide_eval import Client

    left = [s for s in Client(os.environ["ROBOGUIDE_EVAL_SOCKET"]).list_sessions() if "inspect.sample" in (s.get("labels") or {})]
    row("eval(): every sample's sandbox deleted", not left, str(left))


async def egress_run() -> None:
    """The egress policy through Inspect's sandbox config: ``sandbox=("roboguide", {"egress": {...}})`` as Inspect
    deserializes and hashes it, each sample's session created with that policy (none ↔ open here: this runner's server
    has no egress proxy; the allowlist's enforcement is test/integration/session-egress.int.test.ts)."""
    from inspect_ai.util._sandbox.environment import SandboxEnvironmentSpec
    from inspect_ai.util._sandbox.registry import registry_find_sandboxenv

    from roboguide_eval import Client

    provider = registry_find_sandboxenv("roboguide")
    client = Client(os.environ["ROBOGUIDE_EVAL_SOCKET"])
    for mode, interfaces in (("open", lambda names: len(names) > 1), ("none", lambda names: names == ["lo"])):
        name = f"sandbox config egress {{'mode': '{mode}'}}: Inspect's spec hashes it, the session has that policy"
        envs = None
        try:
            config = provider.config_deserialize({"image": os.environ["RG_IMAGE"], "egress": {"mode": mode}})
            hash(SandboxEnvironmentSpec(type="roboguide", config=config))
            envs = await provider.sample_init("rg-frameworks-egress", config, {})
            env = envs["default"]
            names = (await env.exec(["ls", "/sys/class/net"])).stdout.split()
            egress = client.get_session(env.session_id)["egress"]
            row(name, egress == {"mode": mode} and interfaces(names), f"egress={egress} interfaces={names}")
        except Exception as err:  # noqa: BLE001
            row(name, False, failure(err))
        finally:
            if envs is not None:
                await provider.sample_cleanup("rg-frameworks-egress", config, envs, False)


def main() -> None:
    try:
        import inspect_ai  # noqa: F401 - Inspect's own __init__, unchanged
    except Exception as err:  # noqa: BLE001
        row("inspect_ai loads", False, failure(err))
        return
    row("inspect_ai loads", True)
    asyncio.run(self_check_run())
    asyncio.run(egress_run())
    eval_run()
    print(json.dumps({"stand_ins": sorted(STAND_INS.used)}), file=sys.stderr)


if __name__ == "__main__":
    main()
