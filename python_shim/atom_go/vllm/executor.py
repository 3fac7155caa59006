"""AtomGoExecutor: vLLM 0.33.0's executor interface on top of atom-go's Go engine.

There is no vLLM worker: the executor starts atom-plugin, loads the model, reports a KV-cache
spec with atom-go's block size and a memory figure that makes vLLM allocate exactly the engine's
block count, hands vLLM's block count to InitKVCache, and turns every SchedulerOutput into an
ExecuteModel call. atom-go keeps each request's tokens (vLLM does not resend decode tokens) and
frees them when vLLM lists the request in ``finished_req_ids``.

A plugin that dies is restarted (:class:`atom_go.restart.RestartingHost`): the same arguments,
the same LoadModel, the KV cache with vLLM's block count, and the live requests recomputed from
what the executor sent and received, so vLLM's scheduler sees the step that met the death
return normally. Beyond the restart budget (``ATOM_GO_MAX_RESTARTS`` in
``ATOM_GO_RESTART_WINDOW`` seconds, or ``--additional-config '{"atom_go_restart":
{"max_restarts": N, "restart_window": S}}'``) the death is reported through vLLM's failure
callback, so vLLM fails its requests (EngineDeadError) instead of waiting.
"""

from __future__ import annotations

import json
import os
import shlex
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import torch
from vllm.logger import init_logger
from vllm.v1.core.sched.output import GrammarOutput, SchedulerOutput
from vllm.v1.executor.abstract import Executor, FailureCallback
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheSpec
from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, DraftTokenIds, ModelRunnerOutput

from atom_go.client import EngineClient
from atom_go.devices import DEVICE_ENV_VARS, visible_devices_env
from atom_go.health import RestartMarker
from atom_go.metrics import restart_metrics
from atom_go.plugin import PluginProcess
from atom_go.restart import EngineGoneError, RestartingHost, RestartPolicy
from atom_go.vllm import mapping
from atom_go.vllm.platform import ENV_DEVICE, ENV_VISIBLE_DEVICES

logger = init_logger("vllm.atom_go")

ENV_ENGINE_ARGS = "ATOM_GO_ENGINE_ARGS"
ENV_AUTO_MTLS = "ATOM_GO_AUTO_MTLS"

_DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def plugin_device_env(assigned: list[int] | None, device: str) -> dict[str, str]:
    """The device variables of this engine core's atom-plugin (see :mod:`atom_go.devices`).

    ``assigned`` is vLLM's ``parallel_config.assigned_physical_gpu_ids``: with data parallelism
    vLLM gives the engine core of local DP rank ``r`` the devices ``r*TP .. r*TP+TP-1`` (or its
    slice of ``--device-ids``), numbered in ``ATOM_GO_VISIBLE_DEVICES`` (the platform's
    device-control variable) when that is set, else logical devices, which index into a
    ``CUDA_VISIBLE_DEVICES``/``HIP_VISIBLE_DEVICES`` the user set. None (one rank, no
    ``--device-ids``) or the cpu backend: nothing is restricted.
    """
    if not assigned or device == "cpu":
        return {}
    if os.environ.get(ENV_VISIBLE_DEVICES, "").strip():
        joined = ",".join(str(d) for d in assigned)
        return {var: joined for var in DEVICE_ENV_VARS}
    return visible_devices_env(assigned)


def resolve_model_path(model: str, revision: str | None = None) -> str:
    """A local checkpoint directory for ``model`` (a directory, or a Hugging Face id in the cache)."""
    if os.path.isdir(model):
        return os.path.abspath(model)
    try:
        from huggingface_hub import snapshot_download

        return str(snapshot_download(model, revision=revision, local_files_only=True))
    except Exception as exc:  # huggingface_hub raises several unrelated types here
        raise FileNotFoundError(
            f"atom-go loads checkpoints from a local directory: {model!r} is not one and is not in the "
            f"Hugging Face cache ({exc}). Download it first and pass its directory to vllm serve."
        ) from None


