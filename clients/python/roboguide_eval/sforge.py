"""SForge container backend backed by ``roboguide-eval serve``, with the semantics of SForge's ``DockerBackend``.

- A container is a session labelled ``sforge.name=<the exact name>``; ``create_container`` takes SForge's
  ``command`` (a string is split like docker-py does, with ``shlex``), ``environment`` (literal values: the server
  masks secret-looking ones such as ``SFORGE_TOKEN``), ``extra_hosts`` (``"host-gateway"`` included), ``cap_drop``,
  ``user``, ``annotations``, ``cpu_limit``, ``mem_limit``; the network is "bridge" (a judge on the host is reachable
  through ``host.docker.internal: host-gateway``) unless ``RoboguideBackend(network="none")``.
- ``exec_run``: a string is split with ``shlex`` (no shell), stdout and stderr come back as one stream in arrival
  order; ``detach=True`` returns at once with the command running on in the container.
- ``exec_run_with_timeout``/``exec_run_with_exit_code``: ``timeout`` None or 0 = no timeout; ``shutdown_event`` is
  polled every second; on timeout or shutdown the command is killed and the result is ``exit_code=-1,
  timed_out=True``; ``log_file``'s folder is created and it receives the raw bytes.
- ``copy_from_container`` returns the tar of the path (as docker-py's ``get_archive``).

Select it by name in SForge's own factory with :func:`register` (see its docstring) — SForge is not edited.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Callable

from .client import Cancel, Client, docker_archive
from .errors import ApiError, ConflictError, NotFoundError

try:  # SForge's own classes whenever SForge is importable
    from sforge.harness.backend.base import (  # type: ignore[import-not-found]
        ContainerBackend,
        ContainerHandle,
        ExecResult,
        NetworkIsolationStrategy,
        StreamingExecResult,
    )

    SFORGE_INSTALLED = True
except ImportError:
    SFORGE_INSTALLED = False
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
        pass

BACKEND_NAME = "roboguide"
NAME_LABEL = "sforge.name"


class RoboguideHandle(ContainerHandle):  # type: ignore[misc,valid-type]
    """``id`` is the container's id (as Docker's handle); ``session_id`` the server's session."""

    def __init__(self, client: Client, session_id: str, name: str, container_id: str):
        self._client = client
        self.session_id = session_id
        self._name = name
        self._container_id = container_id

    @property
    def id(self) -> str:
        return self._container_id

    @property
    def name(self) -> str:
        return self._name

    @property
    def ip_address(self) -> str | None:
        try:
            return self._client.get_session(self.session_id).get("ip_address") or None
        except ApiError:
            return None


_MEM = re.compile(r"^(\d+(?:\.\d+)?)\s*([bkmg]?)b?$", re.IGNORECASE)


