"""The shape of the SGLang classes atom-go's plugin relies on, checked before it attaches.

SGLang has no stable executor API: the plugin subclasses ``TpModelWorker`` and ``ModelRunner`` and
reads ``ScheduleBatch`` and ``Req`` fields directly. A release that renames one of them must make
the plugin refuse to start with a message naming the SGLang version and what changed, never run
with a half-working worker. :func:`check_sglang` is that check; :func:`check_req` checks a live
request the first time the worker sees one (instance attributes cannot be seen on the class).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from atom_go.sglang import ENV_ANY_VERSION, SGLANG_PIN, SUPPORTED_SGLANG_VERSIONS


class SGLangShapeError(RuntimeError):
    """The installed SGLang is not the shape atom-go's plugin was written for."""


def sglang_version() -> str:
    """The installed SGLang's version string ("unknown" when it has none)."""
    try:
        import sglang
    except ImportError as exc:
        raise SGLangShapeError(
            f"atom-go's SGLang plugin needs SGLang ({SGLANG_PIN}), which does not import: {exc}"
        ) from None
    return str(getattr(sglang, "__version__", "unknown"))


def shape_error(problems: Sequence[str], version: str | None = None) -> SGLangShapeError:
    """The error listing ``problems`` for the installed (or given) SGLang version."""
    version = version or sglang_version()
    lines = "\n".join(f"  - {p}" for p in problems)
    return SGLangShapeError(
        f"atom-go's SGLang plugin cannot attach to sglang {version}: it was written for sglang "
        f"{', '.join(SUPPORTED_SGLANG_VERSIONS)} and these have changed shape:\n{lines}\n"
        f"Install {SGLANG_PIN} (the supported release) or an atom-go built for sglang {version}."
    )


@dataclasses.dataclass(frozen=True)
class ClassShape:
    """What the plugin needs of one SGLang class.

    ``methods`` maps a method name to the parameter names (after ``self``) the plugin passes or
    overrides, in order; ``attributes`` are class-level names (methods, properties or annotated
    fields) that must exist.
    """

    module: str
    name: str
    methods: Mapping[str, Sequence[str]] = dataclasses.field(default_factory=dict)
    attributes: Sequence[str] = ()
    fields: Sequence[str] = ()  # record fields (dataclass or msgspec Struct)

    @property
    def target(self) -> str:
        return f"{self.module}.{self.name}"


