"""Harbor environment backed by ``roboguide-eval serve``.

Select it with ``--environment-import-path roboguide_eval.harbor:RoboguideEnvironment`` (Harbor's
``EnvironmentFactory`` imports it). It behaves like Harbor's own Docker environment: the task's prebuilt
``docker_image`` or an image built from ``environment/Dockerfile`` (through ``POST /v1/images``, cached by content),
the runtime ``network_policy`` (public → egress "open", no-network → "none", allowlist → an egress allowlist of its
``allowed_hosts``, switched between phases by ``set_network_policy``: capabilities ``network_allowlist`` and
``dynamic_network_policy``), the task's ``workdir``, the
``/logs`` folders created, the ``environment/`` folder uploaded for prebuilt images, commands run as
``bash -c`` (``sh -c`` when the image has no bash), a timed-out command raising ``RuntimeError("Command timed out
after N seconds")`` like Docker's, and GPUs (which Harbor's Docker environment refuses).

Harbor itself must be importable (``harbor.environments.base``); without it a small local base class with the same
constructor and helpers stands in so that the module still imports (used by our own tests, never by Harbor).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Iterator

from . import _aio
from .client import Cancel, Client
from .errors import ApiError, NotFoundError

try:  # Harbor's own classes whenever Harbor is importable
    from harbor.environments.base import BaseEnvironment, ExecResult, SandboxBuildFailedError  # type: ignore[import-not-found]
    from harbor.environments.capabilities import EnvironmentCapabilities, EnvironmentResourceCapabilities  # type: ignore[import-not-found]

    HARBOR_INSTALLED = True
except ImportError:
    HARBOR_INSTALLED = False

    class SandboxBuildFailedError(Exception):  # type: ignore[no-redef]
        """Stand-in for ``harbor.environments.base.SandboxBuildFailedError``."""

    @dataclass
    class ExecResult:  # type: ignore[no-redef]
        stdout: str | None = None
        stderr: str | None = None
        return_code: int = 0

    @dataclass(frozen=True)
    class EnvironmentCapabilities:  # type: ignore[no-redef]
        gpus: bool = False
        tpus: bool = False
        disable_internet: bool = False
        network_allowlist: bool = False
        dynamic_network_policy: bool = False
        windows: bool = False
        mounted: bool = False
        docker_compose: bool = False

    @dataclass(frozen=True)
    class EnvironmentResourceCapabilities:  # type: ignore[no-redef]
        cpu_limit: bool = False
        cpu_request: bool = False
        memory_limit: bool = False
        memory_request: bool = False

    class BaseEnvironment:  # type: ignore[no-redef]
        """Stand-in for ``harbor.environments.base.BaseEnvironment`` (constructor and helpers only)."""

        def __init__(self, environment_dir: Path, environment_name: str, session_id: str, trial_paths: Any, task_env_config: Any,
                     logger: logging.Logger | None = None, override_cpus: int | None = None, override_memory_mb: int | None = None,
                     override_storage_mb: int | None = None, override_gpus: int | None = None, persistent_env: dict[str, str] | None = None,
                     mounts: list[Any] | None = None, network_policy: Any = None, *args: Any, **kwargs: Any):
            self.environment_dir = Path(environment_dir)
            self.environment_name = environment_name
            self.session_id = session_id
            self.trial_paths = trial_paths
            self.task_env_config = task_env_config
            self.default_user: str | int | None = None
            self._persistent_env: dict[str, str] = {**(getattr(task_env_config, "env", None) or {}), **(persistent_env or {})}
            self._mounts = list(mounts or [])
            self._network_policy = network_policy
            self.logger = (logger or logging.getLogger("roboguide_eval")).getChild(__name__)
            for name, value in (("cpus", override_cpus), ("memory_mb", override_memory_mb), ("gpus", override_gpus)):
                if value is not None:
                    setattr(task_env_config, name, value)
            self._validate_definition()

        @property
        def network_policy(self) -> Any:
            return self._network_policy

        @property
        def _effective_cpus(self) -> int | None:
            return getattr(self.task_env_config, "cpus", None)

        @property
        def _effective_memory_mb(self) -> int | None:
            return getattr(self.task_env_config, "memory_mb", None)

        @property
        def _effective_gpus(self) -> int:
            return getattr(self.task_env_config, "gpus", None) or 0

        def _mount_targets(self, *, writable_only: bool = False) -> list[str]:
            return [m["target"] for m in self._mounts if not (writable_only and m.get("read_only"))]

        def _resolve_user(self, user: str | int | None) -> str | int | None:
            return user if user is not None else self.default_user

        @contextlib.contextmanager
        def with_default_user(self, user: str | int | None) -> Iterator[None]:
            previous, self.default_user = self.default_user, user
            try:
                yield
            finally:
                self.default_user = previous

        def _merge_env(self, env: dict[str, str] | None) -> dict[str, str] | None:
            merged = {**self._persistent_env, **(env or {})}
            return merged or None

        async def _upload_environment_dir_after_start(self) -> None:
            env_dir = self.environment_dir
            if not getattr(self.task_env_config, "docker_image", None) or (env_dir / "Dockerfile").exists() or (env_dir / "docker-compose.yaml").exists():
                return
            if not env_dir.is_dir() or not any(env_dir.iterdir()):
                return
            workdir = getattr(self.task_env_config, "workdir", None)
            if not workdir:
                workdir = ((await self.exec("pwd")).stdout or "/").strip()
            await self.upload_dir(env_dir, workdir)

        async def is_dir(self, path: str, user: str | int | None = None) -> bool:
            return (await self.exec(f"test -d {shlex.quote(path)}", timeout_sec=10, user=user)).return_code == 0

        async def is_file(self, path: str, user: str | int | None = None) -> bool:
            return (await self.exec(f"test -f {shlex.quote(path)}", timeout_sec=10, user=user)).return_code == 0

        async def set_network_policy(self, network_policy: Any) -> None:
            """As Harbor's: unchanged → nothing; else ``_apply_network_policy`` and the policy kept."""
            if network_policy == self._network_policy:
                return
            await self._apply_network_policy(network_policy)
            self._network_policy = network_policy


