"""Prometheus series of a restarting atom-plugin, for a framework that serves its worker
processes' prometheus_client values on its own ``/metrics``.

SGLang with ``--enable-metrics`` runs prometheus_client in multiprocess mode: it sets
``PROMETHEUS_MULTIPROC_DIR`` before it starts its scheduler processes, each process writes its
values to files there, and the HTTP server's ``/metrics`` collects them all. The worker (and with
it :class:`atom_go.restart.RestartingHost`) lives in a scheduler process, so the series made
here reach ``/metrics``, summed over data-parallel ranks:

- ``atom_go_engine_restarts_total``: plugins restarted after a death;
- ``atom_go_recomputed_requests_total``: requests recomputed on a restarted plugin;
- ``atom_go_engine_recovery_seconds``: from the last death to the new plugin serving;
- ``atom_go_engine_restarting``: 1 while a dead plugin is being replaced.

Without multiprocess mode (or without prometheus_client) there is nothing to write to:
:func:`restart_metrics` returns None.
"""

from __future__ import annotations

import os
import threading
from typing import Any

ENV_MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"

_lock = threading.Lock()
_metrics: RestartMetrics | None = None


class RestartMetrics:
    """The series above, in this process's default prometheus_client registry (one set per
    process: prometheus_client refuses a second series of the same name)."""

    def __init__(self) -> None:
        from prometheus_client import Counter, Gauge

        self._restarts: Any = Counter("atom_go_engine_restarts", "atom-plugin processes restarted after a death.")
        self._recomputed: Any = Counter(
            "atom_go_recomputed_requests", "Requests recomputed on a restarted atom-plugin."
        )
        self._recovery: Any = Gauge(
            "atom_go_engine_recovery_seconds",
            "Seconds from the last atom-plugin death to the new plugin serving.",
            multiprocess_mode="mostrecent",
        )
        self._restarting: Any = Gauge(
            "atom_go_engine_restarting",
            "1 while a dead atom-plugin is being restarted.",
            multiprocess_mode="livemax",
        )

    def set_restarting(self, restarting: bool) -> None:
        """Marks a restart as begun (True) or over (False)."""
        self._restarting.set(1 if restarting else 0)

    def restarted(self, recovery_seconds: float) -> None:
        """Counts one restart that took recovery_seconds from the death to serving."""
        self._restarts.inc()
        self._recovery.set(recovery_seconds)

    def recomputed(self, requests: int) -> None:
        """Counts requests recomputed on a restarted plugin."""
        if requests > 0:
            self._recomputed.inc(requests)


def restart_metrics() -> RestartMetrics | None:
    """This process's RestartMetrics when the framework collects multiprocess values, else None."""
    global _metrics
    if not os.environ.get(ENV_MULTIPROC_DIR):
        return None
    with _lock:
        if _metrics is None:
            try:
                _metrics = RestartMetrics()
            except ImportError:
                return None
        return _metrics
