package layers

import (
	"fmt"
	"math"

	"github.com/atom-go/atom/ops"
)

// RotaryConfig is a model's rotary position embedding (ops.NewRoPE's parameters).
type RotaryConfig struct {
	HeadDim, RotaryDim int
	Theta              float64
	Scaling            ops.RoPEScaling
	MaxPositions       int
}

// NewRotary builds the rotary embedding every attention layer of a model shares (the gpu
// backend keeps one device table per RoPE).
func NewRotary(c *Context, rc RotaryConfig) *ops.RoPE {
	if c.err != nil {
		return nil
	}
	r, err := ops.NewRoPE(rc.HeadDim, rc.RotaryDim, rc.Theta, rc.Scaling, rc.MaxPositions)
	c.fail(err)
	return r
}

// AttentionConfig is one attention layer's shape and options.
type AttentionConfig struct {
	Hidden, Heads, KVHeads, HeadDim int
	// Bias: the q, k and v projections have biases (Qwen2, Llama's attention_bias).
	Bias bool
	// QKNorm: an RMSNorm over each query and key head before RoPE (Qwen3's q_norm, k_norm),
	// with epsilon NormEps.
	QKNorm  bool
	NormEps float32
	Rope    *ops.RoPE
	// OBias: the output projection has a bias too (gpt-oss's attention_bias), added once
	// under tensor parallelism (by the first rank).
	OBias bool
	// Window > 0 makes the layer attend to the last Window positions only (a sliding-window
	// layer, declared in its KV spec); 0: the whole context.
	Window int
	// Sinks: one learned logit per head in the softmax's denominator ("sinks", gpt-oss),
	// split by heads under tensor parallelism.
	Sinks bool
}

// Attention is GQA self-attention over the paged KV cache: the q|k|v projection, RoPE (and
// the q/k norm) fused with the write of k and v into the cache, paged attention over each
// sequence's context and the row-parallel output projection.
type Attention struct {
	QKV, O *Linear
	Heads  Heads
	QKNorm *ops.QKNorm // nil unless the layer normalises q and k heads
	rope   *ops.RoPE
	shape  ops.AttnShape
	c      *Context
	// Workspaces: the q|k|v projection's output, the rotated q and the attention's output.
	qkv, q, out *Buf
}

// NewAttention loads the attention module prefix ("model.layers.0.self_attn").
func NewAttention(c *Context, prefix string, ac AttentionConfig) *Attention {
	h := c.splitHeads(ac.Heads, ac.KVHeads, ac.HeadDim)
	a := &Attention{Heads: h, rope: ac.Rope, c: c}
	a.QKV = NewQKVParallel(c, prefix, ac.Hidden, h, ac.Bias)
	if ac.OBias {
		a.O = NewRowParallelBias(c, prefix+".o_proj", ac.Heads*ac.HeadDim, ac.Hidden)
	} else {
		a.O = NewRowParallel(c, prefix+".o_proj", ac.Heads*ac.HeadDim, ac.Hidden)
	}
	if ac.QKNorm {
		a.QKNorm = &ops.QKNorm{Eps: ac.NormEps, Q: c.get(prefix+".q_norm.weight", ac.HeadDim),
			K: c.get(prefix+".k_norm.weight", ac.HeadDim)}
	}
	a.shape = ops.AttnShape{NumHeads: h.RankQ, NumKVHeads: h.RankKV, HeadDim: h.Dim,
		Scale: float32(1 / math.Sqrt(float64(h.Dim))), Window: ac.Window}
	if ac.Sinks && c.err == nil {
		lo := c.shard.Rank * h.RankQ
		// float32 on every backend (the GPU kernels read the logits unrounded)
		t, err := c.load.SliceExact(prefix+".sinks", 0, lo, lo+h.RankQ, ac.Heads)
		c.fail(err)
		a.shape.Sinks = t
	}
	if c.err == nil {
		if err := ops.CheckAttention(c.be, a.shape); err != nil {
			c.fail(fmt.Errorf("%s: %w", prefix, err))
		}
	}
	a.q, a.out = c.workspace("attn.q", h.RankQ*h.Dim), c.workspace("attn.out", h.RankQ*h.Dim)
	a.qkv = c.workspace("attn.qkv", a.QKV.Out)
	return a
}

// KVSpec is the cache this layer reads and writes on this rank: a key and a value per KV head,
// over the whole context or its sliding window, in the activations' dtype.
func (a *Attention) KVSpec() ops.KVLayerSpec {
	s := ops.KVLayerSpec{Kind: ops.KVPair, Heads: a.Heads.RankKV, HeadDim: a.Heads.Dim, SlidingWindow: a.shape.Window}
	if a.q.t != nil {
		s.DType = a.q.t.DType()
	}
	return s
}

// Forward adds the layer's output on norm(stream) into the stream, writing this pass's keys
// and values into layer's cache; next is the norm that follows it.
func (a *Attention) Forward(s *Stream, norm, next *RMSNorm, cache ops.KVCache, layer int, meta *ops.AttnMetadata) {
	be := a.c.be
	qkv, out := a.qkv.View(), a.out.View()
	s.NormLinear(qkv, norm, a.QKV)
	q := a.q.View()
	be.RopeWriteKVFused(q, qkv, a.rope, a.QKNorm, cache, layer, meta)
	be.Attention(out, q, cache, layer, meta, a.shape)
	a.O.AddTo(s, out, next)
}
