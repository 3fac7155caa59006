"""vLLM 0.33.0's SchedulerOutput <-> atom-go's ExecuteModel msgpack payload and result.

Pure functions over vLLM's real dataclasses (vllm.v1.core.sched.output, vllm.v1.outputs): the
executor calls them every step, the unit tests call them directly.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from atom_go import wire

if TYPE_CHECKING:
    from vllm.config import SpeculativeConfig
    from vllm.pooling_params import PoolingParams
    from vllm.sampling_params import SamplingParams
    from vllm.v1.core.sched.output import NewRequestData, SchedulerOutput
    from vllm.v1.outputs import ModelRunnerOutput


class UnsupportedRequestError(ValueError):
    """A request uses something atom-go does not do; the message names it, ``parameter`` too."""

    def __init__(self, message: str, parameter: str | None = None) -> None:
        super().__init__(message)
        self.parameter = parameter


def _refuse(what: str, why: str = "atom-go does not support it") -> UnsupportedRequestError:
    return UnsupportedRequestError(
        f"{what}: {why}. Remove it from the request (atom-go refuses rather than ignores it).",
        parameter=what.split(" ", 1)[0].split("=", 1)[0],
    )


def check_sampling_params(sp: SamplingParams) -> None:
    """Raises UnsupportedRequestError naming the first parameter atom-go cannot honour."""
    if sp.prompt_logprobs is not None:
        raise _refuse("prompt_logprobs")
    if getattr(sp, "prompt_logprob_token_ids", None) is not None:
        raise _refuse("prompt_logprob_token_ids")
    if getattr(sp, "logprob_token_ids", None) is not None:
        raise _refuse("logprob_token_ids")
    if sp.logprobs is not None and not 0 <= sp.logprobs <= wire.MAX_LOGPROBS:
        raise _refuse(f"logprobs={sp.logprobs}", f"atom-go returns at most {wire.MAX_LOGPROBS} top logprobs per token")
    if sp.structured_outputs is not None:
        raise _refuse("structured outputs (guided decoding, response_format, structured_outputs)")
    if sp.logit_bias:
        raise _refuse("logit_bias")
    if sp.allowed_token_ids is not None:
        raise _refuse("allowed_token_ids")
    if sp.bad_words:
        raise _refuse("bad_words")
    if sp.extra_args:
        raise _refuse(f"extra_args ({', '.join(sorted(sp.extra_args))})", "atom-go has no custom logits processors")
    if getattr(sp, "thinking_token_budget", None) is not None:
        raise _refuse("thinking_token_budget")
    if getattr(sp, "repetition_detection", None) is not None:
        raise _refuse("repetition_detection")
    if getattr(sp, "trace_decode_token_ids", None) is not None:
        raise _refuse("trace_decode_token_ids")
    if sp.top_k is not None and sp.top_k < -1:
        raise _refuse(f"top_k={sp.top_k}", "top_k must be -1, 0 or positive")


def check_pooling_params(pp: PoolingParams | None) -> None:
    """atom-go generates; it does not pool."""
    if pp is not None:
        raise _refuse("pooling (embedding, classification, scoring)", "atom-go only generates text")


def sampling_params_to_wire(sp: SamplingParams) -> dict[str, Any]:
    """Maps vLLM's SamplingParams onto bridge.SamplingParams, refusing what atom-go lacks.

    vLLM applies stop strings, stop tokens, max_tokens and detokenisation itself; atom-go
    samples (temperature, top-p/k, min-p, penalties, seed) and masks every stop token before
    min_tokens, so it gets vLLM's full stop-token set (EOS included).
    """
    check_sampling_params(sp)
    stop_ids = sorted(set(sp.all_stop_token_ids) | set(sp.stop_token_ids or []))
    return wire.sampling_params(
        temperature=sp.temperature,
        top_p=sp.top_p,
        top_k=0 if sp.top_k in (None, -1) else sp.top_k,
        min_p=sp.min_p,
        seed=sp.seed,
        repetition_penalty=sp.repetition_penalty,
        presence_penalty=sp.presence_penalty,
        frequency_penalty=sp.frequency_penalty,
        max_tokens=sp.max_tokens or 0,
        min_tokens=sp.min_tokens,
        ignore_eos=sp.ignore_eos,
        stop_token_ids=stop_ids,
        logprobs=sp.logprobs,
    )


def _block_groups(groups: Iterable[Iterable[int]] | None, where: str) -> list[list[int]]:
    if groups is None:
        return []
    out = [list(g) for g in groups]
    if len(out) > 1:
        raise UnsupportedRequestError(
            f"{where}: {len(out)} KV-cache groups; atom-go keeps one (full attention in every layer)"
        )
    return out


# Speculative methods atom-go's engine implements, as vLLM names them (vLLM folds deepseek_mtp
# and the other per-family MTP names into "mtp" before the platform sees the config).
SPEC_METHODS = ("ngram", "draft_model", "mtp")

# SpeculativeConfig settings atom-go does not honour, with the value that means "off".
_SPEC_OFF: dict[str, Any] = {
    "parallel_drafting": False,
    "num_speculative_tokens_per_batch_size": None,
    "enable_adaptive_verification": False,
    "synthetic_acceptance_rates": None,
    "synthetic_acceptance_length": None,
    "use_heterogeneous_vocab": False,
    "draft_lm_head_quantization": None,
}


def speculative_config_problem(sc: SpeculativeConfig) -> tuple[str, str] | None:
    """The first --speculative-config setting atom-go's engine cannot run, and why (None: none).

    vLLM's draft_sample_method is not one of them: either way the rejection sampler keeps the
    target's distribution; atom-go's draft model drafts greedy requests by argmax and samples
    the others' drafts from its own distribution (vLLM's "probabilistic").
    """
    method = str(sc.method)
    if method not in SPEC_METHODS:
        return f"--speculative-config method {method}", f"atom-go's engine implements {', '.join(SPEC_METHODS)}"
    for name, off in _SPEC_OFF.items():
        value = getattr(sc, name, off)
        if value != off:
            return f"--speculative-config {name}={value!r}", "atom-go's speculative decoding does not do it"
    return None


def speculative_config_json(
    sc: SpeculativeConfig | None, target_model: str, resolve: Callable[[str], str]
) -> str | None:
    """atom-go's --speculative-config for vLLM's SpeculativeConfig (None: no speculation).

    ``resolve`` turns a draft model's name (a directory or a Hugging Face id in the cache)
    into a local directory; ``target_model`` is the target's directory, which method mtp
    reads its layer from unless the config names another checkpoint.
    """
    if sc is None:
        return None
    problem = speculative_config_problem(sc)
    if problem is not None:
        raise ValueError(f"atom-go cannot serve with {problem[0]}: {problem[1]}")
    method = str(sc.method)
    body: dict[str, Any] = {"method": method, "num_speculative_tokens": int(sc.num_speculative_tokens)}
    if method == "ngram":
        # vLLM fills both in from each other (5 when neither is given).
        lo, hi = sc.prompt_lookup_min, sc.prompt_lookup_max
        body["prompt_lookup_min"] = int(lo if lo is not None else hi or 5)
        body["prompt_lookup_max"] = int(hi if hi is not None else lo or 5)
    elif method == "draft_model":
        body["model"] = resolve(str(sc.model))
    elif sc.model:
        model = resolve(str(sc.model))
        if model != target_model:
            body["model"] = model
    return json.dumps(body, separators=(",", ":"))


def new_request_to_wire(req: NewRequestData) -> dict[str, Any]:
    """NewRequestData -> bridge.NewRequest."""
    rid = req.req_id
    if req.prompt_token_ids is None or req.prompt_embeds is not None:
        raise _refuse(f"request {rid}: prompt embeddings", "atom-go takes token ids")
    if req.mm_features:
        raise _refuse(f"request {rid}: multimodal inputs", "atom-go serves text-only models")
    if req.lora_request is not None:
        raise _refuse(f"request {rid}: LoRA adapters")
    check_pooling_params(req.pooling_params)
    if req.sampling_params is None:
        raise UnsupportedRequestError(f"request {rid} has no sampling parameters")
    return {
        "req_id": rid,
        "prompt_token_ids": list(req.prompt_token_ids),
        "sampling_params": sampling_params_to_wire(req.sampling_params),
        "block_ids": _block_groups(req.block_ids, f"request {rid}"),
        "num_computed_tokens": int(req.num_computed_tokens),
    }


def scheduler_output_to_payload(so: SchedulerOutput) -> dict[str, Any]:
    """SchedulerOutput -> bridge.ExecuteModelPayload (a dict; wire.encode_payload encodes it)."""
    if so.scheduled_encoder_inputs:
        raise _refuse("encoder inputs", "atom-go serves decoder-only text models")
    cached = so.scheduled_cached_reqs
    if cached.new_token_ids and any(cached.new_token_ids):
        raise _refuse("pipeline parallelism (new_token_ids)")
    resumed = cached.resumed_req_ids
    new_block_ids = [
        _block_groups(b, f"request {rid}") for rid, b in zip(cached.req_ids, cached.new_block_ids, strict=True)
    ]
    drafts, padding = spec_decode_tokens(so)
    scheduled = {rid: int(n) - padding.get(rid, 0) for rid, n in so.num_scheduled_tokens.items()}
    return {
        "scheduled_new_reqs": [new_request_to_wire(r) for r in so.scheduled_new_reqs],
        "scheduled_cached_reqs": {
            "req_ids": list(cached.req_ids),
            "resumed_from_preemption": [rid in resumed for rid in cached.req_ids],
            "new_block_ids": new_block_ids,
            "num_computed_tokens": [int(n) for n in cached.num_computed_tokens],
            "num_output_tokens": [int(n) for n in cached.num_output_tokens],
        },
        "num_scheduled_tokens": scheduled,
        "total_num_scheduled_tokens": int(so.total_num_scheduled_tokens) - sum(padding.values()),
        "finished_req_ids": sorted(so.finished_req_ids),
        "scheduled_spec_decode_tokens": drafts,
    }


def spec_decode_tokens(so: SchedulerOutput) -> tuple[dict[str, list[int]], dict[str, int]]:
    """The drafts each request verifies this step (vLLM's scheduled_spec_decode_tokens), and
    per request the placeholders left out.

    The drafts are atom-go's own (take_draft_token_ids), as many as vLLM's scheduler kept.
    vLLM pads a request that decodes without drafts in a step that speculates (a resumed
    request, a full prefix-cache hit) with -1 placeholders, to keep its CUDA graphs' uniform
    batch; they can never be accepted, so atom-go does not compute them: the request's
    scheduled tokens leave them out, and vLLM counts them as rejected when the result has
    just the target's token.
    """
    drafts: dict[str, list[int]] = {}
    padding: dict[str, int] = {}
    for rid, spec in (so.scheduled_spec_decode_tokens or {}).items():
        ids = [int(t) for t in spec]
        real = ids
        while real and real[-1] < 0:
            real = real[:-1]
        if any(t < 0 for t in real):
            raise wire.WireError(f"request {rid}: scheduled draft tokens {ids} hold a placeholder before a draft")
        if len(real) < len(ids):
            padding[rid] = len(ids) - len(real)
        if real:
            drafts[rid] = real
    return drafts, padding


def draft_token_ids(result: wire.ExecuteResult) -> tuple[list[str], list[list[int]]] | None:
    """The drafts atom-go proposed in a step, as vLLM's DraftTokenIds lists (None: none at all).

    Every request of the step is listed, with an empty list where atom-go proposed nothing
    (vLLM's scheduler already cleared what it scheduled; an empty list keeps it clear).
    """
    if not result.draft_token_ids or not any(result.draft_token_ids):
        return None
    return list(result.req_ids), [list(d) for d in result.draft_token_ids]


def encode_scheduler_output(so: SchedulerOutput) -> bytes:
    """SchedulerOutput -> msgpack bytes for ExecuteModel."""
    return wire.encode_payload(scheduler_output_to_payload(so))


def result_to_model_runner_output(result: wire.ExecuteResult, so: SchedulerOutput) -> ModelRunnerOutput:
    """bridge.ExecuteModelResult -> vLLM's ModelRunnerOutput for the step ``so`` scheduled.

    Every scheduled request must be in the result (vLLM's scheduler looks each one up).
    Logprobs become one LogprobsLists row per request; a request that asked for none, or
    sampled nothing this step, gets a row that vLLM never reads. When a request sampled several
    tokens with logprobs (a verify step), each sampled token gets its row and
    cu_num_generated_tokens says where each request's rows start, as vLLM's rejection sampler
    returns them.
    """
    from vllm.v1.outputs import LogprobsLists, ModelRunnerOutput

    index = {rid: i for i, rid in enumerate(result.req_ids)}
    if len(index) != len(result.req_ids):
        raise wire.WireError("ExecuteModel result names a request twice")
    missing = [rid for rid in so.num_scheduled_tokens if rid not in index]
    if missing:
        raise wire.WireError(f"ExecuteModel result lacks scheduled requests {missing[:5]}")
    extra = [rid for rid in result.req_ids if rid not in so.num_scheduled_tokens]
    if extra:
        raise wire.WireError(f"ExecuteModel result names requests that were not scheduled: {extra[:5]}")
    logprobs = None
    if any(lp is not None for lp in result.logprobs):
        rows = [result.token_logprobs(i) for i in range(len(result.req_ids))]
        # One row per request, or, when a request has several, one per sampled token (a
        # request without logprobs keeps one unread row so every request has a start).
        counts = [max(1, len(r)) for r in rows] if result.more_logprobs else [1] * len(rows)
        starts = np.concatenate(([0], np.cumsum(counts))).astype(int).tolist()
        width = max(len(lp.token_ids) for r in rows for lp in r)
        ids = np.zeros((starts[-1], width), dtype=np.int32)
        vals = np.full((starts[-1], width), -np.inf, dtype=np.float32)
        ranks = np.zeros(starts[-1], dtype=np.int32)
        for i, r in enumerate(rows):
            for j, lp in enumerate(r):
                k = len(lp.token_ids)
                ids[starts[i] + j, :k] = lp.token_ids
                vals[starts[i] + j, :k] = lp.logprobs
                ranks[starts[i] + j] = lp.rank
        logprobs = LogprobsLists(
            logprob_token_ids=ids,
            logprobs=vals,
            sampled_token_ranks=ranks,
            cu_num_generated_tokens=starts if result.more_logprobs else None,
        )
    return ModelRunnerOutput(
        req_ids=list(result.req_ids),
        req_id_to_index=index,
        sampled_token_ids=[list(t) for t in result.sampled_token_ids],
        logprobs=logprobs,
        prompt_logprobs_dict={},
        pooler_output=None,
    )
