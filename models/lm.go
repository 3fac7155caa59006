package models

import (
	"github.com/atom-go/atom/models/layers"
	"github.com/atom-go/atom/ops"
)

// causalLM is what every family shares around its decoder layers: the token embedding, the
// residual stream, the final norm, the vocab-parallel LM head and the KV cache the layers
// declare. A family embeds it and adds its layers and Forward.
type causalLM struct {
	cfg    *Config
	c      *layers.Context
	embed  *layers.Embedding
	stream *layers.Stream
	norm   *layers.RMSNorm
	head   *layers.ParallelLMHead
	kv     ops.KVCacheSpec
}

// newCausalLM loads the shared parts under their Hugging Face names; the LM head is the
// embedding's table when the checkpoint ties them and has no lm_head.
func newCausalLM(c *layers.Context, cfg *Config) causalLM {
	h := cfg.HiddenSize
	head := "lm_head"
	if cfg.TieEmbeddings && !c.Has(head+".weight") {
		head = "model.embed_tokens"
	}
	return causalLM{cfg: cfg, c: c,
		embed:  layers.NewEmbedding(c, "model.embed_tokens", cfg.VocabSize, h),
		norm:   layers.NewRMSNorm(c, "model.norm", h, float32(cfg.RMSNormEps)),
		head:   layers.NewParallelLMHead(c, head, cfg.VocabSize, h),
		stream: layers.NewStream(c, h),
		kv:     ops.KVCacheSpec{Ranks: c.Shard().Size},
	}
}

// rotary is the rotary embedding the config describes, shared by every layer.
func rotary(c *layers.Context, cfg *Config) *ops.RoPE {
	return layers.NewRotary(c, layers.RotaryConfig{HeadDim: cfg.HeadDim, RotaryDim: cfg.RotaryDim(),
		Theta: cfg.RoPETheta, Scaling: cfg.RoPEScaling, MaxPositions: cfg.MaxPositions})
}

// attention is a decoder layer's attention sublayer: GQA (layers.Attention) or DeepSeek's MLA
// (layers.MLA), each declaring its own cache.
type attention interface {
	Forward(s *layers.Stream, norm, next *layers.RMSNorm, cache ops.KVCache, layer int, meta *ops.AttnMetadata)
	KVSpec() ops.KVLayerSpec
}

// declareKV appends an attention layer's cache to the model's KV cache spec.
func (m *causalLM) declareKV(a attention) { m.kv.Layers = append(m.kv.Layers, a.KVSpec()) }

func (m *causalLM) base() *causalLM { return m }

func (m *causalLM) Config() *Config { return m.cfg }

func (m *causalLM) KVCacheSpec() ops.KVCacheSpec { return m.kv }

func (m *causalLM) NewKVCache(numBlocks, blockSize int) (ops.KVCache, error) {
	return ops.NewKVCacheFor(m.c.Backend(), m.kv, numBlocks, blockSize)
}

func (m *causalLM) SetLayerHook(fn func(int, []float32, int)) { m.stream.SetHook(fn) }

func (m *causalLM) Logits(hidden ops.Tensor, rows []int32) ops.Tensor {
	return m.head.Forward(hidden, rows)
}
