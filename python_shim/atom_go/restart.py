"""A host-mode atom-plugin that is restarted when it dies, its requests recomputed.

:class:`RestartingHost` owns the plugin of a vLLM executor or an SGLang worker: ``launch``
starts a fresh atom-plugin and loads the model with the arguments of the first start, the KV
cache is re-created with the block count the host already allocated, and the live requests are
recomputed (:mod:`atom_go.recovery`), so that the framework's scheduler never notices: the step
that saw the death runs again on the new engine and returns what the old one would have. A
restart budget stops a crash loop: beyond it :class:`EngineGoneError` is raised and the
framework reports its engine dead its usual way.

The budget is read from the environment (``ATOM_GO_MAX_RESTARTS``, default 3, 0 turns restarts
off; ``ATOM_GO_RESTART_WINDOW``, seconds, default 300), or from a config mapping with the keys
``max_restarts`` and ``restart_window`` (vLLM: ``--additional-config '{"atom_go":
{"max_restarts": 5}}'``), which wins over the environment.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, Protocol, TypeVar

from atom_go._proto import atom_pb2
from atom_go.client import EngineClient
from atom_go.errors import PluginDiedError, PluginError
from atom_go.plugin import PluginProcess
from atom_go.recovery import StepLedger
from atom_go.wire import ExecuteResult, decode_result, encode_payload

log = logging.getLogger("atom_go.restart")

ENV_MAX_RESTARTS = "ATOM_GO_MAX_RESTARTS"
ENV_RESTART_WINDOW = "ATOM_GO_RESTART_WINDOW"
DEFAULT_MAX_RESTARTS = 3
DEFAULT_RESTART_WINDOW = 300.0
ADDITIONAL_CONFIG_KEY = "atom_go_restart"  # vLLM's --additional-config


class EngineGoneError(PluginDiedError):
    """The plugin died beyond the restart budget (or could not be restarted): the engine is dead."""


@dataclasses.dataclass(frozen=True)
class RestartPolicy:
    """At most ``max_restarts`` restarts within ``window`` seconds; 0 restarts: none."""

    max_restarts: int = DEFAULT_MAX_RESTARTS
    window: float = DEFAULT_RESTART_WINDOW

    def __post_init__(self) -> None:
        if self.max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, got {self.max_restarts}")
        if not self.window > 0:
            raise ValueError(f"restart window must be positive seconds, got {self.window}")

    @classmethod
    def from_config(
        cls, config: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
    ) -> RestartPolicy:
        """The policy of ``config`` (keys max_restarts, restart_window), else of the environment."""
        env = os.environ if environ is None else environ
        config = config or {}
        unknown = sorted(set(config) - {"max_restarts", "restart_window"})
        if unknown:
            raise ValueError(f"atom-go restart config: unknown keys {unknown} (want max_restarts, restart_window)")

        def pick(key: str, var: str, default: float, conv: Callable[[Any], float]) -> float:
            raw: Any = config.get(key)
            where = f"config {key!r}"
            if raw is None:
                raw = env.get(var, "").strip() or None
                where = var
            if raw is None:
                return default
            try:
                return conv(raw)
            except (TypeError, ValueError):
                raise ValueError(f"{where}={raw!r}: want a number") from None

        max_restarts = int(pick("max_restarts", ENV_MAX_RESTARTS, DEFAULT_MAX_RESTARTS, lambda v: int(str(v), 10)))
        window = pick("restart_window", ENV_RESTART_WINDOW, DEFAULT_RESTART_WINDOW, float)
        return cls(max_restarts=max_restarts, window=window)

    @classmethod
    def from_additional_config(
        cls, additional_config: object, environ: Mapping[str, str] | None = None
    ) -> RestartPolicy:
        """The policy of vLLM's ``--additional-config`` key ``atom_go_restart`` (see from_config)."""
        cfg: Any = None
        if isinstance(additional_config, Mapping):
            cfg = additional_config.get(ADDITIONAL_CONFIG_KEY)
        if cfg is not None and not isinstance(cfg, Mapping):
            raise ValueError(f"--additional-config {ADDITIONAL_CONFIG_KEY!r} must be an object, got {cfg!r}")
        return cls.from_config(cfg, environ)


