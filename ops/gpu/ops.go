package gpu

import (
	"fmt"

	"github.com/atom-go/atom/hipkernels"
	"github.com/atom-go/atom/ops"
)

// Each op checks the shapes its kernel relies on (a mismatch would read or write out of
// bounds on the device) and queues its kernels on the stream.

func shapeErr(op string, format string, args ...any) {
	panic(fmt.Sprintf("gpu %s: %s", op, fmt.Sprintf(format, args...)))
}

// Embedding writes out[i] = table[ids[i]].
func (b *Backend) Embedding(out, table ops.Tensor, ids []int32) {
	o, tb := out.(*Tensor), table.(*Tensor)
	vocab := tb.rows()
	if o.cols() != tb.cols() || o.rows() < len(ids) {
		shapeErr("Embedding", "out %v for %d ids of table %v", o.shape, len(ids), tb.shape)
	}
	for i, id := range ids {
		if id < 0 || int(id) >= vocab {
			shapeErr("Embedding", "id %d (position %d) outside the vocabulary [0, %d)", id, i, vocab)
		}
	}
	if b.bound != nil {
		b.boundRows("Embedding", len(ids))
		b.must("Embedding", b.lib.GatherRows(b.kdt, o.ptr, tb.ptr, b.bound.in.region(regIDs), len(ids), tb.cols(), vocab, b.stream))
		return
	}
	if len(ids) == 0 {
		return
	}
	p := b.uploadInt32(&b.ids, ids)
	b.must("Embedding", b.lib.GatherRows(b.kdt, o.ptr, tb.ptr, p, len(ids), tb.cols(), vocab, b.stream))
}

// GatherRows writes out[i] = x[rows[i]].
func (b *Backend) GatherRows(out, x ops.Tensor, rows []int32) {
	o, xt := out.(*Tensor), x.(*Tensor)
	if o.cols() != xt.cols() || o.rows() < len(rows) {
		shapeErr("GatherRows", "out %v for %d rows of %v", o.shape, len(rows), xt.shape)
	}
	for i, r := range rows {
		if r < 0 || int(r) >= xt.rows() {
			shapeErr("GatherRows", "row %d (index %d) outside [0, %d)", r, i, xt.rows())
		}
	}
	if b.bound != nil {
		b.boundRows("GatherRows", len(rows))
		b.must("GatherRows", b.lib.GatherRows(b.kdt, o.ptr, xt.ptr, b.bound.in.region(regRows), len(rows), xt.cols(), xt.rows(), b.stream))
		return
	}
	if len(rows) == 0 {
		return
	}
	p := b.uploadInt32(&b.rows, rows)
	b.must("GatherRows", b.lib.GatherRows(b.kdt, o.ptr, xt.ptr, p, len(rows), xt.cols(), xt.rows(), b.stream))
}

// RMSNorm normalises each row of x (or of residual += x) into out.
func (b *Backend) RMSNorm(out, x, residual, w ops.Tensor, eps float32) {
	o, xt, wt := out.(*Tensor), x.(*Tensor), w.(*Tensor)
	rows, cols := xt.rows(), xt.cols()
	if o.cols() != cols || o.rows() < rows || wt.elems() != cols {
		shapeErr("RMSNorm", "out %v, x %v, weight %v", o.shape, xt.shape, wt.shape)
	}
	var rp hipkernels.Ptr // 0: no residual
	if residual != nil {
		r := residual.(*Tensor)
		if r.cols() != cols || r.rows() < rows {
			shapeErr("RMSNorm", "residual %v for x %v", r.shape, xt.shape)
		}
		rp = r.ptr
	}
	b.must("RMSNorm", b.lib.RMSNorm(b.kdt, o.ptr, xt.ptr, rp, wt.ptr, rows, cols, eps, b.stream))
}

// HeadRMSNorm normalises each headDim-wide head of x in place.
func (b *Backend) HeadRMSNorm(x, w ops.Tensor, headDim int, eps float32) {
	xt, wt := x.(*Tensor), w.(*Tensor)
	if headDim <= 0 || xt.cols()%headDim != 0 || wt.elems() != headDim {
		shapeErr("HeadRMSNorm", "x %v, weight %v, head dim %d", xt.shape, wt.shape, headDim)
	}
	b.must("HeadRMSNorm", b.lib.HeadRMSNorm(b.kdt, xt.ptr, wt.ptr, xt.rows(), xt.cols()/headDim, headDim, eps, b.stream))
}

// Linear writes out = x·wᵀ (+ bias) through the BLAS (the bias add is a separate kernel).
func (b *Backend) Linear(out, x, w, bias ops.Tensor) {
	o, xt, wt := out.(*Tensor), x.(*Tensor), w.(*Tensor)
	m, k, n := xt.rows(), xt.cols(), wt.rows()
	if len(wt.shape) != 2 || wt.cols() != k || o.cols() != n || o.rows() < m {
		shapeErr("Linear", "out %v = x %v · w %vᵀ", o.shape, xt.shape, wt.shape)
	}
	if m == 0 {
		return
	}
	b.must("Linear", b.lib.Gemm(b.blas, b.stream, b.kdt, o.ptr, xt.ptr, wt.ptr, m, n, k))
	if bias != nil {
		bt := bias.(*Tensor)
		if bt.elems() != n {
			shapeErr("Linear", "bias %v for %d outputs", bt.shape, n)
		}
		b.must("Linear", b.lib.AddBias(b.kdt, o.ptr, bt.ptr, m, n, b.stream))
	}
}

// SiluMul writes out = silu(gate) * up.
func (b *Backend) SiluMul(out, gate, up ops.Tensor) {
	o, g, u := out.(*Tensor), gate.(*Tensor), up.(*Tensor)
	rows, cols := o.rows(), o.cols()
	if g.cols() != cols || u.cols() != cols || g.rows() < rows || u.rows() < rows {
		shapeErr("SiluMul", "out %v, gate %v, up %v", o.shape, g.shape, u.shape)
	}
	b.must("SiluMul", b.lib.SiluMul(b.kdt, o.ptr, g.ptr, u.ptr, rows, cols, b.stream))
}
