package models

import (
	"fmt"
	"math"

	"github.com/atom-go/atom/models/layers"
	"github.com/atom-go/atom/ops"
)

// DeepSeek V2 and V3 (and V2-Lite): Multi-head Latent Attention over a latent KV cache (one
// [kv_c, k_pe] vector per token and layer) with RoPE on the rope part of q and k only, and a
// feed-forward sublayer that is a dense MLP on the first first_k_dense_replace layers and a
// MoE block on every moe_layer_freq-th after: n_routed_experts routed (V2: softmax scores,
// greedy or group-limited; V3: sigmoid scores chosen with e_score_correction_bias among the
// best topk_group of n_group groups), weighted by routed_scaling_factor, plus n_shared_experts
// shared experts as one ungated MLP. The multi-token-prediction layers
// (num_nextn_predict_layers, stored as layer num_hidden_layers) are not part of the model:
// speculative decoding loads the first with LoadMTP (deepseek_mtp.go). As in vLLM's
// deepseek_v2.py.
func init() { register(newDeepSeek, "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM") }

// deepSeek is one rank's DeepSeek V2/V3.
type deepSeek struct {
	causalLM
	layers []moeLayer
}

func newDeepSeek(c *layers.Context, cfg *Config) rankModel {
	m := &deepSeek{causalLM: newCausalLM(c, cfg)}
	mla, h, eps := cfg.MLA, cfg.HiddenSize, float32(cfg.RMSNormEps)
	rope := layers.NewRotary(c, layers.RotaryConfig{HeadDim: mla.RopeDim, RotaryDim: mla.RopeDim,
		Theta: cfg.RoPETheta, Scaling: cfg.RoPEScaling, MaxPositions: cfg.MaxPositions})
	ac := layers.MLAConfig{Hidden: h, Heads: cfg.NumHeads, QLoraRank: mla.QLoraRank, KVLoraRank: mla.KVLoraRank,
		NopeDim: mla.NopeDim, RopeDim: mla.RopeDim, VDim: mla.VDim, NormEps: eps,
		Interleaved: mla.Interleaved, Rope: rope, SoftmaxScale: mlaSoftmaxScale(cfg.RoPEScaling)}
	moe := deepSeekMoE(c, cfg)
	for i := range cfg.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		l := moeLayer{
			inNorm:   layers.NewRMSNorm(c, p+"input_layernorm", h, eps),
			attn:     layers.NewMLA(c, p+"self_attn", ac),
			postNorm: layers.NewRMSNorm(c, p+"post_attention_layernorm", h, eps),
		}
		if cfg.DeepSeekSparse(i) {
			l.ffn = layers.NewFusedMoE(c, p+"mlp", moe)
		} else {
			l.ffn = layers.NewMLP(c, p+"mlp", h, cfg.Intermediate)
		}
		m.layers = append(m.layers, l)
		m.declareKV(l.attn)
	}
	return m
}

// mlaSoftmaxScale is what transformers' yarn_apply_mscale multiplies the softmax scale by: under
// a scaled RoPE with mscale_all_dim, mscale(factor, mscale_all_dim)², with mscale(f, m) =
// 0.1·m·ln f + 1 (1 for f <= 1). The rotation's own cos/sin factor, mscale(f, mscale) /
// mscale(f, mscale_all_dim), is ops.NewRoPE's.
func mlaSoftmaxScale(sc ops.RoPEScaling) float64 {
	if sc.Type == "" || sc.Type == "default" || sc.MscaleAllDim == 0 || sc.Factor <= 1 {
		return 1
	}
	m := 0.1*sc.MscaleAllDim*math.Log(sc.Factor) + 1
	return m * m
}

// deepSeekMoE is the MoE block of the DeepSeek families.
func deepSeekMoE(c *layers.Context, cfg *Config) layers.MoEConfig {
	mc, d := cfg.MoE, cfg.MoE.DeepSeek
	if mc.NumExperts > 0 && mc.Intermediate == 0 {
		c.Fail(fmt.Errorf("%s: no moe_intermediate_size", cfg.Architecture))
	}
	scoring := ops.ScoreSoftmax
	if d.Sigmoid {
		scoring = ops.ScoreSigmoid
	}
	return layers.MoEConfig{Hidden: cfg.HiddenSize, Inter: mc.Intermediate, Experts: mc.NumExperts, TopK: mc.TopK,
		Renormalize: mc.NormTopKProb, Names: layers.QwenExperts, SharedInter: mc.Intermediate * d.SharedExperts,
		SharedPlain: true, Scoring: scoring, Groups: d.Groups, TopKGroups: d.TopKGroups,
		Bias: d.TopKMethod == "noaux_tc", Scale: float32(d.Scale)}
}

// Forward runs every layer over the batch and returns the final-normed hidden states.
func (m *deepSeek) Forward(ids []int32, meta *ops.AttnMetadata, cache ops.KVCache) ops.Tensor {
	return m.forwardMoE(m.layers, ids, meta, cache)
}
