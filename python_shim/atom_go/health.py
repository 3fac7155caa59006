"""Whether a host's atom-plugin is being restarted, for a health endpoint in another process.

A framework's ``/health`` is answered by its HTTP server's process, while the plugin is restarted
in a worker process (vLLM's engine core, SGLang's scheduler). The worker marks a restart with a
file ``restarting-<pid>`` in a state directory both processes know: ``ATOM_GO_STATE_DIR``, made
by :func:`ensure_state_dir` in the server's process before it starts its workers (which inherit
the variable). :func:`restarting` is what the health endpoint asks, through
:func:`restart_health`, an HTTP middleware for the frameworks' Starlette apps (vLLM:
``--middleware atom_go.health.restart_health``; SGLang: attached by the plugin).
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


async def restart_health(request: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
    """HTTP middleware: ``GET /health`` answers 503 while a worker restarts atom-plugin, and
    everything else goes to the framework (its /health: 200 afterwards, 503 once the engine is
    reported dead)."""
    if request.url.path == "/health" and restarting():
        from starlette.responses import Response

        return Response(status_code=503)
    return await call_next(request)
