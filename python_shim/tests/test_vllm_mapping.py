"""SchedulerOutput <-> msgpack against vLLM's real dataclasses, and through the real plugin."""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Iterator
from typing import Any

import msgpack
import numpy as np
import pytest

pytest.importorskip("vllm")

from vllm.sampling_params import SamplingParams, StructuredOutputsParams
from vllm.v1.core.sched.output import CachedRequestData, NewRequestData, SchedulerOutput
from vllm.v1.outputs import LogprobsLists, ModelRunnerOutput

from atom_go import wire
from atom_go.client import EngineClient
from atom_go.plugin import PluginProcess, PluginRPCError
from atom_go.vllm import mapping

EOS = 2


def _sp(**kw: Any) -> SamplingParams:
    sp = SamplingParams(**kw)
    sp.update_from_generation_config({}, eos_token_id=EOS)
    return sp


def _new(
    rid: str, prompt: list[int], blocks: list[int], sp: SamplingParams | None = None, computed: int = 0
) -> NewRequestData:
    return NewRequestData(
        req_id=rid,
        prompt_token_ids=prompt,
        mm_features=[],
        sampling_params=sp or _sp(temperature=0.0, max_tokens=16),
        pooling_params=None,
        block_ids=(blocks,),
        num_computed_tokens=computed,
        lora_request=None,
    )


def _cached(reqs: list[tuple[str, int, int, list[int] | None]], resumed: set[str] | None = None) -> CachedRequestData:
    """reqs: (req_id, num_computed_tokens, num_output_tokens, new block ids or None)."""
    return CachedRequestData(
        req_ids=[r[0] for r in reqs],
        resumed_req_ids=resumed or set(),
        new_token_ids=[],
        all_token_ids={},
        new_block_ids=[None if r[3] is None else (r[3],) for r in reqs],
        num_computed_tokens=[r[1] for r in reqs],
        num_output_tokens=[r[2] for r in reqs],
    )


def _so(
    new: list[NewRequestData] | None = None,
    cached: CachedRequestData | None = None,
    sched: dict[str, int] | None = None,
    finished: set[str] | None = None,
) -> SchedulerOutput:
    sched = sched or {}
    return SchedulerOutput(
        scheduled_new_reqs=new or [],
        scheduled_cached_reqs=cached or CachedRequestData.make_empty(),
        num_scheduled_tokens=sched,
        total_num_scheduled_tokens=sum(sched.values()),
        scheduled_spec_decode_tokens={},
        scheduled_encoder_inputs={},
        finished_req_ids=finished or set(),
        free_encoder_mm_hashes=[],
    )


def test_payload_fields() -> None:
    sp = _sp(
        temperature=0.7,
        top_p=0.9,
        top_k=-1,
        min_p=0.05,
        seed=11,
        max_tokens=9,
        min_tokens=2,
        presence_penalty=0.5,
        frequency_penalty=-0.5,
        repetition_penalty=1.1,
        stop_token_ids=[9],
        logprobs=3,
        stop=["xyz"],
    )
    so = _so(
        new=[_new("n1", [1, 2, 3], [4, 5], sp, computed=0)],
        cached=_cached([("c1", 7, 3, [9]), ("c2", 12, 5, None), ("c3", 0, 2, [1, 2])], resumed={"c3"}),
        sched={"n1": 3, "c1": 1, "c2": 1, "c3": 7},
        finished={"gone"},
    )
    payload = mapping.scheduler_output_to_payload(so)
    new = payload["scheduled_new_reqs"][0]
    assert new["req_id"] == "n1" and new["prompt_token_ids"] == [1, 2, 3]
    assert new["block_ids"] == [[4, 5]] and new["num_computed_tokens"] == 0
    p = new["sampling_params"]
    assert p["temperature"] == 0.7 and p["top_p"] == 0.9 and p["top_k"] == 0 and p["min_p"] == 0.05
    assert p["seed"] == 11 and p["max_tokens"] == 9 and p["min_tokens"] == 2 and p["logprobs"] == 3
    assert p["presence_penalty"] == 0.5 and p["frequency_penalty"] == -0.5 and p["repetition_penalty"] == 1.1
    assert p["stop_token_ids"] == [EOS, 9]  # vLLM's whole stop set, so min_tokens masks EOS too
    assert p["stop"] == []  # vLLM applies stop strings itself
    c = payload["scheduled_cached_reqs"]
    assert c["req_ids"] == ["c1", "c2", "c3"]
    assert c["resumed_from_preemption"] == [False, False, True]
    assert c["new_block_ids"] == [[[9]], [], [[1, 2]]]
    assert c["num_computed_tokens"] == [7, 12, 0] and c["num_output_tokens"] == [3, 5, 2]
    assert payload["num_scheduled_tokens"] == {"n1": 3, "c1": 1, "c2": 1, "c3": 7}
    assert payload["total_num_scheduled_tokens"] == 12
    assert payload["finished_req_ids"] == ["gone"]
    decoded = msgpack.unpackb(mapping.encode_scheduler_output(so))
    assert decoded["wire_version"] == 1 and decoded["scheduled_cached_reqs"]["req_ids"] == ["c1", "c2", "c3"]


