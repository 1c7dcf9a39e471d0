"""Loading the frameworks from ``../shared/frameworks`` (never copied into the repository): what the runner changes,
and only in a temporary copy, is listed here and named in the output.

- Stand-ins, only for distributions a framework declares that have no wheel on disk (``fwvenv.plan().missing``):
  ``shortuuid`` and ``dirhash`` work (standard library); every other one is a placeholder module whose names fail
  when used (``RuntimeError: … is not installed``). A module is stood in only when the framework imports it, and the
  output lists those that were.
- Harbor declares Python >= 3.12; on 3.11 its copy gets two mechanical source adaptations: ``TypedDict`` /
  ``NotRequired`` from ``typing_extensions`` (pydantic requires that below 3.12), and f-string fields split over
  lines (PEP 701) joined onto one line. Its ``__init__.py`` is kept: a ``harbor`` dist-info beside the copy answers
  its ``importlib.metadata.version`` as an installed Harbor would.
- Inspect's copy lacks its built viewer (``_view/``): a placeholder ``inspect_ai._view`` (``view()`` fails when
  called) lets ``inspect_ai/__init__.py`` load unchanged; an ``inspect_ai`` dist-info answers its version.
- SForge loads as it is, straight from its folder.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import re
import shutil
import sys
from pathlib import Path
from typing import Any

MODULES = {"agent-client-protocol": "acp", "claude-agent-sdk": "claude_agent_sdk", "zipfile-zstd": "zipfile_zstd"}
"""Distribution → top-level module, where the two differ."""

PLACEHOLDER = """# stand-in of the framework runner: this distribution has no wheel on disk
class _Missing(Exception):  # an Exception too, so `except NAME:` clauses of the framework stay valid
    def __init__(self, *a, **k):
        raise RuntimeError(f"{__name__} is not installed (stand-in of the framework runner)")
    def __init_subclass__(cls, **k):
        return None
import collections as _collections
def __getattr__(name):
    if name.startswith('__'):
        raise AttributeError(name)
    if name.endswith('_models'):
        return set()  # litellm's model tables: empty, as with no provider known
    if name.startswith('models_by_'):
        return _collections.defaultdict(set)
    return _Missing
"""

PERMISSIVE = """# stand-in of the framework runner: a permissive placeholder for a UI library whose classes are subclassed,
# decorated and subscripted when the framework's modules load; nothing of it can run (no terminal UI here)
class _Meta(type):
    def __getattr__(cls, name):
        if name.startswith('__'):
            raise AttributeError(name)
        return _Anything
    def __getitem__(cls, item):
        return cls
class _Anything(metaclass=_Meta):
    def __init_subclass__(cls, **k):
        pass
    def __init__(self, *a, **k):
        pass
    def __call__(self, *a, **k):
        return a[0] if len(a) == 1 and callable(a[0]) and not k else _Anything()
    def __getattr__(self, name):
        if name.startswith('__'):
            raise AttributeError(name)
        return _Anything()
    def __set_name__(self, owner, name):
        pass
    def run(self, *a, **k):
        raise RuntimeError(f"{__name__} is not installed (stand-in of the framework runner)")
def __getattr__(name):
    if name.startswith('__'):
        raise AttributeError(name)
    return _Anything
"""

WORKING = {
    "shortuuid": """# stand-in of the framework runner: shortuuid's random ids from the standard library
import uuid as _uuid
class ShortUUID:
    def __init__(self, alphabet=None):
        pass
    def random(self, length=22):
        return _uuid.uuid4().hex[:length]
    def uuid(self, name=None, pad_length=None):
        return _uuid.uuid4().hex[:22]
def uuid(name=None, pad_length=None):
    return _uuid.uuid4().hex[:22]
def random(length=22):
    return _uuid.uuid4().hex[:length]
""",
    "semver": """# stand-in of the framework runner: semver's Version (parse, compare, order) from the standard library
