"""HTTP/1.1 + JSON over the server's unix socket (or plain HTTP on loopback TCP with a bearer token).

Standard library only. Every call opens its own connection, so one ``Client`` may be shared between threads;
a call given a :class:`Cancel` can be ended from another thread (closing its connection, which makes the server
kill a running exec's process tree).
"""

from __future__ import annotations

import base64
import http.client
import io
import json
import os
import socket
import tarfile
import threading
import time
from pathlib import Path, PurePosixPath
from typing import IO, Any, Callable, Iterable, Iterator
from urllib.parse import quote, urlencode, urlsplit

from .errors import ApiError, BuildError, RateLimitedError, TransportError, error_for

DEFAULT_TIMEOUT = 60.0
"""Seconds a call waits to connect and between two reads of an answer (``Client(timeout=None)`` waits forever)."""

EXEC_GRACE = 60.0
"""Added to an exec's own ``timeout_sec`` for the read timeout of its answer (the server kills it at timeout_sec)."""

INLINE_STDIN_MAX = 1024 * 1024
"""Up to this many bytes, stdin travels in the JSON body; beyond (or from a file object) it is streamed."""

EXEC_STREAM_TYPE = "application/vnd.roboguide.exec-stream"


def default_socket_path(env: dict[str, str] | None = None) -> str:
    """``$ROBOGUIDE_EVAL_SOCKET``, else the server's default: ``$XDG_RUNTIME_DIR/roboguide-eval/api.sock``,
    else under the state directory."""
    env = dict(os.environ) if env is None else env
    if env.get("ROBOGUIDE_EVAL_SOCKET"):
        return env["ROBOGUIDE_EVAL_SOCKET"]
    runtime = env.get("XDG_RUNTIME_DIR", "")
    if runtime.startswith("/"):
        return os.path.join(runtime, "roboguide-eval", "api.sock")
    state = env.get("XDG_STATE_HOME", "")
    if not state.startswith("/"):
        state = os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "roboguide-eval", "api.sock")


