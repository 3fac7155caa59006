package layers

import (
	"fmt"
	"math"

	"github.com/atom-go/atom/ops"
)

// MLAConfig is one Multi-head Latent Attention layer's shape (DeepSeek V2/V3).
type MLAConfig struct {
	Hidden, Heads int
	// QLoraRank > 0 projects q through q_a_proj, q_a_layernorm and q_b_proj; 0: q_proj.
	QLoraRank                          int
	KVLoraRank, NopeDim, RopeDim, VDim int
	NormEps                            float32
	// Interleaved is the GPT-J RoPE layout on the rope parts.
	Interleaved bool
	Rope        *ops.RoPE
	// SoftmaxScale multiplies 1/sqrt(NopeDim+RopeDim): YaRN's mscale(factor, mscale_all_dim)²
	// (0 means 1).
	SoftmaxScale float64
}

// MLA is Multi-head Latent Attention over a latent KV cache, as vLLM's MLA backends run it:
// q from the (low-rank) q projection, the compressed [kv_c, k_pe] from kv_a_proj_with_mqa,
// kv_c normalised and k_pe rotated into the cache, attention in the absorbed form with
// kv_b_proj's W_UK and W_UV, and the row-parallel output projection. Under tensor parallelism
// the heads are split (q_b_proj / q_proj and kv_b_proj column-parallel, o_proj row-parallel);
// the latent projections and the cache are replicated.
type MLA struct {
	QA, QB, Q, KVA, KVB, O *Linear // QA and QB, or Q
	QANorm, KVANorm        *RMSNorm
	shape                  ops.MLAShape
	rope                   *ops.RoPE
	mb                     ops.MLABackend
	c                      *Context
	// Workspaces: the q low-rank output and its norm, q, the latent projection, the output.
	qa, qan, q, kv, out *Buf
}

// NewMLA loads the attention module prefix ("model.layers.0.self_attn"). A backend without
// MLA refuses it with ops.ErrUnsupportedKVCache.
func NewMLA(c *Context, prefix string, mc MLAConfig) *MLA {
	mb, ok := c.be.(ops.MLABackend)
	if !ok {
		c.fail(fmt.Errorf("%w: multi-head latent attention on the %s backend", ops.ErrUnsupportedKVCache, c.be.Name()))
		return &MLA{}
	}
	lo, hi := c.split(mc.Heads, "num_attention_heads")
	heads, qk := hi-lo, mc.NopeDim+mc.RopeDim
	m := &MLA{rope: mc.Rope, mb: mb, c: c}
	if mc.QLoraRank > 0 {
		m.QA = NewReplicated(c, prefix+".q_a_proj", mc.Hidden, mc.QLoraRank, false)
		m.QANorm = NewRMSNorm(c, prefix+".q_a_layernorm", mc.QLoraRank, mc.NormEps)
		m.QB = NewColumnParallel(c, prefix+".q_b_proj", mc.QLoraRank, mc.Heads*qk, false)
		m.qa, m.qan = c.workspace("mla.q_a", mc.QLoraRank), c.workspace("mla.q_a_norm", mc.QLoraRank)
	} else {
		m.Q = NewColumnParallel(c, prefix+".q_proj", mc.Hidden, mc.Heads*qk, false)
	}
	m.KVA = NewReplicated(c, prefix+".kv_a_proj_with_mqa", mc.Hidden, mc.KVLoraRank+mc.RopeDim, false)
	m.KVANorm = NewRMSNorm(c, prefix+".kv_a_layernorm", mc.KVLoraRank, mc.NormEps)
	m.KVB = NewColumnParallel(c, prefix+".kv_b_proj", mc.KVLoraRank, mc.Heads*(mc.NopeDim+mc.VDim), false)
	m.O = NewRowParallel(c, prefix+".o_proj", mc.Heads*mc.VDim, mc.Hidden)
	scale := 1 / math.Sqrt(float64(qk))
	if mc.SoftmaxScale > 0 {
		scale *= mc.SoftmaxScale
	}
	m.shape = ops.MLAShape{Heads: heads, KVRank: mc.KVLoraRank, NopeDim: mc.NopeDim, RopeDim: mc.RopeDim, VDim: mc.VDim,
		Scale: float32(scale), Eps: mc.NormEps, Interleaved: mc.Interleaved}
	m.q, m.out = c.workspace("mla.q", heads*qk), c.workspace("mla.out", heads*mc.VDim)
	m.kv = c.workspace("mla.kv_a", mc.KVLoraRank+mc.RopeDim)
	return m
}

// KVSpec is the layer's latent cache: one [kv_c, k_pe] vector per token in the activations'
// dtype (float32 on the cpu, whose MLA is exact), the same on every rank.
func (m *MLA) KVSpec() ops.KVLayerSpec {
	s := ops.KVLayerSpec{Kind: ops.KVLatent, Heads: 1, HeadDim: m.shape.LatentDim(), DType: ops.F32}
	if m.q != nil && m.q.t != nil {
		s.DType = m.q.t.DType()
	}
	return s
}

// Forward adds the layer's output on norm(stream) into the stream, writing this pass's latents
// into layer's cache; next is the norm that follows it.
func (m *MLA) Forward(s *Stream, norm, next *RMSNorm, cache ops.KVCache, layer int, meta *ops.AttnMetadata) {
	be := m.c.be
	x := s.Norm(norm)
	q, kv, out := m.q.View(), m.kv.View(), m.out.View()
	if m.QA != nil {
		qa, qan := m.qa.View(), m.qan.View()
		be.Linear(qa, x, m.QA.W, nil)
		be.RMSNorm(qan, qa, nil, m.QANorm.W, m.QANorm.Eps)
		be.Linear(q, qan, m.QB.W, nil)
	} else {
		be.Linear(q, x, m.Q.W, nil)
	}
	be.Linear(kv, x, m.KVA.W, nil)
	m.mb.MLAWriteKV(q, kv, m.KVANorm.W, m.rope, cache, layer, meta, m.shape)
	m.mb.MLAAttention(out, q, m.KVB.W, cache, layer, meta, m.shape)
	m.O.AddTo(s, out, next)
}
