// Package layers holds the building blocks the model families in package models are composed
// of, as nano-vllm's layers/ and vLLM's model_executor/layers are: Embedding and the
// vocab-parallel LM head, RMSNorm and the residual stream it runs on, Linear in its parallel
// kinds (replicated, column-parallel, row-parallel, merged-column, q|k|v), the rotary
// embedding, attention over the paged KV cache (GQA, and DeepSeek's Multi-head Latent Attention
// over a latent cache), the SwiGLU MLP and the sparse MoE block (FusedMoE).
//
// Each layer owns its checkpoint names (with the packed modules it stacks), its slice of the
// tensor-parallel split and its workspaces, and chooses the backend's fused paths itself (norm
// into the next GEMM, residual add into the projection, RoPE with the KV write), so a family
// file only wires layers together. The weights of the linear layers are read through a weight
// format (package formats).
//
// layers imports ops, models/formats and the standard library; only package models imports it.
package layers

import (
	"fmt"

	"github.com/atom-go/atom/models/formats"
	"github.com/atom-go/atom/ops"
)

// Shard is one rank's place in a tensor-parallel group, as vLLM and ATOM split a decoder:
// column-parallel layers keep a slice of their output features, row-parallel layers a slice of
// their input features followed by an all-reduce; everything else is replicated.
type Shard struct {
	Rank, Size int
	Group      ops.Group // nil for a single rank
}

// Single is the shard of a model that is not split.
func Single() Shard { return Shard{Size: 1} }

// Split returns this rank's part [lo, hi) of n; n must divide evenly.
func (s Shard) Split(n int, what string) (lo, hi int, err error) {
	if n%s.Size != 0 {
		return 0, 0, fmt.Errorf("%s %d is not divisible by --tensor-parallel-size %d", what, n, s.Size)
	}
	per := n / s.Size
	return s.Rank * per, (s.Rank + 1) * per, nil
}

// SplitUneven returns this rank's part of n when n need not divide evenly (the vocabulary):
// ranks take ceil(n/size) each, the last one the rest.
func (s Shard) SplitUneven(n int) (lo, hi int) {
	per := (n + s.Size - 1) / s.Size
	return min(s.Rank*per, n), min((s.Rank+1)*per, n)
}

// allReduce sums a row-parallel layer's partial output across the group.
func (s Shard) allReduce(t ops.Tensor) {
	if s.Group != nil {
		s.Group.AllReduce(s.Rank, t)
	}
}

// Context is what layers are built with: the backend, the rank's shard, the checkpoint, the
// linear layers' weight format and the workspaces. Constructors record the first error in it
// (later constructors then do nothing), so a family builds all its layers and checks Err
// once, as bufio.Scanner does.
type Context struct {
	be      ops.Backend
	shard   Shard
	load    *formats.Loader
	format  formats.Format
	maxSeqs int
	arena   arena
	moe     map[ops.MoESpec]ops.MoERouting // the MoE workspaces, one per spec
	err     error
	// The backend's optional fused op, resolved once.
	resAdd ops.ResidualAdder
}

// NewContext returns a context that builds layers on be for shard, reading weights through
// load in format f, with workspaces for maxTokens rows (maxSeqs rows of logits).
func NewContext(be ops.Backend, shard Shard, load *formats.Loader, f formats.Format, maxTokens, maxSeqs int) *Context {
	c := &Context{be: be, shard: shard, load: load, format: f, maxSeqs: maxSeqs,
		arena: arena{be: be, rows: maxTokens, bufs: map[string]*Buf{}}}
	c.resAdd, _ = be.(ops.ResidualAdder)
	return c
}

// Err returns the first error a constructor met.
func (c *Context) Err() error { return c.err }

// Backend is the backend the layers run on.
func (c *Context) Backend() ops.Backend { return c.be }

// Shard is the rank's place in the tensor-parallel group.
func (c *Context) Shard() Shard { return c.shard }

// Has reports whether the checkpoint holds the tensor name.
func (c *Context) Has(name string) bool { return c.load.Has(name) }

func (c *Context) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// split is Shard.Split recording its error.
func (c *Context) split(n int, what string) (lo, hi int) {
	lo, hi, err := c.shard.Split(n, what)
	c.fail(err)
	return lo, hi
}

// get loads a whole tensor, recording the error.
func (c *Context) get(name string, shape ...int) ops.Tensor {
	if c.err != nil {
		return nil
	}
	t, err := c.load.Get(name, shape...)
	c.fail(err)
	return t
}

// getExact loads a whole tensor that the backend keeps in float32 (ops.WeightDesc.Exact),
// recording the error.
func (c *Context) getExact(name string, shape ...int) ops.Tensor {
	if c.err != nil {
		return nil
	}
	t, err := c.load.GetExact(name, shape...)
	c.fail(err)
	return t
}

// Buf is a workspace: an activation buffer of the context's row capacity, and its view of the
// current pass's rows.
type Buf struct {
	t, view ops.Tensor
}

// View is the buffer narrowed to the rows of the pass Stream.Start began.
func (b *Buf) View() ops.Tensor { return b.view }

// arena holds the workspaces of a model's layers. Layers ask for theirs by purpose and width
// when they are built; layers of one kind get the same buffer, since they run one after the
// other, so a model has one set whatever its depth.
type arena struct {
	be    ops.Backend
	rows  int
	bufs  map[string]*Buf
	order []*Buf
}

// workspace returns the context's buffer for purpose, cols wide.
func (c *Context) workspace(purpose string, cols int) *Buf {
	if c.err != nil {
		return &Buf{}
	}
	a := &c.arena
	key := fmt.Sprintf("%s/%d", purpose, cols)
	if b, ok := a.bufs[key]; ok {
		return b
	}
	b := &Buf{t: a.be.Buffer(a.rows, cols)}
	a.bufs[key], a.order = b, append(a.order, b)
	return b
}

// begin narrows every workspace to the pass's n rows.
func (a *arena) begin(n int) {
	for _, b := range a.order {
		b.view = a.be.View(b.t, n)
	}
}

// Fail records err (the first error wins) for a family's own checks of its config.
func (c *Context) Fail(err error) { c.fail(err) }
