"""The hooks atom-go attaches to SGLang through its HookRegistry (``sglang.srt.plugins``).

- ``sglang.srt.managers.tp_worker.TpModelWorker`` is REPLACEd by AtomGoTpModelWorker (a subclass)
  in every process that loads plugins: SGLang's scheduler process is the one that builds it.
- ``GrammarManager.process_req_with_grammar`` (the last step of admitting a generate request)
  gets a BEFORE hook that aborts requests needing what atom-go does not do (constrained
  decoding, logit_bias, custom logit processors, prompt logprobs, embeddings, images, more top
  logprobs than atom-go returns) the way SGLang aborts a bad request: the client gets HTTP 400
  with the reason.
- ``TokenizerManager._send_one_request`` (SGLang's main process) gets a BEFORE hook that gives
  the ``i``-th copy of a seeded parallel-sampling request (``n > 1``) the seed ``seed + i``, as
  vLLM does (:mod:`atom_go.sglang.mapping`): SGLang sends the ``n`` copies with one seed, which
  would make every choice the same.
- ``TokenizerManager.__init__`` (SGLang's main process, before its HTTP server starts) gets an
  AFTER hook that adds :class:`atom_go.health.RestartHealth` to the HTTP server's app: ``/health``
  answers 503 while a scheduler's worker restarts atom-plugin (the state id it marks the restart
  under is made by the ``resolve_once`` hook below, before the schedulers start).
- ``Scheduler.on_idle`` gets an AFTER hook that frees atom-go's state of requests that finished
  in the scheduler's last step (steps free them too, but an idle scheduler runs none).
- ``sglang.srt.server_args.ServerArgs.resolve_once`` gets a BEFORE hook that puts SGLang's own
  side on the CPU (``--device cpu``; atom-go runs the model where ``ATOM_GO_DEVICE`` says, and a
  ``--device cuda`` given to SGLang selects ``ATOM_GO_DEVICE=gpu``) and turns the overlap
  scheduler off (atom-go's step is one blocking call, so overlap only delays finish detection);
  with ``--dp-size`` > 1 it also sets SGLang's CPU binding of the scheduler ranks when unset
  (``SGLANG_CPU_OMP_THREADS_BIND``: the schedulers compute nothing, atom-go's plugins do).

When the installed SGLang does not have the shape the worker was written for, nothing is
replaced: a BEFORE hook on ``Scheduler.__init__`` and one on ``ServerArgs.resolve_once`` raise
the shape error instead, so the server refuses to start with a message naming the SGLang version
(SGLang's plugin loader only logs what a plugin's entry point raises).
"""

from __future__ import annotations

import copy
import logging
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

from atom_go import checkpoint
from atom_go.health import RestartHealth, ensure_state_id
from atom_go.sglang import ENV_DEVICE
from atom_go.sglang.compat import SGLangShapeError, check_sglang, shape_error
from atom_go.sglang.mapping import ParallelSeeds

log = logging.getLogger("atom_go.sglang")

TP_WORKER_TARGET = "sglang.srt.managers.tp_worker.TpModelWorker"
SERVER_ARGS_RESOLVE_TARGET = "sglang.srt.server_args.ServerArgs.resolve_once"
SCHEDULER_INIT_TARGET = "sglang.srt.managers.scheduler.Scheduler.__init__"
IDLE_TARGET = "sglang.srt.managers.scheduler.Scheduler.on_idle"
ADMISSION_TARGET = "sglang.srt.constrained.grammar_manager.GrammarManager.process_req_with_grammar"
SEND_TARGET = "sglang.srt.managers.tokenizer_manager.TokenizerManager._send_one_request"
TOKENIZER_INIT_TARGET = "sglang.srt.managers.tokenizer_manager.TokenizerManager.__init__"
HTTP_SERVER_MODULE = "sglang.srt.entrypoints.http_server"
# SGLang's CPU thread binding of its scheduler ranks, one "|"-separated CPU group per rank.
ENV_CPU_BIND = "SGLANG_CPU_OMP_THREADS_BIND"


_installed = False
_health_attached = False


