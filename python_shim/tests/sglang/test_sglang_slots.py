"""The slot-mode step builder against the real atom-plugin: what each SGLang-shaped step sends.

No SGLang objects here (the scheduler tests drive those): requests are plain objects with the
fields SGLang's Req has, the payloads go to a real atom-plugin in slot mode, and atom-go's answers
are checked against `atom-plugin generate`.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence

import pytest
import torch
from sglang_support import Reference

from atom_go.plugin import PluginRPCError
from atom_go.sglang.engine import SlotEngine, SlotEngineOptions
from atom_go.sglang.slots import SlotModeError, SlotRequest, SlotStepper
from atom_go.wire import sampling_params

SLOTS = 512


class Host:
    """A minimal host that owns the slot map the way SGLang does (one row of slots a request)."""

    def __init__(self) -> None:
        self.next_slot = 1  # slot 0 is the padding slot
        self.finished: set[int] = set()

    def alloc(self, n: int) -> torch.Tensor:
        out = torch.arange(self.next_slot, self.next_slot + n, dtype=torch.int64)
        self.next_slot += n
        assert self.next_slot <= SLOTS
        return out


class Req:
    """The fields of SGLang's Req the worker reads."""

    def __init__(self, rid: str, prompt: Sequence[int]) -> None:
        self.rid = rid
        self.prompt = list(prompt)
        self.output: list[int] = []
        self.slots = torch.zeros(0, dtype=torch.int64)
        self.generation = 0
        self.done = False

    def tokens(self) -> list[int]:
        return self.prompt + self.output


def slot_req(req: Req, computed: int, new_slots: torch.Tensor) -> SlotRequest:
    req.slots = torch.cat((req.slots[:computed], new_slots))
    return SlotRequest(
        rid=req.rid,
        owner=req,
        generation=req.generation,
        known_tokens=req.tokens,
        prefix_slots=req.slots[:computed],
        new_slots=new_slots,
        computed=computed,
        sampling=lambda: sampling_params(temperature=0.0),
    )


@pytest.fixture(scope="module")
def engine(atom_plugin: str, qwen2_dir: str) -> Iterator[SlotEngine]:
    eng = SlotEngine(
        SlotEngineOptions(model_path=qwen2_dir, kv_slots=SLOTS - 1, binary=atom_plugin, extra_args=("--threads=2",))
    )
    yield eng
    eng.close()


def run(engine: SlotEngine, stepper: SlotStepper, reqs: list[SlotRequest]) -> dict[str, list[int]]:
    step = stepper.plan(reqs)
    result = engine.execute(step.payload)
    sampled = dict(zip(result.req_ids, result.sampled_token_ids, strict=True))
    stepper.commit(step, sampled)
    for sr in reqs:
        if sampled[sr.rid]:
            sr.owner.output.append(sampled[sr.rid][0])
    return sampled


def decode(host: Host, req: Req) -> SlotRequest:
    n = len(req.tokens())
    return slot_req(req, n - 1, host.alloc(1))


def test_chunked_prefill_then_decode_matches_generate(engine: SlotEngine, reference: Reference) -> None:
    host, stepper = Host(), SlotStepper(is_finished=lambda r: r.done)
    prompt = list(range(20, 60))
    req = Req("chunked", prompt)
    assert run(engine, stepper, [slot_req(req, 0, host.alloc(16))]) == {"chunked": []}  # not the last chunk
    assert run(engine, stepper, [slot_req(req, 16, host.alloc(16))]) == {"chunked": []}
    run(engine, stepper, [slot_req(req, 32, host.alloc(8))])
    for _ in range(7):
        run(engine, stepper, [decode(host, req)])
    assert req.output == reference.tokens(prompt, 8)
    assert stepper.stats.new_requests == 1 and stepper.stats.replaced_tables == 0
    req.done = True
    step = stepper.plan([])
    assert step.payload["finished_req_ids"] == ["chunked"]
    engine.execute(step.payload)
    stepper.commit(step, {})
    assert engine.describe().running_requests == 0


