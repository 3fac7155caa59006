"""A GGUF file served by SGLang (`sglang serve --model-path DIR`) on atom-go, end to end.

SGLang reads a checkpoint directory itself (config.json and the tokenizer, through
transformers): `atom-plugin gguf-dir FILE.gguf DIR` writes that view of the GGUF's metadata
beside a model.gguf link, and atom-go loads the weights from the file. Greedy tokens must equal
`atom-plugin generate --model FILE.gguf`'s, which reads the GGUF directly. Needs the SmolLM2
GGUF of testdata/gguf/fetch.sh.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from sglang_support import Reference, require_sglang
from test_sglang_server import SGLANG_SERVE, Server, _ok, _start

require_sglang()

TEXTS = ("The capital of France is", "1 2 3 4 5 6")


@pytest.fixture(scope="module")
def gguf_server(atom_plugin: str, gguf_file: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    view = tmp_path_factory.mktemp("gguf") / "smollm2"
    subprocess.run([atom_plugin, "gguf-dir", gguf_file, str(view)], check=True, capture_output=True, timeout=60)
    srv = _start(
        SGLANG_SERVE, atom_plugin, str(view), str(tmp_path_factory.mktemp("sglang-gguf")), "--context-length", "512"
    )
    try:
        yield srv
    finally:
        srv.stop()
        print("---- SGLang server log (tail) ----\n" + srv.log_tail(150))


def test_gguf_greedy_tokens_match(gguf_server: Server, atom_plugin: str, gguf_file: str) -> None:
    ref = Reference(atom_plugin, gguf_file)
    assert any("atom-go" in line for line in gguf_server.lines)
    for text in TEXTS:
        want = ref.run(text, 8)
        # Text through SGLang's tokenizer (the tokenizer.json gguf-dir wrote) ...
        got = _ok(
            gguf_server.post(
                "/generate",
                {"text": text, "sampling_params": {"temperature": 0, "max_new_tokens": 8, "ignore_eos": True}},
            )
        )
        assert got["output_ids"] == want["token_ids"], text
        assert got["text"] == want["text"], text
        # ... and the token ids atom-go's GGUF tokenizer made.
        got = _ok(gguf_server.generate(want["prompt_token_ids"], 8))
        assert got["output_ids"] == want["token_ids"], text