def _prepare_server_args(server_args: Any, *args: Any, **kwargs: Any) -> None:
    """BEFORE hook of ServerArgs.resolve_once: SGLang's side of atom-go runs on the CPU."""
    if getattr(server_args, "_resolution_finished", False) or getattr(server_args, "_input_frozen", False):
        return None
    device = getattr(server_args, "device", None)
    if device not in (None, "cpu"):
        if device.split(":", 1)[0] in ("cuda", "hip", "rocm") and not os.environ.get(ENV_DEVICE):
            os.environ[ENV_DEVICE] = "gpu"
        log.info(
            "atom-go serves SGLang: SGLang's scheduler runs on the CPU (--device %s becomes cpu); "
            "atom-go runs the model on %s",
            device,
            os.environ.get(ENV_DEVICE, "auto"),
        )
    server_args.device = "cpu"
    server_args.disable_overlap_schedule = True
    ensure_state_id()  # inherited by the scheduler processes, which mark restarts there
    _check_checkpoint(server_args)
    _share_cpus_between_dp_ranks(int(getattr(server_args, "dp_size", 1) or 1))
    return None


def _attach_health(result: Any, *args: Any, **kwargs: Any) -> None:
    """AFTER hook of TokenizerManager.__init__: the HTTP server's /health answers 503 while a
    worker restarts atom-plugin. Nothing in a process without SGLang's HTTP server (the offline
    Engine)."""
    global _health_attached
    server = sys.modules.get(HTTP_SERVER_MODULE)
    app = getattr(server, "app", None)
    if _health_attached or app is None:
        return None
    try:
        app.add_middleware(RestartHealth)
    except RuntimeError as exc:  # the app already started: /health stays SGLang's alone
        log.warning("atom-go could not attach its /health middleware: %s", exc)
        return None
    _health_attached = True
    return None


def _check_checkpoint(server_args: Any) -> None:
    """A GGUF file: one line saying what to run, and exit. A checkpoint directory without
    tokenizer files: one warning, and SGLang serves it with --skip-tokenizer-init (token-id
    prompts) instead of failing to load a tokenizer."""
    model = str(getattr(server_args, "model_path", ""))
    if checkpoint.is_gguf_file(model):
        # SGLang 0.5.23 loads a GGUF's config but fails on its tokenizer, deep in a traceback.
        print(checkpoint.gguf_file_message(model, "SGLang"), file=sys.stderr, flush=True)
        raise SystemExit(2)
    tokenizer = str(getattr(server_args, "tokenizer_path", None) or model)
    if getattr(server_args, "skip_tokenizer_init", False) or checkpoint.has_tokenizer(tokenizer):
        return
    log.warning("%s", checkpoint.no_tokenizer_message(tokenizer, "SGLang", "--skip-tokenizer-init"))
    server_args.skip_tokenizer_init = True