def test_moved_prefix_slots_replace_the_table(engine: SlotEngine, reference: Reference) -> None:
    """SGLang's radix cache can point a request at another copy of its prefix KV."""
    host, stepper = Host(), SlotStepper(is_finished=lambda r: r.done)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    a, b = Req("a", prompt), Req("b", prompt)
    run(engine, stepper, [slot_req(a, 0, host.alloc(8)), slot_req(b, 0, host.alloc(8))])
    # b's prefix now lives in a's slots (same tokens, same KV); b's own slots get reused by c.
    b.slots = a.slots.clone()
    c = Req("c", [42] * 8)
    freed = torch.arange(int(host.next_slot) - 8, int(host.next_slot), dtype=torch.int64)
    run(engine, stepper, [slot_req(c, 0, freed)])  # overwrites the KV b used to read
    sr = decode(host, b)
    step = stepper.plan([sr])
    cached = step.payload["scheduled_cached_reqs"]
    assert cached["resumed_from_preemption"] == [True]
    assert cached["new_block_ids"][0][0][:8] == a.slots[:8].tolist()
    result = engine.execute(step.payload)
    stepper.commit(step, dict(zip(result.req_ids, result.sampled_token_ids, strict=True)))
    b.output.append(result.sampled_token_ids[0][0])
    assert b.output == reference.tokens(prompt, 2)
    assert stepper.stats.replaced_tables == 1


def test_a_new_generation_or_owner_resends_the_request(engine: SlotEngine, reference: Reference) -> None:
    host, stepper = Host(), SlotStepper(is_finished=lambda r: r.done)
    req = Req("retracted", [8, 6, 7, 5, 3, 0, 9])
    run(engine, stepper, [slot_req(req, 0, host.alloc(7))])
    run(engine, stepper, [decode(host, req)])
    # SGLang retracts it (frees its slots, bumps retraction_count) and later prefills prompt + output.
    req.generation += 1
    req.slots = torch.zeros(0, dtype=torch.int64)
    step = stepper.plan([slot_req(req, 0, host.alloc(len(req.tokens())))])
    assert step.payload["finished_req_ids"] == ["retracted"]
    assert [r["req_id"] for r in step.payload["scheduled_new_reqs"]] == ["retracted"]
    result = engine.execute(step.payload)
    stepper.commit(step, dict(zip(result.req_ids, result.sampled_token_ids, strict=True)))
    req.output.append(result.sampled_token_ids[0][0])
    assert req.output == reference.tokens([8, 6, 7, 5, 3, 0, 9], 3)
    # Another request object under the same id is another request.
    other = Req("retracted", [1, 2, 3])
    step = stepper.plan([slot_req(other, 0, host.alloc(3))])
    assert step.payload["finished_req_ids"] == ["retracted"] and step.payload["scheduled_new_reqs"]
    assert stepper.stats.resent == 1  # plan() alone changes nothing


def test_a_forgotten_request_is_freed(engine: SlotEngine) -> None:
    host, stepper = Host(), SlotStepper(is_finished=lambda r: r.done)
    req = Req("gone", [1, 2, 3])
    run(engine, stepper, [slot_req(req, 0, host.alloc(3))])
    before = engine.describe().running_requests
    del req
    gc.collect()
    step = stepper.plan([])
    assert step.payload["finished_req_ids"] == ["gone"]
    engine.execute(step.payload)
    stepper.commit(step, {})
    assert engine.describe().running_requests == before - 1
    assert len(stepper) == 0


def test_bad_steps_are_refused_before_and_by_atom_go(engine: SlotEngine) -> None:
    host, stepper = Host(), SlotStepper(is_finished=lambda r: r.done)
    req = Req("bad", [1, 2, 3])
    with pytest.raises(SlotModeError, match="run past"):
        stepper.plan([slot_req(req, 0, host.alloc(4))])
    with pytest.raises(SlotModeError, match="twice"):
        stepper.plan([slot_req(req, 0, host.alloc(3)), slot_req(req, 0, host.alloc(3))])
    # A slot outside atom-go's cache: atom-go refuses the step and keeps its state as it was.
    step = stepper.plan([slot_req(req, 0, torch.tensor([1, 2, SLOTS + 5]))])
    with pytest.raises(PluginRPCError, match="outside the host's KV cache"):
        engine.execute(step.payload)
    assert "bad" not in stepper
