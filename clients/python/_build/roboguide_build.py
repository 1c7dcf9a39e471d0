"""A minimal PEP 517/660 build backend (standard library only) for this package: wheel, sdist and editable."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import tarfile
import zipfile
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10: pip's own vendored copy (the backend runs under pip)
    from pip._vendor import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent.parent
_TAG = "py3-none-any"


def _project() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as fh:
        data = tomllib.load(fh)
    return data


def _dist_name() -> str:
    return _project()["project"]["name"].replace("-", "_")


def _version() -> str:
    return _project()["project"]["version"]


def _metadata() -> str:
    project = _project()["project"]
    lines = ["Metadata-Version: 2.1", f"Name: {project['name']}", f"Version: {project['version']}", f"Summary: {project.get('description', '')}",
             f"Requires-Python: {project.get('requires-python', '')}"]
    readme = ROOT / project.get("readme", "README.md")
    body = readme.read_text(encoding="utf-8") if readme.is_file() else ""
    if body:
        lines.append("Description-Content-Type: text/markdown")
    return "\n".join(lines) + "\n\n" + body


def _entry_points() -> str:
    groups = _project()["project"].get("entry-points", {})
    out = []
    for group, entries in groups.items():
        out.append(f"[{group}]")
        out.extend(f"{name} = {value}" for name, value in entries.items())
        out.append("")
    return "\n".join(out)


def _package_files() -> list[Path]:
    files: list[Path] = []
    for package in _project()["tool"]["roboguide-build"]["packages"]:
        for path in sorted((ROOT / package).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".pyc", ".pyo"):
                files.append(path)
    return files


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _write_wheel(wheel_directory: str, contents: dict[str, bytes]) -> str:
    name, version = _dist_name(), _version()
    dist_info = f"{name}-{version}.dist-info"
    contents = dict(contents)
    contents[f"{dist_info}/METADATA"] = _metadata().encode()
    contents[f"{dist_info}/WHEEL"] = f"Wheel-Version: 1.0\nGenerator: roboguide_build\nRoot-Is-Purelib: true\nTag: {_TAG}\n".encode()
    contents[f"{dist_info}/entry_points.txt"] = _entry_points().encode()
    record = [_record_line(path, data) for path, data in contents.items()] + [f"{dist_info}/RECORD,,"]
    contents[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    filename = f"{name}-{version}-{_TAG}.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for path, data in contents.items():
            info = zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    return filename


def get_requires_for_build_wheel(config_settings=None):  # noqa: ANN001, ANN201
    return []


def get_requires_for_build_sdist(config_settings=None):  # noqa: ANN001, ANN201
    return []


def get_requires_for_build_editable(config_settings=None):  # noqa: ANN001, ANN201
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):  # noqa: ANN001, ANN201
    dist_info = Path(metadata_directory) / f"{_dist_name()}-{_version()}.dist-info"
    dist_info.mkdir(parents=True, exist_ok=True)
    (dist_info / "METADATA").write_text(_metadata(), encoding="utf-8")
    (dist_info / "entry_points.txt").write_text(_entry_points(), encoding="utf-8")
    return dist_info.name


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):  # noqa: ANN001, ANN201
    return _write_wheel(wheel_directory, {p.relative_to(ROOT).as_posix(): p.read_bytes() for p in _package_files()})


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):  # noqa: ANN001, ANN201
    return _write_wheel(wheel_directory, {f"{_dist_name()}.pth": (str(ROOT) + "\n").encode()})


def build_sdist(sdist_directory, config_settings=None):  # noqa: ANN001, ANN201
    base = f"{_dist_name()}-{_version()}"
    filename = f"{base}.tar.gz"
    members = [ROOT / "pyproject.toml", ROOT / "README.md", ROOT / "_build" / "roboguide_build.py", *_package_files()]
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for path in members:
            if path.is_file():
                tar.add(str(path), arcname=f"{base}/{path.relative_to(ROOT).as_posix()}")
        pkg_info = _metadata().encode()
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        info.size = len(pkg_info)
        tar.addfile(info, io.BytesIO(pkg_info))
    return filename
