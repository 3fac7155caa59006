#!/usr/bin/env python3
"""Writes the GGUF test fixtures of package models (run from anywhere; needs `pip install gguf numpy`).

dequant.json + dequant_<type>.bin + dequant_<type>.f32.bin
    Raw blocks of each quantized type and what the gguf package's reference
    (gguf.quants.dequantize) expands them to. Legacy types are made with
    gguf.quants.quantize from random data; the K and IQ4 types, which the package cannot
    quantize, are random bytes with finite scales. Q8_K has no Python dequantizer: its
    reference is d * qs, written out below.

tiny-llama.gguf + tiny-llama.expected.json
    A 2-layer llama written by gguf.GGUFWriter with mixed tensor types and llama.cpp's q/k
    row permutation (convert_hf_to_gguf.py LlamaModel.permute). The JSON lists, for every
    tensor in Hugging Face naming and layout, the dtype, shape and sha256 of the bytes the Go
    loader must produce; it is computed from the Hugging Face-layout weights, never by undoing
    the permutation.
"""
import hashlib
import json
import os

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(20240611)

QUANTIZABLE = {T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0}
# Byte offsets of the float16 scale fields of the types built from random bytes.
F16_FIELDS = {T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
              T.IQ4_NL: [0], T.IQ4_XS: [0]}
SPECIAL_SCALES = [0.0, -0.0, 6.0e-8, -3.0e-5, 65504.0]  # zero, subnormal, largest half


def random_blocks(qtype, n):
    """n random but valid blocks of a type gguf cannot quantize."""
    _, size = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n, size), dtype=np.uint8)
    if qtype == T.Q8_K:
        raw[:, 0:4] = np.float32(rng.uniform(-0.01, 0.01, n)).view(np.uint8).reshape(n, 4)
        return raw
    for off in F16_FIELDS[qtype]:
        d = rng.uniform(-0.02, 0.02, n).astype(np.float16)
        d[: len(SPECIAL_SCALES)] = SPECIAL_SCALES[: n]
        raw[:, off:off + 2] = d.view(np.uint8).reshape(n, 2)
    return raw


def dequantize(raw, qtype):
    if qtype == T.Q8_K:  # block: float32 d, int8 qs[256], int16 bsums[16]
        d = raw[:, 0:4].copy().view(np.float32)
        qs = raw[:, 4:260].view(np.int8).astype(np.float32)
        return (d * qs).astype(np.float32)
    return gguf.quants.dequantize(raw, qtype).astype(np.float32)


def quantize(w, qtype):
    """Raw GGUF bytes of float32 w (rows x cols) as qtype."""
    if qtype == T.F32:
        return w.astype(np.float32)
    if qtype == T.F16:
        return w.astype(np.float16)
    return gguf.quants.quantize(w.astype(np.float32), qtype)


