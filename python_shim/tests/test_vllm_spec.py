"""`vllm serve --speculative-config` on atom-go's cpu backend: vLLM's scheduler schedules the
drafts atom-go proposes (take_draft_token_ids), atom-go verifies them and returns the accepted
ones with its own token. Greedy tokens equal `atom-plugin generate`'s without speculation, and
vLLM's spec-decode counters show drafts accepted on prompts that repeat themselves."""

from __future__ import annotations

import concurrent.futures
import json
import pathlib
import subprocess
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

pytest.importorskip("vllm")

from test_vllm_e2e import MODEL_NAME, Server, _metric, _start, _stop, _wait_healthy

pytestmark = [pytest.mark.e2e, pytest.mark.vllm]

MODELS = pathlib.Path(__file__).resolve().parents[2] / "testdata" / "models"
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
# Prompts that repeat a unit (the n-gram proposer finds their continuations), then others.
PROMPTS = [
    [5, 6, 7, 8] * 4,
    [40, 41, 42, 43, 44, 45] * 3,
    [17, 250, 3, 99, 17, 250, 3, 99],
    [1, 2, 3, 4, 5],
    list(range(3, 40)),
]
MAX_TOKENS = 24
# 17 tokens: sent again, vLLM's prefix cache serves its first block and the last token is
# scheduled alone, padded with -1 draft placeholders, which atom-go leaves out.
PREFIX_HIT = [5, 6, 7, 8] * 4 + [9]


def _generate_json(binary: str, model: pathlib.Path, prompt: list[int], *extra: str) -> dict[str, Any]:
    cmd = [binary, "generate", "--model", str(model), "--prompt-ids", ",".join(map(str, prompt))]
    cmd += ["--max-tokens", str(MAX_TOKENS), "--ignore-eos", "--temperature", "0", "--json", *extra]
    out = subprocess.run(cmd, capture_output=True, check=True, timeout=120)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def _generate(binary: str, model: pathlib.Path, prompt: list[int]) -> list[int]:
    return [int(t) for t in _generate_json(binary, model, prompt)["token_ids"]]


def _serve(binary: str, model: pathlib.Path, log: pathlib.Path, spec: dict[str, Any]) -> Iterator[Server]:
    proc, url = _start(
        {"ATOM_GO_PLUGIN": binary}, str(model), log, "--max-model-len", "256", "--speculative-config", json.dumps(spec)
    )
    srv = Server(proc, url, log, 0.0)
    try:
        _wait_healthy(srv)
        yield srv
    finally:
        _stop(proc)


def _complete_all(srv: Server, prompts: list[list[int]], batched: bool) -> list[list[int]]:
    client = srv.client()

    def one(prompt: list[int]) -> list[int]:
        r = client.completions.create(
            model=MODEL_NAME,
            prompt=prompt,
            max_tokens=MAX_TOKENS,
            temperature=0,
            extra_body={"return_token_ids": True, "ignore_eos": True},
        )
        return [int(t) for t in r.choices[0].model_extra["token_ids"]]

    if not batched:
        return [one(p) for p in prompts]
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:  # verified in one batch
        return list(pool.map(one, prompts))


def _spec_counters(srv: Server) -> tuple[float, float]:
    return (
        _metric(srv, "vllm:spec_decode_num_draft_tokens_total", ""),
        _metric(srv, "vllm:spec_decode_num_accepted_tokens_total", ""),
    )


