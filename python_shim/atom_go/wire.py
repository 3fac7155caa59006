"""The msgpack payloads of ExecuteModel (bridge/execute.go), independent of any framework.

A payload is a dict with the keys of bridge.ExecuteModelPayload; the result decodes into
ExecuteResult, checked for shape (parallel lists, wire version) before anything uses it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import msgpack

from atom_go.versions import WIRE_VERSION

# Bounds of bridge/execute.go, checked here too so a bad batch is refused with a clear message
# before it crosses the wire.
MAX_BATCH_REQUESTS = 1 << 16
MAX_REQUEST_ID_BYTES = 1024
MAX_TOKEN_ID = (1 << 31) - 1
MAX_STOP_TOKEN_IDS = 1 << 12
MAX_LOGPROBS = 20  # engine.MaxLogprobs


class WireError(ValueError):
    """A payload that cannot be sent, or a result that does not decode as atom-go's."""


@dataclasses.dataclass(frozen=True)
class TokenLogprobs:
    """One sampled token's row of vLLM's LogprobsLists: sampled token first, then the top-N."""

    token_ids: list[int]
    logprobs: list[float]
    rank: int


@dataclasses.dataclass(frozen=True)
class ExecuteResult:
    """bridge.ExecuteModelResult: lists parallel to req_ids."""

    req_ids: list[str]
    sampled_token_ids: list[list[int]]
    # Per request None, or the row of its first sampled token.
    logprobs: list[TokenLogprobs | None]
    # Drafts proposed for each request's next step (empty lists when the plugin proposed none).
    draft_token_ids: list[list[int]] = dataclasses.field(default_factory=list)
    # Per request the rows of its sampled tokens after the first (a verify step's accepted
    # drafts and the target's token); empty where it has none (or no request has any).
    more_logprobs: list[list[TokenLogprobs]] = dataclasses.field(default_factory=list)

    def token_logprobs(self, i: int) -> list[TokenLogprobs]:
        """Request i's logprobs rows, one per sampled token ([] when it asked for none)."""
        first = self.logprobs[i]
        if first is None:
            return []
        return [first, *(self.more_logprobs[i] if self.more_logprobs else [])]


def sampling_params(
    *,
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: int = 0,
    min_p: float = 0.0,
    seed: int | None = None,
    repetition_penalty: float = 1.0,
    presence_penalty: float = 0.0,
    frequency_penalty: float = 0.0,
    max_tokens: int = 0,
    min_tokens: int = 0,
    ignore_eos: bool = False,
    stop_token_ids: Sequence[int] = (),
    logprobs: int | None = None,
) -> dict[str, Any]:
    """bridge.SamplingParams as a msgpack map (n, stop strings and detokenisation are the host's)."""
    for name, value in (
        ("temperature", temperature),
        ("top_p", top_p),
        ("min_p", min_p),
        ("repetition_penalty", repetition_penalty),
        ("presence_penalty", presence_penalty),
        ("frequency_penalty", frequency_penalty),
    ):
        if not math.isfinite(value):
            raise WireError(f"sampling parameter {name} is {value}, not a finite number")
    if len(stop_token_ids) > MAX_STOP_TOKEN_IDS:
        raise WireError(f"{len(stop_token_ids)} stop token ids, at most {MAX_STOP_TOKEN_IDS}")
    if logprobs is not None and not 0 <= logprobs <= MAX_LOGPROBS:
        raise WireError(f"logprobs {logprobs}: atom-go returns 0..{MAX_LOGPROBS} top logprobs per token")
    return {
        "n": 1,
        "temperature": float(temperature),
        "top_p": float(top_p),
        "top_k": int(top_k),
        "min_p": float(min_p),
        "seed": None if seed is None else int(seed),
        "repetition_penalty": float(repetition_penalty),
        "presence_penalty": float(presence_penalty),
        "frequency_penalty": float(frequency_penalty),
        "max_tokens": int(max_tokens),
        "min_tokens": int(min_tokens),
        "ignore_eos": bool(ignore_eos),
        "stop_token_ids": [int(t) for t in stop_token_ids],
        "stop": [],
        "logprobs": None if logprobs is None else int(logprobs),
    }


