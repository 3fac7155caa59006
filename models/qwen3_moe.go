package models

import (
	"fmt"

	"github.com/atom-go/atom/models/layers"
	"github.com/atom-go/atom/ops"
)

// Qwen3-MoE is Qwen3 (q/k head norms, explicit head_dim) whose feed-forward sublayer is a
// sparse MoE block on the layers Config.SparseLayer picks (mlp_only_layers,
// decoder_sparse_step) and a dense MLP of intermediate_size on the others: a router over
// num_experts experts of moe_intermediate_size, top num_experts_per_tok, renormalised when
// norm_topk_prob.
func init() { register(newQwen3Moe, "Qwen3MoeForCausalLM") }

// qwen3Moe is one rank's Qwen3-MoE.
type qwen3Moe struct {
	causalLM
	layers []moeLayer
}

// moeLayer is a decoder layer of the MoE families: attention behind its input norm, then the
// MLP or the MoE block behind its post-attention norm, each adding its output into the
// residual stream.
type moeLayer struct {
	inNorm, postNorm *layers.RMSNorm
	attn             attention
	ffn              layers.FeedForward
}

func newQwen3Moe(c *layers.Context, cfg *Config) rankModel {
	m := &qwen3Moe{causalLM: newCausalLM(c, cfg)}
	rope := rotary(c, cfg)
	h, eps := cfg.HiddenSize, float32(cfg.RMSNormEps)
	moe := qwenMoE(c, cfg, 0)
	for i := range cfg.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		l := moeLayer{
			inNorm: layers.NewRMSNorm(c, p+"input_layernorm", h, eps),
			attn: layers.NewAttention(c, p+"self_attn", layers.AttentionConfig{Hidden: h, Heads: cfg.NumHeads,
				KVHeads: cfg.NumKVHeads, HeadDim: cfg.HeadDim, Bias: cfg.AttentionBias, QKNorm: true, NormEps: eps,
				Rope: rope}),
			postNorm: layers.NewRMSNorm(c, p+"post_attention_layernorm", h, eps),
			ffn:      qwenFeedForward(c, cfg, i, p+"mlp", moe),
		}
		m.layers = append(m.layers, l)
		m.declareKV(l.attn)
	}
	return m
}

// qwenMoE is the MoE block of the Qwen MoE families, with a shared expert of sharedInter
// (0: none).
func qwenMoE(c *layers.Context, cfg *Config, sharedInter int) layers.MoEConfig {
	mc := cfg.MoE
	if mc.NumExperts > 0 && mc.Intermediate == 0 {
		c.Fail(fmt.Errorf("%s: no moe_intermediate_size", cfg.Architecture))
	}
	return layers.MoEConfig{Hidden: cfg.HiddenSize, Inter: mc.Intermediate, Experts: mc.NumExperts, TopK: mc.TopK,
		Renormalize: mc.NormTopKProb, Names: layers.QwenExperts, SharedInter: sharedInter}
}

// qwenFeedForward is layer i's feed-forward sublayer under prefix: the MoE block moe where the
// config makes the layer sparse, the dense MLP otherwise.
func qwenFeedForward(c *layers.Context, cfg *Config, i int, prefix string, moe layers.MoEConfig) layers.FeedForward {
	if cfg.SparseLayer(i) {
		return layers.NewFusedMoE(c, prefix, moe)
	}
	return layers.NewMLP(c, prefix, cfg.HiddenSize, cfg.Intermediate)
}

// Forward runs every layer over the batch and returns the final-normed hidden states.
func (m *qwen3Moe) Forward(ids []int32, meta *ops.AttnMetadata, cache ops.KVCache) ops.Tensor {
	return m.forwardMoE(m.layers, ids, meta, cache)
}

// forwardMoE runs the layers of a MoE family over the batch.
func (m *causalLM) forwardMoE(ls []moeLayer, ids []int32, meta *ops.AttnMetadata, cache ops.KVCache) ops.Tensor {
	s := m.stream
	s.Start(m.embed, ids)
	for i := range ls {
		l := &ls[i]
		next := m.norm // the norm after this layer: the next layer's input norm, or the final one
		if i+1 < len(ls) {
			next = ls[i+1].inNorm
		}
		l.attn.Forward(s, l.inNorm, l.postNorm, cache, i, meta)
		l.ffn.Forward(s, l.postNorm, next)
		s.EndLayer(i + 1)
	}
	return s.Final(m.norm)
}
