"""The frameworks' own dependencies, installed offline into a cached virtual environment.

The requirement list is read from the frameworks' own files (Harbor's and EdgeBench's ``pyproject.toml``
``[project].dependencies``, Inspect's ``requirements.txt``) plus ``pytest`` (Inspect's ``self_check`` imports it).
Each requirement is checked against the wheels on disk (``FRAMEWORKS_WHEELS``, default ``/opt/pypi/files``):

- no wheel of that name at all: *missing*; the runner gives it a named stand-in (``fwload.py``);
- wheels, but none inside the declared version range: *relaxed*; installed without the range, and said so;
- otherwise installed as declared.

The environment is built once per requirement list: its folder is named after a hash of the list (and of the Python
version), under ``FRAMEWORKS_VENV_CACHE`` (default ``$XDG_CACHE_HOME/roboguide-eval`` or ``~/.cache/roboguide-eval``,
outside the repository). A lock file serialises concurrent builds; a ``complete`` marker is written last, so a build
that was interrupted is thrown away and made again.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

try:
    from packaging.requirements import Requirement
    from packaging.version import InvalidVersion, Version
except ImportError:  # a bare interpreter: pip's own copy
    from pip._vendor.packaging.requirements import Requirement  # type: ignore[no-redef]
    from pip._vendor.packaging.version import InvalidVersion, Version  # type: ignore[no-redef]

EXTRA = ["pytest"]
"""Not declared by a framework's runtime list but needed to run its checks: Inspect's ``self_check`` imports pytest."""


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass
class Plan:
    install: list[str] = field(default_factory=list)
    missing: dict[str, list[str]] = field(default_factory=dict)
    """Distribution name → the frameworks that declare it."""
    relaxed: list[str] = field(default_factory=list)
    key: str = ""


def declared(sources: dict[str, Path]) -> dict[str, list[str]]:
    """Framework → its declared requirement strings, markers evaluated for this interpreter."""
    out: dict[str, list[str]] = {}
    for framework, root in sources.items():
        requirements_txt = root / "requirements.txt"
        if framework == "inspect" and requirements_txt.is_file():
            lines = [line.split(" #", 1)[0].strip() for line in requirements_txt.read_text().splitlines()]
            raw = [line for line in lines if line and not line.startswith("#")]
        else:
            raw = list(tomllib.loads((root / "pyproject.toml").read_text())["project"].get("dependencies", []))
        kept = []
        for text in raw:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate():
                kept.append(text)
        out[framework] = kept
    return out


def wheels_on_disk(wheelhouse: Path) -> dict[str, list[Version]]:
    found: dict[str, list[Version]] = {}
    for wheel in wheelhouse.glob("*.whl"):
        parts = wheel.name.split("-")
        try:
            found.setdefault(normalise(parts[0]), []).append(Version(parts[1]))
        except (InvalidVersion, IndexError):
            continue
    return found


def plan(sources: dict[str, Path], wheelhouse: Path) -> Plan:
    result = Plan()
    have = wheels_on_disk(wheelhouse)
    merged: dict[str, tuple[Requirement, list[str]]] = {}
    for framework, texts in declared(sources).items():
        for text in [*texts, *(EXTRA if framework == "inspect" else [])]:
            req = Requirement(text)
            name = normalise(req.name)
            if name in merged:
                prev, who = merged[name]
                prev.specifier &= req.specifier
                prev.extras |= req.extras
                who.append(framework)
            else:
                req.marker = None
                merged[name] = (req, [framework])
    for name, (req, who) in sorted(merged.items()):
        versions = have.get(name, [])
        if not versions:
            result.missing[name] = who
            continue
        if str(req.specifier) and not any(req.specifier.contains(v, prereleases=True) for v in versions):
            on_disk = ", ".join(str(v) for v in sorted(versions))
            result.relaxed.append(f"{req.name}{req.specifier} ({'/'.join(who)}): no wheel on disk in that range (have {on_disk}); installed without it")
            req.specifier = type(req.specifier)("")
        result.install.append(str(req))
    digest = hashlib.sha256(json.dumps({"python": sys.version, "install": result.install}).encode()).hexdigest()
    result.key = digest[:16]
    return result


def cache_root() -> Path:
    if os.environ.get("FRAMEWORKS_VENV_CACHE"):
        return Path(os.environ["FRAMEWORKS_VENV_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "roboguide-eval"


def ensure(p: Plan, wheelhouse: Path, log: callable = print) -> tuple[Path, bool]:  # type: ignore[valid-type]
    """The environment's interpreter, and whether it was built by this call."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    venv = root / f"frameworks-venv-{p.key}"
    marker = venv / "complete"
    with open(root / f"frameworks-venv-{p.key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.is_file():
            return venv / "bin" / "python", False
        shutil.rmtree(venv, ignore_errors=True)
        log(f"building the frameworks' environment {venv} ({len(p.install)} requirements, offline from {wheelhouse})")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        listing = venv / "requirements.txt"
        listing.write_text("\n".join(p.install) + "\n")
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-index",
               "--find-links", str(wheelhouse), "-r", str(listing)]
        done = subprocess.run(pip, capture_output=True, text=True)
        if done.returncode != 0:
            shutil.rmtree(venv, ignore_errors=True)
            raise RuntimeError(f"pip install of the frameworks' requirements failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
        marker.write_text(json.dumps({"install": p.install}) + "\n")
        return venv / "bin" / "python", True
