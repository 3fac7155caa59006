package cpu

import "github.com/atom-go/atom/ops"

// tileRows is how many weight rows are widened together and reused across every input row.
const tileRows = 8

// Linear computes out = x·wᵀ + bias, parallel over output features: the exact reference's loops
// over rows widened to float32, or on the vector path the block (qLinear) and 16-bit
// (linear16) kernels.
func (b *Backend) Linear(out, x, w, bias ops.Tensor) {
	o, xt, wt := out.(*Tensor), x.(*Tensor), w.(*Tensor)
	var bt *Tensor
	if bias != nil {
		bt = bias.(*Tensor)
	}
	if wt.q != nil {
		b.qLinear(o, xt, wt, bt)
		return
	}
	if k := dot16For(wt.dt); b.vec && wt.u16 != nil && k != nil {
		b.linear16(o, xt, wt, bt, k)
		return
	}
	in, outF, rows := wt.cols(), wt.rows(), xt.rows()
	tiles := (outF + tileRows - 1) / tileRows
	b.pool.run(tiles, func(lo, hi, worker int) {
		scratch := b.pool.buf(worker, tileRows*in)
		var wrows [tileRows][]float32
		for tile := lo; tile < hi; tile++ {
			j0 := tile * tileRows
			n := min(tileRows, outF-j0)
			for k := 0; k < n; k++ {
				wrows[k] = wt.row(j0+k, scratch[k*in:(k+1)*in])
			}
			for r := 0; r < rows; r++ {
				xr := xt.f32[r*in : (r+1)*in]
				dst := o.f32[r*outF+j0 : r*outF+j0+n]
				for k := 0; k < n; k++ {
					dst[k] = dot(xr, wrows[k])
				}
			}
			if bt != nil {
				for r := 0; r < rows; r++ {
					for k := 0; k < n; k++ {
						o.f32[r*outF+j0+k] += bt.at(j0 + k)
					}
				}
			}
		}
	})
}

// dot is unrolled four ways; the partial sums also make rounding closer to a pairwise sum.
func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}
