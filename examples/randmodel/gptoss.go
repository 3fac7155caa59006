package main

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// gpt-oss checkpoints (--shape gpt-oss-20b, gpt-oss-120b): the released layout, attention with
// q/k/v/o biases and per-head sinks, a router with a bias, and each layer's experts packed in
// one tensor per projection (mlp.experts.gate_up_proj [E, H, 2I], gate and up interleaved;
// down_proj [E, I, H]; their biases [E, 2I], [E, H]) in bfloat16, or with --dtype mxfp4 as the
// released checkpoints store them: *_blocks uint8 [E, out, in/32, 16] (two E2M1 codes a byte)
// and *_scales uint8 [E, out, in/32] (E8M0), quant_method "mxfp4", everything else bf16.
//
// The MXFP4 codes are uniform random bytes (E2M1 values of RMS 2.93) under one scale a tensor,
// the power of two that brings them to about 1/sqrt(in), as the bf16 weights are.

const gptOssArch = "GptOssForCausalLM"

// The mxfp4 roles of a checkpoint's tensors (after the fp8 ones).
const (
	// mxfp4Codes: an expert projection's packed E2M1 codes (*_blocks).
	mxfp4Codes fp8Role = fp8Input + 1 + iota
	// mxfp4Scales: its E8M0 scales (*_scales), in the shard of the codes before it.
	mxfp4Scales
)

// e2m1RMS is the root mean square of the 16 E2M1 values, the size of uniform random codes.
var e2m1RMS = math.Sqrt((0 + 0.25 + 1 + 2.25 + 4 + 9 + 16 + 36) / 8)

// gptOssLayer is layer p's attention extras (biases, sinks) and MoE block.
func (s shape) gptOssLayer(p string, mxfp4 bool) []tensor {
	q, kv := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
	m, h, in := s.MoE, s.Hidden, s.Intermediate
	std := 1 / math.Sqrt(float64(h))
	out := []tensor{{p + "self_attn.q_proj.bias", []int{q}, 0.02}, {p + "self_attn.k_proj.bias", []int{kv}, 0.02},
		{p + "self_attn.v_proj.bias", []int{kv}, 0.02}, {p + "self_attn.o_proj.bias", []int{h}, 0.02},
		{p + "self_attn.sinks", []int{s.Heads}, 0.5},
		{p + "mlp.router.weight", []int{m.Experts, h}, std}, {p + "mlp.router.bias", []int{m.Experts}, 0.02}}
	x := p + "mlp.experts."
	if mxfp4 {
		out = append(out, tensor{x + "gate_up_proj_blocks", []int{m.Experts, 2 * in, h / 32, 16}, std},
			tensor{x + "gate_up_proj_scales", []int{m.Experts, 2 * in, h / 32}, std},
			tensor{x + "down_proj_blocks", []int{m.Experts, h, in / 32, 16}, 1 / math.Sqrt(float64(in))},
			tensor{x + "down_proj_scales", []int{m.Experts, h, in / 32}, 1 / math.Sqrt(float64(in))})
	} else {
		out = append(out, tensor{x + "gate_up_proj", []int{m.Experts, h, 2 * in}, std},
			tensor{x + "down_proj", []int{m.Experts, in, h}, 1 / math.Sqrt(float64(in))})
	}
	return append(out, tensor{x + "gate_up_proj_bias", []int{m.Experts, 2 * in}, 0.02},
		tensor{x + "down_proj_bias", []int{m.Experts, h}, 0.02})
}

// mxfp4Roles marks the mxfp4 tensors of ts; it refuses --dtype mxfp4 for another family.
func mxfp4Roles(s shape, ts []tensor) (map[string]fp8Role, error) {
	if s.Arch != gptOssArch {
		return nil, fmt.Errorf("--dtype mxfp4 is gpt-oss's expert format (--shape gpt-oss-20b or gpt-oss-120b), not %s's", s.Arch)
	}
	if s.Hidden%32 != 0 || s.Intermediate%32 != 0 {
		return nil, fmt.Errorf("mxfp4 needs hidden and expert widths divisible by 32 (%d, %d)", s.Hidden, s.Intermediate)
	}
	roles := map[string]fp8Role{}
	for _, t := range ts {
		switch n := t.name; {
		case len(n) > 7 && n[len(n)-7:] == "_blocks":
			roles[n] = mxfp4Codes
		case len(n) > 7 && n[len(n)-7:] == "_scales":
			roles[n] = mxfp4Scales
		}
	}
	return roles, nil
}

// mxfp4Bytes is an mxfp4 tensor's bytes: random codes, or every scale the exponent that
// brings E2M1 values of RMS e2m1RMS to t.std.
func mxfp4Bytes(t tensor, r fp8Role, seed uint64) []byte {
	n := 1
	for _, d := range t.shape {
		n *= d
	}
	b := make([]byte, n)
	if r == mxfp4Scales {
		e := byte(127 + int(math.Round(math.Log2(t.std/e2m1RMS))))
		for i := range b {
			b[i] = e
		}
		return b
	}
	parallel((n+1<<20-1)>>20, func(c int) {
		g := rand.NewPCG(seed, uint64(c))
		chunk := b[c<<20 : min((c+1)<<20, n)]
		for i := 0; i < len(chunk); i += 8 {
			u := g.Uint64()
			for j := 0; j < 8 && i+j < len(chunk); j++ {
				chunk[i+j] = byte(u >> (8 * j))
			}
		}
	})
	return b
}

// gptOssConfig adds gpt-oss's fields to config.json, as the released configs spell them.
func gptOssConfig(s shape, cfg map[string]any, mxfp4 bool) {
	types := make([]string, s.Layers)
	for i := range types {
		types[i] = "full_attention"
		if i%2 == 0 {
			types[i] = "sliding_attention"
		}
	}
	cfg["model_type"], cfg["num_local_experts"], cfg["experts_per_token"] = "gpt_oss", s.MoE.Experts, s.MoE.TopK
	cfg["sliding_window"], cfg["layer_types"], cfg["swiglu_limit"], cfg["attention_bias"] = 128, types, 7.0, true
	cfg["initial_context_length"] = 4096
	cfg["rope_scaling"] = map[string]any{"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
		"truncate": false, "original_max_position_embeddings": 4096}
	if mxfp4 {
		cfg["quantization_config"] = map[string]any{"quant_method": "mxfp4", "modules_to_not_convert": []string{
			"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}}
	}
}
