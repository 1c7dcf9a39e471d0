"""HTTP/1.1 + JSON over the server's unix socket (or loopback TCP with a bearer token)."""

from __future__ import annotations

import http.client
import io
import json
import os
import socket
import tarfile
from pathlib import Path, PurePosixPath
from typing import Any, Iterator
from urllib.parse import quote, urlencode


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


class ApiError(Exception):
    """An error answer of the server: ``{"error": {"code", "message", "issues"}}`` with its HTTP status."""

    def __init__(self, status: int, code: str, message: str, issues: list[dict[str, str]] | None = None):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.issues = issues or []


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float | None):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if self.timeout is not None:
            sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


class Client:
    """One server. Every call opens its own connection, so a Client may be shared between threads."""

    def __init__(self, socket_path: str | None = None, *, url: str | None = None, token: str | None = None, timeout: float | None = None):
        self.socket_path = socket_path or default_socket_path()
        self.url = url
        self.token = token
        self.timeout = timeout

    # --- transport ---

    def _connection(self) -> http.client.HTTPConnection:
        if self.url is not None:
            host = self.url.split("://", 1)[-1].rstrip("/")
            return http.client.HTTPConnection(host, timeout=self.timeout)
        return _UnixConnection(self.socket_path, self.timeout)

    def _open(self, method: str, path: str, body: Any = None, raw: bytes | None = None, query: dict[str, str] | None = None) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        headers: dict[str, str] = {}
        data: bytes | None = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["content-type"] = "application/json"
        elif raw is not None:
            data = raw
            headers["content-type"] = "application/x-tar"
        if self.token:
            headers["authorization"] = f"Bearer {self.token}"
        if query:
            path = f"{path}?{urlencode(query)}"
        conn = self._connection()
        conn.request(method, path, body=data, headers=headers)
        response = conn.getresponse()
        if response.status >= 400:
            payload = response.read()
            conn.close()
            try:
                err = json.loads(payload)["error"]
                raise ApiError(response.status, err.get("code", ""), err.get("message", ""), err.get("issues"))
            except (ValueError, KeyError, TypeError):
                raise ApiError(response.status, "E_HTTP", payload.decode(errors="replace")) from None
        return conn, response

    def request(self, method: str, path: str, body: Any = None, raw: bytes | None = None, query: dict[str, str] | None = None) -> Any:
        conn, response = self._open(method, path, body, raw, query)
        try:
            payload = response.read()
        finally:
            conn.close()
        if response.getheader("content-type", "").startswith("application/json"):
            return json.loads(payload)
        return payload

    # --- routes ---

    def health(self) -> dict[str, Any]:
        return self.request("GET", "/v1/health")

    def image_exists(self, ref: str) -> bool:
        return bool(self.request("GET", "/v1/images", query={"ref": ref})["present"])

    def create_session(self, image: str, **fields: Any) -> dict[str, Any]:
        """Fields of ``POST /v1/sessions``: environment, gpus, ports, mounts, workdir, network, cpus, memory_mb,
        ttl_seconds, labels. Returns ``{session_id, container_id, ports}``."""
        return self.request("POST", "/v1/sessions", {"image": image, **{k: v for k, v in fields.items() if v is not None}})

    def list_sessions(self) -> list[dict[str, Any]]:
        return self.request("GET", "/v1/sessions")["sessions"]

    @staticmethod
    def _exec_body(argv: list[str] | None, command: str | None, cwd: str | None, env: dict[str, str] | None, timeout_sec: float | None, user: str | int | None, stdin: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {"argv": argv} if argv is not None else {"command": command}
        for key, value in (("cwd", cwd), ("env", env), ("timeout_sec", timeout_sec), ("stdin", stdin)):
            if value is not None:
                body[key] = value
        if user is not None:
            body["user"] = str(user)
        return body

    def exec(self, session_id: str, argv: list[str] | None = None, *, command: str | None = None, cwd: str | None = None, env: dict[str, str] | None = None, timeout_sec: float | None = None, user: str | int | None = None, stdin: str | None = None) -> dict[str, Any]:
        """``{stdout, stderr, return_code, timed_out, duration_ms, truncated}``; outputs are redacted."""
        return self.request("POST", f"/v1/sessions/{quote(session_id)}/exec", self._exec_body(argv, command, cwd, env, timeout_sec, user, stdin))

    def exec_stream(self, session_id: str, argv: list[str] | None = None, *, command: str | None = None, cwd: str | None = None, env: dict[str, str] | None = None, timeout_sec: float | None = None, user: str | int | None = None, stdin: str | None = None) -> Iterator[dict[str, Any]]:
        """NDJSON events: ``{"stream": "stdout"|"stderr", "data"}`` … then ``{"exit": {...}}``."""
        conn, response = self._open("POST", f"/v1/sessions/{quote(session_id)}/exec", self._exec_body(argv, command, cwd, env, timeout_sec, user, stdin), query={"stream": "1"})
        try:
            for line in response:
                if line.strip():
                    yield json.loads(line)
        finally:
            conn.close()

    def put_archive(self, session_id: str, path: str, tar_bytes: bytes) -> dict[str, Any]:
        return self.request("PUT", f"/v1/sessions/{quote(session_id)}/archive", raw=tar_bytes, query={"path": path})

    def get_archive(self, session_id: str, path: str) -> bytes:
        return self.request("GET", f"/v1/sessions/{quote(session_id)}/archive", query={"path": path})

    def keepalive(self, session_id: str) -> dict[str, Any]:
        return self.request("POST", f"/v1/sessions/{quote(session_id)}/keepalive")

    def delete_session(self, session_id: str) -> dict[str, Any]:
        """The cleanup record (the same on every call)."""
        return self.request("DELETE", f"/v1/sessions/{quote(session_id)}")

    def start_pair(self, spec: dict[str, Any]) -> str:
        return self.request("POST", "/v1/pairs", spec)["pair_id"]

    def pair(self, pair_id: str) -> dict[str, Any]:
        return self.request("GET", f"/v1/pairs/{quote(pair_id)}")

    def pair_logs(self, pair_id: str, stream: str = "stdout", follow: bool = False) -> bytes:
        query = {"stream": stream, **({"follow": "1"} if follow else {})}
        return self.request("GET", f"/v1/pairs/{quote(pair_id)}/logs", query=query)

    def stop_pair(self, pair_id: str) -> dict[str, Any]:
        return self.request("DELETE", f"/v1/pairs/{quote(pair_id)}")

    # --- file helpers (tar built and read here; the server re-checks every entry) ---

    def upload(self, session_id: str, source: str | os.PathLike[str], target: str, *, contents_only: bool = False) -> None:
        """Copy a local file to the path ``target``, or a directory to ``target`` (its contents, with contents_only)."""
        source = Path(source)
        target_path = PurePosixPath(target)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            if source.is_dir() and contents_only:
                for child in sorted(source.iterdir()):
                    tar.add(str(child), arcname=child.name)
                parent = str(target_path)
            else:
                tar.add(str(source), arcname=target_path.name)
                parent = str(target_path.parent)
        self.put_archive(session_id, parent, buffer.getvalue())

    def download(self, session_id: str, source: str, target: str | os.PathLike[str]) -> None:
        """Copy the container path ``source`` (file or directory) so that it becomes the local path ``target``.
        Only regular files and directories are written, never outside ``target``."""
        data = self.get_archive(session_id, source)
        target = Path(target)
        root = PurePosixPath(source).name
        with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
            for member in tar.getmembers():
                parts = [p for p in PurePosixPath(member.name).parts if p != "."]
                if not parts or ".." in parts or member.name.startswith("/") or not (member.isfile() or member.isdir()):
                    continue
                rel = parts[1:] if parts[0] == root else parts
                dest = target.joinpath(*rel)
                if member.isdir():
                    dest.mkdir(parents=True, exist_ok=True)
                    continue
                dest.parent.mkdir(parents=True, exist_ok=True)
                extracted = tar.extractfile(member)
                if extracted is not None:
                    dest.write_bytes(extracted.read())
                    os.chmod(dest, member.mode & 0o755 | 0o600)
