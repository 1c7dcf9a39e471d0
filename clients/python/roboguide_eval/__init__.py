"""Python client and backend adapters for ``roboguide-eval serve`` (standard library only, Python >= 3.10)."""

from .client import ApiError, Client, default_socket_path

__all__ = ["ApiError", "Client", "default_socket_path"]
__version__ = "0.1.0"