def _memory_mib(limit: str | int | None) -> int | None:
    """docker-py's ``mem_limit`` (bytes as an int, or a string with b/k/m/g) in MiB (at least 1)."""
    if limit is None:
        return None
    if isinstance(limit, int):
        return max(1, limit // (1024 * 1024))
    m = _MEM.match(limit.strip())
    if m is None:
        raise ValueError(f"mem_limit {limit!r}: expected a number with an optional unit b, k, m or g")
    value, unit = float(m.group(1)), m.group(2).lower()
    factor = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[unit]
    return max(1, int(value * factor) // (1024 * 1024))


_ONE_STREAM = ["/bin/sh", "-c", 'exec "$@" 2>&1', "sforge-exec"]
"""SForge reads an exec's output as ONE stream (docker-py's ``exec_run`` without ``demux``). A process's stdout and
stderr are two pipes, and whoever reads two pipes (the engine, then us) cannot tell which write came first: docker's
own combined stream returned ``echo a; echo b >&2; echo c`` as a b c only 2 times in 50 here (b a c 25, a c b 23).
So the command runs with its stderr on its stdout, one pipe, in the order written; the shell replaces itself with it
(``exec``), so the process, its exit code and its process tree are the command's own."""


def _split(cmd: str | list[str]) -> list[str]:
    """docker-py's ``split_command``: a string is split with ``shlex`` (no shell), a list is used as it is."""
    return shlex.split(cmd) if isinstance(cmd, str) else [str(part) for part in cmd]


def _annotation_key(key: str) -> str:
    return "sforge.annotation." + re.sub(r"[^a-z0-9._-]", "-", key.lower()).strip("._-")[:100]


class RoboguideBackend(ContainerBackend):  # type: ignore[misc,valid-type]
    """SForge's ``ContainerBackend`` on roboguide sessions (each removal verified by the server)."""

    def __init__(self, socket_path: str | None = None, *, client: Client | None = None, url: str | None = None, token: str | None = None,
                 network: str = "bridge", ttl_seconds: int = 7 * 24 * 3600):
        self._client = client or Client(socket_path or os.environ.get("ROBOGUIDE_EVAL_SOCKET"), url=url or os.environ.get("ROBOGUIDE_EVAL_URL"),
                                        token=token or os.environ.get("ROBOGUIDE_EVAL_TOKEN"), rate_limit_wait=600.0)
        self._network = network
        self._ttl_seconds = ttl_seconds

    @property
    def backend_name(self) -> str:
        return BACKEND_NAME

    @property
    def client(self) -> Client:
        return self._client

    # --- lifecycle ---

    def create_container(self, image: str, name: str, *, command: str = "tail -f /dev/null", environment: dict[str, str] | None = None,
                         extra_hosts: dict[str, str] | None = None, cap_drop: list[str] | None = None, cpu_limit: int | None = None,
                         mem_limit: str | None = None, user: str | None = None, annotations: dict[str, str] | None = None) -> RoboguideHandle:
        if self._sessions_named(name):
            raise ConflictError(f'409 E_NAME_IN_USE: the container name "{name}" is already in use', status=409, code="E_NAME_IN_USE",
                                message=f'the container name "{name}" is already in use')
        labels = {NAME_LABEL: name}
        created = self._client.create_session(
            image,
            environment=dict(environment) if environment else None,
            command=_split(command) if command else None,
            extra_hosts=[f"{host}:{ip}" for host, ip in (extra_hosts or {}).items()] or None,
            cap_drop=list(cap_drop) if cap_drop else None,
            user=user or None,
            annotations=dict(annotations) if annotations else None,
            cpus=cpu_limit,
            memory_mib=_memory_mib(mem_limit),
            network=self._network,
            ttl_seconds=self._ttl_seconds,
            labels=labels,
        )
        return RoboguideHandle(self._client, created["session_id"], name, created.get("container_id", created["session_id"]))

    def start_container(self, handle: RoboguideHandle) -> None:
        return None  # a session runs from its creation

    def cleanup_container(self, handle: RoboguideHandle | None, logger: logging.Logger | None = None) -> None:
        if handle is None:
            return
        log_info = logger.info if logger else print
        log_error = logger.error if logger else print
        log_info(f"Removing container {handle.name}...")
        try:
            record = self._client.delete_session(handle.session_id)
        except Exception as err:  # like Docker's backend: reported, not raised
            log_error(f"Failed to remove container {handle.name}: {err}")
            return
        if record.get("verified_absent", True):
            log_info(f"Container {handle.name} removed.")
        else:
            log_error(f"Failed to remove container {handle.name}: removal not verified: {record.get('error')}")

    def _sessions_named(self, name: str) -> list[dict[str, Any]]:
        return [s for s in self._client.list_sessions() if (s.get("labels") or {}).get(NAME_LABEL) == name]

    def container_exists(self, name: str) -> bool:
        return bool(self._sessions_named(name))

    def remove_container_by_name(self, name: str) -> None:
        for session in self._sessions_named(name):
            try:
                self._client.delete_session(session["session_id"])
            except NotFoundError:
                pass

    def image_exists(self, image_key: str) -> bool:
        return self._client.image_exists(image_key)

    # --- files ---

    def copy_to_container(self, handle: RoboguideHandle, src: Path, dst: PurePosixPath) -> None:
        dst = PurePosixPath(dst)
        if str(dst.parent) == ".":
            raise ValueError(f"Destination parent directory cannot be empty: {dst}")
        try:
            # As the container's user first (the archive route makes the parent folder): what the user may write stays
            # the user's, as the folder docker's backend makes with `mkdir -p` as that user.
            self._client.upload(handle.session_id, Path(src), str(dst))
        except PermissionError:
            # docker's put_archive (what SForge's DockerBackend calls) writes as root whatever the container's user,
            # and SForge relies on it (`_install_tools`: sforge-submit into /usr/local/bin, then chmod as root). The
            # caller owns this container and may exec as root anyway, so root's write gives it nothing new.
            self._client.upload(handle.session_id, Path(src), str(dst), user=0)

    def copy_from_container(self, handle: RoboguideHandle, src: PurePosixPath) -> bytes:
        """The tar of ``src`` (its top entry named after ``src``'s last part), as docker-py's ``get_archive``."""
        return docker_archive(self._client.get_archive(handle.session_id, str(src)))

    def write_to_container(self, handle: RoboguideHandle, data: str, dst: PurePosixPath) -> None:
        """Writes ``data`` and a newline to ``dst`` (what Docker's backend's here-document writes)."""
        self._client.write_file(handle.session_id, str(dst), data + "\n")

    # --- exec ---

    def exec_run(self, handle: RoboguideHandle, cmd: str | list[str], *, user: str | None = None, workdir: str | None = None,
                 environment: dict[str, str] | None = None, detach: bool = False) -> ExecResult:
        argv = _split(cmd)
        if detach:
            # The command runs on after this call returns (its output discarded, as a detached docker exec).
            launcher = ["/bin/sh", "-c", '"$@" </dev/null >/dev/null 2>&1 &', "sforge-detach", *argv]
            self._client.exec(handle.session_id, launcher, cwd=workdir or None, env=environment or None, user=user or None)
            return ExecResult(output="", exit_code=0)
        output, exit_code, _timed_out, _elapsed = self._run(handle, argv, None, user=user, workdir=workdir, environment=environment)
        return ExecResult(output=output, exit_code=exit_code)

    def exec_run_with_timeout(self, handle: RoboguideHandle, cmd: str | list[str], timeout: int | None = 60, *, log_file: Path | None = None,
                              user: str | None = None, workdir: str | None = None, environment: dict[str, str] | None = None,
                              stream_to_stdout: bool = False, shutdown_event: threading.Event | None = None, log_append: bool = False,
                              on_chunk: Callable[[bytes], None] | None = None) -> StreamingExecResult:
        output, exit_code, timed_out, elapsed = self._run(handle, _split(cmd), timeout, log_file=log_file, user=user, workdir=workdir,
                                                          environment=environment, stream_to_stdout=stream_to_stdout,
                                                          shutdown_event=shutdown_event, log_append=log_append, on_chunk=on_chunk)
        return StreamingExecResult(output=output, exit_code=exit_code, timed_out=timed_out, elapsed_seconds=elapsed)

    def exec_run_with_exit_code(self, handle: RoboguideHandle, cmd: str | list[str], timeout: int | None = 60, *, user: str | None = None,
                                workdir: str | None = None, environment: dict[str, str] | None = None) -> StreamingExecResult:
        output, exit_code, timed_out, elapsed = self._run(handle, _split(cmd), timeout, user=user, workdir=workdir, environment=environment)
        return StreamingExecResult(output=output, exit_code=exit_code, timed_out=timed_out, elapsed_seconds=elapsed)

    def _run(self, handle: RoboguideHandle, argv: list[str], timeout: int | float | None, *, log_file: Path | None = None, user: str | None = None,
             workdir: str | None = None, environment: dict[str, str] | None = None, stream_to_stdout: bool = False,
             shutdown_event: threading.Event | None = None, log_append: bool = False,
             on_chunk: Callable[[bytes], None] | None = None) -> tuple[str, int, bool, float]:
        """One streamed exec read on a thread while this one polls the deadline and ``shutdown_event`` (each second)."""
        chunks: list[bytes] = []
        exit_info: dict[str, Any] = {}
        failure: list[BaseException] = []
        cancel = Cancel()
        log_fh = None
        if log_file is not None:
            Path(log_file).parent.mkdir(parents=True, exist_ok=True)
            log_fh = open(log_file, "ab" if log_append else "wb")

        def read() -> None:
            try:
                stream = self._client.exec_stream(handle.session_id, [*_ONE_STREAM, *argv], cwd=workdir or None, env=environment or None, user=user or None, cancel=cancel)
                for event in stream:
                    if "data" in event:
                        chunk = str(event["data"]).encode()
                        chunks.append(chunk)
                        if log_fh is not None:
                            log_fh.write(chunk)
                            log_fh.flush()
                        if stream_to_stdout:
                            sys.stdout.buffer.write(chunk)
                            sys.stdout.buffer.flush()
                        if on_chunk is not None:
                            try:
                                on_chunk(chunk)
                            except Exception:  # noqa: BLE001 - as Docker's backend: a callback never breaks the exec
                                pass
                    elif "exit" in event:
                        exit_info.update(event["exit"])
                    elif "error" in event:
                        err = event["error"]
                        raise ApiError(f"exec: {err.get('code', '')}: {err.get('message', '')}", status=200, code=str(err.get("code", "")), message=str(err.get("message", "")))
            except BaseException as err:  # noqa: BLE001 - re-raised by the caller
                if not cancel.cancelled:
                    failure.append(err)

        started = time.time()
        thread = threading.Thread(target=read, name="sforge-exec", daemon=True)
        try:
            thread.start()
            deadline = started + timeout if timeout else None
            while thread.is_alive():
                remaining = (deadline - time.time()) if deadline is not None else 1.0
                if remaining <= 0:
                    break
                thread.join(min(remaining, 1.0))
                if shutdown_event is not None and shutdown_event.is_set():
                    break
            timed_out = thread.is_alive()
            if timed_out:
                cancel.cancel()  # the server kills the exec's process tree when its request ends
                thread.join(10)
        finally:
            if log_fh is not None:
                log_fh.close()
        if failure:
            raise failure[0]
        exit_code = -1 if timed_out else int(exit_info.get("return_code", -1))
        return b"".join(chunks).decode(errors="replace"), exit_code, timed_out, time.time() - started

    # --- network ---

    def get_container_ip(self, handle: RoboguideHandle) -> str:
        ip = self._client.get_session(handle.session_id).get("ip_address")
        if not ip:
            raise RuntimeError(f"Cannot determine IP for container {handle.name}")
        return str(ip)

    def get_container_gateway_ip(self, handle: RoboguideHandle) -> str | None:
        """The default route's gateway, read from the container's ``/proc/net/route``."""
        result = self._client.exec(handle.session_id, ["cat", "/proc/net/route"], timeout_sec=30)
        for line in result.get("stdout", "").splitlines()[1:]:
            fields = line.split()
            if len(fields) > 2 and fields[1] == "00000000" and fields[2] != "00000000":
                raw = bytes.fromhex(fields[2])
                return ".".join(str(b) for b in reversed(raw))
        return None

    def create_network_isolation(self, handle: RoboguideHandle, allowed_endpoints: list, logger: logging.Logger | None = None) -> NetworkIsolationStrategy:
        """SForge's internet-off isolation as the session's egress allowlist (``PUT /v1/sessions/{id}/egress``): each
        endpoint is allowed by its host name when it has one, else by its address, on its own port. ``apply()``
        switches the session (every connection made after it returns obeys it); ``cleanup()`` puts back the policy
        the session had before."""
        return RoboguideNetworkIsolation(self._client, handle.session_id, allowed_endpoints, logger or logging.getLogger("roboguide_eval.sforge"))


def egress_allow_entries(endpoints: list) -> list[str]:
    """SForge's ``AllowedEndpoint(ip, port, hostname)`` list as ``allow`` entries: ``HOST:PORT`` (the name as the
    agent asks for it; the proxy resolves it itself) or ``ADDRESS:PORT``; duplicates once, in order."""
    entries: list[str] = []
    for endpoint in endpoints:
        host = getattr(endpoint, "hostname", None) or getattr(endpoint, "ip", None)
        port = getattr(endpoint, "port", None)
        if not host or not isinstance(port, int):
            raise ValueError(f"an allowed endpoint needs a host name or address and a port: {endpoint!r}")
        host = f"[{host}]" if ":" in str(host) else str(host)
        entry = f"{host}:{port}"
        if entry not in entries:
            entries.append(entry)
    return entries


class RoboguideNetworkIsolation(NetworkIsolationStrategy):  # type: ignore[misc,valid-type]
    """One session's egress allowlist, applied through the server (enforced by its filtering proxy and firewall)."""

    def __init__(self, client: Client, session_id: str, endpoints: list, logger: logging.Logger):
        self._client = client
        self._session_id = session_id
        self.allow = egress_allow_entries(endpoints)
        self._logger = logger
        self._before: dict[str, Any] | None = None

    def apply(self) -> None:
        if not self.allow:
            raise ValueError("network isolation with no allowed endpoint: use network 'none' instead")
        self._before = self._client.get_session(self._session_id).get("egress") or {"mode": "open"}
        now = self._client.set_egress(self._session_id, "allowlist", self.allow)
        self._logger.info(f"roboguide session {self._session_id}: egress {now}")

    def cleanup(self) -> None:
        if self._before is None:
            return
        before, self._before = self._before, None
        try:
            self._client.set_egress(self._session_id, before.get("mode", "open"), before.get("allow"), before.get("methods"))
        except NotFoundError:
            pass  # the session is gone: nothing to put back


def register(*, socket_path: str | None = None, network: str = "bridge") -> None:
    """Let SForge's own factory create this backend by name, without editing SForge.

    ``sforge.harness.backend.factory.create_backend("roboguide")`` (and so ``backend: roboguide`` in SForge's
    config, used by ``create_backend_from_config``) returns a :class:`RoboguideBackend`; every other name goes to
    SForge's original function. Call it once before SForge creates a backend, e.g. in a ``sitecustomize`` or in a
    launcher: ``python -c "import roboguide_eval.sforge as r; r.register(); from sforge.cli import main; main()"``,
    or simply ``python -m roboguide_eval.sforge_cli ARGS…`` (SForge's CLI with this backend registered)."""
    from sforge.harness.backend import factory  # type: ignore[import-not-found]

    original = getattr(factory.create_backend, "__roboguide_original__", factory.create_backend)

    def create_backend(name: str = "docker", **kwargs: Any) -> Any:
        if name == BACKEND_NAME:
            return RoboguideBackend(socket_path, network=network)
        return original(name, **kwargs)

    create_backend.__roboguide_original__ = original  # type: ignore[attr-defined]
    create_backend.__doc__ = original.__doc__
    factory.create_backend = create_backend

