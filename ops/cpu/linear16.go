package cpu

import "github.com/atom-go/atom/ops"

// dot16Kernels are the vector kernels of one 16-bit weight format: a weight row against 4 or
// 1 float32 activation rows (xstride bytes apart) over n values, a multiple of 16; each row's
// result bit for bit the same in both.
type dot16Kernels struct {
	x4, x1 func(w *uint16, x *float32, n, xstride int, out *float32)
}

// dot16 are the 16-bit weight kernels in use, float16's then bfloat16's: none unless the cpu
// has AVX2 (dot16_amd64.go); Linear then widens rows into a scratch and dots them in Go.
var dot16 [2]*dot16Kernels

// dot16For returns the kernels of a weight's dtype, nil where there are none.
func dot16For(dt ops.DType) *dot16Kernels {
	switch dt {
	case ops.F16:
		return dot16[0]
	case ops.BF16:
		return dot16[1]
	}
	return nil
}

// linear16 is Linear over 16-bit weights on the vector path (Options.VectorFloat32): each
// weight row is read as it is stored, widened in registers, and dotted with the activation
// rows 4 at a time (then 1); the last in%16 values of a row are added in Go.
func (b *Backend) linear16(o, xt, wt, bt *Tensor, k *dot16Kernels) {
	in, outF, rows := wt.cols(), wt.rows(), xt.rows()
	n16 := in &^ 15
	tiles := (outF + qTileRows - 1) / qTileRows
	b.pool.run(tiles, func(lo, hi, worker int) {
		j0, j1 := lo*qTileRows, min(outF, hi*qTileRows)
		res := &b.quads[worker].v
		for r0 := 0; r0 < rows; r0 += qTileActs {
			r1 := min(rows, r0+qTileActs)
			for j := j0; j < j1; j++ {
				w := wt.u16[j*in : (j+1)*in]
				for r := r0; r < r1; {
					f, m := k.x1, 1
					if r+4 <= r1 {
						f, m = k.x4, 4
					}
					*res = [4]float32{}
					if n16 > 0 {
						_ = xt.f32[(r+m-1)*in+n16-1]
						f(&w[0], &xt.f32[r*in], n16, 4*in, &res[0])
					}
					for i := range m {
						v := res[i]
						x := xt.f32[(r+i)*in : (r+i+1)*in]
						for c := n16; c < in; c++ {
							v += wt.at(j*in+c) * x[c]
						}
						if bt != nil {
							v += bt.at(j)
						}
						o.f32[(r+i)*outF+j] = v
					}
					r += m
				}
			}
		}
	})
}
