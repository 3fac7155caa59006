package models

import (
	"fmt"

	"github.com/atom-go/atom/models/layers"
	"github.com/atom-go/atom/ops"
)

// Qwen2-MoE is Qwen2 (q, k and v biases unless qkv_bias is false) with Qwen3-MoE's sparse
// layers, whose MoE blocks also hold a shared expert of shared_expert_intermediate_size: its
// output, scaled by sigmoid(shared_expert_gate(x)), is added to the routed experts' sum.
func init() { register(newQwen2Moe, "Qwen2MoeForCausalLM") }

// qwen2Moe is one rank's Qwen2-MoE.
type qwen2Moe struct {
	causalLM
	layers []moeLayer
}

func newQwen2Moe(c *layers.Context, cfg *Config) rankModel {
	m := &qwen2Moe{causalLM: newCausalLM(c, cfg)}
	rope := rotary(c, cfg)
	h, eps := cfg.HiddenSize, float32(cfg.RMSNormEps)
	moe := qwenMoE(c, cfg, cfg.MoE.SharedInter)
	for i := range cfg.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		l := moeLayer{
			inNorm: layers.NewRMSNorm(c, p+"input_layernorm", h, eps),
			attn: layers.NewAttention(c, p+"self_attn", layers.AttentionConfig{Hidden: h, Heads: cfg.NumHeads,
				KVHeads: cfg.NumKVHeads, HeadDim: cfg.HeadDim, Bias: !cfg.MoE.NoQKVBias, Rope: rope}),
			postNorm: layers.NewRMSNorm(c, p+"post_attention_layernorm", h, eps),
			ffn:      qwenFeedForward(c, cfg, i, p+"mlp", moe),
		}
		m.layers = append(m.layers, l)
		m.declareKV(l.attn)
	}
	return m
}

// Forward runs every layer over the batch and returns the final-normed hidden states.
func (m *qwen2Moe) Forward(ids []int32, meta *ops.AttnMetadata, cache ops.KVCache) ops.Tensor {
	return m.forwardMoE(m.layers, ids, meta, cache)
}