@pytest.mark.parametrize(
    ("kw", "name"),
    [
        ({"prompt_logprobs": 1}, "prompt_logprobs"),
        ({"logit_bias": {3: 1.0}}, "logit_bias"),
        ({"allowed_token_ids": [1, 2]}, "allowed_token_ids"),
        ({"bad_words": ["x"]}, "bad_words"),
        ({"structured_outputs": StructuredOutputsParams(regex="a+")}, "structured outputs"),
        ({"extra_args": {"foo": 1}}, "extra_args (foo)"),
        ({"logprobs": -1}, "logprobs=-1"),
        ({"logprobs": 21}, "logprobs=21"),
    ],
)
def test_unsupported_sampling_parameters_are_named(kw: dict[str, Any], name: str) -> None:
    with pytest.raises(mapping.UnsupportedRequestError) as err:
        mapping.sampling_params_to_wire(_sp(**kw))
    assert str(err.value).startswith(name)
    assert "refuses rather than ignores" in str(err.value)


def test_spec_decode_tokens_and_placeholders() -> None:
    # a verifies two drafts; b is a resumed decode vLLM padded with -1 placeholders, which
    # atom-go leaves out of its scheduled tokens; c has no drafts.
    so = _so(
        cached=_cached([("a", 9, 3, None), ("b", 4, 1, None), ("c", 6, 1, None)]),
        sched={"a": 3, "b": 4, "c": 1},
    )
    so.scheduled_spec_decode_tokens = {"a": [11, 12], "b": [-1, -1, -1]}
    p = mapping.scheduler_output_to_payload(so)
    assert p["scheduled_spec_decode_tokens"] == {"a": [11, 12]}
    assert p["num_scheduled_tokens"] == {"a": 3, "b": 1, "c": 1}
    assert p["total_num_scheduled_tokens"] == 5
    so.scheduled_spec_decode_tokens = {"a": [-1, 12]}
    with pytest.raises(wire.WireError, match="placeholder before a draft"):
        mapping.scheduler_output_to_payload(so)


def test_draft_token_ids() -> None:
    res = wire.ExecuteResult(["a", "b"], [[7, 8], [9]], [None, None], draft_token_ids=[[1, 2, 3], []])
    assert mapping.draft_token_ids(res) == (["a", "b"], [[1, 2, 3], []])
    assert mapping.draft_token_ids(wire.ExecuteResult(["a"], [[7]], [None])) is None
    assert mapping.draft_token_ids(wire.ExecuteResult(["a"], [[7]], [None], draft_token_ids=[[]])) is None


def _spec_config(**kw: Any) -> Any:
    from vllm.config import SpeculativeConfig

    sc = SpeculativeConfig.__new__(SpeculativeConfig)  # the fields only: no target model to resolve
    for name, field in SpeculativeConfig.__dataclass_fields__.items():
        object.__setattr__(sc, name, kw.get(name, field.default if field.default is not dataclasses.MISSING else None))
    return sc


@pytest.mark.parametrize(
    ("kw", "want"),
    [
        (
            {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 4},
            {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 4},
        ),
        (
            {"method": "draft_model", "num_speculative_tokens": 2, "model": "small"},
            {"method": "draft_model", "num_speculative_tokens": 2, "model": "/resolved/small"},
        ),
        (
            {"method": "mtp", "num_speculative_tokens": 1, "model": "target"},
            {"method": "mtp", "num_speculative_tokens": 1},
        ),
        (
            {"method": "mtp", "num_speculative_tokens": 1, "model": "other"},
            {"method": "mtp", "num_speculative_tokens": 1, "model": "/resolved/other"},
        ),
    ],
)
def test_speculative_config_json(kw: dict[str, Any], want: dict[str, Any]) -> None:
    got = mapping.speculative_config_json(_spec_config(**kw), "/resolved/target", lambda m: f"/resolved/{m}")
    assert got is not None and json.loads(got) == want
    assert mapping.speculative_config_json(None, "/t", str) is None


