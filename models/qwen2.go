package models

import (
	"fmt"

	"github.com/atom-go/atom/models/layers"
	"github.com/atom-go/atom/ops"
)

// Qwen2 is a pre-norm GQA decoder with SwiGLU MLPs whose q, k and v projections carry biases.
func init() { register(newQwen2, "Qwen2ForCausalLM") }

// qwen2 is one rank's Qwen2.
type qwen2 struct {
	causalLM
	layers []qwen2Layer
}

// qwen2Layer is one decoder layer: attention (q|k|v with biases) behind its input norm, then
// the MLP behind its post-attention norm, each adding its output into the residual stream.
type qwen2Layer struct {
	inNorm, postNorm *layers.RMSNorm
	attn             *layers.Attention
	mlp              *layers.MLP
}

func newQwen2(c *layers.Context, cfg *Config) rankModel {
	m := &qwen2{causalLM: newCausalLM(c, cfg)}
	rope := rotary(c, cfg)
	h, eps := cfg.HiddenSize, float32(cfg.RMSNormEps)
	for i := range cfg.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		l := qwen2Layer{
			inNorm: layers.NewRMSNorm(c, p+"input_layernorm", h, eps),
			attn: layers.NewAttention(c, p+"self_attn", layers.AttentionConfig{Hidden: h, Heads: cfg.NumHeads,
				KVHeads: cfg.NumKVHeads, HeadDim: cfg.HeadDim, Bias: true, Rope: rope}),
			postNorm: layers.NewRMSNorm(c, p+"post_attention_layernorm", h, eps),
			mlp:      layers.NewMLP(c, p+"mlp", h, cfg.Intermediate),
		}
		m.layers = append(m.layers, l)
		m.declareKV(l.attn)
	}
	return m
}

// Forward runs every layer over the batch and returns the final-normed hidden states.
func (m *qwen2) Forward(ids []int32, meta *ops.AttnMetadata, cache ops.KVCache) ops.Tensor {
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