def write_dequant_fixtures():
    manifest = []
    for qtype in [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K,
                  T.Q6_K, T.Q8_K, T.IQ4_NL, T.IQ4_XS]:
        block, size = GGML_QUANT_SIZES[qtype]
        n = 16 if block == 32 else 6
        if qtype in QUANTIZABLE:
            x = rng.normal(0, 1, (n, block)).astype(np.float32) * rng.uniform(0.01, 10, (n, 1)).astype(np.float32)
            x[0] = 0                      # all-zero block: scale 0
            x[1] = np.abs(x[1]) + 1       # all positive: min > 0
            x[2] *= np.float32(1e-6)      # tiny values: subnormal half scales
            raw = quantize(x, qtype).reshape(n, size)
        else:
            raw = random_blocks(qtype, n)
        want = dequantize(raw, qtype).reshape(-1)
        assert np.all(np.isfinite(want)), qtype.name
        base = f"dequant_{qtype.name.lower()}"
        raw.tofile(os.path.join(HERE, base + ".bin"))
        want.astype("<f4").tofile(os.path.join(HERE, base + ".f32.bin"))
        manifest.append({"type": qtype.name, "id": int(qtype), "blocks": n,
                         "raw": base + ".bin", "expected": base + ".f32.bin"})
    with open(os.path.join(HERE, "dequant.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


def permute(w, n_head, n_head_kv):
    """convert_hf_to_gguf.py LlamaModel.permute, verbatim."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2)
            .reshape(w.shape))


def write_tiny_llama():
    vocab, hidden, heads, kv_heads, head_dim, inter, layers = 64, 32, 4, 2, 8, 256, 2
    path = os.path.join(HERE, "tiny-llama.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("tiny-llama")
    w.add_custom_alignment(64)
    w.add_context_length(128)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(inter)
    w.add_block_count(layers)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(500000.0)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
    w.add_rope_scaling_factor(2.0)
    w.add_tokenizer_model("gpt2")
    tokens = ["<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(3, vocab)]
    w.add_token_list(tokens)
    w.add_token_types([3, 3, 3] + [1] * (vocab - 3))
    w.add_token_merges(["t 3", "t 4"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_chat_template("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    # One key of every value type, for the metadata accessor.
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 0.25)
    w.add_uint64("test.u64", 1 << 40)
    w.add_int64("test.i64", -(1 << 40))
    w.add_float64("test.f64", 0.1)
    w.add_bool("test.bool", True)
    w.add_array("test.floats", [0.5, -1.5])
    w.add_array("test.nested", [[1, 2], [3]])

    expected = {}

    def add(gguf_name, hf_name, hf, qtype, n_head=None, n_kv=None):
        """Stores hf (Hugging Face layout, float32) as qtype; records what the loader must return."""
        stored = permute(hf, n_head, n_kv) if n_head else hf
        if qtype in (T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K):
            assert n_head is None
            block, size = GGML_QUANT_SIZES[qtype]
            raw = random_blocks(qtype, hf.size // block).reshape(hf.shape[0], -1)
            w.add_tensor(gguf_name, raw, raw_dtype=qtype)
            out, dtype = dequantize(raw.reshape(-1, size), qtype).reshape(hf.shape), "float32"
        elif qtype == T.BF16:
            w.add_tensor(gguf_name, gguf.quants.quantize(stored, T.BF16), raw_dtype=T.BF16)
            out, dtype = gguf.quants.quantize(hf, T.BF16), "bfloat16"
        elif qtype in (T.F32, T.F16):
            w.add_tensor(gguf_name, quantize(stored, qtype))
            out, dtype = quantize(hf, qtype), "float32" if qtype == T.F32 else "float16"
        else:
            w.add_tensor(gguf_name, quantize(stored, qtype), raw_dtype=qtype)
            out, dtype = dequantize(quantize(hf, qtype).reshape(-1, GGML_QUANT_SIZES[qtype][1]), qtype), "float32"
        data = np.ascontiguousarray(out).tobytes()
        first = np.frombuffer(data, dtype=np.float32)[:4] if dtype == "float32" else []
        expected[hf_name] = {"gguf": gguf_name, "type": qtype.name, "dtype": dtype, "shape": list(hf.shape),
                             "sha256": hashlib.sha256(data).hexdigest(), "first": [float(v) for v in first]}

    def rnd(*shape, scale=0.2):
        return (rng.normal(0, scale, shape)).astype(np.float32)

    add("token_embd.weight", "model.embed_tokens.weight", rnd(vocab, hidden), T.Q8_0)
    add("output_norm.weight", "model.norm.weight", 1 + rnd(hidden, scale=0.05), T.F32)
    add("output.weight", "lm_head.weight", rnd(vocab, hidden), T.Q5_0)
    kinds = [  # per layer: q, k, v, o, gate, up, down
        (T.Q4_0, T.Q4_1, T.F16, T.BF16, T.Q8_0, T.Q4_1, T.Q4_K),
        (T.Q5_1, T.F16, T.Q8_0, T.F32, T.Q4_0, T.Q5_0, T.Q6_K),
    ]
    for i, (q, k, v, o, gate, up, down) in enumerate(kinds):
        g, h = f"blk.{i}.", f"model.layers.{i}."
        add(g + "attn_norm.weight", h + "input_layernorm.weight", 1 + rnd(hidden, scale=0.05), T.F32)
        add(g + "ffn_norm.weight", h + "post_attention_layernorm.weight", 1 + rnd(hidden, scale=0.05), T.F32)
        add(g + "attn_q.weight", h + "self_attn.q_proj.weight", rnd(heads * head_dim, hidden), q, heads, heads)
        add(g + "attn_k.weight", h + "self_attn.k_proj.weight", rnd(kv_heads * head_dim, hidden), k, heads, kv_heads)
        add(g + "attn_v.weight", h + "self_attn.v_proj.weight", rnd(kv_heads * head_dim, hidden), v)
        add(g + "attn_output.weight", h + "self_attn.o_proj.weight", rnd(hidden, heads * head_dim), o)
        add(g + "ffn_gate.weight", h + "mlp.gate_proj.weight", rnd(inter, hidden), gate)
        add(g + "ffn_up.weight", h + "mlp.up_proj.weight", rnd(inter, hidden), up)
        add(g + "ffn_down.weight", h + "mlp.down_proj.weight", rnd(hidden, inter), down)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with open(os.path.join(HERE, "tiny-llama.expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    write_dequant_fixtures()
    write_tiny_llama()
