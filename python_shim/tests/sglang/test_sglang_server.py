"""`sglang serve` (and `python -m sglang.launch_server`) served by atom-go (SGLANG_PLUGINS=atom_go), end to end.

One real SGLang server (its tokenizer manager, scheduler and detokenizer processes, SGLang's own
batching, radix cache and chunked prefill) with the plugin's worker starting the real atom-plugin
in the scheduler process. Its greedy tokens must equal `atom-plugin generate`'s for the same
prompts, alone, concurrently and next to an aborted request.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from sglang_support import PROMPTS, Reference, require_entry_point, require_sglang

require_sglang()

STARTUP_TIMEOUT = 600.0
REQUEST_TIMEOUT = 120.0
CHUNK = 16  # --chunked-prefill-size: prompts longer than this prefill in several steps


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A running SGLang server and everything it printed."""

    def __init__(self, launcher: list[str], args: list[str], env: dict[str, str], cwd: str) -> None:
        self.port = _free_port()
        self.lines: list[str] = []
        self._ready = threading.Event()
        self._exited = threading.Event()
        self.proc = subprocess.Popen(
            [*launcher, "--port", str(self.port), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,  # not python_shim/: a source-tree atom_go.egg-info there would hide the entry points
            text=True,
            start_new_session=True,  # its own process group: teardown reaches its children
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if "The server is fired up and ready to roll" in line:
                self._ready.set()
        self._exited.set()
        self._ready.set()

    def wait_ready(self, timeout: float) -> None:
        if not self._ready.wait(timeout) or self._exited.is_set():
            self.stop()
            pytest.fail("SGLang did not start:\n" + self.log_tail(80))

    def log_tail(self, n: int = 60) -> str:
        return "\n".join(line for line in self.lines[-n:] if "server_args=" not in line)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def post(self, path: str, body: dict[str, Any], timeout: float = REQUEST_TIMEOUT) -> Any:
        req = urllib.request.Request(
            self.url(path), data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            return {"http_status": exc.code, "body": exc.read().decode("utf-8", "replace")}

    def stream(self, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        req = urllib.request.Request(
            self.url("/generate"),
            data=json.dumps({**body, "stream": True}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT) as resp:
            for raw in resp:
                line = raw.decode().strip()
                if not line.startswith("data:"):
                    continue
                data = line[len("data:") :].strip()
                if data == "[DONE]":
                    return
                yield json.loads(data)

    def generate(self, input_ids: list[int], max_new_tokens: int, **extra: Any) -> Any:
        body = {
            "input_ids": input_ids,
            "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens, "ignore_eos": True},
            **extra,
        }
        return self.post("/generate", body)

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        self._reader.join(timeout=30)


# SGLang's current entry point, and the one its older documentation gives.
SGLANG_SERVE = [os.path.join(os.path.dirname(sys.executable), "sglang"), "serve"]
LAUNCH_SERVER = [sys.executable, "-m", "sglang.launch_server"]


def _start(launcher: list[str], atom_plugin: str, model: str, cwd: str, *extra: str) -> Server:
    require_entry_point()
    env = dict(os.environ)
    env.update(
        {
            "SGLANG_PLUGINS": "atom_go",
            "ATOM_GO_PLUGIN": atom_plugin,
            "ATOM_GO_ENGINE_ARGS": "--threads=2",
        }
    )
    env.pop("ATOM_GO_SGLANG", None)
    args = ["--model-path", model, "--max-total-tokens", "2048", "--max-running-requests", "8"]
    args += ["--chunked-prefill-size", str(CHUNK), "--log-level", "info", *extra]
    srv = Server(launcher, args, env, cwd)
    srv.wait_ready(STARTUP_TIMEOUT)
    return srv


@pytest.fixture(scope="module")
def server(atom_plugin: str, qwen2_dir: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = _start(SGLANG_SERVE, atom_plugin, qwen2_dir, str(tmp_path_factory.mktemp("sglang-server")))
    try:
        yield srv
    finally:
        srv.stop()
        print("---- SGLang server log (tail) ----\n" + srv.log_tail(150))  # shown when a test fails


def _ok(resp: Any) -> dict[str, Any]:
    assert isinstance(resp, dict) and "output_ids" in resp, resp
    return resp


def test_server_uses_atom_go(server: Server) -> None:
    # The plugin's worker started atom-plugin in SGLang's scheduler process (not SGLang's torch model).
    log = "\n".join(server.lines)
    assert "in slot mode" in log, server.log_tail()
    with urllib.request.urlopen(server.url("/health"), timeout=REQUEST_TIMEOUT) as resp:
        assert resp.status == 200


@pytest.mark.parametrize("prompt", PROMPTS, ids=lambda p: f"len{len(p)}")
def test_greedy_tokens_match_atom_plugin_generate(
    server: Server, reference: Reference, prompt: tuple[int, ...]
) -> None:
    max_new = 12
    out = _ok(server.generate(list(prompt), max_new))
    assert out["output_ids"] == reference.tokens(prompt, max_new)
    assert out["meta_info"]["finish_reason"]["type"] == "length"


def test_logprobs_match_atom_plugin_generate(server: Server, reference: Reference) -> None:
    prompt = PROMPTS[2]
    out = _ok(server.generate(list(prompt), 6, return_logprob=True, top_logprobs_num=3))
    meta = out["meta_info"]
    got = [row[0] for row in meta["output_token_logprobs"]]
    assert [row[1] for row in meta["output_token_logprobs"]] == reference.tokens(prompt, 6)
    assert got == pytest.approx(reference.logprobs(prompt, 6), abs=1e-4)
    for row, top in zip(meta["output_token_logprobs"], meta["output_top_logprobs"], strict=True):
        assert len(top) == 3
        assert top[0][1] == row[1]  # greedy: the sampled token is the most likely
        assert [t[0] for t in top] == sorted((t[0] for t in top), reverse=True)


def test_text_completion_matches_atom_plugin_generate(server: Server, reference: Reference) -> None:
    prompt = "The quick brown fox"
    resp = server.post(
        "/v1/completions", {"model": "m", "prompt": prompt, "max_tokens": 8, "temperature": 0, "ignore_eos": True}
    )
    assert resp["choices"][0]["text"] == reference.run(prompt, 8)["text"], resp


def test_concurrent_requests_and_an_abort(server: Server, reference: Reference) -> None:
    max_new = 24
    abort_prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    long_run = 256 - len(abort_prompt) - 1  # runs long past the abort
    aborted: dict[str, Any] = {}

    def run_aborted() -> None:
        chunks = server.stream(
            {
                "rid": "atom-go-abort-me",
                "input_ids": abort_prompt,
                "sampling_params": {"temperature": 0, "max_new_tokens": long_run, "ignore_eos": True},
            }
        )
        first = next(chunks)
        aborted["first"] = first
        server.post("/abort_request", {"rid": "atom-go-abort-me"})
        last = first
        for last in chunks:  # noqa: B007 - the last chunk carries the finish reason
            pass
        aborted["last"] = last

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(PROMPTS) + 1) as pool:
        abort_future = pool.submit(run_aborted)
        futures = {p: pool.submit(server.generate, list(p), max_new) for p in PROMPTS}
        results = {p: _ok(f.result(timeout=REQUEST_TIMEOUT)) for p, f in futures.items()}
        abort_future.result(timeout=REQUEST_TIMEOUT)
    for p, out in results.items():
        assert out["output_ids"] == reference.tokens(p, max_new), f"prompt of {len(p)} tokens"
    finish = aborted["last"]["meta_info"]["finish_reason"]
    assert finish["type"] == "abort", aborted["last"]["meta_info"]
    n_aborted = len(aborted["last"]["output_ids"])
    assert 0 < n_aborted < long_run
    # The tokens produced before the abort are still atom-go's greedy tokens.
    assert aborted["last"]["output_ids"] == reference.tokens(abort_prompt, long_run)[:n_aborted]
    # The server goes on serving, the same answers.
    again = _ok(server.generate(list(PROMPTS[0]), max_new))
    assert again["output_ids"] == reference.tokens(PROMPTS[0], max_new)


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        ({"return_logprob": True, "logprob_start_len": 0}, "prompt logprobs"),
        ({"sampling_params": {"temperature": 0, "max_new_tokens": 4, "regex": "[0-9]+"}}, "constrained decoding"),
    ],
    ids=["prompt-logprobs", "regex"],
)
def test_unsupported_features_fail_the_request_not_the_server(server: Server, extra: dict[str, Any], why: str) -> None:
    body: dict[str, Any] = {
        "input_ids": [1, 2, 3, 4],
        "sampling_params": {"temperature": 0, "max_new_tokens": 4, "ignore_eos": True},
    }
    body.update(extra)
    resp = server.post("/generate", body)
    text = json.dumps(resp)
    assert "atom-go does not support" in text and why in text, resp
    # Still serving.
    assert _ok(server.generate([1, 2, 3], 4))["output_ids"]


def _sampled(server: Server, seed: int, n: int) -> list[list[int]]:
    body = {
        "input_ids": list(PROMPTS[4]),
        "sampling_params": {
            "temperature": 1.0,
            "max_new_tokens": 12,
            "ignore_eos": True,
            "n": n,
            "sampling_seed": seed,
        },
    }
    resp = server.post("/generate", body)
    outs = resp if isinstance(resp, list) else [resp]
    return [_ok(o)["output_ids"] for o in outs]


def test_parallel_sampling_with_a_seed_returns_distinct_choices(server: Server) -> None:
    # SGLang sends the n copies with one seed; copy i must sample with seed + i, as vLLM does.
    seed, n = 4242, 3
    choices = _sampled(server, seed, n)
    assert len(choices) == n
    assert len({tuple(c) for c in choices}) == n, choices
    for i, got in enumerate(choices):
        assert got == _sampled(server, seed + i, 1)[0], f"choice {i} is the request seeded {seed + i}"
    assert _sampled(server, seed, n) == choices, "reproducible"


def test_openai_n_with_a_seed_returns_distinct_choices(server: Server) -> None:
    body = {"model": "m", "prompt": "The quick brown fox", "max_tokens": 10, "temperature": 1.0, "ignore_eos": True}
    resp = server.post("/v1/completions", {**body, "n": 3, "seed": 99})
    texts = [c["text"] for c in sorted(resp["choices"], key=lambda c: c["index"])]
    assert len(set(texts)) == 3, resp
    assert texts[1] == server.post("/v1/completions", {**body, "seed": 100})["choices"][0]["text"]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (
            "/generate",
            {
                "input_ids": [1, 2, 3, 4],
                "sampling_params": {"temperature": 0, "max_new_tokens": 4},
                "return_logprob": True,
                "top_logprobs_num": 21,
            },
        ),
        ("/v1/completions", {"model": "m", "prompt": "The quick", "max_tokens": 4, "logprobs": 21}),
        (
            "/v1/chat/completions",
            {
                "model": "m",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 4,
                "logprobs": True,
                "top_logprobs": 21,
            },
        ),
    ],
    ids=["generate", "completions", "chat"],
)
def test_top_logprobs_above_the_limit_are_refused(server: Server, path: str, body: dict[str, Any]) -> None:
    resp = server.post(path, body)
    text = json.dumps(resp)
    assert resp.get("http_status") == 400, resp
    assert "top_logprobs_num=21" in text and "at most 20 top logprobs" in text, resp
    # The limit itself is served in full.
    out = _ok(server.generate([1, 2, 3, 4], 3, return_logprob=True, top_logprobs_num=20))
    assert [len(top) for top in out["meta_info"]["output_top_logprobs"]] == [20, 20, 20]


def test_launch_server_entry_point(
    atom_plugin: str, qwen2_dir: str, reference: Reference, tmp_path: pathlib.Path
) -> None:
    """`python -m sglang.launch_server`, the entry point of SGLang's older docs, serves the same."""
    srv = _start(LAUNCH_SERVER, atom_plugin, qwen2_dir, str(tmp_path))
    try:
        assert "in slot mode" in "\n".join(srv.lines), srv.log_tail()
        prompt = PROMPTS[1]
        assert _ok(srv.generate(list(prompt), 8))["output_ids"] == reference.tokens(prompt, 8)
    finally:
        srv.stop()
