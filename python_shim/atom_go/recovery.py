"""Recompute after a restart: the host's record of atom-go's host-mode state, from the payloads.

atom-go's host mode is stateful: the engine keeps each request's tokens and block table between
``ExecuteModel`` steps, and the host (vLLM's scheduler, SGLang's through the slot stepper) sends
only deltas. When the plugin dies that state and the whole KV cache are gone, while the host's
scheduler still believes every block it allocated holds its tokens. :class:`StepLedger` keeps,
from the payloads and results alone (so it serves vLLM and SGLang alike), what the engine knew:
per request the tokens (prompt, then outputs), how many of them are outputs, the sampling
parameters and the block table. After a restart (:meth:`StepLedger.lost`) :meth:`rewrite` turns
the host's next payload into one the fresh engine accepts:

- a request the new engine does not know, or one whose prefix blocks hold KV written before the
  restart (a prefix-cache hit on a block the dead engine filled), is *recomputed*: extra
  ``ExecuteModel`` steps ("warm-ups") prefill its tokens ``[0, num_computed)`` into its own blocks,
  in chunks within the engine's token and sequence budgets, as a new request whose prompt is the
  whole history and whose ``output_offset`` says how many of those ids are outputs (so penalties,
  ``min_tokens`` and a seeded sampler's draws go on as if nothing happened);
- in the step itself the request is then a cached one, so the engine samples exactly where the
  host expects it to.

Blocks written since the restart are tracked, so a prefix hit on a block the new engine wrote is
used as it is. The rewritten payload schedules the same requests with the same token counts, so
the result maps onto the host's step unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from atom_go.wire import ExecuteResult


class RecoveryError(RuntimeError):
    """A payload the ledger cannot make good after a restart (a request it never saw)."""


@dataclasses.dataclass
class _Entry:
    tokens: list[int]  # prompt, then outputs: everything the engine knew
    num_outputs: int  # of which the last num_outputs are outputs
    sampling: dict[str, Any]
    table: list[int]  # block ids


def _cached_lists(payload: Mapping[str, Any]) -> dict[str, list[Any]]:
    c = payload.get("scheduled_cached_reqs") or {}
    ids = list(c.get("req_ids") or [])
    n = len(ids)

    def col(key: str, default: Any) -> list[Any]:
        v = list(c.get(key) or [])
        return v if v else [default] * n

    return {
        "req_ids": ids,
        "resumed_from_preemption": col("resumed_from_preemption", False),
        "new_block_ids": col("new_block_ids", None),
        "num_computed_tokens": list(c.get("num_computed_tokens") or []),
        "num_output_tokens": col("num_output_tokens", -1),
    }


def _first_group(groups: Sequence[Sequence[int]] | None) -> list[int]:
    if not groups:
        return []
    return [int(b) for b in groups[0]]


class StepLedger:
    """What atom-go's host-mode engine holds, rebuilt from the steps it ran (see the module doc).

    ``block_size`` is the KV cache's (SGLang's slot mode: 1). Call :meth:`commit` after every
    step the engine ran, :meth:`lost` when the engine was restarted, and :meth:`rewrite` on every
    payload before it is sent (it returns it unchanged while nothing was lost).
    """

    def __init__(self, block_size: int, num_blocks: int) -> None:
        if block_size < 1 or num_blocks < 1:
            raise ValueError(f"block_size {block_size} and num_blocks {num_blocks} must be positive")
        self.block_size = block_size
        self.num_blocks = num_blocks
        self._reqs: dict[str, _Entry] = {}
        self._known: set[str] = set()  # requests the current engine has state for
        self._fresh: bytearray | None = None  # after a loss: 1 for blocks written since

    def __len__(self) -> int:
        return len(self._reqs)

    def __contains__(self, rid: object) -> bool:
        return rid in self._reqs

    @property
    def recovering(self) -> bool:
        """True once an engine was lost: payloads are checked against what the new one knows."""
        return self._fresh is not None

    def tokens(self, rid: str) -> list[int]:
        """The tokens atom-go knows for rid (prompt, then outputs)."""
        return list(self._reqs[rid].tokens)

    # ------------------------------------------------------------------ bookkeeping

    def lost(self) -> None:
        """The engine was replaced: it knows no request and no block holds what the host thinks."""
        self._known.clear()
        self._fresh = bytearray(self.num_blocks)

    def _mark(self, table: Sequence[int], start: int, end: int) -> None:
        if self._fresh is None or end <= start:
            return
        bs = self.block_size
        for i in range(start // bs, min((end + bs - 1) // bs, len(table))):
            b = table[i]
            if 0 <= b < self.num_blocks:
                self._fresh[b] = 1

    def _prefix_fresh(self, table: Sequence[int], computed: int) -> bool:
        if self._fresh is None:
            return True
        bs = self.block_size
        need = (computed + bs - 1) // bs
        if need > len(table):
            return False
        fresh = self._fresh
        return all(0 <= b < self.num_blocks and fresh[b] for b in table[:need])

    def commit(self, payload: Mapping[str, Any], result: ExecuteResult) -> None:
        """Records a step the engine ran: its requests, their blocks and the tokens it sampled."""
        for rid in payload.get("finished_req_ids") or ():
            self._reqs.pop(rid, None)
            self._known.discard(rid)
        scheduled: Mapping[str, int] = payload.get("num_scheduled_tokens") or {}
        for nr in payload.get("scheduled_new_reqs") or ():
            rid = nr["req_id"]
            table = _first_group(nr.get("block_ids"))
            self._reqs[rid] = _Entry(
                tokens=[int(t) for t in nr["prompt_token_ids"]],
                num_outputs=int(nr.get("output_offset") or 0),
                sampling=dict(nr.get("sampling_params") or {}),
                table=table,
            )
            self._known.add(rid)
            computed = int(nr.get("num_computed_tokens") or 0)
            self._mark(table, computed, computed + int(scheduled.get(rid, 0)))
        c = _cached_lists(payload)
        for i, rid in enumerate(c["req_ids"]):
            e = self._reqs.get(rid)
            if e is None:
                continue
            blocks = _first_group(c["new_block_ids"][i])
            if c["resumed_from_preemption"][i]:
                e.table = blocks
            else:
                e.table.extend(blocks)  # in place: a step costs its new blocks, not the table
            n_out = int(c["num_output_tokens"][i])
            if 0 <= n_out < e.num_outputs:  # the host forgot outputs: so did the engine
                del e.tokens[len(e.tokens) - (e.num_outputs - n_out) :]
                e.num_outputs = n_out
            computed = int(c["num_computed_tokens"][i])
            self._mark(e.table, computed, computed + int(scheduled.get(rid, 0)))
        for rid, toks in zip(result.req_ids, result.sampled_token_ids, strict=True):
            e = self._reqs.get(rid)
            if e is not None and toks:
                e.tokens.extend(int(t) for t in toks)
                e.num_outputs += len(toks)

    # ------------------------------------------------------------------ after a restart

    def rewrite(
        self, payload: Mapping[str, Any], *, max_tokens: int, max_seqs: int
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The warm-up payloads to run first and the payload to run instead of ``payload``.

        ``max_tokens`` and ``max_seqs`` are the engine's per-step budgets (its
        max_num_batched_tokens and max_num_seqs). While no engine was lost: ``([], payload)``.
        """
        if self._fresh is None:
            return [], dict(payload)
        out = dict(payload)
        scheduled = dict(payload.get("num_scheduled_tokens") or {})
        redo: list[tuple[str, list[int], int, dict[str, Any], list[int], int]] = []
        new_reqs: list[dict[str, Any]] = []
        cached = _cached_lists(payload)
        kept: dict[str, list[Any]] = {k: [] for k in cached}
        finished = set(payload.get("finished_req_ids") or ())

        def keep_cached(rid: str, computed: int, num_outputs: int) -> None:
            kept["req_ids"].append(rid)
            kept["resumed_from_preemption"].append(False)
            kept["new_block_ids"].append(None)  # the warm-up gave the whole table
            kept["num_computed_tokens"].append(computed)
            kept["num_output_tokens"].append(num_outputs)

        for nr in payload.get("scheduled_new_reqs") or ():
            computed = int(nr.get("num_computed_tokens") or 0)
            table = _first_group(nr.get("block_ids"))
            if computed == 0 or self._prefix_fresh(table, computed):
                new_reqs.append(dict(nr))
                continue
            tokens = [int(t) for t in nr["prompt_token_ids"]]
            rid = nr["req_id"]
            offset = int(nr.get("output_offset") or 0)
            redo.append((rid, tokens, offset, dict(nr.get("sampling_params") or {}), table, computed))
            keep_cached(rid, computed, offset)
        forget: set[str] = set()
        for i, rid in enumerate(cached["req_ids"]):
            computed = int(cached["num_computed_tokens"][i])
            resumed = bool(cached["resumed_from_preemption"][i])
            known = rid in self._known and rid not in finished
            if known and resumed and computed > 0:
                # A new table (vLLM's resumption, SGLang's radix dedup) may point at blocks
                # written before the restart: then the engine forgets the request and it is
                # recomputed like one it never knew.
                e = self._reqs.get(rid)
                new_table = _first_group(cached["new_block_ids"][i])
                if e is not None and not self._prefix_fresh(new_table, computed):
                    known = False
                    forget.add(rid)
            if known:
                for k, col in kept.items():
                    col.append(cached[k][i])
                continue
            e = self._reqs.get(rid)
            if e is None:
                raise RecoveryError(
                    f"request {rid!r} is scheduled as cached, but atom-go's engine was restarted and no "
                    "earlier step introduced it: it cannot be recomputed"
                )
            blocks = _first_group(cached["new_block_ids"][i])
            table = blocks if cached["resumed_from_preemption"][i] else e.table + blocks
            tokens, n_out = e.tokens, e.num_outputs
            want_out = int(cached["num_output_tokens"][i])
            if 0 <= want_out < n_out:
                tokens, n_out = tokens[: len(tokens) - (n_out - want_out)], want_out
            if computed == 0 or self._prefix_fresh(table, computed):
                new_reqs.append(
                    {
                        "req_id": rid,
                        "prompt_token_ids": list(tokens),
                        "sampling_params": dict(e.sampling),
                        "block_ids": [table],
                        "num_computed_tokens": computed,
                        "output_offset": n_out,
                    }
                )
                continue
            redo.append((rid, list(tokens), n_out, dict(e.sampling), table, computed))
            keep_cached(rid, computed, n_out)
        if not all(int(v) >= 0 for v in kept["num_output_tokens"]):
            kept["num_output_tokens"] = []  # the host does not count outputs (empty: unchecked)
        out["scheduled_new_reqs"] = new_reqs
        out["scheduled_cached_reqs"] = kept
        out["num_scheduled_tokens"] = scheduled
        warmups = _warmups(redo, max_tokens=max_tokens, max_seqs=max_seqs)
        if warmups:
            # The engine frees finished requests before a step: they must be gone before a
            # warm-up brings back a request under an id the engine may still hold.
            warmups[0]["finished_req_ids"] = sorted(finished | forget)
            out["finished_req_ids"] = []
        return warmups, out


