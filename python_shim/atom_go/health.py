"""Whether a host's atom-plugin is being restarted, for a health endpoint in another process.

A framework's ``/health`` is answered by its HTTP server's process, while the plugin is restarted
in a worker process (vLLM's engine core, SGLang's scheduler). The worker marks a restart with a
file ``restarting-<pid>`` in a state directory both processes know: ``ATOM_GO_STATE_DIR``, made
by :func:`ensure_state_dir` in the server's process before it starts its workers (which inherit
the variable). :func:`restarting` is what the health endpoint asks, through
:class:`RestartHealth`, an ASGI middleware for the frameworks' apps (vLLM:
``--middleware atom_go.health.RestartHealth``; SGLang: attached by the plugin).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import tempfile
from collections.abc import Awaitable, Callable
from typing import Any

ENV_STATE_DIR = "ATOM_GO_STATE_DIR"
_PREFIX = "restarting-"

_state_dir: tempfile.TemporaryDirectory[str] | None = None


def ensure_state_dir() -> str:
    """The state directory, made (and named in ATOM_GO_STATE_DIR) unless inherited; a directory
    made here is removed when this process exits."""
    global _state_dir
    d = os.environ.get(ENV_STATE_DIR)
    if d:
        return d
    _state_dir = tempfile.TemporaryDirectory(prefix="atomgo-state-")
    os.environ[ENV_STATE_DIR] = _state_dir.name
    return _state_dir.name


class RestartMarker:
    """A RestartingHost observer that keeps this process's ``restarting-<pid>`` file while a
    restart runs (nothing without a state directory)."""

    def __init__(self) -> None:
        d = os.environ.get(ENV_STATE_DIR)
        self.path = pathlib.Path(d, f"{_PREFIX}{os.getpid()}") if d else None

    def set_restarting(self, restarting: bool) -> None:
        """Creates the file when a restart begins, removes it when the restart is over."""
        if self.path is None:
            return
        with contextlib.suppress(OSError):
            if restarting:
                self.path.touch()
            else:
                self.path.unlink(missing_ok=True)

    def restarted(self, recovery_seconds: float) -> None:
        """Nothing to mark: the file is gone once the restart is over."""

    def recomputed(self, requests: int) -> None:
        """Nothing to mark."""


def restarting(state_dir: str | None = None) -> bool:
    """Whether a live worker marked a restart in the state directory (default ATOM_GO_STATE_DIR).

    A mark left by a process that died meanwhile is ignored: that worker's death is the
    framework's to report.
    """
    d = state_dir or os.environ.get(ENV_STATE_DIR)
    if not d:
        return False
    try:
        names = os.listdir(d)
    except OSError:
        return False
    for name in names:
        pid = name.removeprefix(_PREFIX)
        if name.startswith(_PREFIX) and pid.isdigit() and _alive(int(pid)):
            return True
    return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RestartHealth:
    """ASGI middleware: ``GET /health`` answers 503 while a worker restarts atom-plugin, and every
    other request goes to the framework's app untouched (its /health: 200 afterwards, 503 once the
    engine is reported dead).

    A plain ASGI class rather than Starlette's ``@app.middleware("http")``, whose wrapper of the
    response stream hides a client's disconnect from the app (a streamed request would then run
    to its end instead of being aborted).
    """

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") == "http" and scope.get("path") == "/health" and restarting():
            await send({"type": "http.response.start", "status": 503, "headers": [(b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b""})
            return
        await self.app(scope, receive, send)
