"""Which tokenization follows the checkpoint: atom-go's, or transformers' (what vLLM uses)?

The checkpoint's own answer is its tokenizer.json run by Hugging Face's `tokenizers` library.
atom-go must reproduce it token for token. transformers rebuilds some tokenizers (Qwen2's among
them) from the vocabulary with its own pre-tokenizer, which splits digits differently: those
differences are printed, not asserted, since they are transformers' to change (the shim's README,
Troubleshooting, says what it means for `vllm serve`).
"""

from __future__ import annotations

import json
import pathlib
import subprocess

import pytest

pytestmark = pytest.mark.vllm  # transformers and tokenizers come with vLLM

REPO = pathlib.Path(__file__).resolve().parents[2]
TEXTS = [
    "12345 apples",
    "pi is 3.14159265",
    "2026-12-06 at 03:08",
    "x=1000000;y=42",
    "Tel: +44 20 7946 0958",
    "The 3rd of 12 items cost $1,234.56 (v2.0.1)",
    "١٢٣ and ௧௨௩ and 一二三",
]


def _checkpoints() -> list[pathlib.Path]:
    dirs = [REPO / "testdata" / "models" / "qwen2-bf16"]
    external = REPO / "testdata" / "external" / "tokenizers"  # make fetch-testdata
    if external.is_dir():
        dirs += sorted(d for d in external.iterdir() if (d / "tokenizer.json").is_file())
    return dirs


@pytest.mark.parametrize("checkpoint", _checkpoints(), ids=lambda d: d.name)
def test_atom_go_tokenizes_as_the_checkpoint(plugin_binary: str, checkpoint: pathlib.Path) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    own = tokenizers.Tokenizer.from_file(str(checkpoint / "tokenizer.json"))
    hf = transformers.AutoTokenizer.from_pretrained(str(checkpoint))
    differs = []
    for text in TEXTS:
        want = own.encode(text).ids  # with the special tokens the checkpoint adds (BOS)
        out = subprocess.run(
            [plugin_binary, "tokenize", "--model", str(checkpoint), "--text", text, "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["token_ids"] == want, text
        if hf.encode(text) != want:
            differs.append(text)
    print(f"\n{checkpoint.name}: transformers' {type(hf).__name__} differs from tokenizer.json on {differs}")