def encode_payload(payload: Mapping[str, Any]) -> bytes:
    """Encodes an ExecuteModel payload, stamping the wire version."""
    body = dict(payload)
    body["wire_version"] = WIRE_VERSION
    try:
        return msgpack.packb(body, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise WireError(f"cannot encode the ExecuteModel payload: {exc}") from None


def _list(obj: Any, what: str) -> list[Any]:
    if not isinstance(obj, list):
        raise WireError(f"ExecuteModel result: {what} is {type(obj).__name__}, want a list")
    return obj


def decode_result(data: bytes) -> ExecuteResult:
    """Decodes and checks an ExecuteModel result."""
    try:
        obj = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except (msgpack.UnpackException, ValueError, TypeError) as exc:
        raise WireError(f"ExecuteModel result is not msgpack: {exc}") from None
    if not isinstance(obj, dict):
        raise WireError(f"ExecuteModel result is a {type(obj).__name__}, want a map")
    version = obj.get("wire_version")
    if version != WIRE_VERSION:
        raise WireError(f"ExecuteModel result has wire_version {version!r}, this host speaks {WIRE_VERSION}")
    req_ids = _list(obj.get("req_ids") or [], "req_ids")
    sampled = _list(obj.get("sampled_token_ids") or [], "sampled_token_ids")
    raw_lps = _list(obj.get("logprobs") or [], "logprobs")
    raw_drafts = _list(obj.get("draft_token_ids") or [], "draft_token_ids")
    raw_more = _list(obj.get("more_logprobs") or [], "more_logprobs")
    if (
        len(sampled) != len(req_ids)
        or (raw_lps and len(raw_lps) != len(req_ids))
        or (raw_drafts and len(raw_drafts) != len(req_ids))
        or (raw_more and len(raw_more) != len(req_ids))
    ):
        raise WireError(
            f"ExecuteModel result lists disagree: {len(req_ids)} req_ids, {len(sampled)} "
            f"sampled_token_ids, {len(raw_lps)} logprobs, {len(raw_more)} more_logprobs, "
            f"{len(raw_drafts)} draft_token_ids"
        )
    if not all(isinstance(r, str) for r in req_ids):
        raise WireError("ExecuteModel result: req_ids holds a non-string")
    tokens: list[list[int]] = []
    for i, raw_row in enumerate(sampled):
        row = _list(raw_row if raw_row is not None else [], f"sampled_token_ids[{i}]")
        if not all(isinstance(t, int) and 0 <= t <= MAX_TOKEN_ID for t in row):
            raise WireError(f"ExecuteModel result: sampled_token_ids[{i}] holds a bad token id: {row!r}")
        tokens.append(row)
    drafts: list[list[int]] = []
    for i, raw_row in enumerate(raw_drafts):
        row = _list(raw_row if raw_row is not None else [], f"draft_token_ids[{i}]")
        if not all(isinstance(t, int) and 0 <= t <= MAX_TOKEN_ID for t in row):
            raise WireError(f"ExecuteModel result: draft_token_ids[{i}] holds a bad token id: {row!r}")
        drafts.append(row)
    lps: list[TokenLogprobs | None] = []
    more: list[list[TokenLogprobs]] = []
    for i in range(len(req_ids)):
        lp = raw_lps[i] if raw_lps else None
        rest = _list((raw_more[i] if raw_more else None) or [], f"more_logprobs[{i}]")
        if lp is None:
            if rest:
                raise WireError(f"ExecuteModel result: more_logprobs[{i}] without logprobs[{i}]")
            lps.append(None)
            more.append([])
            continue
        if len(rest) not in (0, len(tokens[i]) - 1):
            raise WireError(
                f"ExecuteModel result: {len(rest)} more_logprobs[{i}] rows for {len(tokens[i])} sampled tokens"
            )
        lps.append(_token_logprobs(lp, tokens[i][:1], f"logprobs[{i}]"))
        more.append(
            [_token_logprobs(r, tokens[i][j + 1 : j + 2], f"more_logprobs[{i}][{j}]") for j, r in enumerate(rest)]
        )
    return ExecuteResult(
        req_ids=list(req_ids),
        sampled_token_ids=tokens,
        logprobs=lps,
        draft_token_ids=drafts,
        more_logprobs=more if any(more) else [],
    )


def _token_logprobs(lp: Any, token: list[int], what: str) -> TokenLogprobs:
    """One logprobs row, which must start with its sampled token."""
    if not isinstance(lp, dict):
        raise WireError(f"ExecuteModel result: {what} is not a map")
    ids = _list(lp.get("token_ids") or [], f"{what}.token_ids")
    vals = _list(lp.get("logprobs") or [], f"{what}.logprobs")
    rank = lp.get("rank")
    if not ids or len(ids) != len(vals) or not isinstance(rank, int):
        raise WireError(f"ExecuteModel result: {what} is malformed: {lp!r}")
    if not token or ids[0] != token[0]:
        raise WireError(f"ExecuteModel result: {what} does not start with the sampled token")
    return TokenLogprobs(token_ids=[int(t) for t in ids], logprobs=[float(v) for v in vals], rank=rank)
