"""``/health`` answers 503 while atom-plugin restarts: an HTTP middleware for vLLM's API server.

vLLM's ``/health`` asks only whether the engine-core process is dead; the plugin is restarted
inside that process (:class:`atom_go.restart.RestartingHost`), which marks the restart in the
state directory (:mod:`atom_go.health`). Passed to vLLM as
``--middleware atom_go.vllm.health.restart_health``, this answers ``GET /health`` with 503 while
a restart is marked, and leaves everything else to vLLM (200 afterwards; 503 once vLLM reports
the engine dead).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from atom_go.health import restarting


async def restart_health(request: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
    """vLLM ``--middleware``: 503 for /health while atom-plugin restarts."""
    if request.url.path == "/health" and restarting():
        from starlette.responses import Response

        return Response(status_code=503)
    return await call_next(request)