if HARBOR_INSTALLED:

    class RoboguideExecResult(ExecResult):  # type: ignore[misc,valid-type]
        """Harbor's ``ExecResult`` plus ``truncated`` (an output stream went past the server's 16 MiB cap)."""

        truncated: bool = False

else:

    @dataclass
    class RoboguideExecResult(ExecResult):  # type: ignore[no-redef]
        truncated: bool = False


DEFAULT_LOG_DIRS = ("/logs/agent", "/logs/verifier", "/logs/artifacts")
"""Harbor's ``EnvironmentPaths`` log folders, created at start when the trial passes no mounts."""

_build_locks: dict[str, asyncio.Lock] = {}


def _image_name(environment_name: str) -> str:
    name = environment_name.lower()
    if not re.match(r"^[a-z0-9]", name):
        name = "0" + name
    return "roboguide-harbor/hb__" + re.sub(r"[^a-z0-9._-]", "-", name)


def _network_mode(policy: Any) -> str:
    """Harbor's ``NetworkPolicy.network_mode`` as a plain string (``public`` when there is no policy)."""
    if policy is None:
        return "public"
    mode = getattr(policy, "network_mode", policy)
    return str(getattr(mode, "value", mode))


def egress_of(policy: Any) -> dict[str, Any]:
    """Harbor's ``NetworkPolicy`` as the session's ``egress``: public → open, no-network → none, allowlist → allowlist
    of its ``allowed_hosts`` (names and ``*.`` wildcards, ports 80 and 443: what Harbor's hosts mean)."""
    mode = _network_mode(policy)
    if mode == "public":
        return {"mode": "open"}
    if mode == "no-network":
        return {"mode": "none"}
    if mode == "allowlist":
        hosts = list(getattr(policy, "allowed_hosts", None) or [])
        if not hosts:
            raise ValueError("network_mode='allowlist' needs allowed_hosts")
        return {"mode": "allowlist", "allow": hosts}
    raise ValueError(f"network_mode={mode!r} is not supported by the roboguide environment")