class Cancel:
    """Ends a call from another thread: closes its connection (at once, or as soon as it opens)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conn: http.client.HTTPConnection | None = None
        self.cancelled = False

    def _attach(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            self._conn = conn
            if not self.cancelled:
                return
        _hard_close(conn)

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
            conn = self._conn
        if conn is not None:
            _hard_close(conn)


def _hard_close(conn: http.client.HTTPConnection) -> None:
    sock = conn.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    conn.close()


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float | None):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class ExecStream:
    """The NDJSON events of a streamed exec: ``{"stream", "data"}`` … then ``{"exit": {...}}`` (or ``{"error"}``).
    ``close()`` ends the request; the server then kills the exec's process tree."""

    def __init__(self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse):
        self._conn = conn
        self._response = response

    def __iter__(self) -> Iterator[dict[str, Any]]:
        try:
            for line in self._response:
                if line.strip():
                    yield json.loads(line)
        finally:
            self.close()

    def close(self) -> None:
        _hard_close(self._conn)

    def __enter__(self) -> "ExecStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Client:
    """One server: a unix socket (default) or ``url="http://127.0.0.1:PORT"`` with ``token``.

    ``timeout`` (default :data:`DEFAULT_TIMEOUT` seconds) bounds connecting and each read; an exec waits its own
    ``timeout_sec`` plus :data:`EXEC_GRACE` (an exec without ``timeout_sec`` waits as long as its command runs).
    ``https://`` is refused: the server serves plain HTTP on loopback only (use an SSH tunnel or a TLS-terminating
    proxy you trust and give its plain-HTTP loopback end)."""

    def __init__(self, socket_path: str | None = None, *, url: str | None = None, token: str | None = None, timeout: float | None = DEFAULT_TIMEOUT,
                 rate_limit_wait: float = 0.0):
        self.socket_path = socket_path or default_socket_path()
        self.rate_limit_wait = rate_limit_wait
        """Seconds a call may spend waiting out 429 answers (``Retry-After``) before it raises ``RateLimitedError``
        (0: raise at once). The adapters wait: a harness never expects "too many requests" from its environment."""
        self.url = url
        self.token = token
        self.timeout = timeout
        self._host: tuple[str, int] | None = None
        if url is not None:
            parts = urlsplit(url)
            if parts.scheme == "https":
                raise ValueError(f"url {url!r}: https is not supported (the server serves plain HTTP on loopback); use http://127.0.0.1:PORT or the unix socket")
            if parts.scheme != "http" or not parts.hostname:
                raise ValueError(f"url {url!r}: expected http://HOST:PORT")
            if parts.path not in ("", "/") or parts.query:
                raise ValueError(f"url {url!r}: expected no path or query (http://HOST:PORT)")
            self._host = (parts.hostname, parts.port or 80)

    # --- transport ---

    def _connection(self, timeout: float | None) -> http.client.HTTPConnection:
        if self._host is not None:
            return http.client.HTTPConnection(self._host[0], self._host[1], timeout=timeout)
        return _UnixConnection(self.socket_path, timeout)

    def _open(self, method: str, path: str, *, body: Any = None, raw: bytes | Iterable[bytes] | IO[bytes] | None = None,
              content_type: str = "application/x-tar", query: dict[str, str] | None = None, timeout: float | None | str = "default",
              cancel: Cancel | None = None, error_path: str | None = None) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        deadline = time.monotonic() + self.rate_limit_wait
        while True:
            try:
                return self._open_once(method, path, body=body, raw=raw, content_type=content_type, query=query, timeout=timeout, cancel=cancel,
                                       error_path=error_path)
            except RateLimitedError as err:
                resendable = raw is None or isinstance(raw, (bytes, bytearray))
                wait = err.retry_after or 1.0
                if not resendable or time.monotonic() + wait > deadline or (cancel is not None and cancel.cancelled):
                    raise
                time.sleep(wait)

    def _open_once(self, method: str, path: str, *, body: Any, raw: Any, content_type: str, query: dict[str, str] | None, timeout: float | None | str,
                   cancel: Cancel | None, error_path: str | None) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        headers: dict[str, str] = {}
        data: Any = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["content-type"] = "application/json"
        elif raw is not None:
            data = raw
            headers["content-type"] = content_type
        if self.token:
            headers["authorization"] = f"Bearer {self.token}"
        if query:
            path = f"{path}?{urlencode(query)}"
        conn = self._connection(self.timeout if timeout == "default" else timeout)  # type: ignore[arg-type]
        if cancel is not None:
            cancel._attach(conn)
        try:
            conn.request(method, path, body=data, headers=headers, encode_chunked=data is not None and not isinstance(data, (bytes, bytearray)))
            response = conn.getresponse()
        except (OSError, http.client.HTTPException) as err:
            conn.close()
            if cancel is not None and cancel.cancelled:
                raise TransportError(f"{method} {path}: cancelled", code="E_CANCELLED") from err
            raise TransportError(f"{method} {path}: {err}", code="E_TRANSPORT") from err
        if response.status >= 400:
            payload = response.read()
            conn.close()
            raise self._error(response, payload, error_path)
        return conn, response

    @staticmethod
    def _error(response: http.client.HTTPResponse, payload: bytes, path: str | None) -> ApiError:
        try:
            err = json.loads(payload)["error"]
            result = error_for(response.status, str(err.get("code", "")), str(err.get("message", "")), err.get("issues"), path=path)
        except (ValueError, KeyError, TypeError):
            result = error_for(response.status, "E_HTTP", payload.decode(errors="replace")[:500], path=path)
        if isinstance(result, RateLimitedError):
            try:
                result.retry_after = float(response.getheader("retry-after") or "")
            except ValueError:
                result.retry_after = None
        return result

    def request(self, method: str, path: str, body: Any = None, raw: bytes | None = None, query: dict[str, str] | None = None, *,
                timeout: float | None | str = "default", cancel: Cancel | None = None, error_path: str | None = None) -> Any:
        conn, response = self._open(method, path, body=body, raw=raw, query=query, timeout=timeout, cancel=cancel, error_path=error_path)
        try:
            payload = response.read()
        except (OSError, http.client.HTTPException) as err:
            raise TransportError(f"{method} {path}: {err}", code="E_CANCELLED" if cancel is not None and cancel.cancelled else "E_TRANSPORT") from err
        finally:
            conn.close()
        if response.getheader("content-type", "").startswith("application/json"):
            return json.loads(payload)
        return payload

    # --- sessions ---

    def health(self) -> dict[str, Any]:
        return self.request("GET", "/v1/health")

    def image_exists(self, ref: str) -> bool:
        return bool(self.request("GET", "/v1/images", query={"ref": ref})["present"])

    def create_session(self, image: str, **fields: Any) -> dict[str, Any]:
        """Fields of ``POST /v1/sessions`` (environment, secret_env, gpus, ports, mounts, workdir, network, cpus,
        memory_mib, ttl_seconds, labels, user, cap_drop, command, annotations, extra_hosts, egress); ``None`` values are
        left out. Returns ``{session_id, container_id, ports}``."""
        return self.request("POST", "/v1/sessions", {"image": image, **{k: v for k, v in fields.items() if v is not None}})

    def get_session(self, session_id: str) -> dict[str, Any]:
        """``{session_id, container_id, image, state, workdir, user, network, ip_address, ports, labels, ...}``."""
        return self.request("GET", f"/v1/sessions/{quote(session_id, safe='')}")

    def list_sessions(self) -> list[dict[str, Any]]:
        return self.request("GET", "/v1/sessions")["sessions"]

    def set_egress(self, session_id: str, mode: str, allow: list[str] | None = None, methods: list[str] | None = None) -> dict[str, Any]:
        """``PUT /v1/sessions/{id}/egress``: the session's egress policy from now on (mode ``none``, ``open`` or
        ``allowlist`` with ``allow`` entries ``HOST``, ``*.DOMAIN``, ``ADDRESS``, each with an optional ``:PORT``, and
        optionally ``methods``). Every connection made after it returns obeys the new policy; tunnels through the proxy
        opened under the old one are closed. Returns the policy now in force."""
        body: dict[str, Any] = {"mode": mode}
        if allow is not None:
            body["allow"] = list(allow)
        if methods is not None:
            body["methods"] = list(methods)
        return self.request("PUT", f"/v1/sessions/{quote(session_id, safe='')}/egress", body)

    def keepalive(self, session_id: str) -> dict[str, Any]:
        return self.request("POST", f"/v1/sessions/{quote(session_id, safe='')}/keepalive")

    def delete_session(self, session_id: str, *, timeout: float | None = 300.0) -> dict[str, Any]:
        """The cleanup record (the same on every call)."""
        return self.request("DELETE", f"/v1/sessions/{quote(session_id, safe='')}", timeout=timeout)

    # --- exec ---

    @staticmethod
    def _exec_body(argv: list[str] | None, command: str | None, cwd: str | None, env: dict[str, str] | None, timeout_sec: float | None,
                   user: str | int | None, secret_env: list[str] | None) -> dict[str, Any]:
        if (argv is None) == (command is None):
            raise ValueError("give exactly one of argv and command")
        body: dict[str, Any] = {"argv": list(argv)} if argv is not None else {"command": command}
        for key, value in (("cwd", cwd), ("env", env), ("timeout_sec", timeout_sec), ("secret_env", secret_env)):
            if value is not None:
                body[key] = value
        if user is not None:
            body["user"] = str(user)
        return body

    def _exec_open(self, session_id: str, body: dict[str, Any], stdin: str | bytes | IO[bytes] | None, stream: bool, cancel: Cancel | None):
        read_timeout: float | None = None
        if body.get("timeout_sec") is not None:
            read_timeout = float(body["timeout_sec"]) + EXEC_GRACE
            if self.timeout is not None:
                read_timeout = max(read_timeout, self.timeout)
        path = f"/v1/sessions/{quote(session_id, safe='')}/exec"
        query = {"stream": "1"} if stream else None
        if isinstance(stdin, str) and len(stdin) <= INLINE_STDIN_MAX:
            return self._open("POST", path, body={**body, "stdin": stdin}, query=query, timeout=read_timeout, cancel=cancel)
        if isinstance(stdin, (bytes, bytearray)) and len(stdin) <= INLINE_STDIN_MAX:
            return self._open("POST", path, body={**body, "stdin_base64": base64.b64encode(stdin).decode()}, query=query, timeout=read_timeout, cancel=cancel)
        if stdin is None:
            return self._open("POST", path, body=body, query=query, timeout=read_timeout, cancel=cancel)
        # Large or file-like stdin: one JSON line, a newline, then the raw bytes (streamed, never buffered whole).
        head = json.dumps(body).encode() + b"\n"
        if isinstance(stdin, str):
            stdin = stdin.encode()
        return self._open("POST", path, raw=_chunks(head, stdin), content_type=EXEC_STREAM_TYPE, query=query, timeout=read_timeout, cancel=cancel)

    def exec(self, session_id: str, argv: list[str] | None = None, *, command: str | None = None, cwd: str | None = None,
             env: dict[str, str] | None = None, timeout_sec: float | None = None, user: str | int | None = None,
             stdin: str | bytes | IO[bytes] | None = None, secret_env: list[str] | None = None, cancel: Cancel | None = None) -> dict[str, Any]:
        """``{stdout, stderr, return_code, timed_out, duration_ms, truncated}``; outputs are redacted. ``argv`` runs
        without a shell, ``command`` as ``/bin/sh -c``. Literal ``env`` values under secret-looking names (or
        listed in ``secret_env``) are secrets: masked in every output. ``stdin`` may be text, bytes or a binary file."""
        body = self._exec_body(argv, command, cwd, env, timeout_sec, user, secret_env)
        conn, response = self._exec_open(session_id, body, stdin, False, cancel)
        try:
            payload = response.read()
        except (OSError, http.client.HTTPException) as err:
            raise TransportError(f"exec: {err}", code="E_CANCELLED" if cancel is not None and cancel.cancelled else "E_TRANSPORT") from err
        finally:
            conn.close()
        return json.loads(payload)

    def exec_stream(self, session_id: str, argv: list[str] | None = None, *, command: str | None = None, cwd: str | None = None,
                    env: dict[str, str] | None = None, timeout_sec: float | None = None, user: str | int | None = None,
                    stdin: str | bytes | IO[bytes] | None = None, secret_env: list[str] | None = None, cancel: Cancel | None = None) -> ExecStream:
        """A streamed exec (see :class:`ExecStream`); closing it, or ``cancel``, kills the exec."""
        body = self._exec_body(argv, command, cwd, env, timeout_sec, user, secret_env)
        conn, response = self._exec_open(session_id, body, stdin, True, cancel)
        return ExecStream(conn, response)

    # --- files ---

    @staticmethod
    def _file_query(path: str, user: str | int | None) -> dict[str, str]:
        return {"path": path, **({"user": str(user)} if user is not None else {})}

    def put_archive(self, session_id: str, path: str, tar_bytes: bytes, *, user: str | int | None = None, cancel: Cancel | None = None) -> dict[str, Any]:
        """Extract a tar into the directory ``path`` (relative: against the session's working directory)."""
        return self.request("PUT", f"/v1/sessions/{quote(session_id, safe='')}/archive", raw=tar_bytes, query=self._file_query(path, user), cancel=cancel, error_path=path)

    def get_archive(self, session_id: str, path: str, *, user: str | int | None = None, cancel: Cancel | None = None) -> bytes:
        """A tar of ``path`` (its top entry named after the path's last part), each file redacted, links kept."""
        return self.request("GET", f"/v1/sessions/{quote(session_id, safe='')}/archive", query=self._file_query(path, user), timeout=None, cancel=cancel, error_path=path)

    def read_file(self, session_id: str, path: str, *, user: str | int | None = None) -> bytes:
        """The bytes of one regular file (redacted). ``FileNotFoundError``/``IsADirectoryError``/``PermissionError``
        (as :mod:`roboguide_eval.errors` classes) for a missing file, a directory, or a file the user may not read."""
        data = self.get_archive(session_id, path, user=user)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
            members = archive_members(tar)
            if not members:
                raise error_for(404, "E_FILE_NOT_FOUND", f"{path}: no such file", path=path)
            top = members[0]
            if top.isdir():
                raise error_for(409, "E_IS_A_DIRECTORY", f"{path}: is a directory", path=path)
            if not top.isfile():
                raise error_for(404, "E_FILE_NOT_FOUND", f"{path}: not a regular file", path=path)
            extracted = tar.extractfile(top)
            return extracted.read() if extracted is not None else b""

    def write_file(self, session_id: str, path: str, data: bytes | str, *, mode: int = 0o644, user: str | int | None = None) -> None:
        """Write one file as the user (missing parent folders are made). A directory at ``path`` is refused (409), never replaced."""
        payload = data.encode() if isinstance(data, str) else bytes(data)
        target = PurePosixPath(path)
        if not target.name or target.name in (".", ".."):
            raise error_for(409, "E_IS_A_DIRECTORY", f"{path}: is a directory", path=path)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
            info = tarfile.TarInfo(target.name)
            info.size = len(payload)
            info.mode = mode
            tar.addfile(info, io.BytesIO(payload))
        self.put_archive(session_id, str(target.parent), buffer.getvalue(), user=user)

    def upload(self, session_id: str, source: str | os.PathLike[str], target: str, *, contents_only: bool = False, user: str | int | None = None) -> None:
        """Copy a local file to the path ``target``, or a directory to ``target`` (its contents, with
        ``contents_only``). Modes and symbolic links are kept (links are never followed)."""
        source = Path(source)
        target_path = PurePosixPath(target)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
            if source.is_dir() and not source.is_symlink() and contents_only:
                for child in sorted(source.iterdir()):
                    tar.add(str(child), arcname=child.name)
                parent = str(target_path)
            else:
                tar.add(str(source), arcname=target_path.name)
                parent = str(target_path.parent)
        self.put_archive(session_id, parent, buffer.getvalue(), user=user)

    def download(self, session_id: str, source: str, target: str | os.PathLike[str], *, user: str | int | None = None) -> None:
        """Copy the container path ``source`` (file or directory) so that it becomes the local path ``target``
        (a directory's contents are merged into ``target``). Modes and links are kept; nothing is written outside
        ``target`` (an entry that would be — an absolute or escaping link — is skipped)."""
        data = self.get_archive(session_id, source, user=user)
        extract_tar(data, Path(target))

    # --- images ---

    def build_image(self, context: str | os.PathLike[str] | bytes, tag: str, *, dockerfile: str = "Dockerfile",
                    on_log: Callable[[str], None] | None = None, timeout: float | None = 3600.0) -> dict[str, Any]:
        """Build ``tag`` from a context directory (or a tar of it) with ``POST /v1/images``: no pulls, cached by the
        context's content hash. Returns ``{"tag", "id", "cached"}``; raises :class:`BuildError` with the log."""
        raw = context if isinstance(context, bytes) else tar_directory(Path(context))
        conn, response = self._open("POST", "/v1/images", raw=raw, query={"tag": tag, "dockerfile": dockerfile}, timeout=timeout)
        log: list[str] = []
        try:
            for line in response:
                if not line.strip():
                    continue
                event = json.loads(line)
                if "log" in event:
                    log.append(event["log"])
                    if on_log is not None:
                        on_log(event["log"])
                elif "image" in event:
                    return event["image"]
                elif "error" in event:
                    err = event["error"]
                    failure = BuildError(f"build of {tag}: {err.get('code', '')}: {err.get('message', '')}", status=response.status, code=str(err.get("code", "")), message=str(err.get("message", "")))
                    failure.log = "".join(log)
                    raise failure
        finally:
            conn.close()
        failure = BuildError(f"build of {tag}: the answer ended without an image", status=response.status, code="E_BUILD")
        failure.log = "".join(log)
        raise failure

    # --- pairs ---

    def start_pair(self, spec: dict[str, Any]) -> str:
        return self.request("POST", "/v1/pairs", spec)["pair_id"]

    def pair(self, pair_id: str) -> dict[str, Any]:
        return self.request("GET", f"/v1/pairs/{quote(pair_id, safe='')}")

    def pair_logs(self, pair_id: str, stream: str = "stdout", follow: bool = False) -> bytes:
        query = {"stream": stream, **({"follow": "1"} if follow else {})}
        return self.request("GET", f"/v1/pairs/{quote(pair_id, safe='')}/logs", query=query, timeout=None if follow else "default")

    def stop_pair(self, pair_id: str) -> dict[str, Any]:
        return self.request("DELETE", f"/v1/pairs/{quote(pair_id, safe='')}", timeout=600.0)


