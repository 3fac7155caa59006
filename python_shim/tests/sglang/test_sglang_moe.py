"""SGLang serving a Mixture-of-Experts checkpoint (Qwen3-MoE: sparse and dense layers, top-k
renormalised) through atom-go: greedy tokens equal `atom-plugin generate`'s, alone and batched."""

from __future__ import annotations

import concurrent.futures
import pathlib

from sglang_support import PROMPTS, REPO, Reference, require_sglang

require_sglang()

from test_sglang_server import SGLANG_SERVE, _ok, _start  # noqa: E402

MOE = REPO / "testdata" / "models" / "qwen3_moe-bf16"


def test_moe_greedy_tokens_match_atom_plugin_generate(atom_plugin: str, tmp_path: pathlib.Path) -> None:
    reference = Reference(atom_plugin, str(MOE))
    # The toy checkpoint has no tokenizer files: token ids in and out.
    srv = _start(SGLANG_SERVE, atom_plugin, str(MOE), str(tmp_path), "--skip-tokenizer-init")
    try:
        assert "in slot mode" in "\n".join(srv.lines), srv.log_tail()
        with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:
            outs = list(pool.map(lambda p: _ok(srv.generate(list(p), 10)), PROMPTS))
        for prompt, out in zip(PROMPTS, outs, strict=True):
            assert out["output_ids"] == reference.tokens(prompt, 10), prompt
    finally:
        srv.stop()
