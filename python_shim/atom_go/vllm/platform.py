"""atom-go's vLLM platform (vLLM 0.33.0): the host processes run on CPU, the Go engine computes.

vLLM's API server and engine core keep doing what needs no accelerator (HTTP, tokenisation,
scheduling, detokenisation); the executor (atom_go.vllm.executor) hands every step to atom-go.
So the platform reports a CPU device to torch, turns off what would need one (compilation,
CUDA graphs, async scheduling), checks that the configuration is one atom-go can serve, and
refuses requests atom-go cannot honour, naming the parameter.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from vllm.platforms.interface import Platform, PlatformEnum

from atom_go import checkpoint
from atom_go.vllm import activation
from atom_go.vllm.mapping import (
    UnsupportedRequestError,
    check_pooling_params,
    check_sampling_params,
    speculative_config_problem,
)

if TYPE_CHECKING:
    from vllm.config import VllmConfig

log = logging.getLogger("atom_go.vllm")

# The engine's default KV block size (engine/config.go --block-size).
DEFAULT_BLOCK_SIZE = 16
ENV_DEVICE = "ATOM_GO_DEVICE"
# The platform's device-control variable (vLLM numbers a DP rank's devices in it when it is set).
ENV_VISIBLE_DEVICES = "ATOM_GO_VISIBLE_DEVICES"


class AtomGoConfigError(ValueError):
    """A vLLM setting atom-go cannot honour."""


# The --quantization names atom-go serves from the checkpoint itself (vLLM names a gpt-oss
# checkpoint's quant_method mxfp4 gpt_oss_mxfp4).
SERVED_QUANTIZATION = ("fp8", "compressed-tensors", "mxfp4", "gpt_oss_mxfp4")

# The --kv-cache-dtype values passed through to atom-go (the executor adds --kv-cache-dtype).
KV_CACHE_DTYPES = ("auto", None, "fp8", "fp8_e4m3")


def _refuse(setting: str, why: str) -> AtomGoConfigError:
    return AtomGoConfigError(f"atom-go cannot serve with {setting}: {why}")


def _refuse_gguf(convert: Callable[[str], Any] | None) -> Callable[[str], Any]:
    """An argparse ``type`` that ends the process with one line when given a GGUF file."""

    def check(value: str) -> Any:
        if checkpoint.is_gguf_file(value):
            print(checkpoint.gguf_file_message(value, "vLLM"), file=sys.stderr, flush=True)
            raise SystemExit(2)
        return convert(value) if convert is not None else value

    return check


def guard_gguf_arguments(parser: argparse.ArgumentParser) -> None:
    """Make the model arguments of vLLM's CLI (``vllm serve MODEL``, ``--model``) refuse a GGUF
    file with the one line that says what to run: vLLM 0.33.0 reads no GGUF itself and would
    otherwise fail later with a long "Invalid repository ID or local directory" error."""
    for action in parser._actions:
        if action.dest in ("model_tag", "model") and not getattr(action.type, "_atom_go_gguf", False):
            action.type = _refuse_gguf(action.type)  # type: ignore[arg-type]
            action.type._atom_go_gguf = True  # type: ignore[attr-defined]


def warn_if_no_tokenizer(model_config: Any) -> None:
    """A checkpoint directory without tokenizer files: one warning at start-up, and vLLM serves
    it with --skip-tokenizer-init (token-id prompts) instead of failing to load a tokenizer."""
    tokenizer = str(model_config.tokenizer or model_config.model)
    if model_config.skip_tokenizer_init or checkpoint.has_tokenizer(tokenizer):
        return
    log.warning("%s", checkpoint.no_tokenizer_message(tokenizer, "vLLM", "--skip-tokenizer-init"))
    model_config.skip_tokenizer_init = True


class AtomGoPlatform(Platform):
    """vLLM platform whose model execution happens in atom-go's Go engine."""

    _enum = PlatformEnum.OOT
    device_name: str = "cpu"
    device_type: str = "cpu"
    dispatch_key: str = "CPU"
    ray_device_key: str = ""
    simple_compile_backend: str = "eager"
    dist_backend: str = "gloo"
    device_control_env_var: str = ENV_VISIBLE_DEVICES

    @property
    def supported_dtypes(self) -> list[torch.dtype]:
        return [torch.bfloat16, torch.float16, torch.float32]

    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        return f"atom-go ({os.environ.get(ENV_DEVICE, 'auto')})"

    @classmethod
    def get_device_uuid(cls, device_id: int = 0) -> str:
        return "atom-go"

    @classmethod
    def get_device_total_memory(cls, device_id: int = 0) -> int:
        # What vLLM sizes its default token budget by; atom-go sizes its own KV cache.
        return 16 << 30

    @classmethod
    def is_pin_memory_available(cls) -> bool:
        return False

    @classmethod
    def import_kernels(cls) -> None:
        """atom-go's kernels live in the Go process; vLLM's are not needed."""

    @classmethod
    def inference_mode(cls) -> Any:
        return torch.no_grad()

    @classmethod
    def set_device(cls, device: torch.device) -> None:
        """Nothing runs on a torch device here."""

    @classmethod
    def manual_seed_all(cls, seed: int) -> None:
        torch.manual_seed(seed)

    @classmethod
    def get_current_memory_usage(cls, device: torch.types.Device | None = None) -> float:
        return 0.0

    @classmethod
    def get_attn_backend_cls(cls, *args: Any, **kwargs: Any) -> str:
        raise RuntimeError("atom-go runs attention in its Go engine; vLLM's attention backends are not used")

    @classmethod
    def support_hybrid_kv_cache(cls) -> bool:
        return False

    @classmethod
    def support_static_graph_mode(cls) -> bool:
        return False

    @classmethod
    def update_block_size_for_backend(cls, vllm_config: VllmConfig) -> None:
        """The block size is atom-go's, set in check_and_update_config."""

    @classmethod
    def verify_model_arch(cls, model_arch: str) -> None:
        if model_arch not in activation.ARCHITECTURES:
            raise _refuse(
                f"architecture {model_arch}",
                f"atom-go serves {', '.join(activation.ARCHITECTURES)}",
            )

    @classmethod
    def verify_quantization(cls, quant: str) -> None:
        # FP8 checkpoints (block-scaled, per-tensor, per-channel; quant_method fp8 or
        # compressed-tensors) and gpt-oss's MXFP4 experts are atom-go's own weight formats;
        # check_and_update_config refuses the same names asked for an unquantized checkpoint
        # (vLLM's online quantization).
        if quant not in SERVED_QUANTIZATION:
            raise _refuse(
                f"--quantization {quant}",
                "atom-go loads bf16/fp16/fp32 checkpoints, fp8 ones (quant_method fp8 or compressed-tensors) "
                "and gpt-oss's mxfp4 experts",
            )

    @classmethod
    def pre_register_and_update(cls, parser: Any = None) -> None:
        """Called with vLLM's CLI parser before it parses: a GGUF file as the model is refused
        there, in one line (see guard_gguf_arguments)."""
        if isinstance(parser, argparse.ArgumentParser):
            guard_gguf_arguments(parser)

    @classmethod
    def check_and_update_config(cls, vllm_config: VllmConfig) -> None:
        """Refuses settings atom-go cannot honour and adapts the rest (see the module doc)."""
        from vllm.config.compilation import CompilationMode, CUDAGraphMode

        model_config = vllm_config.model_config
        if model_config is None:
            return
        pc = vllm_config.parallel_config
        for name in (
            "pipeline_parallel_size",
            "decode_context_parallel_size",
            "prefill_context_parallel_size",
        ):
            value = getattr(pc, name, 1)
            if value != 1:
                raise _refuse(f"{name}={value}", "atom-go's engine runs one model per process (use 1)")
        if getattr(pc, "nnodes", 1) > 1 and getattr(pc, "nnodes_within_dp", 1) > 1:
            raise _refuse(
                f"--nnodes {pc.nnodes} (one model replica across hosts)",
                "atom-go's tensor parallelism stays inside one host; scale across hosts with data "
                "parallelism (docs/scaling.md)",
            )
        # Tensor parallelism is atom-go's own: one engine process drives every GPU (or cpu rank)
        # and the executor passes the size on as --tensor-parallel-size.
        # Data parallelism is vLLM's: each DP rank is an engine-core process with its own
        # executor and atom-plugin (docs/scaling.md). atom-go serves dense models, which vLLM
        # runs as independent ranks (no DP process group, no dummy batches); the executor gives
        # each rank's plugin the rank's GPUs (atom_go.devices).
        if pc.tensor_parallel_size < 1:
            raise _refuse(f"tensor_parallel_size={pc.tensor_parallel_size}", "use 1 or more")
        if vllm_config.speculative_config is not None:
            # atom-go's engine proposes and verifies the drafts (the executor passes the
            # config on as --speculative-config); vLLM schedules them.
            problem = speculative_config_problem(vllm_config.speculative_config)
            if problem is not None:
                raise _refuse(*problem)
        if vllm_config.lora_config is not None:
            raise _refuse("LoRA", "atom-go has no LoRA support")
        if vllm_config.kv_transfer_config is not None:
            raise _refuse("a KV connector (--kv-transfer-config)", "atom-go owns its KV cache memory")
        if getattr(vllm_config, "ec_transfer_config", None) is not None:
            raise _refuse("an encoder-cache connector (--ec-transfer-config)", "atom-go serves text-only models")
        if getattr(vllm_config, "watermark_config", None) is not None:
            raise _refuse("watermarking", "atom-go's sampler does not watermark")
        if model_config.quantization is not None:
            cls.verify_quantization(str(model_config.quantization))
            stored = getattr(model_config.hf_config, "quantization_config", None) or {}
            method = stored.get("quant_method") if isinstance(stored, dict) else getattr(stored, "quant_method", None)
            if method != str(model_config.quantization):
                raise _refuse(
                    f"--quantization {model_config.quantization}",
                    "atom-go does not quantize at load: it serves fp8 checkpoints as they are stored",
                )
        if model_config.runner_type != "generate":
            raise _refuse(f"runner {model_config.runner_type!r}", "atom-go only generates text")
        warn_if_no_tokenizer(model_config)  # after the refusals: a refused setup needs no warning
        cache_config = vllm_config.cache_config
        if cache_config.cache_dtype not in KV_CACHE_DTYPES:
            raise _refuse(
                f"--kv-cache-dtype {cache_config.cache_dtype}",
                "atom-go keeps the KV cache in its own dtype or in fp8 e4m3 (auto, fp8, fp8_e4m3)",
            )
        if getattr(cache_config, "kv_offloading_size", None):
            raise _refuse("--kv-offloading-size", "atom-go owns its KV cache memory")
        if cache_config.block_size is None:
            cache_config.block_size = DEFAULT_BLOCK_SIZE
        if cache_config.block_size > 1024:
            raise _refuse(f"--block-size {cache_config.block_size}", "atom-go's blocks hold 1..1024 tokens")

        backend = pc.distributed_executor_backend
        if backend != activation.EXECUTOR_QUALNAME:
            if backend not in (None, "uni", "mp"):
                log.warning(
                    "atom-go replaces --distributed-executor-backend %s with %s", backend, activation.EXECUTOR_QUALNAME
                )
            pc.distributed_executor_backend = activation.EXECUTOR_QUALNAME

        vllm_config.scheduler_config.async_scheduling = False
        cc = vllm_config.compilation_config
        cc.mode = CompilationMode.NONE
        cc.cudagraph_mode = CUDAGraphMode.NONE
        cc.cudagraph_capture_sizes = []
        cc.max_cudagraph_capture_size = 0
        model_config.enforce_eager = True

    @classmethod
    def validate_request(cls, processed_inputs: Any, params: Any) -> None:
        """Refuses, in the API server, a request atom-go cannot honour (HTTP 400 naming it)."""
        from vllm.exceptions import VLLMValidationError
        from vllm.pooling_params import PoolingParams
        from vllm.sampling_params import SamplingParams

        kind = processed_inputs.get("type") if isinstance(processed_inputs, dict) else None
        try:
            if kind == "embeds":
                raise UnsupportedRequestError("prompt embeddings: atom-go takes token ids. Send text or token ids.")
            if kind not in (None, "token"):
                raise UnsupportedRequestError(f"{kind} inputs: atom-go serves text-only decoder models.")
            if isinstance(params, PoolingParams):
                check_pooling_params(params)
            elif isinstance(params, SamplingParams):
                check_sampling_params(params)
        except UnsupportedRequestError as exc:
            raise VLLMValidationError(str(exc), parameter=exc.parameter) from None
