"""SForge container backend backed by ``roboguide-eval serve`` (SForge's ContainerBackend method set)."""

from __future__ import annotations

import io
import logging
import re
import tarfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Callable

from .client import ApiError, Client

try:  # pragma: no cover - exercised only where SForge is installed
    from sforge.harness.backend.base import (  # type: ignore[import-not-found]
        ContainerBackend,
        ContainerHandle,
        ExecResult,
        NetworkIsolationStrategy,
        StreamingExecResult,
    )
except ImportError:
    ContainerBackend = object  # type: ignore[assignment,misc]

    @dataclass
    class ExecResult:  # type: ignore[no-redef]
        output: str = ""
        exit_code: int = 0

    @dataclass
    class StreamingExecResult:  # type: ignore[no-redef]
        output: str = ""
        exit_code: int = 0
        timed_out: bool = False
        elapsed_seconds: float = 0.0

    class ContainerHandle:  # type: ignore[no-redef]
        pass

    class NetworkIsolationStrategy:  # type: ignore[no-redef]
        def apply(self) -> None: ...

        def cleanup(self) -> None: ...


class RoboguideHandle(ContainerHandle):  # type: ignore[misc,valid-type]
    def __init__(self, session_id: str, name: str, container_id: str):
        self.session_id = session_id
        self._name = name
        self.container_id = container_id

    @property
    def id(self) -> str:
        return self.session_id

    @property
    def name(self) -> str:
        return self._name

    @property
    def ip_address(self) -> str | None:
        return None


class _AlreadyIsolated(NetworkIsolationStrategy):  # type: ignore[misc,valid-type]
    """Sessions start with network "none": nothing to apply or undo."""

    def apply(self) -> None:
        return None

    def cleanup(self) -> None:
        return None


_MEM = re.compile(r"^(\d+)([kmgKMG]?)[bB]?$")


