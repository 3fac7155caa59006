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

// NormLinear is one skinny GEMM normalising its input with the sum of squares a fused residual
// add left (PreNorm.Summed, see LinearResidual) where the library serves it, else RMSNorm into
// p.Spare and Linear (r in p.Res). A norm recomputed in the GEMM's prologue without those sums
// lost to the RMSNorm kernel, so there is no such kernel.
func (b *Backend) NormLinear(out ops.Tensor, p ops.PreNorm, w, bias ops.Tensor) ops.Tensor {
	o, rt, st, nw, wt := out.(*Tensor), p.Res.(*Tensor), p.Spare.(*Tensor), p.Weight.(*Tensor), w.(*Tensor)
	m, k, n := rt.rows(), rt.cols(), wt.rows()
	if len(wt.shape) != 2 || wt.cols() != k || o.cols() != n || o.rows() < m || nw.elems() != k ||
		st.cols() != k || st.rows() < m {
		shapeErr("NormLinear", "out %v = norm(res %v, weight %v, spare %v) · w %vᵀ", o.shape, rt.shape, nw.shape, st.shape, wt.shape)
	}
	if p.X != nil {
		xt := p.X.(*Tensor)
		if xt.cols() != k || xt.rows() < m {
			shapeErr("NormLinear", "x %v for res %v", xt.shape, rt.shape)
		}
	}
	if p.Summed && p.X == nil && b.sumCount > 0 {
		return b.normSummed(out, p, w, bias)
	}
	biasPtr("NormLinear", bias, n) // checks its shape
	if m == 0 {
		return p.Res
	}
	return ops.NormThenLinear(b, out, p, w, bias)
}

// biasPtr is the device address of op's bias of n elements, 0 when there is none.
func biasPtr(op string, bias ops.Tensor, n int) hipkernels.Ptr {
	if bias == nil {
		return 0
	}
	bt := bias.(*Tensor)
	if bt.elems() != n {
		shapeErr(op, "bias %v for %d outputs", bt.shape, n)
	}
	return bt.ptr
}

// HeadRMSNorm normalises each headDim-wide head of x in place.
func (b *Backend) HeadRMSNorm(x, w ops.Tensor, headDim int, eps float32) {
	xt, wt := x.(*Tensor), w.(*Tensor)
	if headDim <= 0 || xt.cols()%headDim != 0 || wt.elems() != headDim {
		shapeErr("HeadRMSNorm", "x %v, weight %v, head dim %d", xt.shape, wt.shape, headDim)
	}
	b.must("HeadRMSNorm", b.lib.HeadRMSNorm(b.kdt, xt.ptr, wt.ptr, xt.rows(), xt.cols()/headDim, headDim, eps, b.stream))
}

// Linear writes out = x·wᵀ (+ bias): decode-sized batches on the skinny kernel (bias in its
// epilogue), larger ones through the BLAS plus a bias kernel.
func (b *Backend) Linear(out, x, w, bias ops.Tensor) {
	o, xt, wt := out.(*Tensor), x.(*Tensor), w.(*Tensor)
	m, k, n := xt.rows(), xt.cols(), wt.rows()
	if len(wt.shape) != 2 || wt.cols() != k || o.cols() != n || o.rows() < m {
		shapeErr("Linear", "out %v = x %v · w %vᵀ", o.shape, xt.shape, wt.shape)
	}
	bp := biasPtr("Linear", bias, n)
	if m == 0 {
		return
	}
	if wt.fp8 != nil {
		b.linearFP8(o, xt, wt.fp8, bp, m)
		return
	}
	b.must("Linear", b.lib.GemmBias(b.blas, b.stream, b.kdt, hipkernels.DType(wt.dt), o.ptr, xt.ptr, wt.ptr, bp, m, n, k))
}

// LinearSwiGLU writes out = (silu(gate)*up) · wᵀ from the fused gate|up rows: one skinny kernel
// at decode sizes (act untouched), else SiluMulFused into act and the GEMM.
func (b *Backend) LinearSwiGLU(out, gateUp, act, w ops.Tensor) {
	o, gu, at, wt := out.(*Tensor), gateUp.(*Tensor), act.(*Tensor), w.(*Tensor)
	m, k, n := gu.rows(), wt.cols(), wt.rows()
	if len(wt.shape) != 2 || gu.cols() != 2*k || at.cols() != k || at.rows() < m || o.cols() != n || o.rows() < m {
		shapeErr("LinearSwiGLU", "out %v = silu·up of %v (act %v) · w %vᵀ", o.shape, gu.shape, at.shape, wt.shape)
	}
	if m == 0 {
		return
	}
	if wt.fp8 != nil { // no fused SwiGLU input for FP8 codes: SiLU-and-mul, then the FP8 Linear
		b.must("LinearSwiGLU", b.lib.SiluMulFused(b.kdt, at.ptr, gu.ptr, m, k, b.stream))
		b.linearFP8(o, at, wt.fp8, 0, m)
		return
	}
	b.must("LinearSwiGLU", b.lib.GemmSwiGLU(b.blas, b.stream, b.kdt, hipkernels.DType(wt.dt), o.ptr, gu.ptr, wt.ptr, at.ptr, m, n, k))
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

// SiluMulFused writes out = silu(gateUp[:, :c]) * gateUp[:, c:], c the width of out.
func (b *Backend) SiluMulFused(out, gateUp ops.Tensor) {
	o, gu := out.(*Tensor), gateUp.(*Tensor)
	rows, cols := o.rows(), o.cols()
	if gu.cols() != 2*cols || gu.rows() < rows {
		shapeErr("SiluMulFused", "out %v from gate|up %v", o.shape, gu.shape)
	}
	b.must("SiluMulFused", b.lib.SiluMulFused(b.kdt, o.ptr, gu.ptr, rows, cols, b.stream))
}

// SplitCols copies consecutive column ranges of each row of src into two or three dst tensors.
func (b *Backend) SplitCols(src ops.Tensor, dst ...ops.Tensor) {
	s := src.(*Tensor)
	if len(dst) < 2 || len(dst) > 3 {
		shapeErr("SplitCols", "%d parts (two or three supported)", len(dst))
	}
	var ptrs [3]hipkernels.Ptr
	var widths [3]int
	for i, d := range dst {
		t := d.(*Tensor)
		if t.rows() < s.rows() {
			shapeErr("SplitCols", "part %d %v for src %v", i, t.shape, s.shape)
		}
		ptrs[i], widths[i] = t.ptr, t.cols()
	}
	if widths[0]+widths[1]+widths[2] != s.cols() {
		shapeErr("SplitCols", "parts of %v columns from src %v", widths, s.shape)
	}
	b.must("SplitCols", b.lib.SplitCols(b.kdt, ptrs[0], ptrs[1], ptrs[2], s.ptr, s.rows(), widths[0], widths[1], widths[2], b.stream))
}
