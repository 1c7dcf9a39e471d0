"""Errors of the ``roboguide-eval serve`` API: one class per HTTP status family, file errors as Python's own."""

from __future__ import annotations

import errno as _errno
from typing import Any


class ApiError(Exception):
    """An error answer of the server, ``{"error": {"code", "message", "issues"}}``, with its HTTP status.

    Every error class below is an ``ApiError``; file errors are also the matching built-in ``OSError`` subclass
    (``FileNotFoundError``, ``IsADirectoryError``, ``NotADirectoryError``, ``PermissionError``)."""

    status: int
    code: str
    message: str
    issues: list[dict[str, Any]]

    def __init__(self, text: str, *, status: int = 0, code: str = "", message: str = "", issues: list[dict[str, Any]] | None = None):
        super().__init__(text)
        self.status = status
        self.code = code
        self.message = message or text
        self.issues = issues or []


class BadRequestError(ApiError):
    """400: the request broke a rule (``issues`` name the fields)."""


class UnauthorizedError(ApiError):
    """401: a missing or wrong bearer token."""


class ForbiddenError(ApiError):
    """403: refused (e.g. a cross-origin request)."""


class NotFoundError(ApiError):
    """404: no such session, pair, image or path."""


class GoneError(NotFoundError):
    """410 ``E_SESSION_ENDED``: the session's container exited or was removed; its slot is released (create a new
    session). A ``NotFoundError`` too: code that handles a missing session handles an ended one."""


class RequestTimeoutError(ApiError):
    """408 ``E_BODY_TIMEOUT``: the request body stopped arriving (the connection is closed)."""


class ConflictError(ApiError):
    """409: the resource is in a state that refuses the request."""


class PayloadTooLargeError(ApiError):
    """413: the body is over the server's cap."""


class UnprocessableError(ApiError):
    """422: understood, but what it asks cannot be done there (``E_FILE_UNUSABLE``: the container's kernel refuses that
    read or write at that path)."""


class UnsupportedMediaTypeError(BadRequestError):
    """415: a body of the wrong ``Content-Type`` (JSON must be ``application/json``)."""


class RateLimitedError(ApiError):
    """429: too many requests in flight; retry after ``retry_after`` seconds."""

    retry_after: float | None = None


class ServerError(ApiError):
    """5xx: the server or its engine failed."""


class UnavailableError(ServerError):
    """503: the engine, the registry or a capacity limit is unavailable right now."""


class TransportError(ApiError):
    """The connection failed or the answer could not be read (no HTTP status)."""


class BuildError(ApiError):
    """An image build that ended with an error line (the build's log is in ``log``)."""

    log: str = ""


class FileNotFoundApiError(NotFoundError, FileNotFoundError):
    """404 ``E_FILE_NOT_FOUND``."""


class IsADirectoryApiError(ConflictError, IsADirectoryError):
    """409 ``E_IS_A_DIRECTORY``."""


class NotADirectoryApiError(ConflictError, NotADirectoryError):
    """409 ``E_NOT_A_DIRECTORY``."""


class PermissionDeniedApiError(ForbiddenError, PermissionError):
    """403 ``E_PERMISSION_DENIED``."""


class ContainerFullApiError(ServerError, OSError):
    """507 ``E_CONTAINER_FULL``: no room left in the container's file system (``errno`` ENOSPC)."""


class FileUnusableApiError(UnprocessableError, OSError):
    """422 ``E_FILE_UNUSABLE``: the container's kernel refuses that read or write at that path (``errno`` EIO)."""


_BY_CODE: dict[str, tuple[type[ApiError], int]] = {
    "E_FILE_NOT_FOUND": (FileNotFoundApiError, _errno.ENOENT),
    "E_IS_A_DIRECTORY": (IsADirectoryApiError, _errno.EISDIR),
    "E_NOT_A_DIRECTORY": (NotADirectoryApiError, _errno.ENOTDIR),
    "E_PERMISSION_DENIED": (PermissionDeniedApiError, _errno.EACCES),
    "E_CONTAINER_FULL": (ContainerFullApiError, _errno.ENOSPC),
    "E_FILE_UNUSABLE": (FileUnusableApiError, _errno.EIO),
}

_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequestError,
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    408: RequestTimeoutError,
    409: ConflictError,
    410: GoneError,
    413: PayloadTooLargeError,
    415: UnsupportedMediaTypeError,
    422: UnprocessableError,
    429: RateLimitedError,
    503: UnavailableError,
}


def error_for(status: int, code: str, message: str, issues: list[dict[str, Any]] | None = None, *, path: str | None = None) -> ApiError:
    """The most specific error class for an answer (the file codes first, then the status, then the family)."""
    text = f"{status} {code}: {message}"
    if issues:
        text += " (" + "; ".join(f"{i.get('path', '')}: {i.get('rule', i.get('message', ''))}" for i in issues[:5]) + ")"
    by_code = _BY_CODE.get(code)
    if by_code is not None:
        cls, number = by_code
        err = cls(text, status=status, code=code, message=message, issues=issues)
        err.errno, err.strerror, err.filename = number, message, path  # type: ignore[attr-defined]
        return err
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else ApiError)
    return cls(text, status=status, code=code, message=message, issues=issues)
