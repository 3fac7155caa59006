"""Whether a host's atom-plugin is being restarted, for a health endpoint in another process.

A framework's ``/health`` is answered by its HTTP server's process, while the plugin is restarted
in a worker process (vLLM's engine core, SGLang's scheduler). While a restart runs, the worker
holds an abstract Unix socket named ``atomgo-restart-<id>-<pid>``, where ``<id>`` is
``ATOM_GO_STATE_ID``, set by :func:`ensure_state_id` in the server's process before it starts its
workers (which inherit it). The server's process sees the name in ``/proc/net/unix``
(:func:`restarting`). An abstract socket needs no file and vanishes with its process, so a worker
that dies mid-restart, or a framework killed outright, leaves nothing behind.
:class:`RestartHealth` is the ASGI middleware that turns this into ``/health`` answers (vLLM:
``--middleware atom_go.health.RestartHealth``; SGLang: attached by the plugin).
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Awaitable, Callable
from typing import Any

ENV_STATE_ID = "ATOM_GO_STATE_ID"
_PREFIX = "atomgo-restart-"
PROC_NET_UNIX = "/proc/net/unix"


def ensure_state_id() -> str:
    """The state id, made (and put in ATOM_GO_STATE_ID) unless inherited."""
    sid = os.environ.get(ENV_STATE_ID)
    if not sid:
        sid = secrets.token_hex(8)
        os.environ[ENV_STATE_ID] = sid
    return sid


class RestartMarker:
    """A RestartingHost observer that holds this process's restart socket while a restart runs
    (nothing without a state id)."""

    def __init__(self) -> None:
        sid = os.environ.get(ENV_STATE_ID)
        self.name = f"{_PREFIX}{sid}-{os.getpid()}" if sid else None
        self._sock: socket.socket | None = None

    def set_restarting(self, restarting: bool) -> None:
        """Binds the socket when a restart begins, closes it when the restart is over."""
        if self.name is None:
            return
        if restarting and self._sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.bind("\0" + self.name)
            except OSError:
                sock.close()
                return
            self._sock = sock
        elif not restarting and self._sock is not None:
            self._sock.close()
            self._sock = None

    def restarted(self, recovery_seconds: float) -> None:
        """Nothing to mark: the socket is closed once the restart is over."""

    def recomputed(self, requests: int) -> None:
        """Nothing to mark."""


def restarting(state_id: str | None = None, proc_net_unix: str = PROC_NET_UNIX) -> bool:
    """Whether a worker of this server (state id, default ATOM_GO_STATE_ID) restarts atom-plugin."""
    sid = state_id or os.environ.get(ENV_STATE_ID)
    if not sid:
        return False
    want = f"@{_PREFIX}{sid}-"
    try:
        with open(proc_net_unix, encoding="utf-8", errors="replace") as f:
            return any(line.rstrip().rsplit(" ", 1)[-1].startswith(want) for line in f)
    except OSError:
        return False


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
