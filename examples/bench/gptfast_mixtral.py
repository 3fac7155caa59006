"""Batch-1 decode speed of gpt-fast's Mixtral (pytorch-labs/gpt-fast, mixtral-moe/) on one of our checkpoints.

A second reference point for the MoE bench: gpt-fast's own model code, compiled the way its
generate.py --compile does (decode_one_token under torch.compile, mode="reduce-overhead",
fullgraph=True, with its inductor settings and the math attention kernel), fed the weights of a
Hugging Face-layout MixtralForCausalLM checkpoint (config.json + *.safetensors, such as the ones
examples/randmodel writes, possibly with fewer layers than the real model). The gpt-fast folder is
imported, not copied:

    python3 examples/bench/gptfast_mixtral.py --gpt-fast .dev/gpt-fast/mixtral-moe \
        --model /dev/shm/mixtral --out gptfast.json

The weights are renamed and reshaped as gpt-fast's converters do: q/k/v concatenated into wqkv (q
and k first permuted back from Hugging Face's rotate-half row order to the interleaved pairs that
gpt-fast's rotary embedding expects, as its scripts/convert_hf_checkpoint.py does for HF
checkpoints), each layer's experts stacked into cond_ffn.w1/w3 [E, I, D] and w2 [E, D, I], and
gate, norms, embeddings and lm_head renamed. The state dict is loaded strictly.

Decoding is greedy (argmax; gpt-fast samples with top-k, which adds a top-k and softmax over the
vocabulary per token): one uncompiled prefill of a random --prompt-len prompt, then --tokens decode
steps, timed alone between torch.cuda.synchronize() calls. --warmup whole runs (compilation and
CUDA graph capture included) come first and are not timed; decode_tok_s is the median of --runs.

    --device cpu --no-compile --dtype float32   checks the weight mapping and the loop on a CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from safetensors import safe_open

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def log(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} gptfast_mixtral: {msg}", file=sys.stderr, flush=True)


def import_gpt_fast(gpt_fast_dir: Path) -> ModuleType:
    """gpt-fast's mixtral-moe/model.py as a module (registered before it runs, for its dataclass)."""
    path = gpt_fast_dir / "model.py"
    if not path.is_file():
        raise SystemExit(f"{path}: not found (--gpt-fast wants gpt-fast's mixtral-moe folder)")
    spec = importlib.util.spec_from_file_location("gptfast_mixtral_model", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def model_args(gf: ModuleType, cfg: dict[str, Any]) -> Any:
    """gpt-fast's ModelArgs for a Hugging Face Mixtral config.json."""
    if cfg.get("model_type", "mixtral") != "mixtral":
        raise SystemExit(f"model_type {cfg.get('model_type')!r}: want a MixtralForCausalLM checkpoint")
    dim, n_head = cfg["hidden_size"], cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim") or dim // n_head
    if head_dim * n_head != dim:
        raise SystemExit(f"head_dim {head_dim} x {n_head} heads != hidden_size {dim}: gpt-fast assumes dim // n_head")
    return gf.ModelArgs(
        block_size=cfg.get("max_position_embeddings", 32768),
        vocab_size=cfg["vocab_size"],
        n_layer=cfg["num_hidden_layers"],
        n_head=n_head,
        dim=dim,
        intermediate_size=cfg["intermediate_size"],
        n_local_heads=cfg.get("num_key_value_heads", n_head),
        rope_base=cfg.get("rope_theta", 1e6),
        norm_eps=cfg.get("rms_norm_eps", 1e-5),
        num_experts=cfg["num_local_experts"],
        num_activated_experts=cfg["num_experts_per_tok"],
    )


class Checkpoint:
    """The tensors of a directory of safetensors files, read one at a time."""

    def __init__(self, model_dir: Path) -> None:
        self.files = sorted(model_dir.glob("*.safetensors"))
        if not self.files:
            raise SystemExit(f"{model_dir}: no *.safetensors")
        self.where: dict[str, Path] = {}
        for f in self.files:
            with safe_open(str(f), framework="pt") as st:
                for k in st.keys():  # noqa: SIM118 (safe_open is not a dict)
                    self.where[k] = f
        self.used: set[str] = set()

    def __contains__(self, name: str) -> bool:
        return name in self.where

    def get(self, name: str, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        self.used.add(name)
        with safe_open(str(self.where[name]), framework="pt") as st:
            return st.get_tensor(name).to(device=device, dtype=dtype)


def unpermute_rotary(w: torch.Tensor, n_heads: int, head_dim: int) -> torch.Tensor:
    """Hugging Face's q/k rows (each head's rotate-half halves) back to interleaved rotary pairs."""
    dim = w.shape[1]
    return w.view(n_heads, 2, head_dim // 2, dim).transpose(1, 2).reshape(n_heads * head_dim, dim)


def gpt_fast_state_dict(ck: Checkpoint, args: Any, device: torch.device, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The checkpoint under gpt-fast's parameter names and shapes."""

    def get(name: str) -> torch.Tensor:
        return ck.get(name, device, dtype)

    sd = {"tok_embeddings.weight": get("model.embed_tokens.weight"), "norm.weight": get("model.norm.weight")}
    sd["output.weight"] = get("lm_head.weight") if "lm_head.weight" in ck else sd["tok_embeddings.weight"]
    for i in range(args.n_layer):
        hf, gf = f"model.layers.{i}.", f"layers.{i}."
        q = unpermute_rotary(get(hf + "self_attn.q_proj.weight"), args.n_head, args.head_dim)
        k = unpermute_rotary(get(hf + "self_attn.k_proj.weight"), args.n_local_heads, args.head_dim)
        sd[gf + "attention.wqkv.weight"] = torch.cat([q, k, get(hf + "self_attn.v_proj.weight")])
        sd[gf + "attention.wo.weight"] = get(hf + "self_attn.o_proj.weight")
        sd[gf + "attention_norm.weight"] = get(hf + "input_layernorm.weight")
        sd[gf + "ffn_norm.weight"] = get(hf + "post_attention_layernorm.weight")
        moe = hf + "block_sparse_moe."
        sd[gf + "block_sparse_moe.gate.weight"] = get(moe + "gate.weight")
        for w in ("w1", "w2", "w3"):  # w1, w3: [I, D] each; w2: [D, I]
            experts = [get(f"{moe}experts.{e}.{w}.weight") for e in range(args.num_experts)]
            sd[gf + f"block_sparse_moe.cond_ffn.{w}"] = torch.stack(experts).contiguous()
            del experts
    unused = sorted(set(ck.where) - ck.used)
    if unused:
        raise SystemExit(f"checkpoint tensors not mapped: {unused[:8]}{' ...' if len(unused) > 8 else ''}")
    return sd


def load_model(
    gpt_fast_dir: Path, model_dir: Path, device: torch.device, dtype: torch.dtype
) -> tuple[Any, dict[str, Any]]:
    """gpt-fast's Transformer with the checkpoint's weights (strict load), and config.json."""
    gf = import_gpt_fast(gpt_fast_dir)
    cfg = json.loads((model_dir / "config.json").read_text())
    args = model_args(gf, cfg)
    with torch.device("meta"):
        model = gf.Transformer(args)
    sd = gpt_fast_state_dict(Checkpoint(model_dir), args, device, dtype)
    model.load_state_dict(sd, strict=True, assign=True)
    return model.eval(), cfg


def setup_caches(model: Any, max_seq_length: int, device: torch.device, dtype: torch.dtype) -> None:
    """gpt-fast's KV caches, rotary table and mask on device; the caches in dtype (gpt-fast makes them bf16)."""
    with torch.device(device):
        model.setup_caches(max_batch_size=1, max_seq_length=max_seq_length)
    model.to(dtype=dtype)


def decode_one_token(model: Any, x: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
    """One greedy step: the next token id, [1] int32 (gpt-fast's decode_one_token with argmax for sampling)."""
    logits = model(x, input_pos)
    return torch.argmax(logits[0, -1], dim=-1, keepdim=True).to(dtype=torch.int)


@contextlib.contextmanager
def math_attention() -> Iterator[None]:
    """The attention kernel generate.py decodes under: math, which inductor codegens."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        yield


def inductor_settings() -> dict[str, Any]:
    """generate.py's inductor settings, where this torch still has them."""
    import torch._inductor.config as ic

    want = {
        "coordinate_descent_tuning": True,
        "triton.unique_kernel_names": True,
        "fx_graph_cache": True,
        "assert_indirect_indexing": False,
    }
    applied = {}
    for name, value in want.items():
        *path, attr = name.split(".")
        obj = getattr(ic, path[0]) if path else ic
        if hasattr(obj, attr):
            setattr(obj, attr, value)
            applied[name] = value
        else:
            log(f"inductor has no {name}: left out")
    return applied


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def generate(
    model: Any, step: Callable[..., torch.Tensor], prompt: torch.Tensor, tokens: int, device: torch.device
) -> tuple[list[int], float]:
    """Prefill prompt, decode tokens greedily; the ids and the seconds the decode steps took."""
    with torch.no_grad():
        t = prompt.numel()
        cur = decode_one_token(model, prompt.view(1, -1), torch.arange(0, t, device=device))  # prefill, uncompiled
        input_pos = torch.tensor([t], device=device, dtype=torch.int)
        out = [cur.clone()]
        sync(device)
        t0 = time.perf_counter()
        for _ in range(tokens):
            with math_attention():
                nxt = step(model, cur.view(1, -1), input_pos)
            input_pos += 1
            # A CUDA-graph output is overwritten by the next replay: clone it, as gpt-fast's
            # decode_n_tokens does, before it is both kept and fed back.
            cur = nxt.clone()
            out.append(cur)
        sync(device)
        wall = time.perf_counter() - t0
    return torch.cat(out).tolist(), wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpt-fast", type=Path, required=True, help="gpt-fast's mixtral-moe folder")
    ap.add_argument("--model", type=Path, required=True, help="Hugging Face MixtralForCausalLM checkpoint folder")
    ap.add_argument("--tokens", type=int, default=128, help="timed decode tokens a run")
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--warmup", type=int, default=2, help="untimed whole runs first (compile, graph capture)")
    ap.add_argument("--runs", type=int, default=3, help="timed runs; decode_tok_s is their median")
    ap.add_argument("--out", type=Path, help="JSON results")
    ap.add_argument("--no-compile", action="store_true", help="eager decode (no torch.compile)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPES))
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    device, dtype, compiled = torch.device(a.device), DTYPES[a.dtype], not a.no_compile
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())

    t = time.perf_counter()
    model, cfg = load_model(a.gpt_fast, a.model, device, dtype)
    setup_caches(model, a.prompt_len + a.tokens + 1, device, dtype)
    sync(device)
    load_s = time.perf_counter() - t
    n_params = sum(p.numel() for p in model.parameters())
    log(f"loaded {cfg['num_hidden_layers']} layers, {n_params / 1e9:.2f}B parameters, in {load_s:.1f} s")

    step: Callable[..., torch.Tensor] = decode_one_token
    inductor: dict[str, Any] = {}
    if compiled:
        inductor = inductor_settings()
        step = torch.compile(decode_one_token, mode="reduce-overhead", fullgraph=True)
    gen = torch.Generator(device="cpu").manual_seed(a.seed)
    prompt = torch.randint(0, cfg["vocab_size"], (a.prompt_len,), generator=gen, dtype=torch.int).to(device)

    t = time.perf_counter()
    ids: list[int] = []
    for _ in range(a.warmup):
        ids, _ = generate(model, step, prompt, a.tokens, device)
    warmup_s = time.perf_counter() - t
    log(f"{a.warmup} warm-up runs in {warmup_s:.1f} s")
    walls = []
    for _ in range(a.runs):
        run_ids, wall = generate(model, step, prompt, a.tokens, device)
        if ids and run_ids != ids:
            log("a run decoded other tokens than the one before")
        ids = run_ids
        walls.append(wall)
    tok_s = a.tokens / statistics.median(walls)

    res = {
        "decode_tok_s": tok_s,
        "tokens": a.tokens,
        "layers": cfg["num_hidden_layers"],
        "compile": compiled,
        "torch": torch.__version__,
        "runs_tok_s": [a.tokens / w for w in walls],
        "prompt_len": a.prompt_len,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else str(device),
        "dtype": a.dtype,
        "parameters": n_params,
        "load_s": load_s,
        "warmup_s": warmup_s,
        "inductor": inductor,
        "first_ids": ids[:16],
    }
    if device.type == "cuda":
        res["max_memory_reserved_gb"] = torch.cuda.max_memory_reserved(device) / 1e9
    if a.out:
        a.out.write_text(json.dumps(res, indent=2) + "\n")
    print(
        f"gpt-fast mixtral: {tok_s:.1f} decode tok/s (batch 1, {a.tokens} tokens after a {a.prompt_len}-token prompt, "
        f"{res['layers']} layers, {'compiled' if compiled else 'eager'}, {a.dtype}, {res['device']}, "
        f"torch {torch.__version__})"
    )


if __name__ == "__main__":
    main()
