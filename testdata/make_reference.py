#!/usr/bin/env python3
"""Write the small random-weight checkpoints under testdata/models and their float32 references.

Each checkpoint is a real Hugging Face architecture at toy size, saved by transformers itself
(safetensors, in the dtype named below), with a tiny byte-level BPE tokenizer trained here so that
text prompts work too. The reference is computed in float32 from the saved (rounded) weights:
for each prompt, a greedy continuation with, at every step, the top-5 logprobs and the margin
between the first and second logit, so the Go tests can skip steps where the top-1 is a near tie.

Run once where torch, transformers and tokenizers are installed:
    python testdata/make_reference.py --out testdata/models
or, to write only some checkpoints and leave the others as they are:
    python testdata/make_reference.py --out testdata/models --only qwen3_moe-bf16 mixtral-f16
Needs no network.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import zlib

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

VOCAB = 384
STEPS = 12
PROMPTS = [
    [1, 17, 42, 99, 7],
    [200, 201, 202, 203, 204, 205, 206, 207, 208, 209, 210, 211, 212, 213, 214, 215, 216, 217, 218],
    [5],
    list(range(30, 70)),
]
TEXT_PROMPTS = ["The quick brown fox", "Hello, world! 123"]

CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% endif %}"
)

CORPUS = [
    "The quick brown fox jumps over the lazy dog. " * 4,
    "Hello, world! 123 456 7890. Numbers and words, words and numbers.",
    "def main():\n    print('hello')\n    return 0\n",
    "Language models predict the next token from the previous ones.",
]


def base(**over: object) -> dict:
    cfg = dict(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        initializer_range=0.15,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
    )
    cfg.update(over)
    return cfg


def mla(q_lora_rank: int | None) -> dict:
    """The Multi-head Latent Attention widths of the DeepSeek cases."""
    return dict(q_lora_rank=q_lora_rank, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16)


# name -> (architecture config class, config kwargs, save dtype, extra)
CASES = {
    "llama-bf16": ("LlamaConfig", base(), torch.bfloat16, {}),
    "llama-linear-f16": (
        "LlamaConfig",
        base(rope_scaling={"rope_type": "linear", "factor": 2.0}),
        torch.float16,
        {},
    ),
    "llama3-rope-f32": (
        "LlamaConfig",
        base(
            rope_theta=500000.0,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
            tie_word_embeddings=True,
        ),
        torch.float32,
        {"shard": "60KB"},
    ),
    "llama-yarn-bf16": (
        "LlamaConfig",
        base(rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}),
        torch.bfloat16,
        {},
    ),
    "mistral-f16": ("MistralConfig", base(sliding_window=None, head_dim=16), torch.float16, {}),
    "qwen2-bf16": (
        "Qwen2Config",
        base(tie_word_embeddings=True, rope_theta=1000000.0),
        torch.bfloat16,
        {"tokenizer": True},
    ),
    "qwen3-bf16": (
        "Qwen3Config",
        base(head_dim=32, tie_word_embeddings=True, rope_theta=1000000.0),
        torch.bfloat16,
        {"tokenizer": True},
    ),
    # Mixture-of-experts families: 8 experts at toy size, widths that split over TP 2 and 4.
    # qwen3_moe: six layers, a sparse step of 2 and layer 3 forced dense, so layers 1 and 5 are
    # sparse and 0, 2, 3, 4 dense; top-2 renormalised.
    "qwen3_moe-bf16": (
        "Qwen3MoeConfig",
        base(
            head_dim=32,
            num_hidden_layers=6,
            tie_word_embeddings=True,
            rope_theta=1000000.0,
            num_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            norm_topk_prob=True,
            decoder_sparse_step=2,
            mlp_only_layers=[3],
        ),
        torch.bfloat16,
        {},
    ),
    # qwen2_moe: every layer sparse, top-4 not renormalised, a gated shared expert, q|k|v biases.
    "qwen2_moe-bf16": (
        "Qwen2MoeConfig",
        base(
            num_hidden_layers=3,
            rope_theta=1000000.0,
            num_experts=8,
            num_experts_per_tok=4,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=64,
            norm_topk_prob=False,
        ),
        torch.bfloat16,
        {},
    ),
    # DeepSeek MLA families (hidden 64, 4 heads): kv_lora_rank 32, nope 16, rope 8, v 16; 8 routed
    # experts top-2 plus shared experts. deepseek_v2-lite: the V2-Lite shape (q_proj, no
    # q_lora_rank), greedy softmax routing, layer 0 dense. deepseek_v2-bf16: q_lora_rank and
    # group-limited greedy routing. deepseek_v3-bf16: noaux_tc (sigmoid scores, a random
    # e_score_correction_bias, groups), YaRN with mscale/mscale_all_dim, interleaved RoPE.
    "deepseek_v2-lite-bf16": (
        "DeepseekV2Config",
        base(
            num_hidden_layers=3,
            num_key_value_heads=4,
            rms_norm_eps=1e-6,
            **mla(None),
            n_routed_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            n_shared_experts=2,
            first_k_dense_replace=1,
            topk_method="greedy",
            norm_topk_prob=False,
            routed_scaling_factor=1.0,
        ),
        torch.bfloat16,
        {},
    ),
    "deepseek_v2-bf16": (
        "DeepseekV2Config",
        base(
            num_hidden_layers=3,
            num_key_value_heads=4,
            rms_norm_eps=1e-6,
            **mla(24),
            n_routed_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            n_shared_experts=1,
            first_k_dense_replace=0,
            topk_method="group_limited_greedy",
            n_group=4,
            topk_group=2,
            norm_topk_prob=False,
            routed_scaling_factor=1.5,
        ),
        torch.bfloat16,
        {},
    ),
    "deepseek_v3-bf16": (
        "DeepseekV3Config",
        base(
            num_hidden_layers=3,
            num_key_value_heads=4,
            rms_norm_eps=1e-6,
            **mla(24),
            n_routed_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            n_shared_experts=1,
            first_k_dense_replace=1,
            n_group=4,
            topk_group=2,
            norm_topk_prob=True,
            routed_scaling_factor=2.5,
            rope_scaling={
                "rope_type": "yarn",
                "factor": 4.0,
                "original_max_position_embeddings": 64,
                "beta_fast": 32,
                "beta_slow": 1,
                "mscale": 0.707,
                "mscale_all_dim": 1.0,
            },
        ),
        torch.bfloat16,
        {"bias": True, "mtp": True},
    ),
    # DeepSeek-V3's native block-scaled FP8 layout: every projection (attention, experts, shared
    # experts) in float8_e4m3fn with [8, 16] weight_scale_inv blocks, the routers unquantized.
    "deepseek_v3-fp8": (
        "DeepseekV3Config",
        base(
            num_hidden_layers=3,
            num_key_value_heads=4,
            rms_norm_eps=1e-6,
            **mla(24),
            n_routed_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            n_shared_experts=1,
            first_k_dense_replace=1,
            n_group=4,
            topk_group=2,
            norm_topk_prob=True,
            routed_scaling_factor=2.5,
            rope_scaling={
                "rope_type": "yarn",
                "factor": 4.0,
                "original_max_position_embeddings": 64,
                "beta_fast": 32,
                "beta_slow": 1,
                "mscale": 0.707,
                "mscale_all_dim": 1.0,
            },
        ),
        torch.bfloat16,
        {"bias": True, "fp8_block_moe": [8, 16]},
    ),
    # mixtral: top-2 always renormalised, a sliding window below max_position_embeddings (served
    # by capping the model length, as for Mistral; the references stay inside it).
    "mixtral-f16": (
        "MixtralConfig",
        base(num_local_experts=8, num_experts_per_tok=2, intermediate_size=64, sliding_window=128),
        torch.float16,
        {},
    ),
    # Block-scaled FP8 (DeepSeek-V3 / Qwen3-FP8 layout): every decoder Linear's weight stored
    # as float8_e4m3fn with a float32 weight_scale_inv per 8x16 block (rows x columns); the
    # embedding (tied LM head) and norms bf16. intermediate_size 120 = 7.5 x 16 leaves a partial
    # block at the edge of down_proj's columns (q|k|v and gate|up stack whole row blocks, as
    # vLLM requires), so this checkpoint does not split over TP 2 or 4: shards must be whole
    # blocks. The reference runs the DEQUANTIZED weights (fp8.float() * scale) in float32.
    "llama-fp8": (
        "LlamaConfig",
        base(intermediate_size=120, tie_word_embeddings=True),
        torch.bfloat16,
        {"fp8_block": [8, 16]},
    ),
    # Per-tensor and per-channel FP8 in llm-compressor's compressed-tensors layout: attention
    # Linears per-tensor (weight_scale [1]) with static input_scale, MLP Linears per-channel
    # (weight_scale [N, 1] in bfloat16) with dynamic per-token activations; q, k and v (and gate,
    # up) have their own per-tensor scales, so the fused weights mix scales. lm_head (untied) and
    # layer 1's down_proj are in the ignore list and stay bf16; each attention layer carries the
    # k_scale / v_scale of an fp8 KV cache (kv_cache_scheme). The reference runs the DEQUANTIZED
    # weights with unquantized activations (input_scale is not applied) in float32.
    "llama-fp8-tensor": (
        "LlamaConfig",
        base(tie_word_embeddings=False),
        torch.bfloat16,
        {"fp8_scaled": True},
    ),
    # Block-scaled FP8 Qwen3-MoE (the Qwen3-30B-A3B-FP8 layout): every expert's gate/up/down
    # and the attention Linears in float8_e4m3fn with weight_scale_inv per 8x16 block; the
    # routers (mlp.gate), embeddings and norms bf16. Layers 1 and 3 sparse.
    "qwen3_moe-fp8": (
        "Qwen3MoeConfig",
        base(
            head_dim=32,
            num_hidden_layers=4,
            tie_word_embeddings=True,
            rope_theta=1000000.0,
            num_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            norm_topk_prob=True,
            decoder_sparse_step=2,
        ),
        torch.bfloat16,
        {"fp8_block_moe": [8, 16]},
    ),
    # Per-channel FP8 Qwen3-MoE in compressed-tensors (the FP8_DYNAMIC layout of
    # Qwen3-30B-A3B-FP8-dynamic): every Linear incl. each expert's gate/up/down per-channel with
    # dynamic per-token activations, lm_head and the routers ignored. Two layers, 1 sparse.
    "qwen3_moe-fp8-channel": (
        "Qwen3MoeConfig",
        base(
            head_dim=32,
            tie_word_embeddings=False,
            rope_theta=1000000.0,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            norm_topk_prob=True,
            decoder_sparse_step=2,
        ),
        torch.bfloat16,
        {"fp8_channel_moe": True},
    ),
    # gpt-oss: three layers alternating sliding (window 8, shorter than the prompts) and full
    # attention, per-head sinks, q/k/v/o biases, YaRN (factor 32, truncate false, theta 150000
    # as the real config), 8 experts top-4 with a biased router, expert biases, gate|up
    # interleaved and the clamped SwiGLU (swiglu_limit 2 so the clamp bites at toy scale).
    # Expert width 64 so that MXFP4's 32-element blocks split over TP 2.
    "gpt_oss-bf16": (
        "GptOssConfig",
        base(
            head_dim=16,
            num_hidden_layers=3,
            intermediate_size=64,
            num_local_experts=8,
            num_experts_per_tok=4,
            sliding_window=8,
            swiglu_limit=2.0,
            rope_theta=150000.0,
        ),
        torch.bfloat16,
        {"gpt_oss": True},
    ),
    # The same in gpt-oss's MXFP4 layout: each expert's gate_up_proj and down_proj quantized to
    # E2M1 codes in 32-element blocks with E8M0 scales (*_blocks, *_scales); attention, router,
    # embeddings and LM head bf16 (modules_to_not_convert). The reference runs the DEQUANTIZED
    # experts in float32.
    "gpt_oss-mxfp4": (
        "GptOssConfig",
        base(
            head_dim=16,
            num_hidden_layers=3,
            intermediate_size=64,
            num_local_experts=8,
            num_experts_per_tok=4,
            sliding_window=8,
            swiglu_limit=2.0,
            rope_theta=150000.0,
        ),
        torch.bfloat16,
        {"gpt_oss": True, "mxfp4": True},
    ),
}


def train_tokenizer(out: str) -> None:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    specials = ["<|endoftext|>", "<|bos|>", "<|eos|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer)
    assert tok.get_vocab_size() <= VOCAB, tok.get_vocab_size()
    tok.save(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(
            {
                "bos_token": None,
                "eos_token": "<|im_end|>",
                "pad_token": "<|endoftext|>",
                "chat_template": CHAT_TEMPLATE,
                "model_max_length": 256,
                "tokenizer_class": "PreTrainedTokenizerFast",
            },
            f,
            indent=1,
        )


def reference(model: torch.nn.Module, prompt: list[int]) -> dict:
    ids = list(prompt)
    steps = []
    with torch.no_grad():
        for _ in range(STEPS):
            logits = model(torch.tensor([ids])).logits[0, -1].float()
            lp = torch.log_softmax(logits, dim=-1)
            top = torch.topk(logits, 5)
            vals, idx = torch.topk(lp, 5)
            steps.append(
                {
                    "token": int(idx[0]),
                    "margin": float(top.values[0] - top.values[1]),
                    "top_ids": [int(i) for i in idx],
                    "top_logprobs": [float(v) for v in vals],
                }
            )
            ids.append(int(idx[0]))
    return {"prompt_ids": prompt, "steps": steps}


def hidden_states(model: torch.nn.Module, prompt: list[int]) -> list:
    """Per-layer last-token hidden state sums, to locate a wrong layer quickly."""
    with torch.no_grad():
        out = model(torch.tensor([prompt]), output_hidden_states=True)
    return [[float(h[0, -1].sum()), float(h[0, -1].abs().sum())] for h in out.hidden_states]


def make(name: str, out_root: str) -> None:
    cls_name, kw, dtype, extra = CASES[name]
    cfg = getattr(transformers, cls_name)(**kw)
    torch.manual_seed(zlib.crc32(name.encode()))
    model_cls = getattr(transformers, cls_name.replace("Config", "ForCausalLM"))
    model = model_cls(cfg).eval()
    # Random q/k norms and biases so those code paths matter.
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("norm.weight"):
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
            if pname.endswith(".bias"):
                p.copy_(0.3 * torch.randn_like(p))
        if extra.get("bias"):  # DeepSeek-V3's selection bias, large enough to change choices
            for bname, b in model.named_buffers():
                if bname.endswith("e_score_correction_bias"):
                    b.copy_(0.2 * torch.randn_like(b))
        if extra.get("gpt_oss"):  # transformers zeroes the expert biases: random ones, and sinks that matter
            for pname, p in model.named_parameters():
                if pname.endswith(("_proj_bias", "router.bias")):
                    p.copy_(0.3 * torch.randn_like(p))
                if pname.endswith("self_attn.sinks"):
                    p.copy_(torch.randn_like(p))
    out = os.path.join(out_root, name)
    shutil.rmtree(out, ignore_errors=True)
    if extra.get("fp8_block"):
        ref_model = save_fp8(model, dtype, extra["fp8_block"], out)
        write_refs(name, cfg, model_cls, ref_model, out, extra)
        return
    if extra.get("mxfp4"):
        ref_model = save_mxfp4(model, model_cls, dtype, out)
        write_refs(name, cfg, model_cls, ref_model, out, extra)
        return
    if extra.get("fp8_scaled") or extra.get("fp8_block_moe") or extra.get("fp8_channel_moe"):
        ref_model = save_quantized(model, model_cls, dtype, extra, out)
        write_refs(name, cfg, model_cls, ref_model, out, extra)
        return
    model.to(dtype).save_pretrained(out, max_shard_size=extra.get("shard", "1GB"), safe_serialization=True)
    # Reference in float32 from the rounded weights actually saved.
    ref_model = model_cls.from_pretrained(out, torch_dtype=torch.float32).eval()
    write_refs(name, cfg, model_cls, ref_model, out, extra)
    if extra.get("mtp"):
        add_mtp(name, cfg, model_cls, ref_model, dtype=dtype, out=out)


def add_mtp(
    name: str,
    cfg: transformers.PretrainedConfig,
    model_cls: type,
    ref_model: torch.nn.Module,
    *,
    dtype: torch.dtype,
    out: str,
) -> None:
    """Add DeepSeek-V3's multi-token-prediction layer, which transformers neither builds nor
    writes, as the published checkpoints store it at layer index num_hidden_layers: embed_tokens
    (a copy of the model's), enorm, hnorm, eh_proj [hidden, 2*hidden], shared_head.norm,
    shared_head.head and a full decoder layer (MLA + MoE), random. Its float32 reference goes
    into reference.json under "mtp": for the first prompt, the logits of
    shared_head.head(shared_head.norm(block(eh_proj([enorm(embed(t[i+1])); hnorm(h[i])])))),
    h being the model's final-normed hidden states, at every position i but the last."""
    import copy
    import tempfile

    from safetensors.torch import load_file, save_file

    n, h, eps = cfg.num_hidden_layers, cfg.hidden_size, cfg.rms_norm_eps
    # The block is layer 0 of a one-layer model of the same shape whose layer 0 is sparse: its
    # norm is shared_head.norm and its lm_head shared_head.head.
    bcfg = copy.deepcopy(cfg)
    bcfg.num_hidden_layers, bcfg.first_k_dense_replace = 1, 0
    torch.manual_seed(zlib.crc32((name + "/mtp").encode()))
    block = model_cls(bcfg).eval()
    with torch.no_grad():
        for pname, p in block.named_parameters():
            if pname.endswith("norm.weight"):
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
        for bname, b in block.named_buffers():
            if bname.endswith("e_score_correction_bias"):
                b.copy_(0.2 * torch.randn_like(b))
    own = {
        "enorm.weight": 1.0 + 0.3 * torch.randn(h),
        "hnorm.weight": 1.0 + 0.3 * torch.randn(h),
        "eh_proj.weight": cfg.initializer_range * torch.randn(h, 2 * h),
    }
    with tempfile.TemporaryDirectory() as tmp:
        block.to(dtype).save_pretrained(tmp, max_shard_size="1GB", safe_serialization=True)
        saved = load_file(os.path.join(tmp, "model.safetensors"))
        ref_block = model_cls.from_pretrained(tmp, torch_dtype=torch.float32).eval()
    path = os.path.join(out, "model.safetensors")
    tensors = load_file(path)
    pre = f"model.layers.{n}."
    for k, v in saved.items():
        if k.startswith("model.layers.0."):
            tensors[pre + k[len("model.layers.0.") :]] = v
        elif k == "model.norm.weight":
            tensors[pre + "shared_head.norm.weight"] = v
        elif k == "lm_head.weight":
            tensors[pre + "shared_head.head.weight"] = v
    for k, v in own.items():
        tensors[pre + k] = v.to(dtype)
        own[k] = tensors[pre + k].float()
    tensors[pre + "embed_tokens.weight"] = tensors["model.embed_tokens.weight"].clone()
    save_file(tensors, path, metadata={"format": "pt"})
    os.chmod(path, 0o644)

    def rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    ids = PROMPTS[0]
    with torch.no_grad():
        hid = ref_model.model(input_ids=torch.tensor([ids])).last_hidden_state[0]
        emb = ref_model.model.embed_tokens(torch.tensor(ids[1:]))
        x = torch.cat([rms(emb, own["enorm.weight"]), rms(hid[:-1], own["hnorm.weight"])], -1) @ own["eh_proj.weight"].T
        logits = ref_block(inputs_embeds=x[None], position_ids=torch.arange(len(ids) - 1)[None]).logits[0].float()
    rows = []
    for row in logits:
        lp = torch.log_softmax(row, dim=-1)
        top = torch.topk(row, 5)
        vals, idx = torch.topk(lp, 5)
        rows.append(
            {
                "token": int(idx[0]),
                "margin": float(top.values[0] - top.values[1]),
                "top_ids": [int(i) for i in idx],
                "top_logprobs": [float(v) for v in vals],
            }
        )
    ref_path = os.path.join(out, "reference.json")
    with open(ref_path) as f:
        refs = json.load(f)
    refs["mtp"] = {"prompt_ids": ids, "steps": rows}
    with open(ref_path, "w") as f:
        json.dump(refs, f, indent=1)
    print(name, "mtp ok", [r["token"] for r in rows])


def quantize_fp8(w: torch.Tensor, bn: int, bk: int) -> tuple:
    """Blockwise float8_e4m3fn quantization: scale = amax(block) / 448 per [bn, bk] block (partial
    blocks at the edges), q = w / scale; returns (q, scale_inv float32, dequantized float32)."""
    n, k = w.shape
    sn, sk = -(-n // bn), -(-k // bk)
    w = w.float()
    scale = torch.empty(sn, sk)
    for i in range(sn):
        for j in range(sk):
            amax = w[i * bn : (i + 1) * bn, j * bk : (j + 1) * bk].abs().max().clamp(min=1e-12)
            scale[i, j] = amax / 448.0
    full = scale.repeat_interleave(bn, 0)[:n].repeat_interleave(bk, 1)[:, :k]
    q = (w / full).clamp(-448, 448).to(torch.float8_e4m3fn)
    return q, scale, q.float() * full


def save_fp8(model: torch.nn.Module, dtype: torch.dtype, block: list, out: str) -> torch.nn.Module:
    """Writes the checkpoint with every decoder Linear in block-scaled fp8 and returns the float32
    model whose weights are the dequantized ones (what transformers' dequantized forward runs)."""
    from safetensors.torch import save_file

    bn, bk = block
    tensors, deq = {}, {}
    for pname, p in model.state_dict().items():
        if pname.startswith("model.layers.") and pname.endswith("_proj.weight"):
            q, s, d = quantize_fp8(p, bn, bk)
            tensors[pname] = q.contiguous()
            tensors[pname[: -len("weight")] + "weight_scale_inv"] = s.contiguous()
            deq[pname] = d
        else:
            tensors[pname] = p.detach().to(dtype).contiguous()
            deq[pname] = tensors[pname].float()
    if model.config.tie_word_embeddings:
        del tensors["lm_head.weight"]  # tied: stored once, as save_pretrained does
    os.makedirs(out, exist_ok=True)
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    model.config.torch_dtype = dtype
    model.config.architectures = [type(model).__name__]
    model.config.save_pretrained(out)
    model.generation_config.save_pretrained(out)
    with open(os.path.join(out, "config.json")) as f:
        cfg = json.load(f)
    cfg["quantization_config"] = {
        "quant_method": "fp8",
        "fmt": "e4m3",
        "activation_scheme": "dynamic",
        "weight_block_size": [bn, bk],
    }
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    ref_model = type(model)(model.config).float().eval()
    ref_model.load_state_dict(deq)
    return ref_model


def quantize_scaled(w: torch.Tensor, channel: bool, scale_dtype: torch.dtype) -> tuple:
    """Per-tensor or per-channel float8_e4m3fn quantization: scale = amax / 448 (per row when
    channel), rounded to scale_dtype first so the stored scale is the one dequantization uses;
    returns (q, scale as stored, dequantized float32)."""
    w = w.float()
    amax = w.abs().amax(dim=1, keepdim=True) if channel else w.abs().max().reshape(1)
    scale = (amax.clamp(min=1e-12) / 448.0).to(scale_dtype)
    full = scale.float() if channel else scale.float().reshape(1, 1)
    q = (w / full).clamp(-448, 448).to(torch.float8_e4m3fn)
    return q, scale, q.float() * full


ATTN = r"re:.*self_attn\.(q|k|v|o)_proj$"
MLP = r"re:.*mlp\.(gate|up|down)_proj$"
CT_IGNORE = ["lm_head", r"re:.*layers\.1\.mlp\.down_proj$"]


def scaled_config() -> dict:
    """compressed-tensors' quantization_config for the llama-fp8-tensor checkpoint."""
    fp8 = {"num_bits": 8, "type": "float", "symmetric": True, "group_size": None, "block_structure": None}
    return {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "quantization_status": "compressed",
        "ignore": CT_IGNORE,
        "config_groups": {
            "group_0": {
                "targets": [ATTN],
                "weights": {**fp8, "strategy": "tensor", "dynamic": False},
                "input_activations": {**fp8, "strategy": "tensor", "dynamic": False},
                "output_activations": None,
            },
            "group_1": {
                "targets": [MLP],
                "weights": {**fp8, "strategy": "channel", "dynamic": False},
                "input_activations": {**fp8, "strategy": "token", "dynamic": True},
                "output_activations": None,
            },
        },
        "kv_cache_scheme": {**fp8, "strategy": "tensor", "dynamic": False},
    }


def channel_moe_config() -> dict:
    """compressed-tensors' FP8_DYNAMIC quantization_config (qwen3_moe-fp8-channel)."""
    fp8 = {"num_bits": 8, "type": "float", "symmetric": True, "group_size": None, "block_structure": None}
    return {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "quantization_status": "compressed",
        "ignore": ["lm_head", "re:.*mlp.gate$"],
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {**fp8, "strategy": "channel", "dynamic": False},
                "input_activations": {**fp8, "strategy": "token", "dynamic": True},
                "output_activations": None,
            },
        },
    }


