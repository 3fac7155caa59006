"""`vllm serve` (the real, pinned vLLM) on a checkpoint directory without tokenizer files.

atom-go's platform warns once at start-up and vLLM serves the checkpoint with
--skip-tokenizer-init: token-id prompts work (and match `atom-plugin generate`), text prompts
are refused by vLLM, instead of start-up failing with a misleading tokenizer error.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
from collections.abc import Iterator

import pytest

pytest.importorskip("vllm")
openai = pytest.importorskip("openai")

from test_vllm_e2e import MODEL_NAME, Server, _start, _stop, _wait_healthy  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.vllm]

REPO = pathlib.Path(__file__).resolve().parents[2]
MODEL = REPO / "testdata" / "models" / "llama-bf16"  # config.json and weights, no tokenizer
PROMPT_IDS = [1, 15, 27, 33, 9]


@pytest.fixture(scope="module")
def server(plugin_binary: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    assert not (MODEL / "tokenizer.json").exists() and (MODEL / "config.json").is_file()
    log = tmp_path_factory.mktemp("vllm-notok") / "serve.log"
    proc, url = _start({"ATOM_GO_PLUGIN": plugin_binary}, str(MODEL), log, "--max-model-len", "128")
    srv = Server(proc, url, log, 0.0)
    try:
        _wait_healthy(srv)
        yield srv
    finally:
        _stop(proc)
        if os.environ.get("ATOM_GO_KEEP_LOGS"):
            print(srv.log_text()[-20000:])


def test_warns_once_at_start_up(server: Server) -> None:
    warnings = [ln for ln in server.log_text().splitlines() if "has no tokenizer" in ln]
    assert len(warnings) == 1, warnings
    assert f"atom-go: {MODEL} has no tokenizer (tokenizer.json or tokenizer.model)" in warnings[0]
    assert "--skip-tokenizer-init" in warnings[0] and "only token-id prompts work" in warnings[0]


def test_token_id_prompts_work(server: Server, plugin_binary: str) -> None:
    out = subprocess.run(
        [
            plugin_binary,
            "generate",
            "--model",
            str(MODEL),
            "--prompt-ids",
            ",".join(map(str, PROMPT_IDS)),
            "--max-tokens",
            "6",
            "--ignore-eos",
            "--json",
        ],
        capture_output=True,
        check=True,
        timeout=120,
    )
    ref = json.loads(out.stdout)
    r = server.client().completions.create(
        model=MODEL_NAME,
        prompt=PROMPT_IDS,
        max_tokens=6,
        temperature=0,
        extra_body={"return_token_ids": True, "ignore_eos": True, "detokenize": False},
    )
    assert r.choices[0].model_extra["token_ids"] == ref["token_ids"]


def test_text_prompts_are_refused(server: Server) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        server.client().completions.create(model=MODEL_NAME, prompt="hello", max_tokens=4)
    assert "Tokenizer not available" in str(err.value)