def cpu_list(cpus: Iterable[int]) -> str:
    """CPU ids as a list of ranges (``0-3,8,10-11``), the format of SGLANG_CPU_OMP_THREADS_BIND."""
    parts: list[str] = []
    ordered = sorted(set(cpus))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def _share_cpus_between_dp_ranks(dp_size: int) -> None:
    """With ``--dp-size`` > 1, give SGLang's CPU schedulers their thread binding.

    SGLang on the CPU binds each scheduler rank to a NUMA node and refuses more ranks than the
    host has nodes unless ``SGLANG_CPU_OMP_THREADS_BIND`` lists one CPU group per rank
    (sglang/srt/utils/numa_utils.py ``init_threads_binding``). Under atom-go the schedulers
    compute nothing (each rank's atom-plugin runs the model), so when the variable is unset
    every rank gets the CPUs this process may use; the server's children inherit it.
    """
    if dp_size <= 1 or os.environ.get(ENV_CPU_BIND):
        return
    cpus = cpu_list(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else f"0-{(os.cpu_count() or 1) - 1}"
    os.environ[ENV_CPU_BIND] = "|".join([cpus] * dp_size)
    log.info("atom-go serves SGLang with --dp-size %d: %s=%s", dp_size, ENV_CPU_BIND, os.environ[ENV_CPU_BIND])


def _refuse_unsupported(grammar_manager: Any, req: Any, *args: Any, **kwargs: Any) -> None:
    """BEFORE hook of GrammarManager.process_req_with_grammar, the last step of SGLang's admission
    of a generate request: abort what atom-go cannot serve, the way SGLang aborts a bad request
    (it is queued, prefilled as one token and answered with the error, HTTP 400)."""
    from atom_go.sglang.worker import unsupported_reason

    if req.to_finish is not None:
        return None
    why = unsupported_reason(req)
    if why is None:
        return None
    sp = req.sampling_params
    for name in ("json_schema", "regex", "ebnf", "structural_tag", "logit_bias"):
        if getattr(sp, name, None) is not None:
            setattr(sp, name, None)
    req.custom_logit_processor = None
    req.set_finish_with_abort(f"atom-go does not support {why}")
    return None


_parallel_seeds = ParallelSeeds()


def _seed_parallel_copy(tokenizer_manager: Any, tokenized_obj: Any, *args: Any, **kwargs: Any) -> None:
    """BEFORE hook of TokenizerManager._send_one_request: copy i of a seeded n > 1 request gets
    seed + i (its own SamplingParams: the n copies share one)."""
    params = getattr(tokenized_obj, "sampling_params", None)
    if params is None:
        return None
    seed = _parallel_seeds.seed_for(params)
    if seed is not None and seed != params.sampling_seed:
        own = copy.copy(params)
        own.sampling_seed = seed
        tokenized_obj.sampling_params = own
    return None


def _release_on_idle(result: Any, scheduler: Any, *args: Any, **kwargs: Any) -> None:
    """AFTER hook of Scheduler.on_idle: free atom-go's state of requests that finished last."""
    from atom_go.sglang.worker import AtomGoTpModelWorker

    worker = getattr(scheduler, "tp_worker", None)
    if isinstance(worker, AtomGoTpModelWorker):
        worker.release_finished()


def _refuser(error: SGLangShapeError) -> Callable[..., None]:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise SGLangShapeError(str(error))

    return refuse


def _import_worker(version: str) -> type:
    """atom-go's TpModelWorker. The worker imports SGLang names at module level: a rename that the
    class shapes of compat do not cover shows up here, as a shape error. (compat itself never
    imports the worker, which imports compat.)"""
    try:
        from atom_go.sglang.worker import AtomGoTpModelWorker
    except ImportError as exc:
        raise shape_error([f"atom_go.sglang.worker does not import against it: {exc}"], version) from None
    return AtomGoTpModelWorker


def _accept_served_quantization() -> None:
    """SGLang registers the ``mxfp4`` quantization only on platforms with its kernels, and its
    ModelConfig refuses a checkpoint whose quant_method it has not registered. atom-go serves
    gpt-oss's MXFP4 experts itself (SGLang never loads the weights), so SGLang only has to accept
    the name."""
    from sglang.srt.layers.quantization import QUANTIZATION_METHODS
    from sglang.srt.layers.quantization.mxfp4 import Mxfp4Config

    QUANTIZATION_METHODS.setdefault("mxfp4", Mxfp4Config)


def install(overrides: dict[str, Any] | None = None) -> str:
    """Checks SGLang and registers atom-go's hooks; returns the SGLang version.

    Raises SGLangShapeError (after registering the refusing hooks) when SGLang changed shape.
    ``overrides`` is passed to :func:`atom_go.sglang.compat.check_sglang`.
    """
    global _installed
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    try:
        version = check_sglang(overrides=overrides)
        worker_class = _import_worker(version)
    except SGLangShapeError as exc:
        log.error("%s", exc)
        refuse = _refuser(exc)
        for target in (SCHEDULER_INIT_TARGET, SERVER_ARGS_RESOLVE_TARGET):
            HookRegistry.register(target, refuse, HookType.BEFORE)
        raise
    if _installed:
        return version
    _accept_served_quantization()
    HookRegistry.register(TP_WORKER_TARGET, worker_class, HookType.REPLACE)
    HookRegistry.register(SERVER_ARGS_RESOLVE_TARGET, _prepare_server_args, HookType.BEFORE)
    HookRegistry.register(ADMISSION_TARGET, _refuse_unsupported, HookType.BEFORE)
    HookRegistry.register(SEND_TARGET, _seed_parallel_copy, HookType.BEFORE)
    HookRegistry.register(TOKENIZER_INIT_TARGET, _attach_health, HookType.AFTER)
    HookRegistry.register(IDLE_TARGET, _release_on_idle, HookType.AFTER)
    _installed = True
    log.info("atom-go's SGLang plugin attached to sglang %s", version)
    return version
