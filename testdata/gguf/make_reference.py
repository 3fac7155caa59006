#!/usr/bin/env python3
"""Writes testdata/gguf/smollm2_reference.json, the reference engine/gguf_test.go checks the
engine against when it runs SmolLM2-135M-Instruct straight from its Q4_1 GGUF file.

What it records, for six plain texts (prose, a question, code, unicode, digits, whitespace
with a special token) and two chat conversations rendered with the GGUF's own chat template
(add_generation_prompt=True):
  - the token ids (checks engine/tokenizer.FromGGUF),
  - the top-20 next-token log-probabilities after the prompt,
  - an 8-token greedy continuation, each step with its log-probability and margin (top-1
    minus top-2 log-probability; a step with a small margin may legitimately differ).

Independent implementation: Hugging Face transformers loads the same file with
`AutoModelForCausalLM.from_pretrained(dir, gguf_file=..., dtype=torch.float32)`; it
dequantizes the Q4_1 blocks with its own code and un-permutes q/k itself, and runs the
model in float32. Both sides therefore compute with the same float32 weights, so
differences are float32 rounding only.

Tokenizer: `AutoTokenizer.from_pretrained(dir, gguf_file=...)` (the Rust `tokenizers`
library) with one correction. transformers' GGUF converter ignores tokenizer.ggml.pre
"smollm" and gives the vocabulary GPT-2's plain ByteLevel pre-tokenizer, which keeps runs
of digits together; SmolLM2's own tokenizer.json (and llama.cpp's "smollm" pre-tokenizer)
split every digit first: Sequence[Digits(individual_digits=True), ByteLevel(use_regex=True)].
The script installs exactly that pipeline, so the reference ids are the original model's.
It prints which texts the uncorrected converter would tokenize differently: none of these,
as it happens, since the SmolLM2 vocabulary has no token with a digit next to anything else
(its merges were learned on split digits), so both pipelines agree here.

Where it ran: on the developer machine's CPU, not on the device machine. The device can only
receive 64 MiB with a run and the GGUF alone is 98 MB (it cannot be fetched there: no
network), so torch (the PyPI build, used on CPU), transformers, accelerate, tokenizers, numpy and the
pure-python gguf package were installed into a throwaway venv under /tmp:

    python3 -m venv /tmp/refvenv
    /tmp/refvenv/bin/pip install torch transformers accelerate gguf numpy
    bash testdata/gguf/fetch.sh
    /tmp/refvenv/bin/python testdata/gguf/make_reference.py

Run from the repository root. Deterministic: greedy decoding, float32, no sampling.
"""

import json
import math
import os
import sys

import torch
import tokenizers
import transformers
from tokenizers import pre_tokenizers
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL_DIR = os.path.join(ROOT, "testdata", "external", "smollm2")
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
OUT = os.path.join(ROOT, "testdata", "gguf", "smollm2_reference.json")

TOP_K = 20
GREEDY_STEPS = 8

TEXTS = [
    ("prose", "The quick brown fox jumps over the lazy dog. It was a bright cold day in April, "
              "and the clocks were striking"),
    ("question", "Question: What is the largest planet in the Solar System?\nAnswer:"),
    ("code", "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) +"),
    ("unicode", "Café crème brûlée — naïve façade. 日本語のテキスト、한국어 텍스트, emoji 🙂👍🏽 and"),
    ("digits", "In 2024 the population was 8118835999, π ≈ 3.14159, and 12345 + 678 ="),
    ("whitespace", "Line one\n\n\tIndented\ttab   three spaces<|im_end|>\n  and then"),
]

CHATS = [
    ("capital", [{"role": "user", "content": "What is the capital of France?"}]),
    ("multi_turn", [
        {"role": "system", "content": "You are a concise assistant."},
        {"role": "user", "content": "Write a haiku about the sea."},
        {"role": "assistant", "content": "Waves fold into foam,\nsalt wind carries gull voices,\nthe tide keeps its time."},
        {"role": "user", "content": "Now give it a title."},
    ]),
]


def smollm_pre_tokenizer():
    """SmolLM2's tokenizer.json pre-tokenizer (llama.cpp's "smollm")."""
    return pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
    ])


def rounded(x):
    return round(float(x), 5)


@torch.no_grad()
def logprobs_after(model, ids):
    logits = model(torch.tensor([ids], dtype=torch.long)).logits[0, -1]
    return torch.log_softmax(logits.double(), dim=-1)


@torch.no_grad()
def reference_case(model, tok, name, text, ids):
    lp = logprobs_after(model, ids)
    top = torch.topk(lp, TOP_K)
    case = {
        "name": name,
        "text": text,
        "ids": ids,
        "top_ids": top.indices.tolist(),
        "top_logprobs": [rounded(v) for v in top.values],
        "greedy": [],
    }
    seq = list(ids)
    for _ in range(GREEDY_STEPS):
        two = torch.topk(lp, 2)
        token = int(two.indices[0])
        case["greedy"].append({
            "token": token,
            "logprob": rounded(two.values[0]),
            "margin": rounded(two.values[0] - two.values[1]),
        })
        seq.append(token)
        lp = logprobs_after(model, seq)
    case["greedy_text"] = tok.decode([s["token"] for s in case["greedy"]])
    return case


def main():
    torch.manual_seed(0)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    tok = AutoTokenizer.from_pretrained(MODEL_DIR, gguf_file=GGUF_FILE)
    backend = tok.backend_tokenizer
    stock = tokenizers.Tokenizer.from_str(backend.to_str())
    backend.pre_tokenizer = smollm_pre_tokenizer()
    model = AutoModelForCausalLM.from_pretrained(MODEL_DIR, gguf_file=GGUF_FILE, dtype=torch.float32)
    model.eval()

    ref = {
        "model": GGUF_FILE,
        "generator": "testdata/gguf/make_reference.py",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "tokenizers": tokenizers.__version__},
        "top_k": TOP_K,
        "texts": [],
        "chats": [],
    }
    for name, text in TEXTS:
        ids = tok(text, add_special_tokens=True)["input_ids"]
        stock_ids = stock.encode(text, add_special_tokens=True).ids
        if stock_ids != ids:
            print(f"{name}: transformers' stock GGUF pre-tokenizer differs ({len(stock_ids)} vs {len(ids)} tokens)",
                  file=sys.stderr)
        ref["texts"].append(reference_case(model, tok, name, text, ids))
    for name, messages in CHATS:
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        case = reference_case(model, tok, name, text, ids)
        case["messages"] = messages
        ref["chats"].append(case)
    for case in ref["texts"] + ref["chats"]:
        margins = [s["margin"] for s in case["greedy"]]
        print(f'{case["name"]}: {len(case["ids"])} ids, top1 {case["top_logprobs"][0]:.4f}, '
              f'min margin {min(margins):.4f}, greedy {case["greedy_text"]!r}', file=sys.stderr)
    with open(OUT, "w") as f:
        json.dump(ref, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {OUT} ({os.path.getsize(OUT)} bytes)", file=sys.stderr)
    assert all(math.isfinite(v) for c in ref["texts"] + ref["chats"] for v in c["top_logprobs"])


if __name__ == "__main__":
    main()
