"""Inspect sandbox environment provider ``roboguide``: each sample's sandbox is a ``roboguide-eval serve`` session.

Inspect finds it through the package's ``inspect_ai`` entry point (``pip install clients/python`` registers it), so
``eval(task, sandbox="roboguide")`` or ``sandbox=("roboguide", {"image": "...", "user": "...", "workdir": "..."})``
works without importing anything. ``{"egress": {"mode": "allowlist", "allow": ["api.openai.com"]}}`` in that config
gives the sample's session an egress policy (docs/serve.md); its network follows from it. Needs ``inspect_ai`` itself (this module refuses to import without it).

Behaviour follows Inspect's ``SandboxEnvironment`` contract: relative ``cwd`` and file paths are resolved against
the sandbox's working directory; ``input`` may be text or bytes (large input is streamed); ``TimeoutError`` on
timeout (the command's process tree is killed); ``PermissionError`` for a command that is not executable and for
file access the user is refused; ``FileNotFoundError``/``IsADirectoryError`` for files; ``OutputLimitExceededError``
past Inspect's limits; file reads and writes run as the sandbox's user.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any, Literal, Union, overload

try:
    from inspect_ai.util import (  # type: ignore[import-not-found]
        ExecResult,
        OutputLimitExceededError,
        SandboxEnvironment,
        SandboxEnvironmentConfigType,
        SandboxEnvironmentLimits,
        sandboxenv,
    )
except ImportError as _err:  # pragma: no cover - depends on the environment
    raise ImportError("roboguide_eval.inspect is a sandbox provider for Inspect and needs inspect_ai (pip install inspect-ai)") from _err

from pydantic import BaseModel, Field

from . import _aio
from .client import Client
from .errors import ApiError, FileNotFoundApiError, NotFoundError

PROVIDER_NAME = "roboguide"


class RoboguideEgress(BaseModel, frozen=True):
    """The session's egress policy (the server's ``egress``): ``none``, ``open``, or ``allowlist`` of ``allow`` entries
    (``HOST``, ``*.DOMAIN``, ``ADDRESS``, each with an optional ``:PORT``; ports 80 and 443 otherwise) and optionally
    ``methods`` (seen on plain HTTP only). When given it decides the network (``network`` is then ignored unless it
    contradicts it)."""

    mode: Literal["none", "open", "allowlist"]
    allow: list[str] | None = None
    methods: list[str] | None = None


class RoboguideSandboxConfig(BaseModel, frozen=True):
    """``sandbox=("roboguide", {...})``: the session's image and options (``socket`` defaults to the server's)."""

    image: str = Field(default_factory=lambda: os.environ.get("ROBOGUIDE_EVAL_IMAGE", ""))
    user: str | None = None
    workdir: str | None = None
    network: Literal["none", "bridge"] = "none"
    egress: RoboguideEgress | None = None
    gpus: Union[int, str, None] = None
    cpus: float | None = None
    memory_mib: int | None = None
    environment: dict[str, str] = Field(default_factory=dict)
    ttl_seconds: int = 86_400
    socket: str | None = None
    url: str | None = None

    def __hash__(self) -> int:
        # Inspect hashes a task's SandboxEnvironmentSpec (its config included); pydantic's frozen hash fails on the
        # `environment` dict, so ``sandbox=("roboguide", {...})`` in ``eval()`` raised TypeError: unhashable type.
        return hash(self.model_dump_json())


def _client(config: RoboguideSandboxConfig) -> Client:
    return Client(config.socket or os.environ.get("ROBOGUIDE_EVAL_SOCKET"), url=config.url or os.environ.get("ROBOGUIDE_EVAL_URL"),
                  token=os.environ.get("ROBOGUIDE_EVAL_TOKEN"), rate_limit_wait=600.0)


def _config(config: SandboxEnvironmentConfigType | None) -> RoboguideSandboxConfig:
    if config is None:
        return RoboguideSandboxConfig()
    if isinstance(config, RoboguideSandboxConfig):
        return config
    if isinstance(config, BaseModel):
        return RoboguideSandboxConfig.model_validate(config.model_dump())
    if isinstance(config, dict):
        return RoboguideSandboxConfig.model_validate(config)
    return RoboguideSandboxConfig(image=str(config))  # a plain string is the image


@sandboxenv(name=PROVIDER_NAME)
class RoboguideSandboxEnvironment(SandboxEnvironment):
    """One sample's sandbox: one session (deleted, and its removal verified by the server, at sample cleanup)."""

    def __init__(self, client: Client, session_id: str, user: str | None):
        super().__init__()
        self._client = client
        self.session_id = session_id
        self._user = user

    # --- lifecycle ---

    @classmethod
    def config_deserialize(cls, config: dict[str, Any]) -> BaseModel:
        return RoboguideSandboxConfig.model_validate(config)

    @classmethod
    def default_concurrency(cls) -> int | None:
        return None  # the server answers 429/503 past its own limits

    @classmethod
    async def sample_init(cls, task_name: str, config: SandboxEnvironmentConfigType | None, metadata: dict[str, str]) -> dict[str, SandboxEnvironment]:
        conf = _config(config)
        if not conf.image:
            raise ValueError("roboguide sandbox: no image (give sandbox=('roboguide', {'image': ...}) or ROBOGUIDE_EVAL_IMAGE)")
        client = _client(conf)
        fields = {"user": conf.user, "workdir": conf.workdir, "network": conf.network, "gpus": conf.gpus, "cpus": conf.cpus,
                  "memory_mib": conf.memory_mib, "environment": conf.environment or None, "ttl_seconds": conf.ttl_seconds,
                  "egress": conf.egress.model_dump(exclude_none=True) if conf.egress is not None else None,
                  "labels": {"inspect.task": task_name[:1024], "inspect.sample": uuid.uuid4().hex}}
        created = await _aio.call(lambda c: client.create_session(conf.image, **fields))
        return {"default": cls(client, created["session_id"], conf.user)}

    @classmethod
    async def sample_cleanup(cls, task_name: str, config: SandboxEnvironmentConfigType | None, environments: dict[str, SandboxEnvironment],
                             interrupted: bool) -> None:
        for env in environments.values():
            if isinstance(env, RoboguideSandboxEnvironment):
                await asyncio.shield(_aio.call(lambda c, e=env: e._client.delete_session(e.session_id)))

    @classmethod
    async def cli_cleanup(cls, id: str | None) -> None:
        client = Client(os.environ.get("ROBOGUIDE_EVAL_SOCKET"))
        for session in await _aio.call(lambda c: client.list_sessions()):
            labels = session.get("labels") or {}
            if "inspect.sample" in labels and (id is None or session["session_id"] == id):
                await _aio.call(lambda c, s=session: client.delete_session(s["session_id"]))

    # --- exec ---

    async def exec(self, cmd: list[str], input: str | bytes | None = None, cwd: str | None = None, env: dict[str, str] | None = None,
                   user: str | None = None, timeout: int | None = None, timeout_retry: bool = True, concurrency: bool = True) -> ExecResult[str]:
        run_as = user or self._user
        try:
            result = await _aio.call(lambda c: self._client.exec(self.session_id, list(cmd), cwd=cwd, env=env or None, user=run_as,
                                                                 timeout_sec=timeout, stdin=input, cancel=c))
        except FileNotFoundApiError:
            raise
        except NotFoundError:
            raise
        except ApiError as err:
            if err.status >= 500 or err.status == 400:
                raise
            # e.g. an unknown user: a failed command, as Docker's `exec` reports it
            return ExecResult(success=False, returncode=126, stdout="", stderr=err.message)
        if result.get("timed_out"):
            raise TimeoutError(f"Command timed out after {timeout} seconds: {cmd!r}")
        stdout, stderr, code = result.get("stdout", ""), result.get("stderr", ""), int(result["return_code"])
        if code == 126 and "permission denied" in (stdout + stderr).casefold():
            raise PermissionError(f"Permission denied executing command: {stdout}{stderr}")
        limit = SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE
        if result.get("truncated") or len(stdout.encode()) > limit or len(stderr.encode()) > limit:
            raise OutputLimitExceededError(limit_str=SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE_STR, truncated_output=stdout[-limit:] or None)
        return ExecResult(success=code == 0, returncode=code, stdout=stdout, stderr=stderr)

    # --- files (as the sandbox's user: its permissions apply) ---

    async def write_file(self, file: str, contents: str | bytes) -> None:
        # As Inspect's Docker sandbox: the bytes go in as stdin of a shell that opens the file for writing as the
        # sandbox's user (its permissions apply: an existing read-only file is refused, a directory is never
        # replaced); missing parent directories are made.
        data = contents.encode("utf-8") if isinstance(contents, str) else bytes(contents)
        script = 'mkdir -p -- "$(dirname -- "$1")" 2>/dev/null; cat > "$1"'
        result = await _aio.call(lambda c: self._client.exec(self.session_id, ["sh", "-c", script, "write_file", file], stdin=data, user=self._user, cancel=c))
        if result["return_code"] == 0:
            return
        message = (result.get("stderr") or result.get("stdout") or "").strip()
        folded = message.casefold()
        if "permission denied" in folded or "read-only" in folded:
            raise PermissionError(13, f"Permission denied: {message}", file)
        if "is a directory" in folded:
            raise IsADirectoryError(21, f"Failed to write file: {file} because it is a directory already", file)
        raise OSError(f"writing {file} failed (exit {result['return_code']}): {message}")

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> Union[str, bytes]:
        try:
            data = await _aio.call(lambda c: self._client.read_file(self.session_id, file, user=self._user))
        except FileNotFoundError as err:
            raise FileNotFoundError(2, "No such file or directory.", file) from err
        except IsADirectoryError as err:
            raise IsADirectoryError(21, "Is a directory.", file) from err
        except PermissionError as err:
            raise PermissionError(13, "Permission denied.", file) from err
        if len(data) > SandboxEnvironmentLimits.MAX_READ_FILE_SIZE:
            raise OutputLimitExceededError(limit_str=SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR, truncated_output=None)
        return data.decode("utf-8") if text else data
