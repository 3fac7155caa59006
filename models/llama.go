package models

import (
	"fmt"

	"github.com/atom-go/atom/models/layers"
	"github.com/atom-go/atom/ops"
)

// Llama and Mistral share one architecture: a pre-norm GQA decoder with SwiGLU MLPs, without
// biases unless the config sets attention_bias. Mistral's sliding window is honoured by
// capping the model length at the window (Config.MaxModelLen), so every layer's cache holds the
// whole (capped) context.
func init() { register(newLlama, "LlamaForCausalLM", "MistralForCausalLM") }

// llama is one rank's Llama.
type llama struct {
	causalLM
	layers []llamaLayer
}

// llamaLayer is one decoder layer: attention behind its input norm, then the MLP behind its
// post-attention norm, each adding its output into the residual stream.
type llamaLayer struct {
	inNorm, postNorm *layers.RMSNorm
	attn             *layers.Attention
	mlp              *layers.MLP
}

func newLlama(c *layers.Context, cfg *Config) rankModel {
	m := &llama{causalLM: newCausalLM(c, cfg)}
	rope := rotary(c, cfg)
	h, eps := cfg.HiddenSize, float32(cfg.RMSNormEps)
	for i := range cfg.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		l := llamaLayer{
			inNorm: layers.NewRMSNorm(c, p+"input_layernorm", h, eps),
			attn: layers.NewAttention(c, p+"self_attn", layers.AttentionConfig{Hidden: h, Heads: cfg.NumHeads,
				KVHeads: cfg.NumKVHeads, HeadDim: cfg.HeadDim, Bias: cfg.AttentionBias, Rope: rope}),
			postNorm: layers.NewRMSNorm(c, p+"post_attention_layernorm", h, eps),
			mlp:      layers.NewMLP(c, p+"mlp", h, cfg.Intermediate),
		}
		m.layers = append(m.layers, l)
		m.declareKV(l.attn)
	}
	return m
}

// Forward runs every layer over the batch and returns the final-normed hidden states.
func (m *llama) Forward(ids []int32, meta *ops.AttnMetadata, cache ops.KVCache) ops.Tensor {
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
