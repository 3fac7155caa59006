"""`vllm serve` on Mixture-of-Experts checkpoints, atom-go's cpu backend: greedy tokens equal
`atom-plugin generate`'s. Qwen2-MoE (routed experts plus the gated shared expert), DeepSeek-V2-Lite
(Multi-head Latent Attention over a latent cache, ungated shared experts) and gpt-oss in MXFP4
(attention sinks, alternating sliding windows, the top-k-softmax router, clamped experts)."""

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

MODELS = pathlib.Path(__file__).resolve().parents[2] / "testdata" / "models"
CASES = [
    ("qwen2_moe-bf16", "Qwen2MoeForCausalLM"),
    ("deepseek_v2-lite-bf16", "DeepseekV2ForCausalLM"),
    ("gpt_oss-mxfp4", "GptOssForCausalLM"),
]
PROMPTS = [[1, 2, 3, 4, 5], [17, 250, 3, 99], list(range(3, 40)), [300, 301]]


def _generate(binary: str, model: pathlib.Path, prompt: list[int], max_tokens: int) -> list[int]:
    cmd = [binary, "generate", "--model", str(model), "--prompt-ids", ",".join(map(str, prompt))]
    cmd += ["--max-tokens", str(max_tokens), "--json"]
    out = subprocess.run(cmd, capture_output=True, check=True, timeout=120)
    return [int(t) for t in json.loads(out.stdout)["token_ids"]]


@pytest.mark.parametrize(("name", "architecture"), CASES, ids=[c[0] for c in CASES])
def test_moe_greedy_tokens_match_atom_plugin_generate(
    plugin_binary: str, tmp_path: pathlib.Path, name: str, architecture: str
) -> None:
    model = MODELS / name
    proc, url = _start({"ATOM_GO_PLUGIN": plugin_binary}, str(model), tmp_path / "serve.log", "--max-model-len", "256")
    srv = Server(proc, url, tmp_path / "serve.log", 0.0)
    try:
        _wait_healthy(srv)
        assert srv.describe()["architecture"] == architecture
        client = srv.client()

        def complete(prompt: list[int]) -> Any:
            extra = {"return_token_ids": True, "ignore_eos": True}
            return client.completions.create(
                model=MODEL_NAME, prompt=prompt, max_tokens=10, temperature=0, extra_body=extra
            )

        with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:  # batched together
            results = list(pool.map(complete, PROMPTS))
        for prompt, r in zip(PROMPTS, results, strict=True):
            assert r.choices[0].model_extra["token_ids"] == _generate(plugin_binary, model, prompt, 10), prompt
    finally:
        _stop(proc)