def _chunks(head: bytes, body: bytes | bytearray | IO[bytes]) -> Iterator[bytes]:
    yield head
    if isinstance(body, (bytes, bytearray)):
        view = memoryview(body)
        for start in range(0, len(view), 1024 * 1024):
            yield bytes(view[start : start + 1024 * 1024])
        return
    while True:
        block = body.read(1024 * 1024)
        if not block:
            return
        yield block


def tar_directory(directory: Path) -> bytes:
    """A tar of a directory's contents (modes and links kept, links never followed)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for child in sorted(directory.iterdir()):
            tar.add(str(child), arcname=child.name)
    return buffer.getvalue()


def extract_tar(data: bytes, target: Path) -> None:
    """Extract an archive of the server (its top entry is the copied path) so that the top entry becomes ``target``.

    Uses tarfile's ``data`` filter (Python 3.10.12+/3.11.4+): modes kept without setuid/setgid and group/other
    write, links kept when they stay inside ``target``; an entry that would land outside is skipped."""
    if not hasattr(tarfile, "data_filter"):
        raise RuntimeError("this Python's tarfile has no extraction filters: use Python 3.10.12+, 3.11.4+ or 3.12+")
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        members = archive_members(tar)
        if not members:
            return
        root = members[0].name.rstrip("/")
        single = len(members) == 1 and not members[0].isdir()
        destination = target.parent if single else target
        destination.mkdir(parents=True, exist_ok=True)

        def rename(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
            if single:
                name = target.name
            else:
                rest = member.name[len(root):].lstrip("/") if member.name == root or member.name.startswith(root + "/") else None
                if rest is None:
                    return None
                name = rest or "."
            if name == ".":
                return None  # the top directory itself is `target`
            try:
                return tarfile.data_filter(member.replace(name=name, deep=False), dest)  # type: ignore[attr-defined]
            except tarfile.FilterError:  # type: ignore[attr-defined]
                return None

        if single and (target.is_dir() and not target.is_symlink()):
            raise IsADirectoryError(f"{target}: is a directory")
        if single and (target.exists() or target.is_symlink()):
            target.unlink()
        tar.extractall(str(destination), members=members, filter=rename)  # type: ignore[call-arg]


def archive_members(tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    """The archive's entries without a leading ``.`` entry and ``./`` prefixes (the server's archives of one path
    start with the path's own entry, as ``docker cp``'s; some carry a ``.`` entry first)."""
    members: list[tarfile.TarInfo] = []
    for member in tar.getmembers():
        name = member.name
        while name.startswith("./"):
            name = name[2:]
        name = name.rstrip("/")
        if name in ("", "."):
            continue
        if name != member.name:
            member.name = name
        members.append(member)
    return members


def docker_archive(data: bytes) -> bytes:
    """The archive re-written as ``docker cp``/docker-py's ``get_archive`` gives it: the copied path's own entry
    first, no ``.`` entry."""
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar, tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as dst:
        for member in archive_members(tar):
            dst.addfile(member, tar.extractfile(member) if member.isfile() else None)
    return out.getvalue()
