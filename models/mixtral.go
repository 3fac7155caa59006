package models

import (
	"fmt"

	"github.com/atom-go/atom/models/layers"
	"github.com/atom-go/atom/ops"
)

// Mixtral is Mistral (its sliding window honoured by capping the model length) whose every
// feed-forward sublayer is a sparse MoE block ("block_sparse_moe"): a router over
// num_local_experts experts of intermediate_size (w1 gate, w3 up, w2 down), top
// num_experts_per_tok, always renormalised.
func init() { register(newMixtral, "MixtralForCausalLM") }

// mixtral is one rank's Mixtral.
type mixtral struct {
	causalLM
	layers []moeLayer
}

func newMixtral(c *layers.Context, cfg *Config) rankModel {
	m := &mixtral{causalLM: newCausalLM(c, cfg)}
	rope := rotary(c, cfg)
	h, eps := cfg.HiddenSize, float32(cfg.RMSNormEps)
	if cfg.MoE.NumExperts == 0 {
		c.Fail(fmt.Errorf("%s: no num_local_experts", cfg.Architecture))
	}
	moe := layers.MoEConfig{Hidden: h, Inter: cfg.Intermediate, Experts: cfg.MoE.NumExperts, TopK: cfg.MoE.TopK,
		Renormalize: true, Names: layers.MixtralExperts, InterField: "intermediate_size"}
	for i := range cfg.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		l := moeLayer{
			inNorm: layers.NewRMSNorm(c, p+"input_layernorm", h, eps),
			attn: layers.NewAttention(c, p+"self_attn", layers.AttentionConfig{Hidden: h, Heads: cfg.NumHeads,
				KVHeads: cfg.NumKVHeads, HeadDim: cfg.HeadDim, Bias: cfg.AttentionBias, Rope: rope}),
			postNorm: layers.NewRMSNorm(c, p+"post_attention_layernorm", h, eps),
			ffn:      layers.NewFusedMoE(c, p+"block_sparse_moe", moe),
		}
		m.layers = append(m.layers, l)
		m.declareKV(l.attn)
	}
	return m
}

// Forward runs every layer over the batch and returns the final-normed hidden states.
func (m *mixtral) Forward(ids []int32, meta *ops.AttnMetadata, cache ops.KVCache) ops.Tensor {
	return m.forwardMoE(m.layers, ids, meta, cache)
}
