"""``npm run test:frameworks``: the adapters driven by the REAL framework code, against a real server and engine.

Sources: ``HARBOR_SRC`` (Harbor: ``src/harbor``), ``SFORGE_SRC`` (EdgeBench: ``sforge/``) and ``INSPECT_SRC``
(inspect_ai: ``src/inspect_ai``); each one unset defaults to its folder in ``../shared/frameworks/`` beside the
repository. A framework whose sources are missing is reported SKIPPED, and that fails the run.

Two stages. This script, under any Python 3.11, reads the frameworks' own dependency lists and makes (once, cached by
a hash of the list: ``fwvenv.py``) a virtual environment with those dependencies installed offline from the wheels on
disk (``FRAMEWORKS_WHEELS``, default ``/opt/pypi/files``); it then runs itself again in that environment, where a
``roboguide-eval serve`` of this checkout is started on a private socket with a temporary state
(``tests/serverkit.py``; run ``npm run build`` first) and the checks run: ``harbor_trials.py``/``harbor_env.py``,
``sforge_checks.py``, ``inspect_checks.py`` (a process of its own). Stand-ins exist only for declared dependencies
that have no wheel on disk, and the source adaptations are the few ``fwload.py`` lists; the output names each.

Prints a table framework × check, the counts and the commits run against; ``--update-docs`` writes the same table
into ``docs/testing.md`` between its markers. Exits 1 when a check failed or a framework was skipped (the one
expected kind of skip says so and does not fail the run).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PY_ROOT = HERE.parent
ROOT = PY_ROOT.parent.parent


def shared_frameworks() -> Path:
    """Where the frameworks' copies lie: ``FRAMEWORKS_DIR``; else ``../shared/frameworks`` beside this checkout; else
    beside the checkout it was cloned from (a clone made elsewhere, as CI makes one, still finds the machine's copies);
    else this kind of machine's own place (``/work/shared/frameworks``). The first that exists; else the second, so
    that SKIPPED names the place a user expects."""
    if os.environ.get("FRAMEWORKS_DIR"):
        return Path(os.environ["FRAMEWORKS_DIR"])  # named: used as it is (a wrong one shows as SKIPPED)
    beside = ROOT.parent / "shared" / "frameworks"
    candidates = [beside]
    origin = subprocess.run(["git", "-C", str(ROOT), "remote", "get-url", "origin"], capture_output=True, text=True)
    if origin.returncode == 0 and origin.stdout.strip().startswith("/"):
        candidates.append(Path(origin.stdout.strip()).parent / "shared" / "frameworks")
    candidates.append(Path("/work/shared/frameworks"))
    return next((c for c in candidates if c.is_dir()), candidates[0])


SHARED = shared_frameworks()
SOURCES = {"harbor": ("HARBOR_SRC", "harbor"), "sforge": ("SFORGE_SRC", "edgebench"), "inspect": ("INSPECT_SRC", "inspect_ai")}
LAYOUT = {"harbor": "src/harbor", "sforge": "sforge", "inspect": "src/inspect_ai"}


def commit_of(src: Path) -> str:
    """The checkout's HEAD, else the commit the shared folder's README gives for it."""
    if (src / ".git").exists():
        done = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True)
        if done.returncode == 0:
            return done.stdout.strip()
    readme = src.parent / "README.md"
    if readme.is_file():
        match = re.search(rf"^\|\s*`{re.escape(src.name)}/`\s*\|[^|]*\|\s*([0-9a-f]{{40}})\s*\|", readme.read_text(), re.MULTILINE)
        if match:
            return match.group(1)
    return "unknown"


def outer() -> int:
    import fwvenv

    started = time.monotonic()
    sources: dict[str, str] = {}
    skipped: dict[str, str] = {}
    only = [n for n in os.environ.get("FRAMEWORKS_ONLY", "").split(",") if n]  # while working on one; the others then show SKIPPED
    for name, (var, folder) in SOURCES.items():
        src = Path(os.environ.get(var) or SHARED / folder).resolve()
        if only and name not in only:
            skipped[name] = f"not in FRAMEWORKS_ONLY={','.join(only)}"
        elif (src / LAYOUT[name]).is_dir():
            sources[name] = str(src)
        else:
            skipped[name] = f"no {LAYOUT[name]} under {src} (set {var}, or FRAMEWORKS_DIR to a folder holding {folder}/)"
    wheelhouse = Path(os.environ.get("FRAMEWORKS_WHEELS", "/opt/pypi/files"))
    plan = fwvenv.plan({k: Path(v) for k, v in sources.items()}, wheelhouse)
    python, built = fwvenv.ensure(plan, wheelhouse)
    print(f"frameworks' environment: {python.parent.parent} ({'built now' if built else 'cached'}, {len(plan.install)} requirements "
          f"from the frameworks' own lists, offline from {wheelhouse}; {time.monotonic() - started:.0f} s)")
    tmp = Path(tempfile.mkdtemp(prefix="rg-frameworks-"))
    try:
        # The client package as pip installs it (its dist-info carries the inspect_ai entry point), fresh each run.
        dist = tmp / "dist"
        subprocess.run([str(python), "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", str(dist), str(PY_ROOT)],
                       check=True, capture_output=True)
        site = tmp / "site"
        zipfile.ZipFile(next(dist.glob("*.whl"))).extractall(site)
        state = {"sources": sources, "skipped": skipped, "missing": plan.missing, "relaxed": plan.relaxed, "tmp": str(tmp),
                 "site": str(site), "started": time.time() - (time.monotonic() - started)}
        path = [str(site), str(HERE)] + ([sources["sforge"]] if "sforge" in sources else [])
        env = {**os.environ, "FRAMEWORKS_STATE": json.dumps(state), "PYTHONPATH": os.pathsep.join(path), "PYTHONDONTWRITEBYTECODE": "1"}
        return subprocess.run([str(python), str(HERE / "run_frameworks.py"), "--inside", *sys.argv[1:]], env=env).returncode
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def inside(args: list[str]) -> int:
    sys.path.append(str(PY_ROOT))  # tests.serverkit (roboguide_eval itself comes from the installed wheel, first on the path)
    import fwload
    import fwreport
    from fwreport import NOTES, SKIPPED, Skip, check

    state = json.loads(os.environ["FRAMEWORKS_STATE"])
    sources = {k: Path(v) for k, v in state["sources"].items()}
    tmp = Path(state["tmp"])
    for name, reason in state["skipped"].items():
        SKIPPED.append(Skip(name, "all checks", reason, allowed=False))
    stand_ins = fwload.install_stand_ins(list(state["missing"]))
    from tests.serverkit import ServerFixture, ensure_test_image

    server = ServerFixture()
    image = ensure_test_image()
    left: list[str] = []
    try:
        if "harbor" in sources:
            adaptations = check("harbor", "Harbor's code loads (Trial, EnvironmentFactory)", lambda: _load_harbor(sources["harbor"], tmp))
            if adaptations is not None:
                NOTES.extend(f"source adaptation: {a}" for a in adaptations)
                import harbor_trials

                harbor_trials.run_harbor(server, image, tmp, gpu_host=_engine_has_nvidia())
        if "sforge" in sources:
            if check("sforge", "SForge's code loads (run_agent, its backend factory)", lambda: __import__("sforge.harness.run_agent")):
                import sforge_checks

                sforge_checks.run_sforge(server, image, tmp)
        if "inspect" in sources:
            _run_inspect(server, image, sources["inspect"], tmp, state)
    finally:
        left = [s["session_id"] for s in server.client.list_sessions()]
        for sid in left:
            server.client.delete_session(sid)
        server.close()
    used = sorted(stand_ins.used | set(NOTES_USED))
    missing = state["missing"]
    declared = ", ".join(f"{name} ({'/'.join(who)})" for name, who in missing.items()) or "none"
    NOTES.append(f"no wheel on disk (stand-ins): {declared}; imported, so stood in: {', '.join(used) or 'none'}")
    NOTES.extend(f"version range relaxed: {r}" for r in state["relaxed"])
    if left:
        NOTES.append(f"sessions left at the end (deleted): {left}")
    fwreport.print_table()
    elapsed = time.time() - state["started"]
    commits = {name: commit_of(src) for name, src in sources.items()}
    print(f"commits: {json.dumps(commits)}; run took {elapsed:.0f} s")
    table = fwreport.markdown(commits, elapsed, f"{os.cpu_count()} cores")
    if "--update-docs" in args:
        fwreport.update_docs(ROOT / "docs" / "testing.md", table)
        print("docs/testing.md: framework table updated")
    return 1 if fwreport.failed() or left else 0


NOTES_USED: set[str] = set()


def _load_harbor(src: Path, tmp: Path) -> list[str]:
    import importlib

    import fwload

    made = fwload.load_harbor(src, tmp / "harbor-src")
    importlib.import_module("harbor.trial.trial")
    importlib.import_module("harbor.environments.factory")
    return made


def _engine_has_nvidia() -> bool:
    done = subprocess.run(["docker", "info", "--format", "{{json .Runtimes}}"], capture_output=True, text=True)
    return "nvidia" in done.stdout


def _run_inspect(server: object, image: str, src: Path, tmp: Path, state: dict) -> None:
    import fwload
    from fwreport import NOTES, RESULTS

    copy = tmp / "inspect-src"
    made = fwload.load_inspect(src, copy)
    NOTES.extend(f"source adaptation: {m}" for m in made)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.environ["PYTHONPATH"], str(copy)]), "ROBOGUIDE_EVAL_SOCKET": server.socket,  # type: ignore[attr-defined]
           "RG_IMAGE": image, "FRAMEWORKS_MISSING": json.dumps(list(state["missing"])), "FRAMEWORKS_TMP": str(tmp)}
    out = subprocess.run([sys.executable, str(HERE / "inspect_checks.py")], env=env, capture_output=True, text=True, timeout=1200)
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    for row in rows:
        RESULTS.append(("inspect", row["check"], row["ok"], row.get("detail", "")))
    for line in out.stderr.splitlines():
        if line.startswith('{"stand_ins"'):
            NOTES_USED.update(json.loads(line)["stand_ins"])
    if out.returncode != 0 or not rows:
        RESULTS.append(("inspect", "inspect_checks.py ran to its end", False, f"exit {out.returncode}: {out.stderr.strip()[-300:]}"))


if __name__ == "__main__":
    sys.exit(inside(sys.argv[2:]) if sys.argv[1:2] == ["--inside"] else outer())
