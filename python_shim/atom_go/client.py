"""AtomEngine over a PluginProcess: typed calls of atom-plugin's gRPC service."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import grpc

from atom_go._proto import atom_pb2, atom_pb2_grpc
from atom_go.plugin import PluginError, PluginProcess
from atom_go.versions import PROTOCOL_VERSION, WIRE_VERSION

log = logging.getLogger("atom_go.client")

T = TypeVar("T")


class EngineClient:
    """The AtomEngine service of one running plugin.

    Every method raises PluginDiedError when the plugin process is gone, PluginRPCError when
    the plugin answered with an error status, and PluginError for a version mismatch.
    """

    def __init__(self, process: PluginProcess) -> None:
        self.process = process
        self._stub = atom_pb2_grpc.AtomEngineStub(process.channel)

    def _call(self, method: str, fn: Callable[[], T]) -> T:
        self.process.raise_if_dead()
        try:
            return fn()
        except grpc.RpcError as exc:
            raise self.process.rpc_error(method, exc) from None

    @staticmethod
    def _check_info(info: atom_pb2.ModelInfo, method: str) -> atom_pb2.ModelInfo:
        if info.wire_version != WIRE_VERSION or info.protocol_version != PROTOCOL_VERSION:
            raise PluginError(
                f"{method}: atom-plugin reports wire version {info.wire_version} and protocol "
                f"{info.protocol_version}; this atom_go package speaks wire {WIRE_VERSION}, protocol "
                f"{PROTOCOL_VERSION}. Install a matching atom-plugin (`make python-plugin`)."
            )
        return info

    def describe(self, timeout: float | None = 30.0) -> atom_pb2.ModelInfo:
        """The plugin's versions and, once loaded, the model's geometry."""
        info = self._call(
            "Describe",
            lambda: self._stub.Describe(atom_pb2.DescribeRequest(wire_version=WIRE_VERSION), timeout=timeout),
        )
        return self._check_info(info, "Describe")

    def load_model(
        self,
        model_path: str,
        *,
        device: str = "cpu",
        dtype: str = "auto",
        block_size: int = 0,
        num_kv_blocks: int = 0,
        kv_cache_memory_bytes: int = 0,
        max_model_len: int = 0,
        max_num_seqs: int = 0,
        max_num_batched_tokens: int = 0,
        enable_prefix_caching: bool | None = None,
        tokenizer: str = "",
        extra_args: Sequence[str] = (),
        progress: Callable[[atom_pb2.LoadProgress], None] | None = None,
        timeout: float | None = None,
    ) -> atom_pb2.ModelInfo:
        """Loads a checkpoint (replacing any loaded one); returns the loaded model's info."""
        req = atom_pb2.LoadModelRequest(
            wire_version=WIRE_VERSION,
            model_path=model_path,
            device=device,
            dtype=dtype,
            kv_cache_memory_bytes=kv_cache_memory_bytes,
            num_kv_blocks=num_kv_blocks,
            block_size=block_size,
            max_model_len=max_model_len,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            tokenizer=tokenizer,
            extra_args=list(extra_args),
        )
        if enable_prefix_caching is not None:
            req.enable_prefix_caching = enable_prefix_caching

        def run() -> atom_pb2.ModelInfo:
            for msg in self._stub.LoadModel(req, timeout=timeout):
                if progress is not None:
                    progress(msg)
                elif msg.done:  # says which backend serves and why
                    log.info("LoadModel: %s", msg.message)
                else:
                    log.debug("LoadModel %s %.0f%% %s", msg.stage, 100 * msg.fraction, msg.message)
                if msg.done:
                    info: atom_pb2.ModelInfo = msg.info
                    return info
            raise PluginError("LoadModel: the plugin ended the stream without a final message")

        return self._check_info(self._call("LoadModel", run), "LoadModel")

    def init_kv_cache(self, num_blocks: int, block_size: int, timeout: float | None = 60.0) -> atom_pb2.ModelInfo:
        """Hands the KV cache to the host (host mode): num_blocks blocks of block_size tokens."""
        resp = self._call(
            "InitKVCache",
            lambda: self._stub.InitKVCache(
                atom_pb2.InitKVCacheRequest(num_blocks=num_blocks, block_size=block_size), timeout=timeout
            ),
        )
        return self._check_info(resp.info, "InitKVCache")

    def execute_model(self, payload: bytes, timeout: float | None = None) -> bytes:
        """Runs one host-scheduled step; payload and result are msgpack (see atom_go.wire)."""
        resp = self._call(
            "ExecuteModel",
            lambda: self._stub.ExecuteModel(atom_pb2.ExecuteModelRequest(payload=payload), timeout=timeout),
        )
        return bytes(resp.result)

    def stats(self, timeout: float | None = 30.0) -> atom_pb2.EngineStats:
        """The loaded engine's gauges and counters (speculative decoding's among them)."""
        stats: atom_pb2.EngineStats = self._call(
            "Stats", lambda: self._stub.Stats(atom_pb2.StatsRequest(), timeout=timeout)
        )
        return stats

    def abort(self, request_id: str, timeout: float | None = 30.0) -> None:
        """Ends a Generate request, or drops a host-mode request's state (NOT_FOUND if unknown)."""
        self._call("Abort", lambda: self._stub.Abort(atom_pb2.AbortRequest(request_id=request_id), timeout=timeout))

    def generate(
        self,
        request_id: str,
        *,
        prompt: str = "",
        prompt_token_ids: Sequence[int] = (),
        params: atom_pb2.SamplingParams | None = None,
        timeout: float | None = None,
    ) -> Iterator[atom_pb2.GenerateResponse]:
        """Runs one request on atom-go's own scheduler (not in host mode), streaming increments."""
        req = atom_pb2.GenerateRequest(
            request_id=request_id, prompt=prompt, prompt_token_ids=list(prompt_token_ids), params=params
        )
        self.process.raise_if_dead()
        call: Any = self._stub.Generate(req, timeout=timeout)
        try:
            yield from call
        except grpc.RpcError as exc:
            raise self.process.rpc_error("Generate", exc) from None
        finally:
            call.cancel()
