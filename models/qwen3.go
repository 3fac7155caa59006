package models

import (
	"fmt"

	"github.com/atom-go/atom/models/layers"
	"github.com/atom-go/atom/ops"
)

// Qwen3 is a pre-norm GQA decoder with SwiGLU MLPs that normalises each query and key head
// (q_norm, k_norm) before RoPE, with an explicit head_dim that need not equal
// hidden_size / num_attention_heads.
func init() { register(newQwen3, "Qwen3ForCausalLM") }

// qwen3 is one rank's Qwen3.
type qwen3 struct {
	causalLM
	layers []qwen3Layer
}

// qwen3Layer is one decoder layer: attention (with the q/k head norm, fused into the RoPE and
// KV write) behind its input norm, then the MLP behind its post-attention norm, each adding its
// output into the residual stream.
type qwen3Layer struct {
	inNorm, postNorm *layers.RMSNorm
	attn             *layers.Attention
	mlp              *layers.MLP
}

func newQwen3(c *layers.Context, cfg *Config) rankModel {
	m := &qwen3{causalLM: newCausalLM(c, cfg)}
	rope := rotary(c, cfg)
	h, eps := cfg.HiddenSize, float32(cfg.RMSNormEps)
	for i := range cfg.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		l := qwen3Layer{
			inNorm: layers.NewRMSNorm(c, p+"input_layernorm", h, eps),
			attn: layers.NewAttention(c, p+"self_attn", layers.AttentionConfig{Hidden: h, Heads: cfg.NumHeads,
				KVHeads: cfg.NumKVHeads, HeadDim: cfg.HeadDim, Bias: cfg.AttentionBias, QKNorm: true, NormEps: eps,
				Rope: rope}),
			postNorm: layers.NewRMSNorm(c, p+"post_attention_layernorm", h, eps),
			mlp:      layers.NewMLP(c, p+"mlp", h, cfg.Intermediate),
		}
		m.layers = append(m.layers, l)
		m.declareKV(l.attn)
	}
	return m
}

// Forward runs every layer over the batch and returns the final-normed hidden states.
func (m *qwen3) Forward(ids []int32, meta *ops.AttnMetadata, cache ops.KVCache) ops.Tensor {
	s := m.stream
	s.Start(m.embed, ids)
	for i := range m.layers {
		l := &m.layers[i]
		next := m.norm // the norm after this layer: the next layer's input norm, or the final one
		if i+1 < len(m.layers) {
			next = m.layers[i+1].inNorm
		}
		l.attn.Forward(s, l.inNorm, l.postNorm, cache, i, meta)
		l.mlp.Forward(s, l.postNorm, next)
		s.EndLayer(i + 1)
	}
	return s.Final(m.norm)
}
