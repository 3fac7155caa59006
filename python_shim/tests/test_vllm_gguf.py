"""A GGUF file served by the real, pinned `vllm serve` on atom-go's cpu backend.

vLLM 0.33.0 reads no GGUF itself: `atom-plugin gguf-dir FILE.gguf DIR` writes a Hugging Face
view of the file (config.json, tokenizer.json, tokenizer_config.json from its metadata, a
model.gguf link) and `vllm serve DIR` serves it, atom-go loading the weights from the file.
Greedy outputs and token ids are compared with `atom-plugin generate --model FILE.gguf`, which
reads the GGUF directly (its own tokenizer and chat template). Needs the SmolLM2 GGUF of
testdata/gguf/fetch.sh.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("vllm")
pytest.importorskip("openai")

from test_vllm_e2e import MODEL_NAME, Server, _start, _stop, _wait_healthy

pytestmark = [pytest.mark.e2e, pytest.mark.vllm]


PROMPTS = ["The capital of France is", "1 2 3 4 5 6"]
CHAT = "What is 12 + 30? Answer briefly."
TEXTS = [
    "Hello, world!",
    "1234567890 and 3.14159",
    "héllo wörld 日本語 🤖",
    "  spaces   and\ttabs\n\nnewlines ",
    "<|im_start|>user\nhi<|im_end|>",
]


@pytest.fixture(scope="module")
def gguf_dir(plugin_binary: str, gguf_file: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("gguf") / "smollm2"
    subprocess.run([plugin_binary, "gguf-dir", gguf_file, str(out)], check=True, capture_output=True, timeout=60)
    return str(out)


def _generate(plugin_binary: str, gguf_file: str, prompt: str, chat: bool) -> dict[str, Any]:
    cmd = [plugin_binary, "generate", "--model", gguf_file, "--prompt", prompt, "--max-tokens", "8", "--json"]
    if chat:
        cmd.append("--chat")
    out = subprocess.run(cmd, capture_output=True, check=True, timeout=120)
    return dict(json.loads(out.stdout))


@pytest.fixture(scope="module")
def served(
    plugin_binary: str, gguf_file: str, gguf_dir: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Server, dict[tuple[str, bool], dict[str, Any]]]]:
    """`vllm serve DIR`, and the references `atom-plugin generate` computes while it starts."""
    log = tmp_path_factory.mktemp("vllm-gguf") / "serve.log"
    proc, url = _start({"ATOM_GO_PLUGIN": plugin_binary}, gguf_dir, log, "--max-model-len", "512")
    srv = Server(proc, url, log, 0.0)
    try:
        cases = [(p, False) for p in PROMPTS] + [(CHAT, True)]
        refs = {c: _generate(plugin_binary, gguf_file, *c) for c in cases}
        _wait_healthy(srv)
        yield srv, refs
    finally:
        _stop(proc)
        if os.environ.get("ATOM_GO_KEEP_LOGS"):
            print(srv.log_text()[-20000:])


def test_tokenizer_json_encodes_like_the_gguf(plugin_binary: str, gguf_file: str, gguf_dir: str) -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(gguf_dir, "tokenizer.json"))
    for text in TEXTS:
        out = subprocess.run(
            [plugin_binary, "tokenize", "--model", gguf_file, "--text", text, "--json"],
            capture_output=True,
            check=True,
            timeout=60,
        )
        assert tok.encode(text).ids == json.loads(out.stdout)["token_ids"], text


@pytest.mark.parametrize("prompt", PROMPTS)
def test_completion_matches_the_gguf(served: tuple[Server, dict[Any, Any]], prompt: str) -> None:
    srv, refs = served
    ref = refs[(prompt, False)]
    r = srv.client().completions.create(
        model=MODEL_NAME, prompt=prompt, max_tokens=8, temperature=0, extra_body={"return_token_ids": True}
    )
    choice = r.choices[0]
    assert choice.model_extra["prompt_token_ids"] == ref["prompt_token_ids"]
    assert choice.model_extra["token_ids"] == ref["token_ids"]
    assert choice.text == ref["text"]


def test_chat_uses_the_gguf_template(served: tuple[Server, dict[Any, Any]]) -> None:
    srv, refs = served
    ref = refs[(CHAT, True)]
    r = srv.client().chat.completions.create(
        model=MODEL_NAME,
        messages=[{"role": "user", "content": CHAT}],
        max_tokens=8,
        temperature=0,
        extra_body={"return_token_ids": True},
    )
    assert r.usage.prompt_tokens == len(ref["prompt_token_ids"])
    assert r.choices[0].message.content == ref["text"]
    assert "atom-go host mode" in srv.log_text()


def test_gguf_file_gets_one_line_error(plugin_binary: str, gguf_file: str, tmp_path: pathlib.Path) -> None:
    """`vllm serve FILE.gguf` exits at argument parsing with the line that says what to run."""
    proc, _ = _start({"ATOM_GO_PLUGIN": plugin_binary}, gguf_file, tmp_path / "serve.log")
    try:
        rc = proc.wait(120)
    finally:
        _stop(proc)
    lines = [ln for ln in (tmp_path / "serve.log").read_text(errors="replace").splitlines() if "atom-go" in ln]
    assert rc == 2
    name = pathlib.Path(gguf_file).name
    assert lines == [
        f"atom-go: vLLM cannot read a GGUF file itself; run `atom-plugin gguf-dir {gguf_file} {name[:-5]}` "
        f"and serve the directory {name[:-5]} instead of {name}"
    ]
