package gpu

import (
	"github.com/atom-go/atom/hipkernels"
	"github.com/atom-go/atom/ops"
)

// maxResidualSums bounds the partial sums of squares a fused residual add may leave (one per
// block of its kernel; the library's kMaxSums).
const maxResidualSums = 2048

// LinearResidual adds x·wᵀ into res in the projection's kernel where the library serves it
// (one row), writing scaled = res·normW and leaving the row's sum of squares for the next
// NormLinear; it reports whether it did.
func (b *Backend) LinearResidual(res, scaled, x, w, normW ops.Tensor) bool {
	xt, wt := x.(*Tensor), w.(*Tensor)
	m, k, n := xt.rows(), xt.cols(), wt.rows()
	if len(wt.shape) != 2 || wt.cols() != k {
		shapeErr("LinearResidual", "x %v · w %vᵀ", xt.shape, wt.shape)
	}
	return b.residual("LinearResidual", res, scaled, normW, xt.ptr, wt, m, n, k, false)
}

// LinearSwiGLUResidual adds (silu(gate)*up)·wᵀ into res in one kernel where the library serves
// it, as LinearResidual does.
func (b *Backend) LinearSwiGLUResidual(res, scaled, gateUp, w, normW ops.Tensor) bool {
	gu, wt := gateUp.(*Tensor), w.(*Tensor)
	m, k, n := gu.rows(), wt.cols(), wt.rows()
	if len(wt.shape) != 2 || gu.cols() != 2*k {
		shapeErr("LinearSwiGLUResidual", "silu·up of %v · w %vᵀ", gu.shape, wt.shape)
	}
	return b.residual("LinearSwiGLUResidual", res, scaled, normW, gu.ptr, wt, m, n, k, true)
}

func (b *Backend) residual(op string, res, scaled, normW ops.Tensor, x hipkernels.Ptr, w *Tensor, m, n, k int,
	swiglu bool) bool {
	rt, st, nw := res.(*Tensor), scaled.(*Tensor), normW.(*Tensor)
	if rt.cols() != n || rt.rows() < m || st.cols() != n || st.rows() < m || nw.elems() != n {
		shapeErr(op, "res %v, scaled %v, norm weight %v for %d outputs", rt.shape, st.shape, nw.shape, n)
	}
	if m != 1 || w.fp8 != nil { // the library fuses one row of 16-bit weights only (atomk_gemm_residual)
		return false
	}
	count, fused, err := b.lib.GemmResidual(b.blas, b.stream, b.kdt, hipkernels.DType(w.dt), rt.ptr, st.ptr, nw.ptr, x, w.ptr, m, n, k, swiglu,
		b.sums.ptr, maxResidualSums)
	b.must(op, err)
	if fused {
		b.sumCount = count
	}
	return fused
}

// normSummed is NormLinear of a row whose scaled form and sum of squares LinearResidual left:
// one kernel where the library serves it, else RMSNorm into p.Spare and Linear. It returns
// p.Res.
func (b *Backend) normSummed(out ops.Tensor, p ops.PreNorm, w, bias ops.Tensor) ops.Tensor {
	o, rt, st, wt := out.(*Tensor), p.Res.(*Tensor), p.Spare.(*Tensor), w.(*Tensor)
	m, k, n := rt.rows(), rt.cols(), wt.rows()
	bp := biasPtr("NormLinear", bias, n)
	if m == 0 {
		return p.Res
	}
	if wt.fp8 != nil {
		return ops.NormThenLinear(b, out, p, w, bias)
	}
	fused, err := b.lib.GemmNormSummed(b.blas, b.stream, b.kdt, hipkernels.DType(wt.dt), o.ptr, st.ptr, b.sums.ptr, b.sumCount, p.Eps, wt.ptr, bp,
		m, n, k)
	b.must("NormLinear", err)
	if fused {
		return p.Res
	}
	return ops.NormThenLinear(b, out, p, w, bias)
}
