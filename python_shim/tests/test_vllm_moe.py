"""`vllm serve` on a Mixture-of-Experts checkpoint (Qwen2-MoE: routed experts plus the gated
shared expert), atom-go's cpu backend: greedy tokens equal `atom-plugin generate`'s."""

from __future__ import annotations

import concurrent.futures
import json
import pathlib
import subprocess
from typing import Any

import pytest

pytest.importorskip("vllm")

from test_vllm_e2e import MODEL_NAME, Server, _start, _stop, _wait_healthy

pytestmark = [pytest.mark.e2e, pytest.mark.vllm]

MOE = pathlib.Path(__file__).resolve().parents[2] / "testdata" / "models" / "qwen2_moe-bf16"
PROMPTS = [[1, 2, 3, 4, 5], [17, 250, 3, 99], list(range(3, 40)), [300, 301]]


def _generate(binary: str, prompt: list[int], max_tokens: int) -> list[int]:
    cmd = [binary, "generate", "--model", str(MOE), "--prompt-ids", ",".join(map(str, prompt))]
    cmd += ["--max-tokens", str(max_tokens), "--json"]
    out = subprocess.run(cmd, capture_output=True, check=True, timeout=120)
    return [int(t) for t in json.loads(out.stdout)["token_ids"]]


def test_moe_greedy_tokens_match_atom_plugin_generate(plugin_binary: str, tmp_path: pathlib.Path) -> None:
    proc, url = _start({"ATOM_GO_PLUGIN": plugin_binary}, str(MOE), tmp_path / "serve.log", "--max-model-len", "256")
    srv = Server(proc, url, tmp_path / "serve.log", 0.0)
    try:
        _wait_healthy(srv)
        assert srv.describe()["architecture"] == "Qwen2MoeForCausalLM"
        client = srv.client()

        def complete(prompt: list[int]) -> Any:
            extra = {"return_token_ids": True, "ignore_eos": True}
            return client.completions.create(
                model=MODEL_NAME, prompt=prompt, max_tokens=10, temperature=0, extra_body=extra
            )

        with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:  # batched together
            results = list(pool.map(complete, PROMPTS))
        for prompt, r in zip(PROMPTS, results, strict=True):
            assert r.choices[0].model_extra["token_ids"] == _generate(plugin_binary, prompt, 10), prompt
    finally:
        _stop(proc)
