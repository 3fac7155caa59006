"""One atom-plugin subprocess in slot mode: host-scheduled execution over KV blocks of one token.

The plugin is restarted when it dies (:class:`atom_go.restart.RestartingHost`, the budget from
``ATOM_GO_MAX_RESTARTS`` and ``ATOM_GO_RESTART_WINDOW``): the step that met the death runs again
on the new engine after the live requests were recomputed, so SGLang's scheduler never notices.
Beyond the budget :class:`atom_go.restart.EngineGoneError` leaves the step, and SGLang's
scheduler ends the server as it does when its model runner fails.
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from atom_go._proto import atom_pb2
from atom_go.client import EngineClient
from atom_go.health import RestartMarker
from atom_go.metrics import restart_metrics
from atom_go.plugin import PluginProcess
from atom_go.restart import RestartingHost, RestartPolicy
from atom_go.wire import ExecuteResult

log = logging.getLogger("atom_go.sglang.engine")

# KV slot 0 is SGLang's padding slot (its token allocator hands out 1..size): atom-go's cache
# has one slot more than SGLang's pool.
RESERVED_SLOTS = 1


@dataclasses.dataclass(frozen=True)
class SlotEngineOptions:
    """How to start and load atom-plugin for a host that owns the KV slots."""

    model_path: str
    device: str = "cpu"
    dtype: str = "auto"
    kv_slots: int = 0  # usable KV slots (tokens); 0: atom-go's memory budget decides
    max_model_len: int = 0
    max_num_seqs: int = 0
    max_num_batched_tokens: int = 0
    tokenizer: str = ""
    extra_args: Sequence[str] = ()
    binary: str | None = None
    auto_mtls: bool = False
    start_timeout: float = 60.0
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)  # set in atom-plugin's environment
    restart_policy: RestartPolicy | None = None  # None: from ATOM_GO_MAX_RESTARTS / ATOM_GO_RESTART_WINDOW


class SlotEngine:
    """atom-plugin loaded with a checkpoint and switched to host mode with KV blocks of one token.

    ``num_slots`` KV slots, ids ``0 .. num_slots-1``; the host hands out ids ``1 .. num_slots-1``
    (slot 0 is its padding slot). :meth:`execute` runs one ExecuteModel step.
    """

    def __init__(self, options: SlotEngineOptions, logger: logging.Logger | None = None) -> None:
        self.options = options

        def launch() -> tuple[PluginProcess, EngineClient]:
            # Every start, restarts included, uses these arguments and this LoadModel request.
            process = PluginProcess(
                options.binary,
                auto_mtls=options.auto_mtls,
                start_timeout=options.start_timeout,
                env=options.env,
                logger=logger,
            )
            process.start()
            try:
                client = EngineClient(process)
                client.load_model(
                    options.model_path,
                    device=options.device,
                    dtype=options.dtype,
                    block_size=1,
                    num_kv_blocks=options.kv_slots + RESERVED_SLOTS if options.kv_slots > 0 else 0,
                    max_model_len=options.max_model_len,
                    max_num_seqs=options.max_num_seqs,
                    max_num_batched_tokens=options.max_num_batched_tokens,
                    tokenizer=options.tokenizer,
                    extra_args=list(options.extra_args),
                )
            except BaseException:
                process.shutdown()
                raise
            return process, client

        self.host = RestartingHost(
            launch,
            options.restart_policy,
            logger=logging.getLogger("atom_go.sglang.restart"),
            # /metrics under --enable-metrics (SGLang collects this process's series), /health
            # (the plugin's middleware in SGLang's HTTP server reads the restart mark).
            observers=[restart_metrics(), RestartMarker()],
        )
        try:
            loaded = self.host.info
            if loaded.num_kv_blocks <= RESERVED_SLOTS:
                raise RuntimeError(f"atom-go loaded {loaded.num_kv_blocks} KV slots; at least 2 are needed")
            # A restarted engine gets the same slot count: SGLang's pool was sized from it.
            self.info: atom_pb2.ModelInfo = self.host.init_kv_cache(loaded.num_kv_blocks, 1)
        except BaseException:
            self.host.shutdown()
            raise
        self._finalizer = weakref.finalize(self, self.host.shutdown)
        atexit.register(self._finalizer)
        log.info(
            "atom-go %s (pid %d) serves %s (%s, %s on %s) in slot mode: %d KV slots",
            self.info.engine_version,
            self.process.pid,
            options.model_path,
            self.info.architecture,
            self.info.dtype,
            self.info.device,
            self.info.num_kv_blocks,
        )

    @property
    def num_slots(self) -> int:
        """KV slots atom-go holds, the padding slot 0 included."""
        return int(self.info.num_kv_blocks)

    def execute(self, payload: Mapping[str, Any], timeout: float | None = None) -> ExecuteResult:
        """Runs one step (an ExecuteModel payload without its wire version) and decodes the result."""
        return self.host.execute(payload, timeout=timeout)

    def describe(self) -> atom_pb2.ModelInfo:
        """atom-go's current ModelInfo (running_requests counts requests with host-mode state)."""
        return self.host.client.describe()

    @property
    def process(self) -> PluginProcess:
        """The plugin running now (a restart replaces it)."""
        return self.host.process

    def close(self) -> None:
        """Stops atom-plugin (idempotent)."""
        self._finalizer()
