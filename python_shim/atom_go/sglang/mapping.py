"""How SGLang's sampling requests map onto atom-go's, where the two differ (no SGLang import).

- Parallel sampling (``n > 1``): SGLang's tokenizer manager sends ``n`` copies of the request,
  each with the same ``sampling_params.sampling_seed``, so a seeded request would return ``n``
  identical choices. vLLM gives its ``i``-th child ``seed + i`` (atom-go's own server keys choice
  ``i``'s generator by the pair ``(seed, i)``); atom-go's SGLang plugin does as vLLM:
  :class:`ParallelSeeds` tells the tokenizer manager's hook which copy is being sent.
- Top logprobs: atom-go returns at most :data:`atom_go.wire.MAX_LOGPROBS` per token; a request
  for more (``top_logprobs_num``: the OpenAI API's ``top_logprobs`` or completions' ``logprobs``)
  is refused with the limit in the message (:func:`top_logprobs_refusal`), not capped.
"""

from __future__ import annotations

import collections
import threading
from typing import Any

from atom_go.wire import MAX_LOGPROBS

_INT64_MIN = -(2**63)
_UINT64 = 2**64

# Parallel-sampling groups being sent at once (a group ends when its n copies are sent; one whose
# sending failed half-way is forgotten once this many newer groups have started).
_MAX_OPEN_GROUPS = 4096


def derive_seed(seed: int, index: int) -> int:
    """The seed of copy ``index`` of a parallel-sampling request: ``seed + index`` (vLLM's rule),
    wrapped into the int64 range that SGLang and atom-go's wire accept."""
    return (int(seed) + int(index) - _INT64_MIN) % _UINT64 + _INT64_MIN


class ParallelSeeds:
    """Counts the copies of each parallel-sampling request as SGLang's tokenizer manager sends them.

    The ``n`` copies of one prompt share one SamplingParams object (the tokenizer manager copies
    the tokenized request shallowly); its cache-warming request that precedes them has its own,
    with ``max_new_tokens`` 0. :meth:`seed_for` returns the seed the next copy must carry.
    """

    def __init__(self, max_open_groups: int = _MAX_OPEN_GROUPS) -> None:
        self._max_open = max_open_groups
        # id(params) -> [params, copies sent]; params is kept so that its id is not reused.
        self._groups: collections.OrderedDict[int, list[Any]] = collections.OrderedDict()
        self._lock = threading.Lock()

    def seed_for(self, params: Any) -> int | None:
        """The seed for the copy of ``params`` about to be sent; None when nothing changes
        (one sample, no seed, or the cache-warming request)."""
        n = int(getattr(params, "n", 1) or 1)
        seed = getattr(params, "sampling_seed", None)
        if n <= 1 or seed is None or getattr(params, "max_new_tokens", None) == 0:
            return None
        key = id(params)
        with self._lock:
            entry = self._groups.get(key)
            if entry is None or entry[0] is not params:
                entry = [params, 0]
                self._groups[key] = entry
                while len(self._groups) > self._max_open:
                    self._groups.popitem(last=False)
            index = entry[1]
            entry[1] += 1
            if entry[1] >= n:
                del self._groups[key]
        return derive_seed(seed, index)

    def open_groups(self) -> int:
        """How many groups have copies still to be sent."""
        with self._lock:
            return len(self._groups)


def top_logprobs_refusal(return_logprob: bool, top_logprobs_num: Any) -> str | None:
    """Why a request's top logprobs cannot be served (more than atom-go returns), or None."""
    if not return_logprob:
        return None
    n = int(top_logprobs_num or 0)
    if n > MAX_LOGPROBS:
        return (
            f"top_logprobs_num={n}: at most {MAX_LOGPROBS} top logprobs per token (the OpenAI API's "
            "top_logprobs, or completions' logprobs)"
        )
    return None
