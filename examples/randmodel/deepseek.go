package main

import (
	"encoding/json"
	"fmt"
	"math"
)

// mlaShape is DeepSeek's Multi-head Latent Attention and MoE layout: q projected through a
// QRank-wide low-rank pair (q_a_proj, q_b_proj), or directly when QRank is 0 (V2-Lite), a latent
// of KVRank plus the Rope dimensions, Nope + Rope wide query heads, V wide value heads; the first
// DenseLayers layers dense, the others sparse with Shared shared experts of the routed experts'
// width. V3 routes as DeepSeek-V3 (sigmoid scores with a selection bias, the best 4 of 8 groups,
// renormalised, scaled by 2.5), else as V2-Lite (softmax, greedy).
type mlaShape struct {
	QRank, KVRank, Nope, Rope, V, DenseLayers, Shared int
	V3                                                bool
}

// deepseekTensors are the tensors of DeepseekV2ForCausalLM.
func (s shape) deepseekTensors() []tensor {
	m := s.MLA
	std := 1 / math.Sqrt(float64(s.Hidden))
	out := []tensor{{"model.embed_tokens.weight", []int{s.Vocab, s.Hidden}, 1}, {"model.norm.weight", []int{s.Hidden}, 0},
		{"lm_head.weight", []int{s.Vocab, s.Hidden}, std}}
	for l := 0; l < s.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		out = append(out,
			tensor{p + "input_layernorm.weight", []int{s.Hidden}, 0},
			tensor{p + "post_attention_layernorm.weight", []int{s.Hidden}, 0},
		)
		if m.QRank > 0 {
			out = append(out,
				tensor{p + "self_attn.q_a_proj.weight", []int{m.QRank, s.Hidden}, std},
				tensor{p + "self_attn.q_a_layernorm.weight", []int{m.QRank}, 0},
				tensor{p + "self_attn.q_b_proj.weight", []int{s.Heads * (m.Nope + m.Rope), m.QRank}, 1 / math.Sqrt(float64(m.QRank))})
		} else {
			out = append(out, tensor{p + "self_attn.q_proj.weight", []int{s.Heads * (m.Nope + m.Rope), s.Hidden}, std})
		}
		out = append(out,
			tensor{p + "self_attn.kv_a_proj_with_mqa.weight", []int{m.KVRank + m.Rope, s.Hidden}, std},
			tensor{p + "self_attn.kv_a_layernorm.weight", []int{m.KVRank}, 0},
			tensor{p + "self_attn.kv_b_proj.weight", []int{s.Heads * (m.Nope + m.V), m.KVRank}, 1 / math.Sqrt(float64(m.KVRank))},
			tensor{p + "self_attn.o_proj.weight", []int{s.Hidden, s.Heads * m.V}, 1 / math.Sqrt(float64(s.Heads*m.V))})
		if l < m.DenseLayers {
			out = append(out, mlp(p+"mlp.", s.Hidden, s.Intermediate)...)
			continue
		}
		out = append(out, tensor{p + "mlp.gate.weight", []int{s.MoE.Experts, s.Hidden}, std})
		if m.V3 {
			out = append(out, tensor{p + "mlp.gate.e_score_correction_bias", []int{s.MoE.Experts}, 0.01})
		}
		for e := 0; e < s.MoE.Experts; e++ {
			out = append(out, mlp(fmt.Sprintf("%smlp.experts.%d.", p, e), s.Hidden, s.MoE.Inter)...)
		}
		out = append(out, mlp(p+"mlp.shared_experts.", s.Hidden, m.Shared*s.MoE.Inter)...)
	}
	return out
}

// mlp is a SwiGLU MLP's three projections under prefix p.
func mlp(p string, hidden, inter int) []tensor {
	std := 1 / math.Sqrt(float64(hidden))
	return []tensor{{p + "gate_proj.weight", []int{inter, hidden}, std}, {p + "up_proj.weight", []int{inter, hidden}, std},
		{p + "down_proj.weight", []int{hidden, inter}, 1 / math.Sqrt(float64(inter))}}
}

// deepseekConfig adds DeepSeek's fields to cfg (V2-Lite's routing: softmax, greedy top-k, no
// renormalisation; V3's: noaux_tc; YaRN with mscale as published).
func (s shape) deepseekConfig(cfg map[string]any) {
	m := s.MLA
	cfg["model_type"] = "deepseek_v2"
	if m.V3 {
		cfg["model_type"] = "deepseek_v3"
	}
	for _, k := range []string{"head_dim", "num_experts", "decoder_sparse_step", "mlp_only_layers"} {
		delete(cfg, k) // Qwen-MoE's spellings, which DeepSeek's config does not have
	}
	for k, v := range map[string]any{
		"q_lora_rank": nil, "num_nextn_predict_layers": 0, "kv_lora_rank": m.KVRank, "qk_nope_head_dim": m.Nope, "qk_rope_head_dim": m.Rope,
		"v_head_dim": m.V, "n_routed_experts": s.MoE.Experts, "n_shared_experts": m.Shared,
		"num_experts_per_tok": s.MoE.TopK, "moe_intermediate_size": s.MoE.Inter, "first_k_dense_replace": m.DenseLayers,
		"moe_layer_freq": 1, "topk_method": "greedy", "n_group": 1, "topk_group": 1,
		"routed_scaling_factor": json.Number("1.0"), // a float: transformers' config classes check the type
		"norm_topk_prob":        false, "scoring_func": "softmax", "rms_norm_eps": 1e-6, "attention_bias": false,
		"rope_theta": json.Number("10000.0"),
		"rope_scaling": map[string]any{"type": "yarn", "factor": json.Number("40.0"), "beta_fast": json.Number("32.0"),
			"beta_slow": json.Number("1.0"), "mscale": 0.707,
			"mscale_all_dim": 0.707, "original_max_position_embeddings": 4096},
	} {
		cfg[k] = v
	}
	if m.QRank > 0 {
		cfg["q_lora_rank"] = m.QRank
	}
	if m.V3 {
		for k, v := range map[string]any{"topk_method": "noaux_tc", "n_group": 8, "topk_group": 4, "scoring_func": "sigmoid",
			"routed_scaling_factor": json.Number("2.5"), "norm_topk_prob": true} {
			cfg[k] = v
		}
		sc := cfg["rope_scaling"].(map[string]any)
		sc["mscale"], sc["mscale_all_dim"] = json.Number("1.0"), json.Number("1.0")
	}
}
