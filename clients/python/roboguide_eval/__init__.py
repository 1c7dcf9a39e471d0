"""Python client and benchmark-harness adapters for ``roboguide-eval serve`` (standard library only, Python >= 3.10).

``roboguide_eval.harbor`` (Harbor environment), ``roboguide_eval.sforge`` (SForge container backend) and
``roboguide_eval.inspect`` (Inspect sandbox provider, needs inspect_ai) are imported on demand."""

from .client import DEFAULT_TIMEOUT, Cancel, Client, ExecStream, default_socket_path
from .errors import (
    ApiError,
    BadRequestError,
    BuildError,
    ConflictError,
    ContainerFullApiError,
    FileNotFoundApiError,
    FileUnusableApiError,
    ForbiddenError,
    GoneError,
    IsADirectoryApiError,
    NotADirectoryApiError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedApiError,
    RateLimitedError,
    RequestTimeoutError,
    ServerError,
    TransportError,
    UnauthorizedError,
    UnavailableError,
    UnprocessableError,
    UnsupportedMediaTypeError,
)

__all__ = [
    "DEFAULT_TIMEOUT", "ApiError", "BadRequestError", "BuildError", "Cancel", "Client", "ConflictError", "ContainerFullApiError", "ExecStream", "FileNotFoundApiError", "FileUnusableApiError",
    "ForbiddenError", "GoneError", "IsADirectoryApiError", "NotADirectoryApiError", "NotFoundError", "PayloadTooLargeError", "PermissionDeniedApiError",
    "RateLimitedError", "RequestTimeoutError", "ServerError", "TransportError", "UnauthorizedError", "UnavailableError", "UnprocessableError", "UnsupportedMediaTypeError", "default_socket_path",
]
__version__ = "0.2.0"
