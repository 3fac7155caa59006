#!/usr/bin/env python3
"""Writes smollm2.reference.json: next-token log-probabilities of SmolLM2-135M-Instruct Q4_1
(testdata/external/smollm2, see fetch.sh) computed the way llama.cpp computes them.

The forward pass below uses the GGUF weights exactly as stored (dequantized with
gguf.quants.dequantize, q/k rows left in the file's order) and llama.cpp's LLAMA_ROPE_TYPE_NORM
rotation, which pairs dimensions (2i, 2i+1) of each head. The Go loader instead un-permutes
q/k rows and the engine rotates Hugging Face style (i, i+d/2); the two agree only if the
un-permutation is right, so this reference does not depend on the loader's logic.

Needs `pip install gguf numpy`; runs in about a minute (float64 numpy).
"""
import json
import os

import numpy as np
import gguf

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(HERE, "..", "external", "smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
# Single-token words (GPT-2 byte-level spelling: "Ġ" is a leading space).
PROMPT = ["The", "Ġcapital", "Ġof", "ĠFrance", "Ġis", "ĠParis", ".", "ĠThe", "Ġcapital", "Ġof",
          "ĠGermany", "Ġis", "ĠBerlin", ".", "ĠThe", "Ġcapital", "Ġof", "ĠItaly", "Ġis"]
TOP = 8


def field(r, key):
    f = r.fields[key]
    if f.types[0] == gguf.GGUFValueType.ARRAY:
        return [bytes(f.parts[i]).decode() for i in f.data]
    v = f.parts[f.data[0]]
    return v.tobytes().decode() if f.types[0] == gguf.GGUFValueType.STRING else v[0].item()


def main():
    r = gguf.GGUFReader(MODEL)
    n_head = field(r, "llama.attention.head_count")
    n_kv = field(r, "llama.attention.head_count_kv")
    eps = float(np.float32(field(r, "llama.attention.layer_norm_rms_epsilon")))
    base = field(r, "llama.rope.freq_base")
    n_layer = field(r, "llama.block_count")
    tokens = field(r, "tokenizer.ggml.tokens")
    ids = [tokens.index(t) for t in PROMPT]
    w = {}
    for t in r.tensors:
        a = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
        w[t.name] = a.reshape([int(d) for d in reversed(t.shape)]) if a.ndim > 1 or len(t.shape) > 1 else a

    def norm(x, g):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g

    n = len(ids)
    hd = w["token_embd.weight"].shape[1] // n_head
    pos = np.arange(n)[:, None]
    ang = pos * base ** (-np.arange(0, hd, 2) / hd)  # [n, hd/2]
    cos, sin = np.cos(ang), np.sin(ang)

    def rope_norm(x):  # x [n, heads, hd]; llama.cpp NORM mode: pairs (2i, 2i+1)
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = a * cos[:, None, :] - b * sin[:, None, :]
        out[..., 1::2] = a * sin[:, None, :] + b * cos[:, None, :]
        return out

    x = w["token_embd.weight"][ids]
    mask = np.triu(np.full((n, n), -np.inf), 1)
    for i in range(n_layer):
        p = f"blk.{i}."
        h = norm(x, w[p + "attn_norm.weight"])
        q = rope_norm((h @ w[p + "attn_q.weight"].T).reshape(n, n_head, hd))
        k = rope_norm((h @ w[p + "attn_k.weight"].T).reshape(n, n_kv, hd))
        v = (h @ w[p + "attn_v.weight"].T).reshape(n, n_kv, hd)
        k, v = np.repeat(k, n_head // n_kv, axis=1), np.repeat(v, n_head // n_kv, axis=1)
        s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        x = x + np.einsum("hqk,khd->qhd", s, v).reshape(n, -1) @ w[p + "attn_output.weight"].T
        h = norm(x, w[p + "ffn_norm.weight"])
        g = h @ w[p + "ffn_gate.weight"].T
        x = x + ((g / (1 + np.exp(-g))) * (h @ w[p + "ffn_up.weight"].T)) @ w[p + "ffn_down.weight"].T
    logits = norm(x, w["output_norm.weight"]) @ w.get("output.weight", w["token_embd.weight"]).T
    lp = logits - logits.max(-1, keepdims=True)
    lp -= np.log(np.exp(lp).sum(-1, keepdims=True))
    steps = []
    for t in range(n):
        top = np.argsort(-lp[t])[:TOP]
        steps.append({"position": t, "top_ids": [int(j) for j in top],
                      "top_logprobs": [round(float(lp[t, j]), 6) for j in top]})
    out = {"model": os.path.basename(MODEL), "prompt": PROMPT, "prompt_ids": ids, "steps": steps}
    with open(os.path.join(HERE, "smollm2.reference.json"), "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print("last position top:", [tokens[j] for j in steps[-1]["top_ids"][:3]])


if __name__ == "__main__":
    main()
