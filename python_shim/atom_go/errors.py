"""The errors of atom-go's plugin host (re-exported by atom_go.plugin, where callers import them)."""

from __future__ import annotations

import grpc


class PluginError(RuntimeError):
    """Base class of the errors of atom-go's plugin host."""


class PluginNotFoundError(PluginError, FileNotFoundError):
    """No usable atom-plugin binary."""


class PluginStartError(PluginError):
    """The plugin did not start: it exited, printed no or a bad handshake, or is unreachable."""


class PluginDiedError(PluginError):
    """The plugin process exited while the host still used it."""

    def __init__(self, message: str, returncode: int | None = None) -> None:
        super().__init__(message)
        self.returncode = returncode


class PluginRPCError(PluginError):
    """An RPC the plugin answered with an error status (a bad request, a failed load, ...)."""

    def __init__(self, method: str, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{method}: {code.name}: {details}")
        self.method = method
        self.code = code
        self.details = details