def _warmups(
    redo: Sequence[tuple[str, list[int], int, dict[str, Any], list[int], int]], *, max_tokens: int, max_seqs: int
) -> list[dict[str, Any]]:
    """Steps that prefill each request's tokens [0, computed) into its blocks, sampling nothing."""
    if not redo:
        return []
    max_tokens = max(1, max_tokens)
    max_seqs = max(1, max_seqs)
    steps: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None
    budget = seqs = 0

    def flush() -> None:
        nonlocal cur
        if cur is not None:
            cur["total_num_scheduled_tokens"] = sum(cur["num_scheduled_tokens"].values())
            steps.append(cur)
        cur = None

    for rid, tokens, offset, sampling, table, computed in redo:
        done = 0
        while done < computed:
            if cur is None or budget == 0 or seqs == max_seqs:
                flush()
                cur = {
                    "scheduled_new_reqs": [],
                    "scheduled_cached_reqs": {
                        "req_ids": [],
                        "resumed_from_preemption": [],
                        "new_block_ids": [],
                        "num_computed_tokens": [],
                    },
                    "num_scheduled_tokens": {},
                    "finished_req_ids": [],
                }
                budget, seqs = max_tokens, 0
            k = min(computed - done, budget)
            if done == 0:
                cur["scheduled_new_reqs"].append(
                    {
                        "req_id": rid,
                        "prompt_token_ids": tokens,
                        "sampling_params": sampling,
                        "block_ids": [table],
                        "num_computed_tokens": 0,
                        "output_offset": offset,
                    }
                )
            else:
                c = cur["scheduled_cached_reqs"]
                c["req_ids"].append(rid)
                c["resumed_from_preemption"].append(False)
                c["new_block_ids"].append(None)
                c["num_computed_tokens"].append(done)
            cur["num_scheduled_tokens"][rid] = k
            done += k
            budget -= k
            seqs += 1
    flush()
    return steps
