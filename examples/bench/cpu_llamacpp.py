#!/usr/bin/env python3
"""atom-go's cpu backend against llama.cpp (llama-cpp-python) on one GGUF, same thread count.

Measures, interleaved (llama.cpp, atom-go, llama.cpp, atom-go, ...), REPS runs each:
  prefill tok/s: a PROMPT-token prompt of fixed pseudo-random token ids, one pass;
  decode tok/s:  GEN greedy tokens after it (the first, sampled from the prefill, not counted);
  streams:       output tok/s of 1 and of STREAMS concurrent greedy completions of GEN tokens
                 through `atom-plugin serve` and through llama.cpp's own server
                 (llama-cpp-python's llama_cpp.server, which serves one sequence at a time),
                 REPS interleaved runs of each server.
and prints a markdown table (medians) with the machine's load, plus the raw runs as JSON.
examples/bench/cpu-llamacpp.sh sets up the venv and the binary and runs this.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from typing import Any


def load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def llama_run(llm: Any, ids: list[int], gen: int) -> tuple[float, float]:
    import llama_cpp
    import numpy as np

    def greedy() -> int:
        # The last position's logits straight from the context (Llama keeps no scores without
        # logits_all).
        p = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
        return int(np.argmax(np.ctypeslib.as_array(p, shape=(llm.n_vocab(),))))

    llm.reset()
    t0 = time.perf_counter()
    llm.eval(ids)
    t1 = time.perf_counter()
    tok = greedy()
    for _ in range(gen - 1):
        llm.eval([tok])
        tok = greedy()
    t2 = time.perf_counter()
    return len(ids) / (t1 - t0), (gen - 1) / (t2 - t1)


def atom_run(args: argparse.Namespace, ids: list[int]) -> tuple[float, float]:
    cmd = [
        args.plugin,
        "generate",
        "--model",
        args.model,
        "--device",
        "cpu",
        "--threads",
        str(args.threads),
        "--prompt-ids",
        ",".join(map(str, ids)),
        "--max-tokens",
        str(args.gen),
        "--ignore-eos",
        "--json",
        "--max-model-len",
        str(args.prompt + args.gen + 16),
        "--kv-cache-memory",
        str(256 << 20),
        "--cpu-weights",
        args.cpu_weights,
    ]
    out = subprocess.run(cmd, capture_output=True, check=True, timeout=600)
    t = json.loads(out.stdout)["timing"]
    return len(ids) / t["ttft_s"], (t["output_tokens"] - 1) / (t["total_s"] - t["ttft_s"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return dict(json.loads(r.read()))


def streams_through(cmd: list[str], port: int, args: argparse.Namespace, extra: dict[str, Any]) -> dict[int, float]:
    """Output tok/s of 1 and of args.streams concurrent greedy completions of args.gen tokens
    through the OpenAI server that cmd starts on port (the same text prompts for both)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(1200):
            try:
                urllib.request.urlopen(base + "/v1/models", timeout=1).read()
                break
            except OSError:
                time.sleep(0.1)
        model = json.loads(urllib.request.urlopen(base + "/v1/models").read())["data"][0]["id"]
        out: dict[int, float] = {}
        for n in (1, args.streams):
            # Distinct short text prompts (llama.cpp's server takes text only; each side tokenizes).
            prompts = [f"Story {i}: write a long tale about the sea, the sky and a small boat." for i in range(n)]
            done: list[int] = []

            def one(p: str, done: list[int] = done) -> None:
                body = {"model": model, "prompt": p, "max_tokens": args.gen, "temperature": 0, **extra}
                r = post(base + "/v1/completions", body)
                done.append(int(r["usage"]["completion_tokens"]))

            threads = [threading.Thread(target=one, args=(p,)) for p in prompts]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            out[n] = sum(done) / (time.perf_counter() - t0)
        return out
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def atom_streams(args: argparse.Namespace) -> dict[int, float]:
    """`atom-plugin serve`'s streams (EOS ignored, so every completion has args.gen tokens)."""
    port = free_port()
    cmd = [
        args.plugin,
        "serve",
        "--model",
        args.model,
        "--device",
        "cpu",
        "--threads",
        str(args.threads),
        "--port",
        str(port),
        "--kv-cache-memory",
        str(256 << 20),
        "--cpu-weights",
        args.cpu_weights,
    ]
    return streams_through(cmd, port, args, {"ignore_eos": True})