import functools as _functools, re as _re
_RE = _re.compile(r"^v?(\\d+)(?:\\.(\\d+))?(?:\\.(\\d+))?(?:-([0-9A-Za-z.-]+))?(?:\\+([0-9A-Za-z.-]+))?$")
@_functools.total_ordering
class Version:
    def __init__(self, major=0, minor=0, patch=0, prerelease=None, build=None):
        self.major, self.minor, self.patch, self.prerelease, self.build = int(major), int(minor), int(patch), prerelease, build
    @classmethod
    def parse(cls, text, optional_minor_and_patch=False):
        m = _RE.match(str(text).strip())
        if not m:
            raise ValueError(f"{text} is not valid SemVer string")
        return cls(m.group(1), m.group(2) or 0, m.group(3) or 0, m.group(4), m.group(5))
    def _key(self):
        return (self.major, self.minor, self.patch, self.prerelease is None, self.prerelease or "")
    def compare(self, other):
        other = other if isinstance(other, Version) else Version.parse(other)
        return (self._key() > other._key()) - (self._key() < other._key())
    def __eq__(self, other):
        return self.compare(other) == 0
    def __lt__(self, other):
        return self.compare(other) < 0
    def __hash__(self):
        return hash(self._key())
    def __str__(self):
        return f"{self.major}.{self.minor}.{self.patch}" + (f"-{self.prerelease}" if self.prerelease else "") + (f"+{self.build}" if self.build else "")
    __repr__ = __str__
VersionInfo = Version
""",
    "textual": PERMISSIVE,
    "acp": PERMISSIVE,
    "zipfile_zstd": """# stand-in of the framework runner: zstd in the standard zipfile (method 93), through the real zstandard wheel
import zipfile as _zipfile, zstandard as _zstd
ZIP_ZSTANDARD = 93
_zipfile.ZIP_ZSTANDARD = ZIP_ZSTANDARD
_zipfile.compressor_names[ZIP_ZSTANDARD] = "zstandard"
_check, _comp, _decomp = _zipfile._check_compression, _zipfile._get_compressor, _zipfile._get_decompressor
def _check_compression(compression):
    if compression != ZIP_ZSTANDARD:
        _check(compression)
def _get_compressor(compress_type, compresslevel=None):
    if compress_type == ZIP_ZSTANDARD:
        return _zstd.ZstdCompressor(level=compresslevel or 3).compressobj()
    return _comp(compress_type, compresslevel)
def _get_decompressor(compress_type):
    if compress_type == ZIP_ZSTANDARD:
        return _zstd.ZstdDecompressor().decompressobj()
    return _decomp(compress_type)
_zipfile._check_compression, _zipfile._get_compressor, _zipfile._get_decompressor = _check_compression, _get_compressor, _get_decompressor
""",
    "dirhash": """# stand-in of the framework runner: a content hash of a directory from the standard library
import hashlib as _hashlib, os as _os
def dirhash(directory, algorithm='sha256', **kwargs):
    h = _hashlib.new(algorithm)
    for root, dirs, files in sorted(_os.walk(directory)):
        dirs.sort()
        for name in sorted(files):
            path = _os.path.join(root, name)
            h.update(_os.path.relpath(path, directory).encode())
            with open(path, 'rb') as fh:
                h.update(_hashlib.new(algorithm, fh.read()).digest())
    return h.hexdigest()