def _memory_mb(limit: str | None) -> int | None:
    if limit is None:
        return None
    m = _MEM.match(limit.strip())
    if m is None:
        raise ValueError(f"mem_limit {limit!r}: expected a number with k, m or g")
    value, unit = int(m.group(1)), m.group(2).lower()
    return {"": max(1, value // (1024 * 1024)), "k": max(1, value // 1024), "m": value, "g": value * 1024}[unit]


def _argv(cmd: str | list[str]) -> dict[str, Any]:
    return {"command": cmd} if isinstance(cmd, str) else {"argv": list(cmd)}


class RoboguideBackend(ContainerBackend):  # type: ignore[misc,valid-type]
    """Each container is a roboguide session (labels ``sforge.name``); removal is verified by the server."""

    def __init__(self, socket_path: str | None = None, *, client: Client | None = None, network: str = "none", ttl_seconds: int = 3600):
        self._client = client or Client(socket_path)
        self._network = network
        self._ttl_seconds = ttl_seconds

    @property
    def backend_name(self) -> str:
        return "roboguide"

    # --- lifecycle ---

    def create_container(self, image: str, name: str, *, command: str = "tail -f /dev/null", environment: dict[str, str] | None = None,
                         extra_hosts: dict[str, str] | None = None, cap_drop: list[str] | None = None, cpu_limit: int | None = None,
                         mem_limit: str | None = None, user: str | None = None, annotations: dict[str, str] | None = None) -> RoboguideHandle:
        # The session's own idle process replaces `command`; init, no-new-privileges and network none are the server's.
        created = self._client.create_session(
            image, environment=environment or None, cpus=cpu_limit, memory_mb=_memory_mb(mem_limit), network=self._network,
            ttl_seconds=self._ttl_seconds, labels={"sforge.name": _label(name)},
        )
        return RoboguideHandle(created["session_id"], name, created["container_id"])

    def start_container(self, handle: RoboguideHandle) -> None:
        return None  # sessions are started when created

    def cleanup_container(self, handle: RoboguideHandle | None, logger: logging.Logger | None = None) -> None:
        if handle is None:
            return
        record = self._client.delete_session(handle.session_id)
        if logger is not None and not record.get("verified_absent"):
            logger.error("roboguide session %s: removal not verified: %s", handle.session_id, record.get("error"))

    def _sessions_named(self, name: str) -> list[dict[str, Any]]:
        return [s for s in self._client.list_sessions() if s.get("labels", {}).get("sforge.name") == _label(name)]

    def container_exists(self, name: str) -> bool:
        return bool(self._sessions_named(name))

    def remove_container_by_name(self, name: str) -> None:
        for session in self._sessions_named(name):
            self._client.delete_session(session["session_id"])

    def image_exists(self, image_key: str) -> bool:
        return self._client.image_exists(image_key)

    # --- files ---

    def copy_to_container(self, handle: RoboguideHandle, src: Path, dst: PurePosixPath) -> None:
        self._client.upload(handle.session_id, src, str(dst))

    def copy_from_container(self, handle: RoboguideHandle, src: PurePosixPath) -> bytes:
        """The file's bytes (redacted by the server)."""
        data = self._client.get_archive(handle.session_id, str(src))
        with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
            for member in tar.getmembers():
                if member.isfile() and PurePosixPath(member.name).name == PurePosixPath(src).name:
                    extracted = tar.extractfile(member)
                    return extracted.read() if extracted is not None else b""
        raise FileNotFoundError(str(src))

    def write_to_container(self, handle: RoboguideHandle, data: str, dst: PurePosixPath) -> None:
        payload = data.encode()
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            info = tarfile.TarInfo(PurePosixPath(dst).name)
            info.size = len(payload)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(payload))
        self._client.put_archive(handle.session_id, str(PurePosixPath(dst).parent), buffer.getvalue())

    # --- exec ---

    def exec_run(self, handle: RoboguideHandle, cmd: str | list[str], *, user: str | None = None, workdir: str | None = None,
                 environment: dict[str, str] | None = None, detach: bool = False) -> ExecResult:
        if detach:
            argv = ["/bin/sh", "-c", 'nohup "$@" >/dev/null 2>&1 &', "sh", *(["/bin/sh", "-c", cmd] if isinstance(cmd, str) else cmd)]
            result = self._client.exec(handle.session_id, argv, cwd=workdir, env=environment, user=user)
        else:
            result = self._client.exec(handle.session_id, **_argv(cmd), cwd=workdir, env=environment, user=user)
        return ExecResult(output=result["stdout"] + result["stderr"], exit_code=result["return_code"])

    def exec_run_with_timeout(self, handle: RoboguideHandle, cmd: str | list[str], timeout: int | None = 60, *, log_file: Path | None = None,
                              user: str | None = None, workdir: str | None = None, environment: dict[str, str] | None = None,
                              stream_to_stdout: bool = False, shutdown_event: threading.Event | None = None, log_append: bool = False,
                              on_chunk: Callable[[bytes], None] | None = None) -> StreamingExecResult:
        started = time.monotonic()
        parts: list[str] = []
        exit_event: dict[str, Any] = {}
        log = open(log_file, "a" if log_append else "w", encoding="utf-8") if log_file is not None else None
        try:
            for event in self._client.exec_stream(handle.session_id, **_argv(cmd), cwd=workdir, env=environment, timeout_sec=timeout, user=user):
                if "data" in event:
                    parts.append(event["data"])
                    if log is not None:
                        log.write(event["data"])
                    if stream_to_stdout:
                        print(event["data"], end="", flush=True)
                    if on_chunk is not None:
                        on_chunk(event["data"].encode())
                elif "exit" in event:
                    exit_event = event["exit"]
                elif "error" in event:
                    err = event["error"]
                    raise ApiError(500, err.get("code", ""), err.get("message", ""), err.get("issues"))
                if shutdown_event is not None and shutdown_event.is_set():
                    break  # closing the stream makes the server kill the exec's process tree
        finally:
            if log is not None:
                log.close()
        return StreamingExecResult(
            output="".join(parts), exit_code=int(exit_event.get("return_code", -1)), timed_out=bool(exit_event.get("timed_out", False)),
            elapsed_seconds=time.monotonic() - started,
        )

    def exec_run_with_exit_code(self, handle: RoboguideHandle, cmd: str | list[str], timeout: int | None = 60, *, user: str | None = None,
                                workdir: str | None = None, environment: dict[str, str] | None = None) -> StreamingExecResult:
        result = self._client.exec(handle.session_id, **_argv(cmd), cwd=workdir, env=environment, timeout_sec=timeout, user=user)
        return StreamingExecResult(output=result["stdout"] + result["stderr"], exit_code=result["return_code"],
                                   timed_out=result["timed_out"], elapsed_seconds=result["duration_ms"] / 1000)

    # --- network ---

    def get_container_ip(self, handle: RoboguideHandle) -> str:
        raise NotImplementedError("roboguide sessions run with network none by default; publish ports (create_session ports=[...]) instead")

    def get_container_gateway_ip(self, handle: RoboguideHandle) -> str | None:
        return None

    def create_network_isolation(self, handle: RoboguideHandle, allowed_endpoints: list, logger: logging.Logger) -> NetworkIsolationStrategy:
        if allowed_endpoints and self._network == "none":
            logger.warning("roboguide: sessions have no network; allowed endpoints are unreachable")
        return _AlreadyIsolated()


def _label(value: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "-" for c in value)[:128] or "-"
