"""Slot mode: SGLang's batches as atom-go ExecuteModel steps over KV blocks of one token.

SGLang keeps no per-request state between forward calls the way vLLM's scheduler output does:
each batch carries requests, their KV row (``req_pool_indices`` into ``req_to_token``), sequence
and prefix lengths and the slots of the tokens written this step (``out_cache_loc``). atom-go's
host-scheduled mode is stateful (it remembers each request's tokens and block table), so this
module keeps the host's side of that state and turns each batch into the delta atom-go expects:

- a request atom-go does not know (or whose KV SGLang dropped: retraction, a new request object
  under a known id) is sent as new, with all the tokens SGLang knows for it and the slots of
  tokens ``[0, end of this step)`` as its block table (block size 1: a slot is a block id);
- a known request is sent as cached with the slots of this step's tokens appended, unless the
  slots of its earlier tokens changed under it (SGLang's radix cache can swap a request's
  prefix for an identical cached one and free the old slots), in which case the whole table is
  sent again (``resumed_from_preemption``);
- requests SGLang finished, aborted or forgot since the last step are listed in
  ``finished_req_ids`` so atom-go frees their state.

The state changes only when the step succeeded (:meth:`SlotStepper.commit`).
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch


class SlotModeError(ValueError):
    """A batch that cannot be expressed as an atom-go slot-mode step."""


@dataclasses.dataclass
class SlotRequest:
    """One request of a batch, as the worker reads it from SGLang's objects."""

    rid: str
    owner: Any  # the host's request object; a new object under a known rid is a new request
    generation: int  # bumps when the host dropped the request's KV (SGLang: retraction_count)
    known_tokens: Callable[[], Sequence[int]]  # every token the host knows (prompt + outputs)
    prefix_slots: torch.Tensor  # 1-D: KV slots of tokens [0, computed), the host's current map
    new_slots: torch.Tensor  # 1-D: KV slots of the `scheduled` tokens computed this step
    computed: int  # tokens already in the KV cache
    sampling: Callable[[], Mapping[str, Any]]  # wire SamplingParams (used for new requests)


@dataclasses.dataclass
class _Known:
    owner: weakref.ref[Any] | Callable[[], Any]
    generation: int
    table: torch.Tensor  # the block table atom-go has for the request (slots of its tokens)
    num_tokens: int  # tokens atom-go knows (prompt sent + sampled)


@dataclasses.dataclass
class SlotStats:
    """Counts of what the committed steps did (for tests and debugging)."""

    steps: int = 0
    new_requests: int = 0  # sent with their whole prompt and table (first time, or re-sent)
    resent: int = 0  # of which atom-go had state under the id (retraction, id reuse)
    replaced_tables: int = 0  # cached requests whose earlier slots SGLang moved
    dropped: int = 0  # finished_req_ids sent


@dataclasses.dataclass
class PlannedStep:
    """One ExecuteModel payload and what committing it changes."""

    payload: dict[str, Any]
    order: list[str]  # rids in the order of the batch (the result's order may differ)
    _updates: dict[str, _Known]
    _dropped: list[str]
    _new: set[str]
    expects_sample: dict[str, bool] = dataclasses.field(default_factory=dict)  # step ends at the last known token
    _resent: int = 0
    _replaced: int = 0

    @property
    def empty(self) -> bool:
        """Nothing to run and nothing to free."""
        return not self.order and not self._dropped


def _ref(obj: Any) -> weakref.ref[Any] | Callable[[], Any]:
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


