"""SGLang's TpModelWorker, replaced: SGLang schedules, atom-go (atom-plugin) executes and samples.

:class:`AtomGoTpModelWorker` is what SGLang's scheduler builds once the plugin's REPLACE hook is
applied (``atom_go.sglang.hooks``). It keeps everything the scheduler reads from a worker, with a
bookkeeping-only :class:`AtomGoModelRunner` (no PyTorch weights, a KV pool without buffers) in
place of SGLang's ModelRunner, and turns every ``forward_batch_generation`` into one atom-go step
through :mod:`atom_go.sglang.slots`. The pattern is SGLang's own MLX worker's (an out-of-torch
backend behind the scheduler), with atom-go out of process.
"""

from __future__ import annotations

import functools
import logging
import os
import shlex
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import torch
from sglang.srt.configs.shared_experts import SharedExpertsConfig
from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.managers import tp_worker as _tp_worker
from sglang.srt.managers.schedule_batch import FINISH_ABORT, Req, ScheduleBatch
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
from sglang.srt.mem_cache.memory_pool import KVCache, ReqToTokenPool
from sglang.srt.model_executor import model_runner as _model_runner
from sglang.srt.model_executor.model_runner_components.layer_setup import ModelLayerInfo
from sglang.srt.runtime_context import get_device, get_model, get_schedule

from atom_go.devices import rank_devices, visible_devices_env
from atom_go.sglang import ENV_AUTO_MTLS, ENV_DEVICE, ENV_ENGINE_ARGS, ENV_KV_SLOTS
from atom_go.sglang.compat import check_req
from atom_go.sglang.engine import RESERVED_SLOTS, SlotEngine, SlotEngineOptions
from atom_go.sglang.mapping import top_logprobs_refusal
from atom_go.sglang.slots import SlotModeError, SlotRequest, SlotStats, SlotStepper
from atom_go.wire import ExecuteResult, sampling_params

log = logging.getLogger("atom_go.sglang")

# The classes as SGLang defines them, bound before the plugin's hook swaps
# sglang.srt.managers.tp_worker.TpModelWorker for AtomGoTpModelWorker (the hook rewrites every
# module-level binding of the original, this module's included).
_TpModelWorker: type = _tp_worker.TpModelWorker
_ModelRunner: type = _model_runner.ModelRunner


# atom-go's runner refuses a batch larger than the limits it was loaded with; SGLang's largest
# extend batch is bounded by its prefill budget plus one decode token per running request.
_DEFAULT_MAX_RUNNING = 256


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


