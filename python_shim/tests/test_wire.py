"""ExecuteModel's msgpack payloads and results (atom_go.wire)."""

from __future__ import annotations

import math

import msgpack
import pytest

from atom_go import wire


def _result(**over: object) -> bytes:
    body: dict[str, object] = {
        "wire_version": 1,
        "req_ids": ["a", "b"],
        "sampled_token_ids": [[5], []],
        "logprobs": [{"token_ids": [5, 7], "logprobs": [-0.5, -1.0], "rank": 1}, None],
    }
    body.update(over)
    return msgpack.packb(body)


def test_encode_payload_stamps_the_wire_version() -> None:
    decoded = msgpack.unpackb(wire.encode_payload({"scheduled_new_reqs": []}))
    assert decoded == {"scheduled_new_reqs": [], "wire_version": 1}


def test_decode_result() -> None:
    r = wire.decode_result(_result())
    assert r.req_ids == ["a", "b"]
    assert r.sampled_token_ids == [[5], []]
    assert r.logprobs[0] == wire.TokenLogprobs(token_ids=[5, 7], logprobs=[-0.5, -1.0], rank=1)
    assert r.logprobs[1] is None


def test_decode_result_without_logprobs_and_nil_lists() -> None:
    r = wire.decode_result(_result(logprobs=None, sampled_token_ids=[None, [3]]))
    assert r.sampled_token_ids == [[], [3]]
    assert r.logprobs == [None, None]


def test_decode_result_with_drafts() -> None:
    # A verify step returns the accepted drafts and the target's token; the next drafts ride along.
    r = wire.decode_result(_result(sampled_token_ids=[[5, 6, 9], []], logprobs=None, draft_token_ids=[[1, 2], None]))
    assert r.sampled_token_ids == [[5, 6, 9], []]
    assert r.draft_token_ids == [[1, 2], []]
    assert wire.decode_result(_result()).draft_token_ids == []


def _row(tok: int) -> dict[str, object]:
    return {"token_ids": [tok, 2], "logprobs": [-0.25, -1.5], "rank": 1}


def test_decode_result_with_more_logprobs() -> None:
    # A verify step's tokens after the first carry their rows in more_logprobs.
    r = wire.decode_result(
        _result(
            sampled_token_ids=[[5, 6, 9], [3]], logprobs=[_row(5), _row(3)], more_logprobs=[[_row(6), _row(9)], None]
        )
    )
    assert [lp.token_ids[0] for lp in r.token_logprobs(0)] == [5, 6, 9]
    assert [lp.token_ids[0] for lp in r.token_logprobs(1)] == [3]
    assert r.more_logprobs == [
        [wire.TokenLogprobs([6, 2], [-0.25, -1.5], 1), wire.TokenLogprobs([9, 2], [-0.25, -1.5], 1)],
        [],
    ]
    assert wire.decode_result(_result()).more_logprobs == []
    assert wire.decode_result(_result(logprobs=None)).token_logprobs(0) == []


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\xc1", "not msgpack"),
        (msgpack.packb([1, 2]), "want a map"),
        (_result(wire_version=2), "wire_version 2"),
        (_result(wire_version=None), "wire_version None"),
        (_result(sampled_token_ids=[[1]]), "lists disagree"),
        (_result(req_ids="ab"), "req_ids is str"),
        (_result(req_ids=["a", 3]), "non-string"),
        (_result(sampled_token_ids=[[-1], []]), "bad token id"),
        (_result(logprobs=[{"token_ids": [6], "logprobs": [0.0], "rank": 1}, None]), "start with the sampled token"),
        (_result(logprobs=[{"token_ids": [5], "logprobs": [], "rank": 1}, None]), "malformed"),
        (_result(logprobs=[7, None]), "not a map"),
        (_result(draft_token_ids=[[1]]), "1 draft_token_ids"),
        (_result(more_logprobs=[[]]), "1 more_logprobs"),
        (
            _result(sampled_token_ids=[[5, 6, 9], []], more_logprobs=[[_row(6)], None]),
            "1 more_logprobs\\[0\\] rows for 3",
        ),
        (
            _result(sampled_token_ids=[[5, 6], []], more_logprobs=[[_row(7)], None]),
            "more_logprobs\\[0\\]\\[0\\] does not start",
        ),
        (_result(sampled_token_ids=[[5], [3, 4]], more_logprobs=[None, [_row(4)]]), "without logprobs\\[1\\]"),
        (_result(draft_token_ids=[[1], [-2]]), "draft_token_ids\\[1\\] holds a bad token id"),
        (_result(draft_token_ids=[[1], 3]), "draft_token_ids\\[1\\] is int"),
    ],
)
def test_bad_results(data: bytes, message: str) -> None:
    with pytest.raises(wire.WireError, match=message):
        wire.decode_result(data)


def test_sampling_params_bounds() -> None:
    sp = wire.sampling_params(temperature=0, stop_token_ids=[2], logprobs=3, seed=7)
    assert sp["temperature"] == 0.0 and sp["stop_token_ids"] == [2] and sp["logprobs"] == 3 and sp["seed"] == 7
    with pytest.raises(wire.WireError, match="temperature"):
        wire.sampling_params(temperature=math.nan)
    with pytest.raises(wire.WireError, match="logprobs 21"):
        wire.sampling_params(logprobs=21)
    with pytest.raises(wire.WireError, match="stop token ids"):
        wire.sampling_params(stop_token_ids=list(range(5000)))


def test_unencodable_payload() -> None:
    with pytest.raises(wire.WireError, match="cannot encode"):
        wire.encode_payload({"x": object()})