class SlotStepper:
    """The host's view of the requests atom-go has state for, and the payloads of each step.

    ``is_finished(owner)`` says whether the host is done with a request (SGLang: ``req.finished()``);
    a request whose owner object is gone counts as finished too.
    """

    def __init__(self, is_finished: Callable[[Any], bool]) -> None:
        self._is_finished = is_finished
        self._known: dict[str, _Known] = {}
        self.stats = SlotStats()

    def __len__(self) -> int:
        return len(self._known)

    def __contains__(self, rid: object) -> bool:
        return rid in self._known

    def known_ids(self) -> list[str]:
        """The request ids atom-go is believed to have state for."""
        return list(self._known)

    def plan(self, reqs: Sequence[SlotRequest]) -> PlannedStep:
        """The payload of one step over ``reqs`` (in batch order); nothing changes until commit."""
        in_batch: dict[str, SlotRequest] = {}
        for r in reqs:
            if r.rid in in_batch:
                raise SlotModeError(f"request {r.rid!r} appears twice in one batch")
            in_batch[r.rid] = r
        dropped: list[str] = []
        for rid, k in self._known.items():
            if rid in in_batch:
                continue
            owner = k.owner()
            if owner is None or self._is_finished(owner):
                dropped.append(rid)
        new_reqs: list[dict[str, Any]] = []
        cached_ids: list[str] = []
        cached_resumed: list[bool] = []
        cached_blocks: list[list[list[int]] | None] = []
        cached_computed: list[int] = []
        num_scheduled: dict[str, int] = {}
        updates: dict[str, _Known] = {}
        new_ids: set[str] = set()
        resent = replaced = 0
        expects: dict[str, bool] = {}
        for r in reqs:
            scheduled = int(r.new_slots.numel())
            if scheduled <= 0:
                raise SlotModeError(f"request {r.rid!r} is scheduled with no tokens")
            if int(r.prefix_slots.numel()) != r.computed:
                raise SlotModeError(
                    f"request {r.rid!r}: {r.prefix_slots.numel()} prefix slots for {r.computed} computed tokens"
                )
            end = r.computed + scheduled
            known = self._known.get(r.rid)
            stale = known is None or known.owner() is not r.owner or known.generation != r.generation
            if stale and known is not None:
                dropped.append(r.rid)
                resent += 1
            table = torch.cat((r.prefix_slots, r.new_slots)) if r.computed else r.new_slots.clone()
            if stale:
                tokens = [int(t) for t in r.known_tokens()]
                if end > len(tokens):
                    raise SlotModeError(
                        f"request {r.rid!r}: {scheduled} tokens scheduled from {r.computed} run past its "
                        f"{len(tokens)} known tokens"
                    )
                new_reqs.append(
                    {
                        "req_id": r.rid,
                        "prompt_token_ids": tokens,
                        "sampling_params": dict(r.sampling()),
                        "block_ids": [table.tolist()],
                        "num_computed_tokens": r.computed,
                    }
                )
                new_ids.add(r.rid)
                num_tokens = len(tokens)
            else:
                assert known is not None
                if end > known.num_tokens:
                    raise SlotModeError(
                        f"request {r.rid!r}: {scheduled} tokens scheduled from {r.computed} run past the "
                        f"{known.num_tokens} tokens atom-go knows (speculative decoding is not supported)"
                    )
                # Append when atom-go's table is still a prefix of SGLang's map; otherwise SGLang
                # moved slots under the request (radix-cache dedup): replace the whole table.
                have = int(known.table.numel())
                if have <= int(table.numel()) and torch.equal(known.table, table[:have]):
                    resumed, blocks = False, table[have:].tolist()
                else:
                    resumed, blocks = True, table.tolist()
                replaced += resumed
                cached_ids.append(r.rid)
                cached_resumed.append(resumed)
                cached_blocks.append([blocks] if blocks else None)
                cached_computed.append(r.computed)
                num_tokens = known.num_tokens
            num_scheduled[r.rid] = scheduled
            expects[r.rid] = end == num_tokens
            updates[r.rid] = _Known(owner=_ref(r.owner), generation=r.generation, table=table, num_tokens=num_tokens)
        payload: dict[str, Any] = {
            "scheduled_new_reqs": new_reqs,
            "scheduled_cached_reqs": {
                "req_ids": cached_ids,
                "resumed_from_preemption": cached_resumed,
                "new_block_ids": cached_blocks,
                "num_computed_tokens": cached_computed,
            },
            "num_scheduled_tokens": num_scheduled,
            "total_num_scheduled_tokens": sum(num_scheduled.values()),
            "finished_req_ids": dropped,
        }
        return PlannedStep(
            payload=payload,
            order=[r.rid for r in reqs],
            _updates=updates,
            _dropped=dropped,
            _new=new_ids,
            expects_sample=expects,
            _resent=resent,
            _replaced=replaced,
        )

    def commit(self, step: PlannedStep, sampled: Mapping[str, Sequence[int]]) -> None:
        """Records a step atom-go ran: its dropped requests and, per request, what it sampled."""
        for rid in step._dropped:
            self._known.pop(rid, None)
        for rid, k in step._updates.items():
            k.num_tokens += len(sampled.get(rid, ()))
            self._known[rid] = k
        self.stats.steps += bool(step.order)
        self.stats.new_requests += len(step._new)
        self.stats.resent += step._resent
        self.stats.replaced_tables += step._replaced
        self.stats.dropped += len(step._dropped)

    def forget(self, rid: str) -> bool:
        """Forgets a request (after it was dropped on atom-go's side some other way)."""
        return self._known.pop(rid, None) is not None

    def reset(self) -> None:
        """Forgets every request (atom-go's host-mode state was reset)."""
        self._known.clear()
