"""SGLang serving Mixture-of-Experts checkpoints (Qwen3-MoE: sparse and dense layers, top-k
renormalised; DeepSeek-V3: MLA over a latent cache, grouped sigmoid routing) through atom-go:
greedy tokens equal `atom-plugin generate`'s, alone and batched."""

from __future__ import annotations

import concurrent.futures
import pathlib

import pytest
from sglang_support import PROMPTS, REPO, Reference, require_sglang

require_sglang()

from test_sglang_server import SGLANG_SERVE, _ok, _start  # noqa: E402

MODELS = REPO / "testdata" / "models"


@pytest.mark.parametrize("model", ["qwen3_moe-bf16", "deepseek_v3-bf16", "gpt_oss-mxfp4"])
def test_moe_greedy_tokens_match_atom_plugin_generate(atom_plugin: str, tmp_path: pathlib.Path, model: str) -> None:
    moe = MODELS / model
    reference = Reference(atom_plugin, str(moe))
    # The toy checkpoint has no tokenizer files: token ids in and out.
    srv = _start(SGLANG_SERVE, atom_plugin, str(moe), str(tmp_path), "--skip-tokenizer-init")
    try:
        assert "in slot mode" in "\n".join(srv.lines), srv.log_tail()
        with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:
            outs = list(pool.map(lambda p: _ok(srv.generate(list(p), 10)), PROMPTS))
        for prompt, out in zip(PROMPTS, outs, strict=True):
            assert out["output_ids"] == reference.tokens(prompt, 10), prompt
    finally:
        srv.stop()