class _SlotOnlyKVCache(KVCache):
    """SGLang's KV cache interface over no buffers: atom-go holds the KV, indexed by slot."""

    def __init__(self, size: int, dtype: torch.dtype, device: str) -> None:
        # KVCache.__init__ sets up memory savers and custom pools that touch device APIs.
        self.size = size
        self.page_size = 1
        self.dtype = dtype
        self.store_dtype = dtype
        self.device = device
        self.layer_num = 0
        self.start_layer = 0
        self.end_layer = 0
        self.mem_usage = 0
        self.cpu_offloading_chunk_size = 8192
        self.layer_transfer_counter = None
        self.enable_custom_mem_pool = False
        self.custom_mem_pool = None

    def _no_buffer(self) -> RuntimeError:
        return RuntimeError("atom-go holds the KV cache in its own process; SGLang's pool has no buffers")

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        raise self._no_buffer()

    def get_value_buffer(self, layer_id: int) -> torch.Tensor:
        raise self._no_buffer()

    def get_kv_buffer(self, layer_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        raise self._no_buffer()

    def set_kv_buffer(self, layer: Any, loc: Any, cache_k: Any, cache_v: Any, *args: Any, **kwargs: Any) -> None:
        raise self._no_buffer()

    def get_kv_size_bytes(self) -> tuple[int, int]:
        return 0, 0


class _NoTorchModel:
    """What ModelRunner inspects of a model (``forward``'s signature, shared-expert config)."""

    shared_experts_config = SharedExpertsConfig()

    @staticmethod
    def forward() -> None:
        raise RuntimeError("atom-go runs the model; SGLang's model stub has no forward pass")


class AtomGoModelRunner(_ModelRunner):
    """A ModelRunner that loads no weights and allocates no KV: the scheduler's bookkeeping only.

    Its token pool has ``kv_slots`` slots (``1 .. kv_slots``, slot 0 being SGLang's padding slot),
    exactly the slots atom-go's KV cache holds besides slot 0.
    """

    canary_manager = None
    prefill_aware_swa = False

    def __init__(self, *args: Any, kv_slots: int, max_running_requests: int, **kwargs: Any) -> None:
        self._atom_kv_slots = kv_slots
        self._atom_max_running = max_running_requests
        super().__init__(*args, **kwargs)

    @property
    def preloaded_weights_bytes(self) -> int:
        return 0

    @property
    def logical_max_total_num_tokens(self) -> int:
        return int(self.req_to_token_pool.schedulable_token_capacity(self.max_total_num_tokens))

    def load_model(self) -> None:
        self.model = _NoTorchModel()
        self.sliding_window_size = None
        self.dtype = self.model_config.dtype
        self.weight_load_mem_usage = 0

    def initialize(self) -> None:
        from sglang.srt.utils.torch_memory_saver_adapter import TorchMemorySaverAdapter

        self.memory_saver_adapter = TorchMemorySaverAdapter.create(enable=False)
        self.sampler = None
        self.load_model()
        layers = max(self.model_config.num_hidden_layers, self.model_config.num_attention_layers)
        self.layer_info = ModelLayerInfo(start_layer=0, end_layer=layers, num_effective_layers=layers)
        self.kv_cache_dtype = self.dtype
        self.max_total_num_tokens = self._atom_kv_slots
        self.max_running_requests = max(1, min(self._atom_max_running, self._atom_kv_slots // 2))
        self.is_hybrid_swa = False
        self.req_to_token_pool = ReqToTokenPool(
            size=self.max_running_requests,
            max_context_len=self.model_config.context_len,
            device="cpu",
            enable_memory_saver=False,
        )
        kv = _SlotOnlyKVCache(size=self.max_total_num_tokens, dtype=self.kv_cache_dtype, device="cpu")
        self.token_to_kv_pool = kv
        self.token_to_kv_pool_allocator = TokenToKVPoolAllocator(
            size=self.max_total_num_tokens, dtype=self.kv_cache_dtype, device="cpu", kvcache=kv, need_sort=False
        )
        self.decode_cuda_graph_runner = None
        self.attn_backend = None
        self.init_ngram_embedding_manager()

    def alloc_memory_pool(self, memory_pool_config: Any = None, *, draft_parallel_layout: Any = None) -> None:
        """The pools were made in initialize(); atom-go holds the KV."""

    def init_attention_backends(self) -> None:
        self.attn_backend = None

    def init_cuda_graphs(self, capture_decode_cuda_graph: bool = True) -> None:
        """atom-go captures its own CUDA graphs (in its process)."""
        self.eager_runner = None


def unsupported_reason(req: Req) -> str | None:
    """Why atom-go cannot serve this SGLang request, or None.

    The plugin's admission hook aborts such requests before they are scheduled (the way SGLang
    refuses a bad request); the worker refuses to run one that got past it.
    """
    sp = req.sampling_params
    if req.grammar is not None or any(
        getattr(sp, name, None) is not None for name in ("json_schema", "regex", "ebnf", "structural_tag")
    ):
        return "constrained decoding (json_schema, regex, ebnf, structural_tag)"
    if getattr(sp, "logit_bias", None):
        return "logit_bias"
    if req.custom_logit_processor:
        return "custom logit processors"
    if req.input_embeds is not None:
        return "input embeddings"
    if req.multimodal_inputs is not None:
        return "multimodal inputs"
    if req.return_logprob and getattr(req.logprob, "token_ids_logprob", None):
        return "logprobs of chosen token ids (token_ids_logprob)"
    if req.return_logprob and 0 <= req.logprob_start_len < len(req.origin_input_ids):
        return "prompt logprobs (logprob_start_len)"
    return top_logprobs_refusal(bool(req.return_logprob), getattr(req.logprob, "top_logprobs_num", 0))


def engine_tensor_parallel_size(engine_args: Sequence[str]) -> int:
    """atom-go's --tensor-parallel-size among atom-plugin engine flags (1 when not given)."""
    size = 1
    for i, arg in enumerate(engine_args):
        name, eq, value = arg.partition("=")
        if name.lstrip("-") != "tensor-parallel-size" or not name.startswith("-"):
            continue
        if not eq:
            value = engine_args[i + 1] if i + 1 < len(engine_args) else ""
        try:
            size = int(value)
        except ValueError:
            raise ValueError(f"{ENV_ENGINE_ARGS}: --tensor-parallel-size needs a number, got {value!r}") from None
    return size


def dp_rank_device_env(
    server_args: Any, gpu_id: int, engine_args: Sequence[str], device: str, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The device variables of this scheduler's atom-plugin under SGLang's ``--dp-size`` > 1.

    SGLang's data-parallel controller starts one scheduler per rank with the GPU id
    ``base_gpu_id + rank * tp_size * gpu_id_step`` (its tp_size is 1 under atom-go); atom-go's
    plugin of rank ``r`` drives ``TP`` GPUs (``--tensor-parallel-size`` in ATOM_GO_ENGINE_ARGS),
    so it sees ``base_gpu_id + (r*TP + i) * gpu_id_step`` for ``i < TP``
    (:func:`atom_go.devices.visible_devices_env`). One rank, or the cpu backend: nothing.
    """
    dp_size = int(getattr(server_args, "dp_size", 1) or 1)
    if dp_size <= 1 or device == "cpu":
        return {}
    first = int(getattr(server_args, "base_gpu_id", 0) or 0)
    step = int(getattr(server_args, "gpu_id_step", 1) or 1)
    rank = (gpu_id - first) // step
    devices = rank_devices(rank, engine_tensor_parallel_size(engine_args), first, step)
    return visible_devices_env(devices, environ)


def _known_tokens(req: Req) -> list[int]:
    """Every token of req the host knows: the prompt, then the outputs."""
    return [*req.origin_input_ids, *req.output_ids]


def _being_aborted(req: Req) -> bool:
    return req.finished() or isinstance(req.to_finish, FINISH_ABORT)


class AtomGoTpModelWorker(_TpModelWorker):
    """SGLang's model worker with atom-go as the model: one atom-plugin in slot mode.

    The scheduler keeps batching, prefix caching, chunked prefill, retraction and aborts; this
    worker sends each batch to atom-go and hands back the tokens atom-go sampled.
    """

    def _init_model_runner(self) -> None:
        self._check_server_args()
        sched = get_schedule()
        kv_slots = int(sched.max_total_tokens or 0) or int(os.environ.get(ENV_KV_SLOTS, "0") or 0)
        max_running = int(sched.max_running_requests or _DEFAULT_MAX_RUNNING)
        prefill_budget = max(int(sched.chunked_prefill_size or 0), int(sched.max_prefill_tokens or 0), 1)
        device = os.environ.get(ENV_DEVICE) or "auto"
        dtype = str(get_model().dtype or "auto")
        engine_args = shlex.split(os.environ.get(ENV_ENGINE_ARGS, ""))
        device_env = dp_rank_device_env(self.server_args, int(self.gpu_id), engine_args, device)
        if device_env:
            log.info(
                "atom-go of the scheduler on GPU id %s sees devices %s",
                self.gpu_id,
                ", ".join(f"{k}={v}" for k, v in sorted(device_env.items())),
            )
        options = SlotEngineOptions(
            model_path=get_model().model_path,
            device=device,
            dtype=dtype if dtype in ("auto", "bfloat16", "float16", "float32") else "auto",
            kv_slots=kv_slots,
            max_model_len=int(self.model_config.context_len),
            max_num_seqs=max_running,
            max_num_batched_tokens=prefill_budget + max_running,
            extra_args=engine_args,
            auto_mtls=_truthy(ENV_AUTO_MTLS),
            env=device_env,
        )
        self.atom = SlotEngine(options, logger=logging.getLogger("atom_go.sglang.plugin"))
        if self.atom.info.vocab_size != self.model_config.vocab_size:
            log.warning(
                "atom-go reports a vocabulary of %d tokens, SGLang's model config %d",
                self.atom.info.vocab_size,
                self.model_config.vocab_size,
            )
        self._vocab = int(self.atom.info.vocab_size)
        self._stepper = SlotStepper(is_finished=lambda req: bool(req.finished()))
        self._checked_req = False
        self._model_runner = AtomGoModelRunner(
            model_config=self.model_config,
            mem_fraction_static=sched.mem_fraction_static,
            gpu_id=self.gpu_id,
            nccl_port=self.nccl_port,
            server_args=self.server_args,
            is_draft_worker=self.is_draft_worker,
            req_to_token_pool=self.req_to_token_pool,
            token_to_kv_pool_allocator=self.token_to_kv_pool_allocator,
            memory_pool_config=self.memory_pool_config,
            kv_slots=self.atom.num_slots - RESERVED_SLOTS,
            max_running_requests=max_running,
        )

    def _check_server_args(self) -> None:
        from sglang.srt.runtime_context import get_lora, get_parallel, get_spec

        problems: list[str] = []
        par = get_parallel()
        if par.tp_size != 1 or par.pp_size != 1:
            problems.append(
                f"tensor/pipeline parallel sizes {par.tp_size}/{par.pp_size}: run SGLang with one rank "
                "(atom-go splits the model itself: ATOM_GO_ENGINE_ARGS=--tensor-parallel-size=N)"
            )
        if self.is_draft_worker or get_spec().speculative_algorithm is not None:
            problems.append("speculative decoding")
        if get_lora().enable_lora:
            problems.append("LoRA adapters")
        if not self.model_config.is_generation:
            problems.append("embedding and reward models")
        if int(get_schedule().page_size or 1) != 1:
            problems.append(f"--page-size {get_schedule().page_size} (slot mode needs 1)")
        if get_device().device != "cpu":
            problems.append(f"--device {get_device().device}: SGLang's side of atom-go runs on the CPU")
        if problems:
            raise RuntimeError("atom-go's SGLang worker does not support: " + "; ".join(problems))

    def get_pad_input_ids_func(self) -> None:
        return None

    # ------------------------------------------------------------------ forward

    def _sampling(self, req: Req) -> dict[str, Any]:
        sp = req.sampling_params
        top_k = int(sp.top_k)
        greedy = top_k == 1  # SGLang's temperature 0 becomes top_k 1
        if top_k <= 0 or top_k >= self._vocab:
            top_k = 0
        logprobs = None
        if req.return_logprob:
            # More than atom-go returns was refused at admission (unsupported_reason).
            logprobs = max(0, int(req.logprob.top_logprobs_num or 0))
        return sampling_params(
            temperature=0.0 if greedy else float(sp.temperature),
            top_p=float(sp.top_p),
            top_k=0 if greedy else top_k,
            min_p=float(sp.min_p),
            seed=sp.sampling_seed,
            repetition_penalty=float(sp.repetition_penalty),
            presence_penalty=float(sp.presence_penalty),
            frequency_penalty=float(sp.frequency_penalty),
            min_tokens=int(sp.min_new_tokens or 0),
            ignore_eos=bool(sp.ignore_eos),
            stop_token_ids=sorted(int(t) for t in (sp.stop_token_ids or ())),
            logprobs=logprobs,
        )

    def _slot_requests(self, batch: ScheduleBatch) -> list[SlotRequest]:
        """The batch's requests, in batch order, as slot-mode requests."""
        reqs = batch.reqs
        n = len(reqs)
        mode = batch.forward_mode
        seq_lens = batch.seq_lens_cpu.tolist() if batch.seq_lens_cpu is not None else batch.seq_lens.tolist()
        if mode.is_decode():
            scheduled = [1] * n
            computed = [int(s) - 1 for s in seq_lens]
        elif mode.is_extend():  # EXTEND and MIXED (decodes ride as 1-token extends)
            scheduled = [int(x) for x in batch.extend_lens]
            computed = [int(x) for x in batch.prefix_lens]
        else:
            raise SlotModeError(f"atom-go does not run SGLang's {mode.name} batches")
        if len(scheduled) != n or len(computed) != n:
            raise SlotModeError(f"batch of {n} requests has {len(computed)} prefix and {len(scheduled)} extend lengths")
        out_loc = batch.out_cache_loc.to("cpu", torch.int64)
        if int(out_loc.numel()) != sum(scheduled):
            raise SlotModeError(f"out_cache_loc has {out_loc.numel()} slots for {sum(scheduled)} scheduled tokens")
        rows = batch.req_pool_indices_cpu if batch.req_pool_indices_cpu is not None else batch.req_pool_indices
        rows_list = [int(r) for r in rows.tolist()]
        req_to_token = batch.req_to_token_pool.req_to_token
        out: list[SlotRequest] = []
        offset = 0
        for i, req in enumerate(reqs):
            k, c = scheduled[i], computed[i]
            if c + k != int(seq_lens[i]):
                raise SlotModeError(f"request {req.rid!r}: prefix {c} + extend {k} != sequence length {seq_lens[i]}")
            new_slots = out_loc[offset : offset + k]
            offset += k
            if not _being_aborted(req):
                why = unsupported_reason(req)
                if why is not None:
                    raise SlotModeError(f"request {req.rid!r} needs {why}, which atom-go does not support")
            out.append(
                SlotRequest(
                    rid=req.rid,
                    owner=req,
                    generation=int(req.retraction_count),
                    known_tokens=functools.partial(_known_tokens, req),
                    prefix_slots=req_to_token[rows_list[i], :c].to(torch.int64),
                    new_slots=new_slots,
                    computed=c,
                    sampling=functools.partial(self._sampling, req),
                )
            )
        return out

    def forward_batch_generation(
        self,
        batch: ScheduleBatch | None,
        forward_batch: Any = None,
        pp_proxy_tensors: Any = None,
        is_verify: bool = False,
        skip_attn_backend_init: bool | None = None,
        *,
        capture_hidden_mode: Any = None,
        return_kv_loc_plan: bool = False,
    ) -> GenerationBatchResult:
        """Runs one SGLang batch on atom-go; next_token_ids are atom-go's samples (CPU, int64)."""
        if batch is None or is_verify:
            raise NotImplementedError("atom-go's SGLang worker runs ScheduleBatch steps only (no speculative decoding)")
        n = len(batch.reqs)
        if batch.forward_mode.is_idle() or n == 0:
            return GenerationBatchResult(
                logits_output=LogitsProcessorOutput(next_token_logits=None),
                next_token_ids=torch.zeros(0, dtype=torch.int64),
                can_run_cuda_graph=False,
            )
        if not self._checked_req:
            check_req(batch.reqs[0])
            self._checked_req = True
        slot_reqs = self._slot_requests(batch)
        next_ids = [0] * n
        result: ExecuteResult | None = None
        if slot_reqs:
            step = self._stepper.plan(slot_reqs)
            result = self.atom.execute(step.payload)
            sampled = dict(zip(result.req_ids, result.sampled_token_ids, strict=True))
            for rid, want in step.expects_sample.items():
                got = sampled.get(rid)
                if got is None or bool(got) != want:
                    raise SlotModeError(
                        f"atom-go's answer for request {rid!r} is {got!r}; SGLang's step "
                        f"{'ends' if want else 'does not end'} at the request's last known token"
                    )
            self._stepper.commit(step, sampled)
            for i, sr in enumerate(slot_reqs):
                toks = sampled[sr.rid]
                if toks:
                    next_ids[i] = int(toks[0])
        logits_output = LogitsProcessorOutput(next_token_logits=None)
        if batch.return_logprob and result is not None:
            logits_output = self._logprob_output(batch, result)
        return GenerationBatchResult(
            logits_output=logits_output,
            next_token_ids=torch.tensor(next_ids, dtype=torch.int64),
            can_run_cuda_graph=False,
        )

    @staticmethod
    def _logprob_output(batch: ScheduleBatch, result: ExecuteResult) -> LogitsProcessorOutput:
        """Sampled-token logprobs and top alternatives in batch order (what SGLang's output reads)."""
        rows = dict(zip(result.req_ids, result.logprobs, strict=True))
        chosen: list[float] = []
        top_val: list[torch.Tensor] = []
        top_idx: list[torch.Tensor] = []
        tid_val: list[torch.Tensor] = []
        tid_idx: list[list[int]] = []
        for req in batch.reqs:
            lp = rows.get(req.rid)
            if lp is None:
                chosen.append(0.0)
                top_val.append(torch.zeros(0, dtype=torch.float32))
                top_idx.append(torch.zeros(0, dtype=torch.int64))
            else:
                chosen.append(float(lp.logprobs[0]))
                top_val.append(torch.tensor(lp.logprobs[1:], dtype=torch.float32))
                top_idx.append(torch.tensor(lp.token_ids[1:], dtype=torch.int64))
            tid_val.append(torch.zeros(0, dtype=torch.float32))
            tid_idx.append([])
        return LogitsProcessorOutput(
            next_token_logits=None,
            next_token_logprobs=torch.tensor(chosen, dtype=torch.float32),
            next_token_top_logprobs_val=top_val,
            next_token_top_logprobs_idx=top_idx,
            next_token_token_ids_logprobs_val=tid_val,
            next_token_token_ids_logprobs_idx=tid_idx,
        )

    def forward_batch_embedding(self, batch: ScheduleBatch) -> NoReturn:
        raise NotImplementedError("atom-go's SGLang worker serves generation models only")

    def forward_batch_split_prefill(self, batch: ScheduleBatch) -> NoReturn:
        raise NotImplementedError("atom-go's SGLang worker does not support PD multiplexing (--enable-pdmux)")

    def release_finished(self) -> int:
        """Frees atom-go's state of requests SGLang finished or aborted since the last step.

        Steps free them too (``finished_req_ids``); this is for an idle scheduler, which runs no
        step. Returns how many were freed.
        """
        step = self._stepper.plan([])
        if step.empty:
            return 0
        self.atom.execute(step.payload)
        self._stepper.commit(step, {})
        return len(step.payload["finished_req_ids"])

    @property
    def slot_stats(self) -> SlotStats:
        """What the slot-mode steps did so far."""
        return self._stepper.stats

    def running_requests(self) -> Sequence[str]:
        """The request ids atom-go keeps state for, as this worker believes."""
        return self._stepper.known_ids()

    def shutdown(self) -> None:
        """Stops atom-plugin."""
        self.atom.close()