def matches(pattern: str, module: str) -> bool:
    if pattern.startswith("re:"):
        return re.match(pattern[3:], module) is not None
    return module == pattern or module.endswith("." + pattern)


def kv_amax(model: torch.nn.Module) -> list:
    """Per layer, the largest |k| and |v| the k_proj and v_proj outputs reach over PROMPTS."""
    amax, hooks = [], []
    for layer in model.model.layers:
        slot = [0.0, 0.0]
        amax.append(slot)
        for j, proj in enumerate((layer.self_attn.k_proj, layer.self_attn.v_proj)):

            def hook(_m: torch.nn.Module, _i: tuple, out: torch.Tensor, slot: list = slot, j: int = j) -> None:
                slot[j] = max(slot[j], float(out.abs().max()))

            hooks.append(proj.register_forward_hook(hook))
    with torch.no_grad():
        for p in PROMPTS:
            model(torch.tensor([p]))
    for h in hooks:
        h.remove()
    return amax


def save_quantized(
    model: torch.nn.Module, model_cls: type, dtype: torch.dtype, extra: dict, out: str
) -> torch.nn.Module:
    """Saves the model with transformers (the checkpoint's own tensor names, experts one by
    one), quantizes the chosen Linears in place, and returns the float32 model loaded by
    transformers from the DEQUANTIZED tensors."""
    from safetensors.torch import load_file, save_file

    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.to(dtype).save_pretrained(tmp, max_shard_size="1GB", safe_serialization=True)
    tensors = load_file(os.path.join(tmp, "model.safetensors"))
    deq = {}
    gen = torch.Generator().manual_seed(1)
    for pname in sorted(tensors):
        t = tensors[pname]
        mod = pname[: -len(".weight")]
        if extra.get("fp8_scaled"):
            quant = pname.endswith("_proj.weight") and not any(matches(p, mod) for p in CT_IGNORE)
            if quant:
                channel = matches(MLP, mod)
                q, sc, d = quantize_scaled(t, channel, dtype if channel else torch.float32)
                tensors[pname], tensors[mod + ".weight_scale"] = q, sc.contiguous()
                if not channel:  # static activations: a calibrated-looking input_scale
                    tensors[mod + ".input_scale"] = (0.01 + torch.rand(1, generator=gen)) / 448.0
                deq[pname] = d
                continue
        elif extra.get("fp8_channel_moe"):
            if pname.endswith("_proj.weight"):
                q, sc, d = quantize_scaled(t, True, dtype)
                tensors[pname], tensors[mod + ".weight_scale"] = q, sc.contiguous()
                deq[pname] = d
                continue
        elif pname.endswith(("_proj.weight", "_proj_with_mqa.weight")) and "mlp.gate." not in pname:
            bn, bk = extra["fp8_block_moe"]
            q, sc, d = quantize_fp8(t, bn, bk)
            tensors[pname], tensors[mod + ".weight_scale_inv"] = q.contiguous(), sc.contiguous()
            deq[pname] = d
            continue
        deq[pname] = t.float()
    os.makedirs(out, exist_ok=True)
    for f in ("config.json", "generation_config.json"):
        shutil.copy(os.path.join(tmp, f), out)
    # The reference: the same config, the dequantized tensors in float32, read by transformers.
    save_file(deq, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
    ref_model = model_cls.from_pretrained(tmp, torch_dtype=torch.float32).eval()
    shutil.rmtree(tmp)
    if extra.get("fp8_scaled"):
        # Calibrated fp8 KV cache scales, as llm-compressor writes them: amax / 448 of each
        # layer's keys and values over the prompts (keys with headroom for the rotation).
        for i, (k, v) in enumerate(kv_amax(ref_model)):
            tensors[f"model.layers.{i}.self_attn.k_scale"] = torch.tensor(1.5 * k / 448.0)
            tensors[f"model.layers.{i}.self_attn.v_scale"] = torch.tensor(v / 448.0)
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    os.chmod(os.path.join(out, "model.safetensors"), 0o644)
    with open(os.path.join(out, "config.json")) as f:
        cfg = json.load(f)
    if extra.get("fp8_scaled"):
        cfg["quantization_config"] = scaled_config()
    elif extra.get("fp8_channel_moe"):
        cfg["quantization_config"] = channel_moe_config()
    else:
        bn, bk = extra["fp8_block_moe"]
        cfg["quantization_config"] = {
            "quant_method": "fp8",
            "fmt": "e4m3",
            "activation_scheme": "dynamic",
            "weight_block_size": [bn, bk],
        }
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    return ref_model


FP4_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def quantize_mxfp4(w: torch.Tensor) -> tuple:
    """MXFP4 quantization of [E, N, K] (K a multiple of 32): per 32-element block an E8M0 scale
    2^(s-127), the smallest power of two that brings the block's amax within E2M1's 6, and each
    element the nearest E2M1 value; returns (blocks uint8 [E, N, K/32, 16], low nibble the even
    element; scales uint8 [E, N, K/32]; dequantized float32 [E, N, K])."""
    e, n, k = w.shape
    blk = w.float().reshape(e, n, k // 32, 32)
    amax = blk.abs().amax(dim=-1).clamp(min=2.0**-100)
    exp = torch.ceil(torch.log2(amax / 6.0)).clamp(-127, 127)
    scaled = blk / torch.pow(2.0, exp)[..., None]
    lut = torch.tensor(FP4_VALUES)
    codes = (scaled.abs()[..., None] - lut[:8]).abs().argmin(dim=-1)  # nearest magnitude...
    codes = torch.where(scaled < 0, codes + 8, codes).to(torch.uint8)  # ...and the sign
    deq = lut[codes.long()] * torch.pow(2.0, exp)[..., None]
    packed = codes[..., 0::2] | (codes[..., 1::2] << 4)
    scales = (exp + 127).to(torch.uint8)
    return packed.contiguous(), scales.contiguous(), deq.reshape(e, n, k)


def save_mxfp4(model: torch.nn.Module, model_cls: type, dtype: torch.dtype, out: str) -> torch.nn.Module:
    """Saves gpt-oss as the released checkpoints are: transformers' bf16 save, then each layer's
    experts.gate_up_proj [E, H, 2I] and experts.down_proj [E, I, H] replaced by MXFP4
    *_blocks/*_scales of their [E, out, in] transposes, with quant_method mxfp4. Checks the
    encoding against transformers' own dequantization and returns the float32 model of the
    dequantized experts."""
    from safetensors.torch import load_file, save_file
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.to(dtype).save_pretrained(tmp, max_shard_size="1GB", safe_serialization=True)
    tensors = load_file(os.path.join(tmp, "model.safetensors"))
    deq = {}
    for pname in sorted(tensors):
        t = tensors[pname]
        if pname.endswith(("experts.gate_up_proj", "experts.down_proj")):
            blocks, scales, d = quantize_mxfp4(t.float().transpose(1, 2))
            check = convert_moe_packed_tensors(blocks, scales, dtype=torch.float32)
            assert torch.equal(check, d.transpose(1, 2)), pname
            del tensors[pname]
            tensors[pname + "_blocks"], tensors[pname + "_scales"] = blocks, scales
            deq[pname] = d.transpose(1, 2).contiguous()
            continue
        deq[pname] = t.float()
    os.makedirs(out, exist_ok=True)
    for f in ("config.json", "generation_config.json"):
        shutil.copy(os.path.join(tmp, f), out)
    save_file(deq, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
    ref_model = model_cls.from_pretrained(tmp, torch_dtype=torch.float32).eval()
    shutil.rmtree(tmp)
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    os.chmod(os.path.join(out, "model.safetensors"), 0o644)
    with open(os.path.join(out, "config.json")) as f:
        cfg = json.load(f)
    cfg["quantization_config"] = {
        "quant_method": "mxfp4",
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"],
    }
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    return ref_model


def write_refs(name: str, cfg, model_cls, ref_model: torch.nn.Module, out: str, extra: dict) -> None:
    refs = {"architecture": cfg.architectures[0] if cfg.architectures else model_cls.__name__}
    refs["transformers_version"] = transformers.__version__
    refs["torch_version"] = torch.__version__
    refs["cases"] = [reference(ref_model, p) for p in PROMPTS]
    refs["hidden_sums"] = hidden_states(ref_model, PROMPTS[0])
    if extra.get("tokenizer"):
        train_tokenizer(out)
        tok = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
        for text in TEXT_PROMPTS:
            case = reference(ref_model, tok.encode(text).ids)
            case["text"] = text
            refs["cases"].append(case)
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(refs, f, indent=1)
    print(name, "ok", [c["steps"][0]["token"] for c in refs["cases"]])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "models"))
    ap.add_argument("--only", nargs="*", choices=sorted(CASES), help="write only these checkpoints")
    args = ap.parse_args()
    for name in args.only or CASES:
        make(name, args.out)


if __name__ == "__main__":
    main()