def llama_streams(args: argparse.Namespace, eos: int) -> dict[int, float]:
    """llama.cpp's own server (llama-cpp-python's `llama_cpp.server`, one sequence at a time),
    EOS kept out by a logit bias, as `ignore_eos` is not among its request fields."""
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        args.model,
        "--n_threads",
        str(args.threads),
        "--n_threads_batch",
        str(args.threads),
        "--n_ctx",
        "2048",
        "--port",
        str(port),
        "--host",
        "127.0.0.1",
    ]
    return streams_through(cmd, port, args, {"logit_bias": {str(eos): -100.0}})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--plugin", default="bin/atom-plugin")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--streams", type=int, default=8, help="0: skip the serving measurement")
    ap.add_argument("--cpu-weights", default="blocks")
    ap.add_argument("--json", help="write the raw runs here")
    args = ap.parse_args()

    import llama_cpp

    llm = llama_cpp.Llama(
        model_path=args.model,
        n_threads=args.threads,
        n_threads_batch=args.threads,
        n_ctx=args.prompt + args.gen + 16,
        n_batch=args.prompt,
        n_ubatch=args.prompt,
        verbose=False,
    )
    rng = random.Random(0)
    ids = [rng.randrange(100, llm.n_vocab()) for _ in range(args.prompt)]
    runs: list[dict[str, Any]] = []
    llama_run(llm, ids[:32], 8)  # warm-up
    for rep in range(args.reps):
        for side in ("llama.cpp", "atom-go"):
            before = load()
            pf, dec = llama_run(llm, ids, args.gen) if side == "llama.cpp" else atom_run(args, ids)
            runs.append(
                {
                    "rep": rep,
                    "side": side,
                    "prefill_tok_s": pf,
                    "decode_tok_s": dec,
                    "load_before": before,
                    "load_after": load(),
                }
            )
            print(
                f"{side:9s} rep {rep}: prefill {pf:7.1f} tok/s, decode {dec:6.1f} tok/s (load {before})",
                file=sys.stderr,
            )
    eos = int(llm.token_eos())
    del llm
    # The servers, REPS times each, interleaved: one run of 1 and of STREAMS streams swings with
    # the machine's load as much as the difference it measures.
    served: list[dict[str, Any]] = []
    for rep in range(args.reps if args.streams > 0 else 0):
        for side in ("llama.cpp", "atom-go"):
            before = load()
            st = llama_streams(args, eos) if side == "llama.cpp" else atom_streams(args)
            one, many = st[1], st[args.streams]
            served.append({"rep": rep, "side": side, "one": one, "many": many, "load_before": before, "load_after": load()})
            print(
                f"{side:9s} rep {rep}: 1 stream {one:6.1f} tok/s, {args.streams} streams {many:6.1f} tok/s, "
                f"{many / one:.2f}x (load {before})",
                file=sys.stderr,
            )

    def med(side: str, key: str) -> float:
        return statistics.median(r[key] for r in runs if r["side"] == side)

    def best(side: str, key: str) -> float:
        return max(r[key] for r in runs if r["side"] == side)

    print(
        f"\nmodel {os.path.basename(args.model)}, {args.threads} threads, {os.cpu_count()} cpus ({cpu_name()}), "
        f"llama-cpp-python {llama_cpp.__version__}, atom-go --cpu-weights {args.cpu_weights}, "
        f"{args.reps} interleaved runs (median, best), load average {load()} at the end\n"
    )
    print("| | llama.cpp median | atom-go median | ratio | llama.cpp best | atom-go best | ratio |")
    print("|---|---|---|---|---|---|---|")
    for key, label in (
        ("prefill_tok_s", f"prefill, {args.prompt}-token prompt, tok/s"),
        ("decode_tok_s", f"decode, {args.gen} tokens, tok/s"),
    ):
        a, b = med("llama.cpp", key), med("atom-go", key)
        ba, bb = best("llama.cpp", key), best("atom-go", key)
        print(f"| {label} | {a:.1f} | {b:.1f} | {b / a:.2f} | {ba:.1f} | {bb:.1f} | {bb / ba:.2f} |")
    if served:
        print(f"\nserving, {args.gen} greedy tokens a stream, output tok/s, {args.reps} interleaved runs (medians):\n")
        print(f"| server | 1 stream | {args.streams} streams | {args.streams} / 1 (median of the runs) | per run |")
        print("|---|---|---|---|---|")
        many_med = {}
        for side, name in (("llama.cpp", "llama.cpp (llama_cpp.server)"), ("atom-go", "atom-go (atom-plugin serve)")):
            rs = [r for r in served if r["side"] == side]
            one, many = statistics.median(r["one"] for r in rs), statistics.median(r["many"] for r in rs)
            ratios = [r["many"] / r["one"] for r in rs]
            many_med[side] = many
            per = ", ".join(f"{v:.2f}" for v in ratios)
            print(f"| {name} | {one:.1f} | {many:.1f} | {statistics.median(ratios):.2f}x | {per} |")
        ratio = many_med["atom-go"] / many_med["llama.cpp"]
        print(f"\n{args.streams} streams: atom-go {ratio:.2f}x llama.cpp's server (medians)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "served": served, "args": vars(args)}, f, indent=1)


if __name__ == "__main__":
    main()
