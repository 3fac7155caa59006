"""The bench's reference point: the same workloads through Hugging Face transformers.

Runs on the same GPU in the same device call as examples/bench and writes JSON that
`bench --report --hf-json` merges into the table:

    python3 examples/bench/hf_reference.py --model DIR --out hf.json

Workloads (random token-id prompts, greedy, exactly --output-len new tokens):
  time to first token of one --prompt-len prompt (generate with max_new_tokens=1, median),
  batch-1 decode (time per output token after the first), and output throughput of a batch
  of each --concurrency (one generate() call with all prompts, equal lengths, no padding).
A workload that starts after --budget-s is spent is skipped and listed under "skipped".
"""

import argparse
import json
import sys
import time

import torch
import transformers
from transformers import AutoModelForCausalLM


def log(msg):
    print(f"{time.strftime('%H:%M:%S')} hf_reference: {msg}", file=sys.stderr, flush=True)


def timed_generate(model, ids, new_tokens):
    torch.cuda.synchronize()
    t = time.perf_counter()
    with torch.inference_mode():
        model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                       min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    torch.cuda.synchronize()
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--prompt-len", type=int, default=1024)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--concurrency", default="1,16,64,256")
    ap.add_argument("--ttft-reps", type=int, default=3)
    ap.add_argument("--budget-s", type=float, default=240)
    ap.add_argument("--attn", default="sdpa")
    a = ap.parse_args()
    start = time.perf_counter()
    res = {"transformers": transformers.__version__, "torch": torch.__version__, "attn_implementation": a.attn,
           "gpu": torch.cuda.get_device_name(0), "throughput": [], "skipped": []}

    def save():
        with open(a.out, "w") as f:
            json.dump(res, f, indent=2)

    t = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16, device_map="cuda",
                                                 attn_implementation=a.attn)
    model.eval()
    model.generation_config.eos_token_id = None
    torch.cuda.synchronize()
    res["load_s"] = time.perf_counter() - t
    log(f"loaded in {res['load_s']:.1f} s")
    vocab = model.config.vocab_size
    gen = torch.Generator(device="cpu").manual_seed(5)

    def prompts(n):
        return torch.randint(0, vocab, (n, a.prompt_len), generator=gen).cuda()

    timed_generate(model, prompts(1)[:, :32], 4)  # warm-up
    ttfts = sorted(timed_generate(model, prompts(1), 1) for _ in range(a.ttft_reps))
    res["ttft_ms"] = ttfts[len(ttfts) // 2] * 1e3
    log(f"TTFT {res['ttft_ms']:.1f} ms")
    save()
    for c in [int(x) for x in a.concurrency.split(",")]:
        if time.perf_counter() - start > a.budget_s:
            res["skipped"].append(f"concurrency {c}: the {a.budget_s:.0f} s budget was spent")
            log(res["skipped"][-1])
            continue
        try:
            wall = timed_generate(model, prompts(c), a.output_len)
        except torch.OutOfMemoryError as e:
            res["skipped"].append(f"concurrency {c}: out of memory ({e})"[:200])
            torch.cuda.empty_cache()
            continue
        res["throughput"].append({"concurrency": c, "wall_s": wall, "output_tokens_per_s": c * a.output_len / wall})
        log(f"concurrency {c}: {c * a.output_len / wall:.0f} tokens/s ({wall:.1f} s)")
        if c == 1:
            tpot = (wall - res["ttft_ms"] / 1e3) / (a.output_len - 1)
            res["decode_batch1"] = {"tpot_ms": tpot * 1e3, "tokens_per_s": 1 / tpot}
        save()
    save()


if __name__ == "__main__":
    main()
