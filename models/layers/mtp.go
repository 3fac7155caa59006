package layers

import (
	"github.com/atom-go/atom/models/formats"
	"github.com/atom-go/atom/ops"
)

// MTPInput is the input of DeepSeek-V3's multi-token-prediction layer:
// eh_proj([enorm(embed(t)); hnorm(h)]) for the token t one position ahead and the previous
// hidden state h. eh_proj [hidden, 2*hidden] is applied as its two column halves, so no
// concatenation is needed: the stream starts as E·enorm(embed(t)), and its first norm adds
// H·hnorm(h).
type MTPInput struct {
	c            *Context
	embed        *Embedding
	enorm, hnorm *RMSNorm
	e, h         *Linear
	prev, emb    *Buf
	normed       *Buf
}

// NewMTPInput loads the MTP layer's enorm, hnorm and eh_proj under prefix
// ("model.layers.61.") and its embedding table embed ("model.layers.61.embed_tokens").
func NewMTPInput(c *Context, prefix, embed string, vocab, hidden int, eps float32) *MTPInput {
	half := func(lo int) *Linear {
		w := formats.LinearWeight{Name: prefix + "eh_proj.weight", Layout: formats.Cols,
			Parts: []formats.Part{{Name: prefix + "eh_proj.weight", Lo: lo, Hi: lo + hidden, Shape: []int{hidden, 2 * hidden}}}}
		return newLinear(c, w, nil, hidden, hidden)
	}
	return &MTPInput{c: c, embed: NewEmbedding(c, embed, vocab, hidden),
		enorm: NewRMSNorm(c, prefix+"enorm", hidden, eps), hnorm: NewRMSNorm(c, prefix+"hnorm", hidden, eps),
		e: half(0), h: half(hidden),
		prev: c.workspace("mtp.prev", hidden), emb: c.workspace("mtp.embed", hidden), normed: c.workspace("mtp.normed", hidden)}
}

// Start begins a pass of s over len(ids) tokens as the MTP layer's input. The previous hidden
// states are rows of src (one per token), gathered before anything else runs, so src may be
// this stream's own output of its last pass (Stream.Residual).
func (m *MTPInput) Start(s *Stream, ids []int32, src ops.Tensor, rows []int32) {
	be := m.c.be
	prev := be.View(m.prev.t, len(rows))
	be.GatherRows(prev, src, rows)
	s.c.arena.begin(len(ids))
	s.x, s.res, s.spare = s.xb.View(), s.resb.View(), s.spareb.View()
	emb, normed := m.emb.View(), m.normed.View()
	be.Embedding(emb, m.embed.Table, ids)
	be.RMSNorm(normed, emb, nil, m.enorm.W, m.enorm.Eps)
	m.e.Forward(s.res, normed)
	be.RMSNorm(normed, prev, nil, m.hnorm.W, m.hnorm.Eps)
	m.h.Forward(s.x, normed)
	s.pre = ops.PreNorm{X: s.x}
	s.EndLayer(0)
}
