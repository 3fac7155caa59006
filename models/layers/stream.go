package layers

import "github.com/atom-go/atom/ops"

// RMSNorm is y = x / rms(x) * W.
type RMSNorm struct {
	W   ops.Tensor
	Eps float32
}

// NewRMSNorm loads the norm module name ("model.norm") of dim features.
func NewRMSNorm(c *Context, name string, dim int, eps float32) *RMSNorm {
	return &RMSNorm{W: c.get(name+".weight", dim), Eps: eps}
}

// Stream is the residual stream of a pre-norm decoder, and where the fused residual paths are
// chosen. The running sum lives in res; a sublayer's output projection either leaves its
// output in x for the next norm to add (the norm's residual add), or, where the backend can
// (ops.ResidualAdder: one row, no all-reduce in between, no layer hook reading each output),
// adds itself into res in its own kernel. The next NormLinear runs that norm in front of the
// next projection and may leave the sum in spare instead of res: the two then swap roles.
type Stream struct {
	c                *Context
	hidden           int
	xb, resb, spareb *Buf
	x, res, spare    ops.Tensor
	pre              ops.PreNorm // what the next norm adds: X, or nothing (Summed after a fused add)
	hook             func(int, []float32, int)
	dump             []float32
}

// NewStream is the residual stream of hidden features.
func NewStream(c *Context, hidden int) *Stream {
	return &Stream{c: c, hidden: hidden, xb: c.workspace("stream.x", hidden), resb: c.workspace("stream.res", hidden),
		spareb: c.workspace("stream.spare", hidden)}
}

// SetHook, when fn is non-nil, calls fn with each layer's output (see EndLayer); while it is
// set the fused residual adds are off, since fn reads every sublayer's output.
func (s *Stream) SetHook(fn func(layer int, hidden []float32, cols int)) { s.hook = fn }

// Start begins a pass over len(ids) tokens: every workspace is narrowed to that many rows and
// the stream starts as the tokens' embeddings.
func (s *Stream) Start(e *Embedding, ids []int32) {
	s.c.arena.begin(len(ids))
	s.x, s.res, s.spare = s.xb.View(), s.resb.View(), s.spareb.View()
	s.c.be.Embedding(s.res, e.Table, ids)
	s.pre = ops.PreNorm{}
	s.EndLayer(0)
}

// NormLinear writes out = l(norm(stream)), first adding what the last sublayer left into the
// stream; the backend may run the norm in the projection's prologue.
func (s *Stream) NormLinear(out ops.Tensor, norm *RMSNorm, l *Linear) {
	p := s.pre
	p.Res, p.Spare, p.Weight, p.Eps = s.res, s.spare, norm.W, norm.Eps
	if r := s.c.be.NormLinear(out, p, l.W, l.Bias); r != p.Res {
		s.res, s.spare = r, p.Res
	}
	s.pre = ops.PreNorm{}
}

// Norm writes norm(stream) into the spare buffer and returns it (valid until the sublayer's
// output is added), first adding what the last sublayer left into the stream: for a sublayer
// whose input feeds several ops (the MoE router, experts and shared expert).
func (s *Stream) Norm(norm *RMSNorm) ops.Tensor {
	if s.pre.X != nil {
		s.c.be.RMSNorm(s.spare, s.pre.X, s.res, norm.W, norm.Eps)
	} else {
		s.c.be.RMSNorm(s.spare, s.res, nil, norm.W, norm.Eps)
	}
	s.pre = ops.PreNorm{}
	return s.spare
}

// fuse reports whether l may add itself into the stream in its own kernel: it needs no
// all-reduce after it and has no bias, and no hook reads its output.
func (s *Stream) fuse(l *Linear) ops.ResidualAdder {
	if l.reduce || l.Bias != nil || s.hook != nil {
		return nil
	}
	return s.c.resAdd
}

// AddTo adds l(x) into the stream. next is the norm that follows (its weight is the fused
// add's second half).
func (l *Linear) AddTo(s *Stream, x ops.Tensor, next *RMSNorm) {
	if ra := s.fuse(l); ra != nil && ra.LinearResidual(s.res, s.spare, x, l.W, next.W) {
		s.pre = ops.PreNorm{Summed: true}
		return
	}
	l.Forward(s.x, x)
	s.pre = ops.PreNorm{X: s.x}
}

// AddSwiGLUTo adds l's ForwardSwiGLU of gateUp into the stream, as AddTo does.
func (l *Linear) AddSwiGLUTo(s *Stream, gateUp, act ops.Tensor, next *RMSNorm) {
	if ra := s.fuse(l); ra != nil && ra.LinearSwiGLUResidual(s.res, s.spare, gateUp, l.W, next.W) {
		s.pre = ops.PreNorm{Summed: true}
		return
	}
	l.ForwardSwiGLU(s.x, gateUp, act)
	s.pre = ops.PreNorm{X: s.x}
}

// Final applies the final norm to the stream and returns the hidden states [rows, hidden],
// valid until the next pass.
func (s *Stream) Final(norm *RMSNorm) ops.Tensor {
	if s.pre.X != nil {
		s.c.be.RMSNorm(s.spare, s.pre.X, s.res, norm.W, norm.Eps)
	} else {
		s.c.be.RMSNorm(s.spare, s.res, nil, norm.W, norm.Eps)
	}
	return s.spare
}

// Residual is the stream's running sum: after Final, the hidden states before the final norm
// (what DeepSeek's MTP layer chains from one draft to the next), valid until the next pass.
func (s *Stream) Residual() ops.Tensor { return s.res }

// EndLayer hands the stream after layer (0: the embeddings) to the hook; it costs nothing when
// no hook is set.
func (s *Stream) EndLayer(layer int) {
	if s.hook == nil {
		return
	}
	cols, rows := s.hidden, s.res.Shape()[0]
	if cap(s.dump) < 2*rows*cols {
		s.dump = make([]float32, 2*rows*cols)
	}
	a, b := s.dump[:rows*cols], s.dump[rows*cols:2*rows*cols]
	s.c.be.ReadRows(s.res, a)
	if s.pre.X != nil {
		s.c.be.ReadRows(s.pre.X, b)
		for i := range a {
			a[i] += b[i]
		}
	}
	s.hook(layer, a, cols)
}