""",
}


class StandIns(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers imports of the missing distributions' modules (and their submodules) only; records which were used."""

    def __init__(self, missing: list[str]) -> None:
        self.roots = {MODULES.get(name, name.replace("-", "_")): name for name in missing}
        self.used: set[str] = set()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        top = fullname.split(".", 1)[0]
        if top in self.roots:
            self.used.add(self.roots[top])
            return importlib.util.spec_from_loader(fullname, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> None:
        return None

    def exec_module(self, module: Any) -> None:
        module.__path__ = []
        exec(WORKING.get(module.__name__.split(".", 1)[0], PLACEHOLDER), module.__dict__)


def install_stand_ins(missing: list[str]) -> StandIns:
    finder = StandIns(missing)
    sys.meta_path.append(finder)  # last: anything installed for real is found first
    return finder


def _dist_info(into: Path, name: str, version: str) -> None:
    info = into / f"{name}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def _join_split_fstrings(path: Path) -> bool:
    changed = False
    for _ in range(200):
        text = path.read_text()
        try:
            compile(text, str(path), "exec")
            return changed
        except SyntaxError as err:
            if "unterminated" not in str(err.msg) or err.lineno is None:
                raise
            lines = text.split("\n")
            start = err.lineno - 1
            end = start + 1
            while end < len(lines) and not lines[end].lstrip().startswith("}"):
                end += 1
            joined = " ".join([lines[start].rstrip(), *(part.strip() for part in lines[start + 1 : end + 1])])
            lines[start : end + 1] = [joined]
            path.write_text("\n".join(lines))
            changed = True
    return changed


_TYPING_IMPORT = re.compile(r"^from typing import (\([^)]*\)|[^\n]*)", re.MULTILINE)


def _typing_extensions(path: Path) -> bool:
    text = path.read_text()
    if "TypedDict" not in text and "NotRequired" not in text:
        return False

    def fix(match: re.Match[str]) -> str:
        names = [n.strip() for n in match.group(1).strip("()").replace("\n", " ").split(",") if n.strip()]
        moved = [n for n in names if n in ("TypedDict", "NotRequired")]
        if not moved:
            return match.group(0)
        kept = [n for n in names if n not in moved]
        out = f"from typing_extensions import {', '.join(moved)}"
        return (f"from typing import {', '.join(kept)}\n" if kept else "") + out

    fixed = _TYPING_IMPORT.sub(fix, text)
    path.write_text(fixed)
    return fixed != text


def load_harbor(src: Path, into: Path) -> list[str]:
    """Copies Harbor into ``into`` (on ``sys.path``); returns the adaptations made, for the output."""
    shutil.copytree(src / "src" / "harbor", into / "harbor")
    _dist_info(into, "harbor", "0.13.1")
    typed = fstrings = 0
    if sys.version_info < (3, 12):
        for path in (into / "harbor").rglob("*.py"):
            path.chmod(0o644)
            typed += _typing_extensions(path)
            fstrings += _join_split_fstrings(path)
    sys.path.insert(0, str(into))
    if not typed and not fstrings:
        return []
    return [f"harbor on Python {sys.version_info.major}.{sys.version_info.minor} (it declares >= 3.12): TypedDict/NotRequired "
            f"from typing_extensions in {typed} files, multi-line f-string fields joined in {fstrings} files"]




VIEW_PLACEHOLDERS = {
    "__init__": "",
    "view": "def view(*args, **kwargs):\n    raise RuntimeError('inspect view is not available (no viewer in this copy)')\n",
    "notify": "def view_notify_eval(location):\n    return None\n",
    "common": "def resolve_header_only(path, header_only):\n    raise RuntimeError('not available (no viewer in this copy)')\n",
    "network": "class ViewerNetworkPolicyError(Exception):\n    pass\n",
    "_dist": "def resolve_dist_directory(*args, **kwargs):\n    raise RuntimeError('no built viewer in this copy')\n",
}


def load_inspect(src: Path, into: Path) -> list[str]:
    """Copies inspect_ai into ``into`` with a placeholder for its viewer; returns the adaptations made."""
    shutil.copytree(src / "src" / "inspect_ai", into / "inspect_ai")
    _dist_info(into, "inspect_ai", "0.3.999")
    made = []
    view = into / "inspect_ai" / "_view"
    if not view.exists():
        view.mkdir()
        for name, body in VIEW_PLACEHOLDERS.items():
            (view / f"{name}.py").write_text("# placeholder of the framework runner: no _view/ in the framework copy\n" + body)
        made.append("inspect_ai._view (the viewer, absent from the framework copy): placeholders; `view()` fails when called, "
                    "`view_notify_eval` (tells a running viewer of a new log) does nothing")
    return made
