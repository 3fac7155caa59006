package layers

import (
	"github.com/atom-go/atom/models/formats"
	"github.com/atom-go/atom/ops"
)

// Embedding is the token embedding table [vocab, hidden], replicated on every rank (a lookup
// per token costs little, and a replicated table needs no all-reduce after it).
type Embedding struct {
	Table ops.Tensor
}

// NewEmbedding loads the embedding module name ("model.embed_tokens").
func NewEmbedding(c *Context, name string, vocab, hidden int) *Embedding {
	return &Embedding{Table: c.get(name+".weight", vocab, hidden)}
}

// ParallelLMHead is the vocab-parallel output projection: each rank computes the logits of
// its slice [Lo, Hi) of the vocabulary (the tensor-parallel model gathers the slices).
type ParallelLMHead struct {
	W      ops.Tensor
	Lo, Hi int
	c      *Context
	// Workspaces of the context's logit rows.
	sel, logits ops.Tensor
}

// NewParallelLMHead loads this rank's rows of the head module name ("lm_head"; a tied model
// passes its embedding's module).
func NewParallelLMHead(c *Context, name string, vocab, hidden int) *ParallelLMHead {
	h := &ParallelLMHead{c: c}
	h.Lo, h.Hi = c.shard.SplitUneven(vocab)
	if c.err != nil {
		return h
	}
	w := formats.LinearWeight{Name: name + ".weight", Layout: formats.Rows,
		Parts: []formats.Part{{Name: name + ".weight", Lo: h.Lo, Hi: h.Hi, Shape: []int{vocab, hidden}}}}
	var err error
	if h.W, err = c.format.Load(c.load, w); err != nil {
		c.fail(err)
		return h
	}
	h.sel, h.logits = c.be.Buffer(c.maxSeqs, hidden), c.be.Buffer(c.maxSeqs, h.Hi-h.Lo)
	return h
}

// Forward projects the selected rows of hidden to this rank's logits [len(rows), Hi-Lo], valid
// until the next call.
func (h *ParallelLMHead) Forward(hidden ops.Tensor, rows []int32) ops.Tensor {
	be := h.c.be
	out := be.View(h.logits, len(rows))
	if IdentityRows(rows, hidden.Shape()[0]) {
		// A decode batch samples every row in order: the head reads the hidden state itself,
		// with no copy (one dependent kernel fewer per decode step).
		be.Linear(out, hidden, h.W, nil)
		return out
	}
	sel := be.View(h.sel, len(rows))
	be.GatherRows(sel, hidden, rows)
	be.Linear(out, sel, h.W, nil)
	return out
}

// IdentityRows reports whether rows is 0, 1, ..., n-1.
func IdentityRows(rows []int32, n int) bool {
	if len(rows) != n {
		return false
	}
	for i, r := range rows {
		if int(r) != i {
			return false
		}
	}
	return true
}
