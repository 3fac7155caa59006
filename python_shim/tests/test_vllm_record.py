"""`vllm serve` on atom-go's cpu backend with ATOM_GO_RECORD set, then `atom-plugin replay` of
what it recorded, which must be exact on the cpu (docs/recording.md).

The workload mixes greedy, seeded (n = 2), unseeded and penalised requests, logprobs of several
sizes, a stop string, a prompt longer than the step's token budget (chunked prefill), the same
long prompt twice (a prefix-cache hit), more requests than a tiny KV cache holds (preemption:
vLLM resumes them) and a streamed request the client drops (an abort). With
ATOM_GO_RECORDINGS_OUT set the recording is copied there (`make recordings`).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import pathlib
import shutil
import subprocess
from typing import Any

import httpx
import pytest

pytest.importorskip("vllm")

from test_vllm_e2e import MODEL_NAME, Server, _start, _stop, _wait_healthy

pytestmark = [pytest.mark.e2e, pytest.mark.vllm]

RECORDING_NAME = "vllm-qwen2.rec"


def _prompt(n: int, start: int) -> list[int]:
    return [3 + (start + 7 * i) % 300 for i in range(n)]


@pytest.fixture(scope="module")
def recorded(plugin_binary: str, model_dir: str, tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """Runs the workload on a recording server and yields the recording once it stopped."""
    tmp = tmp_path_factory.mktemp("vllm-record")
    rec = tmp / RECORDING_NAME
    env = {"ATOM_GO_PLUGIN": plugin_binary, "VLLM_PLUGINS": "atom_go", "ATOM_GO_RECORD": str(rec)}
    args = ["--num-gpu-blocks-override", "17", "--max-num-batched-tokens", "32", "--max-num-seqs", "8"]
    args += ["--max-model-len", "256", "--seed", "0"]
    proc, url = _start(env, model_dir, tmp / "serve.log", *args)
    srv = Server(proc, url, tmp / "serve.log", 0.0)
    try:
        _wait_healthy(srv)
        _workload(srv)
    finally:
        _stop(proc)
    assert rec.is_file(), srv.log_text()[-4000:]
    out = os.environ.get("ATOM_GO_RECORDINGS_OUT")
    if out:
        shutil.copyfile(rec, pathlib.Path(out) / RECORDING_NAME)
    return rec


def _workload(srv: Server) -> None:
    client = srv.client()

    def complete(prompt: list[int], max_tokens: int, **kw: Any) -> Any:
        extra = {"ignore_eos": True, **kw.pop("extra_body", {})}
        return client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=max_tokens, extra_body=extra, **kw)

    long_prompt = _prompt(60, 5)  # two chunks of the 32-token budget
    jobs: list[tuple[list[int], int, dict[str, Any]]] = [
        (_prompt(12, 1), 40, {"temperature": 0, "logprobs": 3}),
        (long_prompt, 30, {"temperature": 0, "logprobs": 2}),
        (_prompt(5, 9), 40, {"temperature": 0}),
        (_prompt(6, 13), 24, {"temperature": 0.8, "top_p": 0.9, "seed": 11, "n": 2, "logprobs": 1}),
        (_prompt(7, 17), 16, {"temperature": 1.0}),
        (_prompt(8, 19), 20, {"temperature": 0.7, "seed": 3, "presence_penalty": 0.5}),
        (_prompt(9, 23), 30, {"temperature": 0, "stop": ["e"], "extra_body": {"ignore_eos": False}}),
        (_prompt(20, 29), 60, {"temperature": 0}),
        (_prompt(20, 31), 60, {"temperature": 0, "logprobs": 1}),
    ]
    # The long prompt twice, alone: the second time its whole blocks come from the prefix cache
    # (later, the tiny cache under the concurrent load evicts them).
    complete(long_prompt, 8, temperature=0)
    again = complete(long_prompt, 8, temperature=0, logprobs=2)
    assert again.usage.prompt_tokens == len(long_prompt)
    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
        futures = [pool.submit(complete, p, n, **kw) for p, n, kw in jobs]
        _dropped_stream(srv)
        for f in futures:
            assert f.result().choices
    # Preemption that does not hang on how the concurrent jobs above happened to overlap (on a
    # slow machine they may not): four samples of one prompt enter together and each grows to
    # 7 blocks, 1 shared + 4 x 6 = 25 blocks of the 17 the cache holds.
    together = complete(_prompt(20, 41), 92, temperature=0.8, seed=5, n=4)
    assert len(together.choices) == 4


def _dropped_stream(srv: Server) -> None:
    """A streamed request the client leaves after a few chunks: vLLM aborts it."""
    body: dict[str, Any] = {"model": MODEL_NAME, "prompt": _prompt(4, 37), "max_tokens": 200, "temperature": 0}
    body.update(ignore_eos=True, stream=True)
    with httpx.stream("POST", srv.url + "/v1/completions", json=body, timeout=60) as r:
        seen = 0
        for line in r.iter_lines():
            if line.startswith("data: "):
                seen += 1
                if seen == 3:
                    break


def _replay(binary: str, rec: pathlib.Path, *args: str) -> tuple[int, dict[str, Any], str]:
    cmd = [binary, "replay", "--json", *args, str(rec)]
    out = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=300)
    report = json.loads(out.stdout) if out.stdout.strip() else {}
    return out.returncode, report, out.stderr


def test_the_recording_replays_exactly_on_the_cpu(plugin_binary: str, recorded: pathlib.Path) -> None:
    code, report, stderr = _replay(plugin_binary, recorded)
    assert code == 0, (stderr, report.get("mismatch"))
    assert report["ok"] is True
    assert report["mismatches"] == 0 and report["num_near_ties"] == 0 and report["skipped"] == 0
    assert report["max_logprob_diff"] <= 1e-5
    tokens = report["tokens"]
    assert tokens["greedy"] > 0 and tokens["seeded"] > 0 and tokens["random"] > 0, tokens
    work = report["workload"]
    print(f"\nvLLM recording: {recorded.stat().st_size} bytes, {report['steps']} steps, {tokens}, {work}")
    assert work["prefill_chunks"] > 0, work
    assert work["prefix_hits"] > 0, work
    assert work["finished"] > 0, work
    assert work["resumed"] > 0, work  # the tiny KV cache preempted requests and vLLM resumed them


def test_another_checkpoint_is_refused(plugin_binary: str, recorded: pathlib.Path) -> None:
    """The replay checks the model's identity before it compares anything."""
    other = pathlib.Path(__file__).resolve().parents[2] / "testdata" / "models" / "llama-bf16"
    code, _, stderr = _replay(plugin_binary, recorded, "--model", str(other))
    assert code != 0
    assert "is not the recorded model" in stderr