@pytest.mark.parametrize(
    ("kw", "named"),
    [
        ({"method": "eagle3", "num_speculative_tokens": 2}, "method eagle3"),
        ({"method": "suffix", "num_speculative_tokens": 2}, "method suffix"),
        ({"method": "draft_model", "num_speculative_tokens": 2, "parallel_drafting": True}, "parallel_drafting"),
        (
            {"method": "ngram", "num_speculative_tokens": 2, "num_speculative_tokens_per_batch_size": [(1, 4, 2)]},
            "num_speculative_tokens_per_batch_size",
        ),
    ],
)
def test_unsupported_speculative_config_is_named(kw: dict[str, Any], named: str) -> None:
    problem = mapping.speculative_config_problem(_spec_config(**kw))
    assert problem is not None and named in problem[0]
    with pytest.raises(ValueError, match=named):
        mapping.speculative_config_json(_spec_config(**kw), "/t", str)


def test_unsupported_step_contents() -> None:
    two_groups = _new("b", [1], [1])
    two_groups.block_ids = ([1], [2])
    with pytest.raises(mapping.UnsupportedRequestError, match="2 KV-cache groups"):
        mapping.scheduler_output_to_payload(_so(new=[two_groups], sched={"b": 1}))


def test_result_to_model_runner_output() -> None:
    so = _so(new=[_new("a", [1, 2], [1])], cached=_cached([("b", 4, 1, None)]), sched={"a": 2, "b": 1})
    res = wire.ExecuteResult(
        req_ids=["a", "b"],
        sampled_token_ids=[[7], [8]],
        logprobs=[wire.TokenLogprobs([7, 7, 3], [-0.1, -0.1, -2.0], 1), None],
    )
    out = mapping.result_to_model_runner_output(res, so)
    assert isinstance(out, ModelRunnerOutput)
    assert out.req_ids == ["a", "b"] and out.req_id_to_index == {"a": 0, "b": 1}
    assert out.sampled_token_ids == [[7], [8]]
    assert isinstance(out.logprobs, LogprobsLists)
    assert out.logprobs.logprob_token_ids.dtype == np.int32 and out.logprobs.logprob_token_ids.shape == (2, 3)
    assert out.logprobs.logprobs.dtype == np.float32
    assert out.logprobs.sampled_token_ranks.tolist() == [1, 0]
    with pytest.raises(wire.WireError, match="lacks scheduled requests"):
        mapping.result_to_model_runner_output(wire.ExecuteResult(["a"], [[7]], [None]), so)
    with pytest.raises(wire.WireError, match="not scheduled"):
        mapping.result_to_model_runner_output(
            wire.ExecuteResult(["a", "b", "c"], [[7], [8], [9]], [None, None, None]), so
        )


def test_verify_step_logprobs_rows_per_token() -> None:
    # A verify step: "a" emitted two accepted drafts and its own token, each with its row; "b"
    # asked for none; "c" one token. vLLM's scheduler slices each request's rows by
    # cu_num_generated_tokens, as from its own rejection sampler.
    so = _so(cached=_cached([("a", 4, 1, None), ("b", 4, 1, None), ("c", 4, 1, None)]), sched={"a": 3, "b": 1, "c": 1})
    row = lambda tok, lp: wire.TokenLogprobs([tok, 2], [lp, -3.0], 1)  # noqa: E731
    res = wire.ExecuteResult(
        req_ids=["a", "b", "c"],
        sampled_token_ids=[[7, 8, 9], [4], [5]],
        logprobs=[row(7, -0.1), None, row(5, -0.5)],
        more_logprobs=[[row(8, -0.2), row(9, -0.3)], [], []],
    )
    out = mapping.result_to_model_runner_output(res, so)
    assert out.logprobs is not None and out.logprobs.cu_num_generated_tokens == [0, 3, 4, 5]
    a = out.logprobs.slice_request(0, 3)
    assert a.logprob_token_ids[:, 0].tolist() == [7, 8, 9]
    np.testing.assert_allclose(a.logprobs[:, 0], [-0.1, -0.2, -0.3])
    c = out.logprobs.slice_request(2, 1)
    assert c.logprob_token_ids[:, 0].tolist() == [5] and c.sampled_token_ranks.tolist() == [1]
    # A step where every request sampled one token keeps vLLM's one-row-per-request layout.
    one = wire.ExecuteResult(["a", "b", "c"], [[7], [4], [5]], [row(7, -0.1), None, row(5, -0.5)])
    plain = mapping.result_to_model_runner_output(one, so).logprobs
    assert plain is not None and plain.cu_num_generated_tokens is None
    assert plain.slice_request(2, 1).logprob_token_ids[:, 0].tolist() == [5]