class RestartBudget:
    """Deaths within the policy's window; :meth:`allow` records one and says if a restart may follow."""

    def __init__(self, policy: RestartPolicy, clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self._clock = clock
        self._deaths: collections.deque[float] = collections.deque()

    def allow(self) -> bool:
        """Records a death now; True while the deaths within the window do not exceed the budget."""
        now = self._clock()
        while self._deaths and now - self._deaths[0] >= self.policy.window:
            self._deaths.popleft()
        self._deaths.append(now)
        return len(self._deaths) <= self.policy.max_restarts

    @property
    def recent(self) -> int:
        """Deaths recorded within the window (as of the last one)."""
        return len(self._deaths)


class RestartObserver(Protocol):
    """Told of restarts: :class:`atom_go.metrics.RestartMetrics` (the framework's /metrics),
    :class:`atom_go.health.RestartMarker` (its /health)."""

    def set_restarting(self, restarting: bool) -> None:
        """A restart begins (True) or is over, done or given up (False)."""

    def restarted(self, recovery_seconds: float) -> None:
        """A restart is done; it took recovery_seconds from the death to serving."""

    def recomputed(self, requests: int) -> None:
        """Requests were recomputed on a restarted plugin."""


Launch = Callable[[], tuple[PluginProcess, EngineClient]]
T = TypeVar("T")


class _Spawner:
    """One long-lived thread that starts every restarted plugin.

    atom-plugin gets SIGTERM when the thread that started it exits (PR_SET_PDEATHSIG, see
    PluginProcess), so a restart must not start it from a short-lived thread: the watcher's
    callback and the step that saw the death both hand the launch to this thread.
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        threading.Thread(target=self._loop, name="atom-go-spawner", daemon=True).start()

    def _loop(self) -> None:
        while True:
            fn, fut = self._jobs.get()
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn())
                except BaseException as exc:
                    fut.set_exception(exc)

    def run(self, fn: Callable[[], T]) -> T:
        fut: Future[T] = Future()
        self._jobs.put((fn, fut))
        return fut.result()


class RestartingHost:
    """One host-mode atom-plugin, restarted on death (see the module doc).

    ``launch()`` starts a plugin and loads the model (the same arguments every time); it is
    called once here. :meth:`init_kv_cache` hands the KV cache to the host once the host knows
    its block count; afterwards :meth:`execute` runs steps, restarting the plugin when it dies.
    ``max_tokens``/``max_seqs`` bound the recompute steps (0: the loaded engine's limits).
    ``on_gone`` is called once, with the error, when the budget is spent. ``observers`` are told
    of each restart and recompute (the framework's ``/metrics`` and ``/health``).
    """

    def __init__(
        self,
        launch: Launch,
        policy: RestartPolicy | None = None,
        *,
        logger: logging.Logger | None = None,
        on_gone: Callable[[EngineGoneError], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        observers: Sequence[RestartObserver | None] = (),
    ) -> None:
        self._launch = launch
        self.policy = policy or RestartPolicy.from_config()
        self.log = logger or log
        self._on_gone = on_gone
        self._observers = [o for o in observers if o is not None]
        self._budget = RestartBudget(self.policy, clock)
        self._lock = threading.RLock()  # serialises steps and restarts
        self._gone: EngineGoneError | None = None
        self._restarting = False
        self.generation = 0
        self.restarts = 0
        self.recomputed = 0  # requests recomputed after restarts
        self.last_recovery = 0.0  # seconds from the death to the new engine serving
        self.ledger: StepLedger | None = None
        self._kv: tuple[int, int] | None = None
        self._spawner = _Spawner()
        self.process, self.client = launch()
        try:
            self.info: atom_pb2.ModelInfo = self.client.describe()
        except BaseException:
            self.process.shutdown()
            raise
        self._watch(self.process, 0)

    def _watch(self, process: PluginProcess, gen: int) -> None:
        """Restarts generation gen at once when its process dies between steps."""

        def died(err: PluginDiedError) -> None:
            def run() -> None:
                with self._lock:
                    if self._gone is not None or gen != self.generation:
                        return
                    with contextlib.suppress(EngineGoneError):
                        self._restart(gen, err)

            threading.Thread(target=run, name="atom-go-restart", daemon=True).start()

        process.add_death_callback(died)

    # ------------------------------------------------------------------ state

    @property
    def gone(self) -> EngineGoneError | None:
        """Why the engine is dead for good, or None."""
        return self._gone

    @property
    def restarting(self) -> bool:
        """True while a dead plugin is being replaced."""
        return self._restarting

    def check_health(self) -> None:
        """Raises EngineGoneError once the budget is spent, or the plugin's health error.

        A dead plugin within the budget is restarted here (the framework's health probe may
        notice the death before any step does).
        """
        with self._lock:
            if self._gone is not None:
                raise self._gone
            if self.process.death is not None:
                self._restart(self.generation, self.process.death)
            self.process.check_health()

    # ------------------------------------------------------------------ steps

    def init_kv_cache(self, num_blocks: int, block_size: int) -> atom_pb2.ModelInfo:
        """Hands the KV cache to the host; a restarted engine gets the same."""
        with self._lock:
            self.info = self.client.init_kv_cache(num_blocks, block_size)
            self._kv = (num_blocks, block_size)
            self.ledger = StepLedger(block_size, num_blocks)
            return self.info

    def execute(self, payload: Mapping[str, Any], timeout: float | None = None) -> ExecuteResult:
        """Runs one host step; a death is recovered within the budget and the step run again."""
        with self._lock:
            if self.ledger is None:
                raise PluginError("init_kv_cache must come before the first step")
            while True:
                if self._gone is not None:
                    raise self._gone
                gen = self.generation
                try:
                    return self._run(payload, timeout)
                except PluginDiedError as err:
                    if self.process.death is None and self.process.alive():
                        raise  # not this process's death: a stale error
                    self._restart(gen, err)

    def _run(self, payload: Mapping[str, Any], timeout: float | None) -> ExecuteResult:
        assert self.ledger is not None
        warmups, step = self.ledger.rewrite(
            payload, max_tokens=int(self.info.max_num_batched_tokens), max_seqs=int(self.info.max_num_seqs)
        )
        for w in warmups:
            res = decode_result(self.client.execute_model(encode_payload(w), timeout=timeout))
            if any(res.sampled_token_ids):
                raise PluginError("atom-go sampled during a recompute step, which must end short of every request")
            self.ledger.commit(w, res)
            self.recomputed += len(w["scheduled_new_reqs"])
            for o in self._observers:
                o.recomputed(len(w["scheduled_new_reqs"]))
        res = decode_result(self.client.execute_model(encode_payload(step), timeout=timeout))
        self.ledger.commit(step, res)
        return res

    # ------------------------------------------------------------------ restarts

    def _restart(self, gen: int, cause: BaseException) -> None:
        """Replaces generation gen's dead plugin (once), or gives up beyond the budget."""
        if gen != self.generation:
            return  # another caller restarted it already
        started = time.monotonic()
        with contextlib.suppress(Exception):
            self.process.kill()  # reaps what is left of it and removes its socket directory
        if not self._budget.allow():
            self._give_up(
                f"atom-plugin died {self._budget.recent} times within {self.policy.window:g} s "
                f"(restart budget {self.policy.max_restarts}); last: {cause}"
            )
        self.log.warning(
            "atom-plugin died (%s): restarting it (%d of %d within %g s)",
            cause,
            self._budget.recent,
            self.policy.max_restarts,
            self.policy.window,
        )
        self._restarting = True
        for o in self._observers:
            o.set_restarting(True)
        try:
            self.process, self.client = self._spawner.run(self._launch)
            if self._kv is not None:
                self.info = self.client.init_kv_cache(*self._kv)
        except Exception as exc:
            self._give_up(f"atom-plugin could not be restarted: {exc}")
        finally:
            self._restarting = False
            for o in self._observers:
                o.set_restarting(False)
        self.generation += 1
        self.restarts += 1
        self._watch(self.process, self.generation)
        if self.ledger is not None:
            self.ledger.lost()
        self.last_recovery = time.monotonic() - started
        for o in self._observers:
            o.restarted(self.last_recovery)
        self.log.warning(
            "atom-plugin restarted (pid %d) in %.2f s; %d live requests will be recomputed",
            self.process.pid,
            self.last_recovery,
            0 if self.ledger is None else len(self.ledger),
        )

    def _give_up(self, why: str) -> None:
        gone = EngineGoneError(why)
        self._gone = gone
        self.log.error("%s: the engine is dead", why)
        if self._on_gone is not None:
            self._on_gone(gone)
        raise gone

    def shutdown(self) -> int | None:
        """Stops the plugin for good; returns its exit status."""
        with self._lock:
            if self._gone is None:
                self._gone = EngineGoneError("the plugin was shut down")
            return self.process.shutdown()
