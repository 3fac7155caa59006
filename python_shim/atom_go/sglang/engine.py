"""One atom-plugin subprocess in slot mode: host-scheduled execution over KV blocks of one token."""

from __future__ import annotations

import atexit
import dataclasses
import logging
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from atom_go._proto import atom_pb2
from atom_go.client import EngineClient
from atom_go.plugin import PluginProcess
from atom_go.wire import ExecuteResult, decode_result, encode_payload

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


class SlotEngine:
    """atom-plugin loaded with a checkpoint and switched to host mode with KV blocks of one token.

    ``num_slots`` KV slots, ids ``0 .. num_slots-1``; the host hands out ids ``1 .. num_slots-1``
    (slot 0 is its padding slot). :meth:`execute` runs one ExecuteModel step.
    """

    def __init__(self, options: SlotEngineOptions, logger: logging.Logger | None = None) -> None:
        self.options = options
        self._lock = threading.Lock()
        self.process = PluginProcess(
            options.binary,
            auto_mtls=options.auto_mtls,
            start_timeout=options.start_timeout,
            env=options.env,
            logger=logger,
        )
        self.process.start()
        try:
            self.client = EngineClient(self.process)
            info = self.client.load_model(
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
            if info.num_kv_blocks <= RESERVED_SLOTS:
                raise RuntimeError(f"atom-go loaded {info.num_kv_blocks} KV slots; at least 2 are needed")
            self.info: atom_pb2.ModelInfo = self.client.init_kv_cache(info.num_kv_blocks, 1)
        except BaseException:
            self.process.shutdown()
            raise
        self._finalizer = weakref.finalize(self, self.process.shutdown)
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
        data = encode_payload(payload)
        with self._lock:
            raw = self.client.execute_model(data, timeout=timeout)
        return decode_result(raw)

    def describe(self) -> atom_pb2.ModelInfo:
        """atom-go's current ModelInfo (running_requests counts requests with host-mode state)."""
        return self.client.describe()

    def close(self) -> None:
        """Stops atom-plugin (idempotent)."""
        self._finalizer()