class RoboguideEnvironment(BaseEnvironment):  # type: ignore[misc,valid-type]
    """One Harbor trial environment = one roboguide session (deleted, and its removal verified, on ``stop``)."""

    def __init__(self, environment_dir: Path, environment_name: str, session_id: str, trial_paths: Any, task_env_config: Any,
                 *args: Any, socket_path: str | None = None, url: str | None = None, token: str | None = None, image: str | None = None,
                 ttl_seconds: int = 86_400, client: Client | None = None, **kwargs: Any):
        self._image_override = image or os.environ.get("ROBOGUIDE_EVAL_IMAGE") or None
        self._client = client or Client(socket_path or os.environ.get("ROBOGUIDE_EVAL_SOCKET"), url=url or os.environ.get("ROBOGUIDE_EVAL_URL"),
                                        token=token or os.environ.get("ROBOGUIDE_EVAL_TOKEN"), rate_limit_wait=600.0)
        self._ttl_seconds = ttl_seconds
        self._session: str | None = None
        self._shell = "bash"
        super().__init__(environment_dir, environment_name, session_id, trial_paths, task_env_config, *args, **kwargs)

    @staticmethod
    def type() -> Any:
        return "roboguide"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        # A session's egress is none, open or an allowlist, and PUT /v1/sessions/{id}/egress switches it between phases.
        return EnvironmentCapabilities(gpus=True, disable_internet=True, network_allowlist=True, dynamic_network_policy=True)

    async def _apply_network_policy(self, network_policy: Any) -> None:
        """Harbor's phase switch (``set_network_policy``): the session's egress from now on; before start, kept for it."""
        egress = egress_of(network_policy)
        if self._session is None:
            return
        session = self._session
        await _aio.call(lambda c: self._client.set_egress(session, egress["mode"], egress.get("allow")))

    @classmethod
    def resource_capabilities(cls) -> EnvironmentResourceCapabilities:
        return EnvironmentResourceCapabilities(cpu_limit=True, memory_limit=True)

    def _validate_definition(self) -> None:
        env_dir = Path(self.environment_dir)
        if (env_dir / "docker-compose.yaml").exists():
            raise ValueError(f"{env_dir / 'docker-compose.yaml'}: Docker Compose tasks are not supported by the roboguide environment")
        if self._image_override or getattr(self.task_env_config, "docker_image", None) or (env_dir / "Dockerfile").exists():
            return
        raise FileNotFoundError(f"Task environment directory {env_dir} has no environment definition. Set [environment].docker_image "
                                "or add environment/Dockerfile (or pass image=... / ROBOGUIDE_EVAL_IMAGE).")

    @classmethod
    def preflight(cls) -> None:
        client = Client(os.environ.get("ROBOGUIDE_EVAL_SOCKET"), url=os.environ.get("ROBOGUIDE_EVAL_URL"), token=os.environ.get("ROBOGUIDE_EVAL_TOKEN"))
        try:
            health = client.health()
        except (OSError, ApiError) as err:
            raise SystemExit(f"roboguide-eval serve is not reachable: {err}") from err
        if not health.get("ok"):
            raise SystemExit("roboguide-eval serve answers but its Docker engine does not")

    @property
    def session(self) -> str:
        if self._session is None:
            raise RuntimeError("environment not started")
        return self._session

    # --- start / stop ---

    async def _image(self, force_build: bool) -> str:
        if self._image_override:
            return self._image_override
        docker_image = getattr(self.task_env_config, "docker_image", None)
        dockerfile = Path(self.environment_dir) / "Dockerfile"
        if docker_image and (not force_build or not dockerfile.exists()):
            return docker_image
        tag = f"{_image_name(self.environment_name)}:latest"
        lock = _build_locks.setdefault(self.environment_name, asyncio.Lock())
        async with lock:
            try:
                built = await _aio.call(lambda _c: self._client.build_image(self.environment_dir, tag, on_log=lambda line: self.logger.debug(line.rstrip())))
            except ApiError as err:
                raise SandboxBuildFailedError(f"building {tag} from {dockerfile} failed: {err}") from err
        self.logger.debug(f"image {built.get('tag', tag)} ({'cached' if built.get('cached') else 'built'})")
        return str(built.get("tag") or tag)

    async def start(self, force_build: bool) -> None:
        egress = egress_of(self.network_policy)
        image = await self._image(force_build)
        config = self.task_env_config
        gpus = self._effective_gpus
        if gpus and getattr(config, "gpu_types", None):
            self.logger.warning(f"gpu_types {config.gpu_types} are not selectable here: any {gpus} GPU(s) of the host are given")
        fields = {
            "gpus": gpus if gpus > 0 else None,
            "cpus": self._effective_cpus,
            "memory_mib": self._effective_memory_mb,
            "network": "none" if egress["mode"] == "none" else "bridge",
            "egress": egress,
            "workdir": getattr(config, "workdir", None),
            "environment": dict(self._persistent_env) or None,
            "ttl_seconds": self._ttl_seconds,
            "labels": {"harbor.session": self.session_id[:4096]},
        }
        created = await _aio.call(lambda c: self._client.create_session(image, **fields))
        self._session = created["session_id"]
        try:
            probe = await _aio.call(lambda c: self._client.exec(self.session, ["bash", "-c", "true"], timeout_sec=30, user="0"))
            self._shell = "bash" if probe["return_code"] == 0 else "sh"
        except ApiError:
            self._shell = "sh"
        targets = self._mount_targets(writable_only=True) or list(DEFAULT_LOG_DIRS)
        quoted = " ".join(shlex.quote(str(t)) for t in targets)
        made = await self.exec(f"mkdir -p {quoted} && chmod 777 {quoted}", user="0")  # uid 0: also where /etc/passwd has no root
        if made.return_code != 0:
            raise RuntimeError(f"cannot create {quoted} in the environment: {made.stderr or made.stdout}")
        await self._upload_environment_dir_after_start()

    async def stop(self, delete: bool) -> None:
        # A session has no stopped-but-kept state: it is always deleted, and the server verifies the removal (it
        # finishes even if this process is interrupted).
        if self._session is None:
            return
        session, self._session = self._session, None
        try:
            record = await _aio.call(lambda c: self._client.delete_session(session))
        except Exception as err:  # like Docker's environment: a failed teardown is a warning, not the trial's error
            self.logger.warning(f"roboguide session {session}: deletion failed: {err}")
            return
        if not record.get("verified_absent", True):
            self.logger.warning(f"roboguide session {session}: removal not verified: {record.get('error')}")

    # --- exec ---

    async def exec(self, command: str, cwd: str | None = None, env: dict[str, str] | None = None, timeout_sec: int | None = None,
                   user: str | int | None = None) -> ExecResult:
        session = self.session
        argv = [self._shell, "-c", command]
        run_as = self._resolve_user(user)
        merged = self._merge_env(env)
        limit = timeout_sec if timeout_sec else None  # Docker's environment: 0/None = no timeout
        result = await _aio.call(lambda c: self._client.exec(session, argv, cwd=cwd, env=merged, timeout_sec=limit, user=run_as, cancel=c))
        if result.get("timed_out"):
            raise RuntimeError(f"Command timed out after {timeout_sec} seconds")
        truncated = bool(result.get("truncated"))
        if truncated:
            self.logger.warning(f"exec output went past the server's cap and was truncated: {command[:200]}")
        return RoboguideExecResult(stdout=result.get("stdout") or None, stderr=result.get("stderr") or None,
                                   return_code=int(result["return_code"]), truncated=truncated)

    # --- files (tar through the server: modes and links kept, every file redacted on the way out) ---

    async def _put(self, source: Path, target: str, contents_only: bool) -> None:
        session = self.session

        def put(c: Cancel) -> None:
            try:
                self._client.upload(session, source, target, contents_only=contents_only)
            except NotFoundError:
                parent = target if contents_only else str(PurePosixPath(target).parent)
                self._client.exec(session, ["mkdir", "-p", "--", parent], user="0", timeout_sec=60)
                self._client.upload(session, source, target, contents_only=contents_only)

        await _aio.call(put)

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        await self._put(Path(source_path), target_path, contents_only=False)

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        await self._put(Path(source_dir), target_dir, contents_only=True)

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        session = self.session
        await _aio.call(lambda c: self._client.download(session, source_path, Path(target_path)))

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        session = self.session
        await _aio.call(lambda c: self._client.download(session, source_dir, Path(target_dir)))