@pytest.fixture(scope="module")
def ngram_server(plugin_binary: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("vllm-spec") / "serve.log"
    yield from _serve(plugin_binary, MODELS / "qwen2-bf16", log, NGRAM)


@pytest.mark.parametrize("batched", [False, True], ids=["one-by-one", "batched"])
def test_ngram_greedy_tokens_match_without_speculation(ngram_server: Server, plugin_binary: str, batched: bool) -> None:
    drafted, accepted = _spec_counters(ngram_server)
    got = _complete_all(ngram_server, PROMPTS, batched)
    for prompt, tokens in zip(PROMPTS, got, strict=True):
        assert tokens == _generate(plugin_binary, MODELS / "qwen2-bf16", prompt), prompt
    drafted2, accepted2 = _spec_counters(ngram_server)
    print(f"\nvLLM's spec-decode counters: {accepted2 - accepted:.0f} of {drafted2 - drafted:.0f} drafts accepted")
    assert accepted2 > accepted, "vLLM counts accepted drafts on prompts that repeat themselves"
    assert drafted2 - drafted > accepted2 - accepted, "and rejected ones"
    assert ngram_server.describe()["speculative_config"] == NGRAM  # passed on to atom-go as is


def test_prefix_cache_hit_padded_with_placeholders(ngram_server: Server, plugin_binary: str) -> None:
    want = _generate(plugin_binary, MODELS / "qwen2-bf16", PREFIX_HIT)
    hits = _metric(ngram_server, "vllm:prefix_cache_hits_total", "")
    assert _complete_all(ngram_server, [PREFIX_HIT], False) == [want]
    assert _complete_all(ngram_server, [PREFIX_HIT], False) == [want]
    assert _metric(ngram_server, "vllm:prefix_cache_hits_total", "") >= hits + 16


def test_ngram_logprobs_and_sampling(ngram_server: Server, plugin_binary: str) -> None:
    client = ngram_server.client()
    # A request with logprobs gets drafts too, and a row for every token, accepted drafts
    # included: the tokens and logprobs of atom-go without speculation.
    want = _generate_json(plugin_binary, MODELS / "qwen2-bf16", PROMPTS[0], "--logprobs", "2")
    accepted = _spec_counters(ngram_server)[1]
    r = client.completions.create(
        model=MODEL_NAME,
        prompt=PROMPTS[0],
        max_tokens=MAX_TOKENS,
        temperature=0,
        logprobs=2,
        extra_body={"ignore_eos": True, "return_token_ids": True},
    )
    accepted2 = _spec_counters(ngram_server)[1]
    assert accepted2 > accepted, "drafts were accepted for the request with logprobs"
    lps = r.choices[0].logprobs
    assert [int(t) for t in r.choices[0].model_extra["token_ids"]] == want["token_ids"]
    assert len(lps.token_logprobs) == MAX_TOKENS
    for i, (got, ref) in enumerate(zip(lps.token_logprobs, want["logprobs"], strict=True)):
        assert got == pytest.approx(ref["logprob"], abs=1e-4), i
        # vLLM keys the alternatives by their text, so tokens that decode alike share an entry
        # (the later one's value).
        known = [ref["logprob"], *ref["top_logprobs"]]
        assert all(any(abs(v - k) <= 1e-4 for k in known) for v in lps.top_logprobs[i].values()), i
    # A seeded sampling request verified by rejection sampling is repeatable.
    kw: dict[str, Any] = {"model": MODEL_NAME, "prompt": PROMPTS[0], "max_tokens": 16, "temperature": 0.8, "seed": 5}
    a = client.completions.create(**kw, extra_body={"ignore_eos": True})
    b = client.completions.create(**kw, extra_body={"ignore_eos": True})
    assert a.choices[0].text == b.choices[0].text
    assert a.usage.completion_tokens == 16


def test_unsupported_speculative_method_is_refused(plugin_binary: str, tmp_path: pathlib.Path) -> None:
    log = tmp_path / "serve.log"
    proc, _ = _start(
        {"ATOM_GO_PLUGIN": plugin_binary},
        str(MODELS / "qwen2-bf16"),
        log,
        "--speculative-config",
        json.dumps({"method": "ngram_gpu", "num_speculative_tokens": 2, "prompt_lookup_max": 3}),
    )
    try:
        proc.wait(300)
    finally:
        _stop(proc)
    assert proc.returncode != 0
    assert "atom-go cannot serve with --speculative-config method ngram_gpu" in log.read_text(errors="replace")


def test_draft_model_greedy_tokens_match(plugin_binary: str, tmp_path: pathlib.Path) -> None:
    # The target drafting for itself: vLLM's draft-model config, atom-go's draft model.
    model = MODELS / "qwen2-bf16"
    spec = {"method": "draft_model", "model": str(model), "num_speculative_tokens": 3}
    prompts = [*PROMPTS[:3], PREFIX_HIT]
    for srv in _serve(plugin_binary, model, tmp_path / "serve.log", spec):
        got = _complete_all(srv, prompts, True)
        # Again: the prefix cache serves blocks whose draft KV atom-go computed in the first round.
        again = _complete_all(srv, prompts, False)
        for prompt, tokens, tokens2 in zip(prompts, got, again, strict=True):
            want = _generate(plugin_binary, model, prompt)
            assert tokens == want and tokens2 == want, prompt
        assert _metric(srv, "vllm:prefix_cache_hits_total", "") > 0
        drafted, accepted = _spec_counters(srv)
        assert drafted > accepted > 0  # vLLM counts its -1 placeholders as rejected drafts
        d = srv.describe()
        assert d["spec_num_draft_tokens"] > 0
        assert d["spec_num_accepted_tokens"] == d["spec_num_draft_tokens"], (
            "a model drafting for itself has every greedy draft accepted, also after prefix-cache hits"
        )
        assert httpx.get(srv.url + "/health", timeout=10).status_code == 200


def test_deepseek_mtp_greedy_tokens_match(plugin_binary: str, tmp_path: pathlib.Path) -> None:
    # DeepSeek-V3's MTP layer (testdata's is random: its drafts are mostly rejected), named as
    # vLLM names it; vLLM gives it lookahead slots and atom-go's layer drafts.
    model = MODELS / "deepseek_v3-bf16"
    spec = {"method": "deepseek_mtp", "num_speculative_tokens": 2}
    for srv in _serve(plugin_binary, model, tmp_path / "serve.log", spec):
        assert srv.describe()["speculative_config"] == {"method": "mtp", "num_speculative_tokens": 2}
        got = _complete_all(srv, PROMPTS[:3], True)
        for prompt, tokens in zip(PROMPTS[:3], got, strict=True):
            assert tokens == _generate(plugin_binary, model, prompt), prompt
        drafted, _ = _spec_counters(srv)
        assert drafted > 0
