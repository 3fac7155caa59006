package models

import (
	"fmt"

	"github.com/atom-go/atom/models/layers"
	"github.com/atom-go/atom/ops"
)

// gpt-oss (GptOssForCausalLM) is a pre-norm MoE decoder whose every layer is attention then a
// sparse MoE block:
//   - attention with q, k, v and o biases (attention_bias), a learned sink logit per head in
//     the softmax's denominator (self_attn.sinks), and on the layers layer_types calls
//     "sliding_attention" (the even ones by default) a window of sliding_window positions;
//     NeoX-style YaRN RoPE (factor 32 over 4096 original positions, untruncated);
//   - a router Linear with a bias (mlp.router) whose k largest logits are softmaxed; experts
//     with biases stored packed (mlp.experts.gate_up_proj with gate and up interleaved,
//     mlp.experts.down_proj; MXFP4 *_blocks and *_scales in the released checkpoints) and the
//     clamped SwiGLU of swiglu_limit and swiglu_alpha.
//
// The weight format (unquantized or formats.MXFP4) and the backend's ops do the rest; a
// backend without sliding windows or sinks (ops.AttentionFeatures) refuses the load.
func init() { register(newGptOss, gptOssArch) }

// gptOss is one rank's gpt-oss.
type gptOss struct {
	causalLM
	layers []moeLayer
}

func newGptOss(c *layers.Context, cfg *Config) rankModel {
	m := &gptOss{causalLM: newCausalLM(c, cfg)}
	rope := rotary(c, cfg)
	h, eps := cfg.HiddenSize, float32(cfg.RMSNormEps)
	if len(cfg.GptOss.LayerWindows) != cfg.NumLayers {
		c.Fail(fmt.Errorf("%s: %d layer types for %d layers", cfg.Architecture, len(cfg.GptOss.LayerWindows), cfg.NumLayers))
		return m
	}
	moe := layers.MoEConfig{Hidden: h, Inter: cfg.Intermediate, Experts: cfg.MoE.NumExperts, TopK: cfg.MoE.TopK,
		InterField: "intermediate_size", Scoring: ops.ScoreTopKSoftmax, Router: "router", RouterBias: true,
		Packed: true, ExpertBias: true, Activation: ops.ActSwiGLUClamped,
		Alpha: float32(cfg.GptOss.SwigluAlpha), Limit: float32(cfg.GptOss.SwigluLimit)}
	for i := range cfg.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		l := moeLayer{
			inNorm: layers.NewRMSNorm(c, p+"input_layernorm", h, eps),
			attn: layers.NewAttention(c, p+"self_attn", layers.AttentionConfig{Hidden: h, Heads: cfg.NumHeads,
				KVHeads: cfg.NumKVHeads, HeadDim: cfg.HeadDim, Bias: cfg.AttentionBias, OBias: cfg.AttentionBias,
				Rope: rope, Window: cfg.GptOss.LayerWindows[i], Sinks: true}),
			postNorm: layers.NewRMSNorm(c, p+"post_attention_layernorm", h, eps),
			ffn:      layers.NewFusedMoE(c, p+"mlp", moe),
		}
		m.layers = append(m.layers, l)
		m.declareKV(l.attn)
	}
	return m
}

// Forward runs every layer over the batch and returns the final-normed hidden states.
func (m *gptOss) Forward(ids []int32, meta *ops.AttnMetadata, cache ops.KVCache) ops.Tensor {
	return m.forwardMoE(m.layers, ids, meta, cache)
}