# Everything the worker (atom_go.sglang.worker) touches on SGLang's classes.
SHAPES: tuple[ClassShape, ...] = (
    ClassShape(
        "sglang.srt.managers.tp_worker",
        "TpModelWorker",
        methods={
            "__init__": ("server_args", "gpu_id", "nccl_port", "is_draft_worker"),
            "forward_batch_generation": ("batch", "forward_batch", "pp_proxy_tensors", "is_verify"),
            "_init_model_runner": (),
            "_init_model_config": (),
            "get_pad_input_ids_func": (),
            "get_memory_pool": (),
            "get_worker_info": (),
            "alloc_memory_pool": (),
            "forward_batch_embedding": ("batch",),
            "forward_batch_split_prefill": ("batch",),
        },
        attributes=("model_runner",),
    ),
    ClassShape(
        "sglang.srt.model_executor.model_runner",
        "ModelRunner",
        methods={
            "__init__": (
                "model_config",
                "mem_fraction_static",
                "gpu_id",
                "nccl_port",
                "server_args",
                "is_draft_worker",
                "req_to_token_pool",
                "token_to_kv_pool_allocator",
                "memory_pool_config",
            ),
            "initialize": (),
            "load_model": (),
            "alloc_memory_pool": (),
            "init_attention_backends": (),
            "init_ngram_embedding_manager": (),
        },
    ),
    ClassShape(
        "sglang.srt.managers.schedule_batch",
        "ScheduleBatch",
        attributes=(
            "reqs",
            "forward_mode",
            "seq_lens_cpu",
            "prefix_lens",
            "extend_lens",
            "out_cache_loc",
            "req_pool_indices",
            "req_pool_indices_cpu",
            "req_to_token_pool",
            "return_logprob",
            "top_logprobs_nums",
        ),
    ),
    ClassShape(
        "sglang.srt.managers.schedule_batch",
        "Req",
        methods={
            "__init__": ("rid", "origin_input_text", "origin_input_ids", "sampling_params", "return_logprob"),
            "finished": (),
            "set_finish_with_abort": ("error_msg",),
        },
    ),
    ClassShape(
        "sglang.srt.constrained.grammar_manager",
        "GrammarManager",
        methods={"process_req_with_grammar": ("req",)},
    ),
    ClassShape(
        "sglang.srt.managers.tokenizer_manager",
        "TokenizerManager",
        methods={"_send_one_request": ("tokenized_obj",)},
    ),
    ClassShape(
        "sglang.srt.managers.io_struct",
        "TokenizedGenerateReqInput",
        fields=("sampling_params",),
    ),
    ClassShape(
        "sglang.srt.managers.scheduler",
        "Scheduler",
        methods={"__init__": ("server_args", "port_args"), "on_idle": ()},
    ),
    ClassShape(
        "sglang.srt.managers.utils",
        "GenerationBatchResult",
        fields=("logits_output", "next_token_ids", "can_run_cuda_graph"),
    ),
    ClassShape(
        "sglang.srt.layers.logits_processor",
        "LogitsProcessorOutput",
        fields=(
            "next_token_logits",
            "next_token_logprobs",
            "next_token_top_logprobs_val",
            "next_token_top_logprobs_idx",
            "next_token_token_ids_logprobs_val",
            "next_token_token_ids_logprobs_idx",
        ),
    ),
    ClassShape(
        "sglang.srt.model_executor.forward_batch_info",
        "ForwardMode",
        attributes=("is_idle", "is_decode", "is_extend", "is_mixed"),
    ),
    ClassShape(
        "sglang.srt.mem_cache.memory_pool",
        "ReqToTokenPool",
        methods={"__init__": ("size", "max_context_len", "device", "enable_memory_saver")},
    ),
    ClassShape(
        "sglang.srt.mem_cache.memory_pool",
        "KVCache",
        attributes=("get_key_buffer", "get_value_buffer", "get_kv_buffer", "set_kv_buffer"),
    ),
    ClassShape(
        "sglang.srt.mem_cache.allocator",
        "TokenToKVPoolAllocator",
        methods={"__init__": ("size", "dtype", "device", "kvcache", "need_sort")},
    ),
    ClassShape(
        "sglang.srt.model_executor.model_runner_components.layer_setup",
        "ModelLayerInfo",
        fields=("start_layer", "end_layer", "num_effective_layers"),
    ),
    ClassShape(
        "sglang.srt.sampling.sampling_params",
        "SamplingParams",
        attributes=(
            "temperature",
            "top_p",
            "top_k",
            "min_p",
            "frequency_penalty",
            "presence_penalty",
            "repetition_penalty",
            "min_new_tokens",
            "max_new_tokens",
            "n",
            "stop_token_ids",
            "ignore_eos",
            "sampling_seed",
            "logit_bias",
            "json_schema",
            "regex",
            "ebnf",
            "structural_tag",
        ),
    ),
    ClassShape(
        "sglang.srt.server_args",
        "ServerArgs",
        methods={"resolve_once": ()},
        attributes=("device", "tp_size", "pp_size", "dp_size", "speculative_algorithm", "disable_overlap_schedule"),
    ),
    ClassShape(
        "sglang.srt.plugins.hook_registry",
        "HookRegistry",
        methods={"register": ("target", "hook", "hook_type")},
    ),
)

# The attributes of a live Req the worker reads (checked on the first request it sees).
REQ_ATTRIBUTES = (
    "rid",
    "origin_input_ids",
    "output_ids",
    "sampling_params",
    "kv",
    "retraction_count",
    "return_logprob",
    "logprob",
    "logprob_start_len",
    "to_finish",
    "grammar",
    "custom_logit_processor",
    "input_embeds",
    "multimodal_inputs",
)


