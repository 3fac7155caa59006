"""atom_go.sglang.mapping: parallel-sampling seeds and the top-logprobs limit.

Pure Python (no SGLang import): these run with or without SGLang installed. The end-to-end
checks against a real SGLang server are in test_sglang_server.py.
"""

from __future__ import annotations

import dataclasses

import pytest

from atom_go.sglang.mapping import ParallelSeeds, derive_seed, top_logprobs_refusal
from atom_go.wire import MAX_LOGPROBS


@dataclasses.dataclass(eq=False)  # identity, as SGLang's msgspec SamplingParams
class Params:
    """The SamplingParams fields the mapping reads."""

    n: int = 1
    sampling_seed: int | None = None
    max_new_tokens: int | None = 16


@pytest.mark.parametrize(
    ("seed", "index", "want"),
    [
        (1234, 0, 1234),
        (1234, 3, 1237),
        (-5, 2, -3),
        (2**63 - 1, 1, -(2**63)),  # wraps within int64, the range SGLang and atom-go accept
        (2**63 - 2, 3, -(2**63) + 1),
    ],
)
def test_derive_seed(seed: int, index: int, want: int) -> None:
    assert derive_seed(seed, index) == want
    assert -(2**63) <= derive_seed(seed, index) < 2**63


def test_the_copies_of_one_request_get_seed_plus_index() -> None:
    seeds = ParallelSeeds()
    shared = Params(n=4, sampling_seed=100)
    assert [seeds.seed_for(shared) for _ in range(4)] == [100, 101, 102, 103]
    assert seeds.open_groups() == 0, "a group ends with its n-th copy"
    # The same client request sent again is counted from 0 again: reproducible.
    again = Params(n=4, sampling_seed=100)
    assert [seeds.seed_for(again) for _ in range(4)] == [100, 101, 102, 103]


def test_interleaved_requests_are_counted_apart() -> None:
    seeds = ParallelSeeds()
    a, b = Params(n=2, sampling_seed=10), Params(n=3, sampling_seed=10)
    got = [seeds.seed_for(a), seeds.seed_for(b), seeds.seed_for(b), seeds.seed_for(a), seeds.seed_for(b)]
    assert got == [10, 10, 11, 11, 12]


@pytest.mark.parametrize(
    "params",
    [
        Params(n=1, sampling_seed=7),  # one sample: nothing to derive
        Params(n=3, sampling_seed=None),  # unseeded: the engine's generator differs per request
        Params(n=3, sampling_seed=7, max_new_tokens=0),  # SGLang's prefix-cache warm-up request
    ],
    ids=["n1", "unseeded", "warm-up"],
)
def test_requests_left_alone(params: Params) -> None:
    seeds = ParallelSeeds()
    assert seeds.seed_for(params) is None
    assert seeds.open_groups() == 0


def test_an_abandoned_group_is_forgotten() -> None:
    seeds = ParallelSeeds(max_open_groups=2)
    stuck = Params(n=3, sampling_seed=1)
    assert seeds.seed_for(stuck) == 1  # its other copies are never sent
    for i in range(3):
        assert seeds.seed_for(Params(n=2, sampling_seed=50 + i)) == 50 + i
    assert seeds.open_groups() == 2
    assert seeds.seed_for(stuck) == 1, "forgotten: counted as a new group"


@pytest.mark.parametrize(
    ("return_logprob", "num", "refused"),
    [
        (True, 0, False),
        (True, None, False),
        (True, MAX_LOGPROBS, False),
        (True, MAX_LOGPROBS + 1, True),
        (True, 10**6, True),
        (False, 10**6, False),  # no logprobs asked for: the number is not used
    ],
)
def test_top_logprobs_refusal(return_logprob: bool, num: int | None, refused: bool) -> None:
    why = top_logprobs_refusal(return_logprob, num)
    if not refused:
        assert why is None
        return
    assert why is not None
    assert f"top_logprobs_num={num}" in why and "top_logprobs" in why and "logprobs" in why
    assert f"at most {MAX_LOGPROBS}" in why