class AtomGoExecutor(Executor):
    """Runs vLLM's scheduled steps on atom-go (one atom-plugin subprocess)."""

    uses_ray = False
    supports_pp = False

    def _init_executor(self) -> None:
        self._lock = threading.Lock()
        self._failure_callbacks: list[FailureCallback] = []
        self._failure: BaseException | None = None
        self._num_blocks_vllm: int | None = None
        self._layout: str | None = None
        self._drafts: DraftTokenIds | None = None
        mc, cc, sc = self.model_config, self.cache_config, self.scheduler_config
        dtype = _DTYPES.get(mc.dtype)
        if dtype is None:
            raise ValueError(f"atom-go cannot run dtype {mc.dtype}; use --dtype bfloat16, float16 or float32")
        model_path = resolve_model_path(mc.model, mc.revision)
        device = os.environ.get(ENV_DEVICE, "auto")
        extra = shlex.split(os.environ.get(ENV_ENGINE_ARGS, ""))
        if device != "cpu":
            extra.insert(0, f"--gpu-memory-utilization={cc.gpu_memory_utilization}")
        if cc.cache_dtype not in ("auto", None):  # fp8 / fp8_e4m3 (the platform refused others)
            extra.insert(0, f"--kv-cache-dtype={cc.cache_dtype}")
        spec = mapping.speculative_config_json(
            self.vllm_config.speculative_config,
            model_path,
            lambda name: resolve_model_path(name, getattr(self.vllm_config.speculative_config, "revision", None)),
        )
        self._spec = spec
        if spec is not None:
            extra.insert(0, f"--speculative-config={spec}")
        tp = self.parallel_config.tensor_parallel_size
        if tp != 1:
            extra.insert(0, f"--tensor-parallel-size={tp}")
        pc = self.parallel_config
        # Non-MoE DP ranks run as independent engines (vLLM resets data_parallel_size to 1 in
        # each); data_parallel_index keeps the rank, assigned_physical_gpu_ids its devices.
        self.dp_index = int(getattr(pc, "data_parallel_index", 0) or 0)
        device_env = plugin_device_env(getattr(pc, "assigned_physical_gpu_ids", None), device)
        if device_env:
            logger.info(
                "atom-go of data-parallel rank %d sees devices %s",
                self.dp_index,
                ", ".join(f"{k}={v}" for k, v in sorted(device_env.items())),
            )
        auto_mtls = _truthy(ENV_AUTO_MTLS)
        load_kwargs: dict[str, Any] = {
            "device": device,
            "dtype": dtype,
            "block_size": cc.block_size or 0,
            "num_kv_blocks": cc.num_gpu_blocks_override or 0,
            "kv_cache_memory_bytes": (cc.kv_cache_memory_bytes or 0) if device != "gpu" else 0,
            "max_model_len": mc.max_model_len,
            "max_num_seqs": sc.max_num_seqs,
            "max_num_batched_tokens": sc.max_num_batched_tokens,
            "extra_args": extra,
        }

        def launch() -> tuple[PluginProcess, EngineClient]:
            # Every start, restarts included, uses these arguments and this LoadModel request.
            process = PluginProcess(auto_mtls=auto_mtls, env=device_env, logger=init_logger("vllm.atom_go.plugin"))
            process.start()
            try:
                client = EngineClient(process)
                client.load_model(model_path, **load_kwargs)
            except BaseException:
                process.shutdown()
                raise
            return process, client

        self.host = RestartingHost(
            launch,
            RestartPolicy.from_additional_config(getattr(self.vllm_config, "additional_config", None)),
            logger=init_logger("vllm.atom_go.restart"),
            on_gone=self._on_engine_gone,
            # /metrics when vLLM collects its processes' series (multiprocess prometheus), /health
            # with --middleware atom_go.health.RestartHealth.
            observers=[restart_metrics(), RestartMarker()],
        )
        self.info = self.host.info
        if cc.block_size and self.info.block_size != cc.block_size:
            self.host.shutdown()
            raise RuntimeError(
                f"atom-go loaded blocks of {self.info.block_size} tokens, vLLM asked for {cc.block_size}"
            )
        logger.info(
            "atom-go %s (pid %d, data-parallel rank %d) loaded %s (%s, %s on %s): %d KV blocks of %d tokens",
            self.info.engine_version,
            self.process.pid,
            self.dp_index,
            model_path,
            self.info.architecture,
            self.info.dtype,
            self.info.device,
            self.info.num_kv_blocks,
            self.info.block_size,
        )

    # ------------------------------------------------------------------ failures

    @property
    def process(self) -> PluginProcess:
        """The plugin running now (a restart replaces it)."""
        return self.host.process

    @property
    def client(self) -> EngineClient:
        """The AtomEngine client of the plugin running now."""
        return self.host.client

    def _on_engine_gone(self, err: EngineGoneError) -> None:
        """The plugin died beyond the restart budget: vLLM fails its requests (EngineDeadError)."""
        with self._lock:
            self._failure = err
            callbacks = list(self._failure_callbacks)
        for cb in callbacks:
            cb()

    def register_failure_callback(self, callback: FailureCallback) -> None:
        with self._lock:
            failed = self._failure is not None
            if not failed:
                self._failure_callbacks.append(callback)
        if failed:
            callback()

    def check_health(self) -> None:
        if self._failure is not None:
            raise self._failure
        self.host.check_health()

    # ------------------------------------------------------------------ KV cache

    def _kv_dtype(self) -> torch.dtype:
        # The cpu backend keeps the KV cache in float32, the gpu backend in the weights' dtype.
        if self.info.device == "cpu":
            return torch.float32
        return self.model_config.dtype

    def get_kv_cache_specs(self) -> list[dict[str, KVCacheSpec]]:
        spec = FullAttentionSpec(
            block_size=self.info.block_size,
            num_kv_heads=self.info.num_kv_heads,
            head_size=self.info.head_dim,
            dtype=self._kv_dtype(),
        )
        return [{f"model.layers.{i}.self_attn.attn": spec for i in range(self.info.num_layers)}]

    def get_supported_kv_cache_layouts(self) -> list[list[str]]:
        from vllm.v1.attention.backends.utils import get_supported_kv_cache_layouts

        return [[layout.name for layout in get_supported_kv_cache_layouts([])]]

    def set_kv_cache_layout(self, layout_name: str, cp_kv_cache_interleave_size: int) -> None:
        # atom-go lays its cache out itself; vLLM only allocates block ids.
        self._layout = layout_name

    def determine_available_memory(self) -> list[int]:
        """Bytes that make vLLM's planner allocate exactly the engine's block count."""
        per_block = sum(s.page_size_bytes for s in self.get_kv_cache_specs()[0].values())
        return [self.info.num_kv_blocks * per_block]

    def initialize_from_config(self, kv_cache_configs: list[KVCacheConfig]) -> None:
        if len(kv_cache_configs) != 1:
            raise RuntimeError(f"atom-go has one worker, vLLM planned {len(kv_cache_configs)}")
        kcc = kv_cache_configs[0]
        if len(kcc.kv_cache_groups) != 1:
            raise RuntimeError(f"atom-go keeps one KV-cache group, vLLM planned {len(kcc.kv_cache_groups)}")
        block_size = kcc.kv_cache_groups[0].kv_cache_spec.block_size
        if kcc.num_blocks != self.info.num_kv_blocks:
            logger.warning(
                "vLLM planned %d KV blocks, atom-go loaded %d; atom-go uses vLLM's count",
                kcc.num_blocks,
                self.info.num_kv_blocks,
            )
        self.info = self.host.init_kv_cache(kcc.num_blocks, block_size)
        self._num_blocks_vllm = kcc.num_blocks
        logger.info(
            "atom-go host mode: %d KV blocks of %d tokens (block 0 is vLLM's null block)", kcc.num_blocks, block_size
        )

    def compile_or_warm_up_model(self) -> None:
        """atom-go warms itself up (CUDA graphs on the gpu backend) when it loads."""

    # ------------------------------------------------------------------ steps

    def _step(self, scheduler_output: SchedulerOutput) -> ModelRunnerOutput:
        if self._failure is not None:
            raise self._failure
        self._drafts = None
        if not scheduler_output.num_scheduled_tokens and not scheduler_output.finished_req_ids:
            return EMPTY_MODEL_RUNNER_OUTPUT
        result = self.host.execute(mapping.scheduler_output_to_payload(scheduler_output))
        if not scheduler_output.num_scheduled_tokens:
            return EMPTY_MODEL_RUNNER_OUTPUT
        out = mapping.result_to_model_runner_output(result, scheduler_output)
        drafts = mapping.draft_token_ids(result)
        if drafts is not None:
            self._drafts = DraftTokenIds(req_ids=drafts[0], draft_token_ids=drafts[1])
        return out

    def execute_model(  # type: ignore[override]
        self, scheduler_output: SchedulerOutput, non_block: bool = False
    ) -> ModelRunnerOutput | Future[ModelRunnerOutput]:
        if not non_block:
            return self._step(scheduler_output)
        fut: Future[ModelRunnerOutput] = Future()
        try:
            fut.set_result(self._step(scheduler_output))
        except Exception as exc:
            fut.set_exception(exc)
        return fut

    def sample_tokens(  # type: ignore[override]
        self, grammar_output: GrammarOutput | None, non_block: bool = False
    ) -> ModelRunnerOutput | Future[ModelRunnerOutput]:
        raise RuntimeError("atom-go samples inside execute_model; sample_tokens (structured outputs) is not supported")

    def take_draft_token_ids(self) -> DraftTokenIds | None:
        """The drafts atom-go proposed in the last step (vLLM's scheduler calls this after each
        step under --speculative-config); None once taken or when it proposed none."""
        drafts, self._drafts = self._drafts, None
        return drafts

    def execute_dummy_batch(self) -> None:
        """An idle data-parallel rank's step: nothing to run.

        vLLM's DPEngineCoreProc (MoE models only) keeps idle ranks stepping so that their
        expert-parallel collectives meet the busy ranks'; atom-go's ranks share no collective
        (each rank's tensor parallelism is inside its own plugin), so an idle rank runs nothing.
        """

    # ------------------------------------------------------------------ the rest

    @property
    def max_concurrent_batches(self) -> int:
        return 1

    def describe(self) -> dict[str, Any]:
        """atom-go's view (collective_rpc "atom_go_describe", e.g. from vLLM's dev endpoint)."""
        info = self.client.describe()
        stats = self.client.stats()
        return {
            "pid": self.process.pid,
            "data_parallel_index": self.dp_index,
            "engine_version": info.engine_version,
            "architecture": info.architecture,
            "device": info.device,
            "tensor_parallel_size": info.tensor_parallel_size,
            "host_mode": info.host_mode,
            "num_kv_blocks": info.num_kv_blocks,
            "block_size": info.block_size,
            "running_requests": info.running_requests,
            "vllm_num_blocks": self._num_blocks_vllm,
            "engine_restarts": self.host.restarts,
            "recomputed_requests": self.host.recomputed,
            "last_recovery_seconds": self.host.last_recovery,
            "speculative_config": None if self._spec is None else json.loads(self._spec),
            # atom-go's own counts: drafts it verified, placeholders vLLM pads with excluded.
            "spec_num_draft_tokens": stats.spec_num_draft_tokens,
            "spec_num_accepted_tokens": stats.spec_num_accepted_tokens,
        }

    def _rpc_table(self) -> dict[str, Callable[..., Any]]:
        return {
            "get_kv_cache_spec": lambda: self.get_kv_cache_specs()[0],
            "get_supported_kv_cache_layouts": lambda: self.get_supported_kv_cache_layouts()[0],
            "set_kv_cache_layout": self.set_kv_cache_layout,
            "determine_available_memory": lambda: self.determine_available_memory()[0],
            "initialize_from_config": lambda configs: self.initialize_from_config(
                configs if isinstance(configs, list) else [configs]
            ),
            "compile_or_warm_up_model": self.compile_or_warm_up_model,
            "get_supported_tasks": lambda: ("generate",),
            "update_max_model_len": self._update_max_model_len,
            "execute_model": self._step,
            "execute_dummy_batch": self.execute_dummy_batch,
            "take_draft_token_ids": self.take_draft_token_ids,
            "check_health": self.check_health,
            "reset_mm_cache": lambda: None,
            "reset_encoder_cache": lambda: None,
            "get_kv_connector_handshake_metadata": lambda: {},
            "supports_draft_weight_updates": lambda: False,
            "list_loras": set,
            "atom_go_describe": self.describe,
            "shutdown": self.shutdown,
        }

    def _update_max_model_len(self, max_model_len: int) -> None:
        if max_model_len > self.info.max_model_len:
            raise ValueError(f"max_model_len {max_model_len} exceeds atom-go's {self.info.max_model_len}")

    def collective_rpc(  # type: ignore[override]
        self,
        method: str | Callable[..., Any],
        timeout: float | None = None,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        non_block: bool = False,
    ) -> list[Any] | Future[list[Any]]:
        def run() -> list[Any]:
            if not isinstance(method, str):
                raise NotImplementedError(
                    f"atom-go's executor has no vLLM worker to run {getattr(method, '__name__', method)!r} on"
                )
            fn = self._rpc_table().get(method)
            if fn is None:
                raise NotImplementedError(f"atom-go's executor does not support the worker method {method!r}")
            return [fn(*args, **(kwargs or {}))]

        if not non_block:
            return run()
        fut: Future[list[Any]] = Future()
        try:
            fut.set_result(run())
        except Exception as exc:
            fut.set_exception(exc)
        return fut

    def profile(self, is_start: bool = True, profile_prefix: str | None = None, **kwargs: Any) -> None:
        raise NotImplementedError("profile atom-go with its own tools (examples/bench), not vLLM's profiler")

    def sleep(self, level: int = 1) -> None:
        raise NotImplementedError("atom-go does not support vLLM's sleep mode")

    def wake_up(self, tags: list[str] | None = None) -> None:
        raise NotImplementedError("atom-go does not support vLLM's sleep mode")

    def shutdown(self) -> None:
        host = getattr(self, "host", None)
        if host is not None:
            rc = host.shutdown()
            logger.info("atom-go stopped (exit status %s)", rc)