def _class_names(cls: type) -> set[str]:
    names: set[str] = set()
    for klass in cls.__mro__:
        names.update(vars(klass))
        names.update(getattr(klass, "__annotations__", {}))
    return names


def _check_params(qualname: str, fn: Any, want: Sequence[str]) -> list[str]:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return [f"{qualname} has no inspectable signature"]
    params = [p for p in sig.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    names = [p.name for p in params]
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    missing = [p for p in want if p not in names]
    if missing:
        return [f"{qualname}({', '.join(names)}) lost parameter(s) {', '.join(missing)}"]
    # Positional order matters where the plugin overrides the method.
    order = [names.index(p) for p in want]
    if order != sorted(order) or (want and order[0] != 0 and not qualname.endswith("__init__")):
        return [f"{qualname}({', '.join(names)}) reordered its parameters; expected ({', '.join(want)}, ...)"]
    return []


def check_shape(shape: ClassShape, cls: Any | None = None) -> list[str]:
    """The ways ``cls`` (by default the class ``shape`` names) differs from ``shape``."""
    if cls is None:
        try:
            module = importlib.import_module(shape.module)
        except Exception as exc:  # an import error of any kind means the module changed
            return [f"module {shape.module} does not import: {type(exc).__name__}: {exc}"]
        cls = getattr(module, shape.name, None)
        if cls is None:
            return [f"{shape.target} is gone"]
    if not isinstance(cls, type):
        return [f"{shape.target} is a {type(cls).__name__}, not a class"]
    problems: list[str] = []
    names = _class_names(cls)
    for method, params in shape.methods.items():
        fn = inspect.getattr_static(cls, method, None)
        if fn is None:
            problems.append(f"{shape.target}.{method} is gone")
            continue
        if isinstance(fn, (staticmethod, classmethod)):
            fn = fn.__func__
        if not callable(fn):
            problems.append(f"{shape.target}.{method} is not a method")
            continue
        problems += _check_params(f"{shape.target}.{method}", fn, params)
    problems += [f"{shape.target}.{a} is gone" for a in shape.attributes if a not in names]
    if shape.fields:
        have = _field_names(cls)
        problems += [f"{shape.target}.{f} (a field) is gone" for f in shape.fields if f not in have]
    return problems


def _field_names(cls: type) -> set[str]:
    """A record class's fields: a dataclass's, a msgspec Struct's, else its annotations."""
    if dataclasses.is_dataclass(cls):
        return {f.name for f in dataclasses.fields(cls)}
    struct_fields = getattr(cls, "__struct_fields__", None)
    if struct_fields is not None:
        return set(struct_fields)
    names: set[str] = set()
    for klass in cls.__mro__:
        names.update(getattr(klass, "__annotations__", {}))
    return names


def check_sglang(shapes: Iterable[ClassShape] = SHAPES, overrides: Mapping[str, Any] | None = None) -> str:
    """Checks the installed SGLang; returns its version or raises SGLangShapeError.

    ``overrides`` maps a shape's target ("module.Class") to the class to check instead of the
    installed one (used to test the refusal against a changed class).
    """
    version = sglang_version()
    problems: list[str] = []
    if version not in SUPPORTED_SGLANG_VERSIONS and os.environ.get(ENV_ANY_VERSION, "") != "1":
        problems.append(
            f"sglang {version} is not a supported release ({', '.join(SUPPORTED_SGLANG_VERSIONS)}); "
            f"set {ENV_ANY_VERSION}=1 to try it anyway"
        )
    for shape in shapes:
        problems += check_shape(shape, (overrides or {}).get(shape.target))
    if problems:
        raise shape_error(problems, version)
    return version


def check_req(req: Any) -> None:
    """Checks a live SGLang Req for the attributes the worker reads."""
    missing = [a for a in REQ_ATTRIBUTES if not hasattr(req, a)]
    if not hasattr(getattr(req, "kv", None), "req_pool_idx"):
        missing.append("kv.req_pool_idx")
    if missing:
        raise shape_error([f"sglang.srt.managers.schedule_batch.Req instances lost {', '.join(missing)}"])
