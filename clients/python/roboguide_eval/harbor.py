"""Harbor environment backed by ``roboguide-eval serve``.

Load it with ``--environment-import-path roboguide_eval.harbor:RoboguideEnvironment``. When Harbor is
installed its ``BaseEnvironment`` is the base class; otherwise a small stand-in with the same method
signatures is used (so the adapter can be tested without Harbor).
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .client import Client

try:  # pragma: no cover - exercised only where Harbor is installed
    from harbor.environments.base import BaseEnvironment, ExecResult  # type: ignore[import-not-found]

    HARBOR_INSTALLED = True
except ImportError:
    HARBOR_INSTALLED = False

    @dataclass
    class ExecResult:  # type: ignore[no-redef]
        stdout: str | None = None
        stderr: str | None = None
        return_code: int = 0

    class BaseEnvironment:  # type: ignore[no-redef]
        """Stand-in for ``harbor.environments.base.BaseEnvironment`` (same constructor and methods)."""

        def __init__(self, environment_dir: Path, environment_name: str, session_id: str, trial_paths: Any, task_env_config: Any,
                     logger: logging.Logger | None = None, override_cpus: int | None = None, override_memory_mb: int | None = None,
                     override_storage_mb: int | None = None, override_gpus: int | None = None, suppress_override_warnings: bool = False,
                     persistent_env: dict[str, str] | None = None, *args: Any, **kwargs: Any):
            self.environment_dir = environment_dir
            self.environment_name = environment_name
            self.session_id = session_id
            self.trial_paths = trial_paths
            self.task_env_config = task_env_config
            self.default_user: str | int | None = None
            self._persistent_env: dict[str, str] = persistent_env or {}
            self.logger = (logger or logging.getLogger("roboguide_eval")).getChild(__name__)
            for name, value in (("cpus", override_cpus), ("memory_mb", override_memory_mb), ("gpus", override_gpus)):
                if value is not None and task_env_config is not None:
                    setattr(task_env_config, name, value)
            self._validate_definition()

        def _resolve_user(self, user: str | int | None) -> str | int | None:
            return user if user is not None else self.default_user

        def _merge_env(self, env: dict[str, str] | None) -> dict[str, str] | None:
            merged = {**self._persistent_env, **(env or {})}
            return merged or None

        @classmethod
        def preflight(cls) -> None:
            return None

        async def is_dir(self, path: str, user: str | int | None = None) -> bool:
            return (await self.exec(f"test -d '{path}'", timeout_sec=10, user=user)).return_code == 0

        async def is_file(self, path: str, user: str | int | None = None) -> bool:
            return (await self.exec(f"test -f '{path}'", timeout_sec=10, user=user)).return_code == 0


@dataclass(frozen=True)
class Capabilities:
    gpus: bool = True
    disable_internet: bool = True
    mounted: bool = False


class RoboguideEnvironment(BaseEnvironment):
    """One Harbor trial = one roboguide session: GPU requests, network none unless the task allows the internet,
    exec with a real timeout (the process tree is killed), files in and out through redacted archives, and a
    deletion the server verifies (it finishes even if this process is interrupted)."""

    def __init__(self, environment_dir: Path, environment_name: str, session_id: str, trial_paths: Any, task_env_config: Any,
                 *args: Any, socket_path: str | None = None, image: str | None = None, ttl_seconds: int = 3600, **kwargs: Any):
        self._image = image or getattr(task_env_config, "docker_image", None) or os.environ.get("ROBOGUIDE_EVAL_IMAGE")
        self._client = Client(socket_path or os.environ.get("ROBOGUIDE_EVAL_SOCKET"))
        self._ttl_seconds = ttl_seconds
        self._session: str | None = None
        super().__init__(environment_dir, environment_name, session_id, trial_paths, task_env_config, *args, **kwargs)

    @staticmethod
    def type() -> Any:
        return "roboguide"

    @property
    def is_mounted(self) -> bool:
        return False

    @property
    def supports_gpus(self) -> bool:
        return True

    @property
    def can_disable_internet(self) -> bool:
        return True

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities()

    def _validate_definition(self) -> None:
        if not self._image:
            raise ValueError("no image: set task environment docker_image, pass image=..., or ROBOGUIDE_EVAL_IMAGE")

    @classmethod
    def preflight(cls) -> None:
        try:
            health = Client(os.environ.get("ROBOGUIDE_EVAL_SOCKET")).health()
        except OSError as err:
            raise SystemExit(f"roboguide-eval serve is not reachable: {err}") from err
        if not health.get("ok"):
            raise SystemExit("roboguide-eval serve answers but its Docker engine does not")

    @property
    def session(self) -> str:
        if self._session is None:
            raise RuntimeError("environment not started")
        return self._session

    async def start(self, force_build: bool) -> None:
        config = self.task_env_config
        gpus = getattr(config, "gpus", 0) or 0
        allow_internet = getattr(config, "allow_internet", False)
        created = await asyncio.to_thread(
            self._client.create_session,
            self._image,
            gpus=gpus if gpus > 0 else None,
            cpus=getattr(config, "cpus", None),
            memory_mb=getattr(config, "memory_mb", None),
            network="bridge" if allow_internet else "none",
            ttl_seconds=self._ttl_seconds,
            labels={"harbor.session": _label(self.session_id)},
        )
        self._session = created["session_id"]

    async def stop(self, delete: bool) -> None:
        # The server has no stopped-but-kept state: a session is always deleted (verified) when it stops.
        if self._session is None:
            return
        await asyncio.to_thread(self._client.delete_session, self._session)
        self._session = None

    async def exec(self, command: str, cwd: str | None = None, env: dict[str, str] | None = None, timeout_sec: int | None = None,
                   user: str | int | None = None) -> ExecResult:
        result = await asyncio.to_thread(
            self._client.exec, self.session, command=command, cwd=cwd, env=self._merge_env(env), timeout_sec=timeout_sec,
            user=self._resolve_user(user),
        )
        return ExecResult(stdout=result["stdout"], stderr=result["stderr"], return_code=result["return_code"])

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        await asyncio.to_thread(self._client.upload, self.session, source_path, target_path)

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        await asyncio.to_thread(self._client.upload, self.session, source_dir, target_dir, contents_only=True)

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        await asyncio.to_thread(self._client.download, self.session, source_path, target_path)

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        await asyncio.to_thread(self._client.download, self.session, source_dir, target_dir)


def _label(value: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "-" for c in value)[:128] or "-"