# ---------------------------------------------------------------- through the real plugin

REFERENCE = pathlib.Path(__file__).resolve().parents[2] / "testdata" / "models" / "qwen2-bf16" / "reference.json"


@pytest.fixture(scope="module")
def host_engine(plugin_binary: str, model_dir: str) -> Iterator[EngineClient]:
    with PluginProcess(plugin_binary) as p:
        c = EngineClient(p)
        c.load_model(model_dir, num_kv_blocks=64)
        c.init_kv_cache(64, 16)
        yield c


def _step(c: EngineClient, so: SchedulerOutput) -> ModelRunnerOutput:
    return mapping.result_to_model_runner_output(
        wire.decode_result(c.execute_model(mapping.encode_scheduler_output(so))), so
    )


def test_vllm_steps_through_atom_go_match_the_reference(host_engine: EngineClient) -> None:
    cases = json.loads(REFERENCE.read_text())["cases"]
    a, b = cases[0], cases[1]  # 5 and 19 prompt tokens
    a_ref = [s["token"] for s in a["steps"]]
    b_ref = [s["token"] for s in b["steps"]]
    sp = _sp(temperature=0.0, max_tokens=12, logprobs=2)
    # Step 1: a is prefilled whole, b's prompt in a chunk of 10 (no token for b yet).
    out = _step(
        host_engine,
        _so(
            new=[_new("a", a["prompt_ids"], [1], sp), _new("b", b["prompt_ids"], [2], _sp(temperature=0.0))],
            sched={"a": len(a["prompt_ids"]), "b": 10},
        ),
    )
    assert out.sampled_token_ids == [[a_ref[0]], []]
    assert out.logprobs is not None
    row = out.logprobs.logprob_token_ids[0].tolist()
    assert row == [a_ref[0], *a["steps"][0]["top_ids"][:2]]
    np.testing.assert_allclose(
        out.logprobs.logprobs[0], [a["steps"][0]["top_logprobs"][i] for i in (0, 0, 1)], atol=2e-2
    )
    assert out.logprobs.sampled_token_ranks[0] == 1
    # Step 2: b's last 9 prompt tokens need a second block; a decodes.
    out = _step(
        host_engine,
        _so(
            cached=_cached([("a", len(a["prompt_ids"]), 1, None), ("b", 10, 0, [3])]),
            sched={"a": 1, "b": len(b["prompt_ids"]) - 10},
        ),
    )
    assert out.sampled_token_ids == [[a_ref[1]], [b_ref[0]]]
    got_a, got_b = a_ref[:2], b_ref[:1]
    # Decode a and b together; vLLM never resends the sampled tokens.
    for _ in range(4):
        na, nb = len(a["prompt_ids"]) + len(got_a) - 1, len(b["prompt_ids"]) + len(got_b) - 1
        out = _step(
            host_engine,
            _so(cached=_cached([("a", na, len(got_a), None), ("b", nb, len(got_b), None)]), sched={"a": 1, "b": 1}),
        )
        got_a.append(out.sampled_token_ids[0][0])
        got_b.append(out.sampled_token_ids[1][0])
    assert got_a == a_ref[: len(got_a)]
    assert got_b == b_ref[: len(got_b)]
    assert host_engine.describe().running_requests == 2
    # b is preempted and resumed with a new block table: every known token is computed again
    # (the prompt and what it sampled, which vLLM does not resend), in the same step that frees a.
    nb_tokens = len(b["prompt_ids"]) + len(got_b)
    out = _step(
        host_engine,
        _so(cached=_cached([("b", 0, len(got_b), [5, 6])], resumed={"b"}), sched={"b": nb_tokens}, finished={"a"}),
    )
    got_b.append(out.sampled_token_ids[0][0])
    assert got_b == b_ref[: len(got_b)]
    assert host_engine.describe().running_requests == 1  # a's state was freed
    _step(host_engine, _so(finished={"b"}))
    assert host_engine.describe().running_requests == 0


def test_bad_step_is_refused_by_the_engine(host_engine: EngineClient) -> None:
    so = _so(cached=_cached([("never-seen", 3, 1, None)]), sched={"never-seen": 1})
    with pytest.raises(PluginRPCError, match="NOT_FOUND"):
        _step(host_engine, so)
    far = _new("far", [1, 2, 3], [999])
    with pytest.raises(PluginRPCError, match="outside the host's KV cache"):
        _step(host_engine, _so(new=[far], sched={"far": 3}))
