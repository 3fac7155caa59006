package models

import (
	"errors"
	"fmt"

	"github.com/atom-go/atom/models/formats"
	"github.com/atom-go/atom/models/layers"
	"github.com/atom-go/atom/ops"
)

// ErrNoMTP is returned by LoadMTP for a checkpoint without a multi-token-prediction layer.
var ErrNoMTP = errors.New("no multi-token-prediction layer")

// MTP is DeepSeek-V3's multi-token-prediction layer (num_nextn_predict_layers, stored as layer
// num_hidden_layers), the draft model of speculative decoding's "mtp" method, as vLLM's
// deepseek_mtp.py runs it: at position p, with the token t one position ahead and the previous
// hidden state h (the target's final-normed hidden state at p, or this layer's own output for
// the next draft),
//
//	h' = block(eh_proj([enorm(embed(t)); hnorm(h)]))    logits = head(norm(h'))
//
// block a full DeepSeek decoder layer (MLA and MoE) with its own one-layer KV cache, embed,
// norm and head the layer's embed_tokens, shared_head.norm and shared_head.head (the model's
// embedding and LM head where the checkpoint does not repeat them). One rank only.
//
// (vLLM also zeroes the embedding at position 0; DeepSeek's paper and this layer do not.)
type MTP struct {
	causalLM
	input *layers.MTPInput
	layer moeLayer
}

// LoadMTP loads the first MTP layer of a DeepSeek checkpoint on be; opt sizes its workspaces.
func LoadMTP(ck *Checkpoint, be ops.Backend, opt Options) (*MTP, error) {
	cfg := ck.Config
	if cfg.Architecture != "DeepseekV3ForCausalLM" && cfg.Architecture != "DeepseekV2ForCausalLM" {
		return nil, fmt.Errorf("load %s: %w: %s has none", ck.Dir, ErrNoMTP, cfg.Architecture)
	}
	pre := fmt.Sprintf("model.layers.%d.", cfg.NumLayers)
	if cfg.MLA.NextN < 1 || !ck.Has(pre+"eh_proj.weight") {
		return nil, fmt.Errorf("load %s: %w: num_nextn_predict_layers is %d and %seh_proj.weight is absent",
			ck.Dir, ErrNoMTP, cfg.MLA.NextN, pre)
	}
	if opt.MaxTokens <= 0 || opt.MaxSeqs <= 0 {
		return nil, fmt.Errorf("load %s: MaxTokens and MaxSeqs must be positive", ck.Dir)
	}
	format, err := formats.For(cfg.Quant)
	if err != nil {
		return nil, fmt.Errorf("load %s: quantization_config: %w", ck.Dir, err)
	}
	load := formats.NewLoader(ck, be, 0, nil)
	c := layers.NewContext(be, layers.Single(), load, format, opt.MaxTokens, opt.MaxSeqs)
	m := newDeepSeekMTP(c, cfg, pre)
	if err := c.Err(); err != nil {
		return nil, fmt.Errorf("load %s: MTP layer: %w", ck.Dir, err)
	}
	return m, nil
}

func newDeepSeekMTP(c *layers.Context, cfg *Config, pre string) *MTP {
	h, eps := cfg.HiddenSize, float32(cfg.RMSNormEps)
	embed, head := pre+"embed_tokens", pre+"shared_head.head"
	if !c.Has(embed + ".weight") {
		embed = "model.embed_tokens"
	}
	if !c.Has(head + ".weight") {
		head = "lm_head"
	}
	m := &MTP{causalLM: causalLM{cfg: cfg, c: c,
		norm:   layers.NewRMSNorm(c, pre+"shared_head.norm", h, eps),
		head:   layers.NewParallelLMHead(c, head, cfg.VocabSize, h),
		stream: layers.NewStream(c, h),
		kv:     ops.KVCacheSpec{Ranks: 1},
	}}
	m.input = layers.NewMTPInput(c, pre, embed, cfg.VocabSize, h, eps)
	mla := cfg.MLA
	rope := layers.NewRotary(c, layers.RotaryConfig{HeadDim: mla.RopeDim, RotaryDim: mla.RopeDim,
		Theta: cfg.RoPETheta, Scaling: cfg.RoPEScaling, MaxPositions: cfg.MaxPositions})
	ac := layers.MLAConfig{Hidden: h, Heads: cfg.NumHeads, QLoraRank: mla.QLoraRank, KVLoraRank: mla.KVLoraRank,
		NopeDim: mla.NopeDim, RopeDim: mla.RopeDim, VDim: mla.VDim, NormEps: eps,
		Interleaved: mla.Interleaved, Rope: rope, SoftmaxScale: mlaSoftmaxScale(cfg.RoPEScaling)}
	m.layer = moeLayer{
		inNorm:   layers.NewRMSNorm(c, pre+"input_layernorm", h, eps),
		attn:     layers.NewMLA(c, pre+"self_attn", ac),
		postNorm: layers.NewRMSNorm(c, pre+"post_attention_layernorm", h, eps),
	}
	// The MTP layer's block is sparse whenever the model has experts (it sits past
	// first_k_dense_replace), as DeepSeekSparse says for its index.
	if cfg.DeepSeekSparse(cfg.NumLayers) {
		m.layer.ffn = layers.NewFusedMoE(c, pre+"mlp", deepSeekMoE(c, cfg))
	} else {
		m.layer.ffn = layers.NewMLP(c, pre+"mlp", h, cfg.Intermediate)
	}
	m.declareKV(m.layer.attn)
	return m
}

// Forward runs the layer over a flattened batch: ids[i] is the token one position ahead of
// meta's position i, and row rows[i] of prev its previous hidden state. It writes the layer's
// KV into cache (one layer, NewKVCache's) and returns norm(h') [len(ids), hidden] for Logits,
// valid until the next call; Hidden is h' itself.
func (m *MTP) Forward(ids []int32, prev ops.Tensor, rows []int32, meta *ops.AttnMetadata, cache ops.KVCache) ops.Tensor {
	s := m.stream
	m.input.Start(s, ids, prev, rows)
	l := &m.layer
	l.attn.Forward(s, l.inNorm, l.postNorm, cache, 0, meta)
	l.ffn.Forward(s, l.postNorm, m.norm)
	s.EndLayer(1)
	return s.Final(m.norm)
}

// Hidden is the last Forward's h' [len(ids), hidden] before shared_head.norm: the previous
// hidden state of the next draft.
func (m *MTP) Hidden() ops.Tensor { return m.stream.Residual() }
