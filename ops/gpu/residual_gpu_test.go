//go:build gpu

package gpu

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// TestLinearResidual runs a sublayer's output projection added into the residual stream, then
// the next pre-norm and projection, on both backends: the gpu one through LinearResidual (or
// LinearSwiGLUResidual) and NormLinear with PreNorm.Summed where it fuses (one row of a 16-bit
// dtype), the plain ops elsewhere; the cpu one through the plain
// ops. The residual stream and the projection must agree, and the fused path must be taken
// exactly where it should.
func TestLinearResidual(t *testing.T) {
	for _, dt := range testDTypes {
		for _, maxM := range []int{16, 0} {
			b, c := newGPU(t, dt), newCPU(t)
			require.NoError(t, b.SetGemvMaxM(maxM))
			// h: the residual width (the projection's output, the next one's input); k: the
			// projection's input; n: the next projection's output. h = 37 leaves the next
			// NormLinear unfused (h % 8), after a fused add. h = 20000: more than one wave of
			// blocks, each leaving its partial sum of squares.
			for _, sh := range []struct{ h, k, n int }{{4096, 4096, 1536}, {264, 136, 40}, {37, 264, 24}, {4096, 14336, 512}, {20000, 264, 40}} {
				w := weight(t, b, c, randVals(dt, sh.h*sh.k, 1/math.Sqrt(float64(sh.k))), sh.h, sh.k)
				nw := weight(t, b, c, randVals(dt, sh.h, 1), sh.h)
				w2 := weight(t, b, c, randVals(dt, sh.n*sh.h, 1/math.Sqrt(float64(sh.h))), sh.n, sh.h)
				bias := weight(t, b, c, randVals(dt, sh.n, 1), sh.n)
				for _, m := range []int{1, 3} {
					for _, swiglu := range []bool{false, true} {
						if swiglu && m > 1 {
							continue // LinearSwiGLU's act scratch at m > 1: covered by TestLinearSwiGLU
						}
						name := fmt.Sprintf("LinearResidual %v h=%d k=%d n=%d m=%d swiglu=%v max m %d", dt, sh.h, sh.k, sh.n, m, swiglu, maxM)
						res := activation(b, randVals(dt, m*sh.h, 1), m, sh.h)
						spare, xo, out := output(b, c, m, sh.h), output(b, c, m, sh.h), output(b, c, m, sh.n)
						var fused bool
						if swiglu {
							gu := activation(b, randVals(dt, m*2*sh.k, 1), m, 2*sh.k)
							act := output(b, c, m, sh.k)
							c.LinearSwiGLU(xo.c, gu.c, act.c, w.c)
							if fused = b.LinearSwiGLUResidual(res.g, spare.g, gu.g, w.g, nw.g); !fused {
								b.LinearSwiGLU(xo.g, gu.g, act.g, w.g)
							}
						} else {
							x := activation(b, randVals(dt, m*sh.k, 1), m, sh.k)
							c.Linear(xo.c, x.c, w.c, nil)
							if fused = b.LinearResidual(res.g, spare.g, x.g, w.g, nw.g); !fused {
								b.Linear(xo.g, x.g, w.g, nil)
							}
						}
						require.Equal(t, m == 1 && dt != ops.F32 && maxM > 0, fused, name)
						if fused { // spare holds r · the next norm's weight
							r, g := read(b, res.g), nw.c.Float32()
							for i := range r {
								r[i] = roundTo(dt, r[i]*g[i])
							}
							compare(t, name+" scaled", dt, read(b, spare.g), r)
						}
						p := ops.PreNorm{Res: res.g, Spare: spare.g, Weight: nw.g, Eps: 1e-5, Summed: fused}
						if !fused {
							p.X = xo.g
						}
						got := b.NormLinear(out.g, p, w2.g, bias.g)
						want := c.NormLinear(out.c, ops.PreNorm{X: xo.c, Res: res.c, Spare: spare.c, Weight: nw.c, Eps: 1e-5}, w2.c, bias.c)
						compare(t, name+" residual", dt, read(b, got.(*Tensor)), want.(interface{ Float32() []float32 }).Float32())
						compare(t, name, dt, read(b, out.g), out.c.Float32())
					}
				}
			}
		}
	}
}

// BenchmarkLinearResidual times the 8B shape's sublayer boundaries at m = 1: the output
// projection, the residual add and pre-norm, and the next projection, as separate ops (Linear,
// then RMSNorm + Linear) and fused (LinearResidual, then NormLinear with PreNorm.Summed), and
// each piece alone.
func BenchmarkLinearResidual(t *testing.B) {
	b := newGPU(t, ops.BF16)
	const h = 4096
	res, spare, x, nw := b.Buffer(1, h), b.Buffer(1, h), b.Buffer(1, h), b.Buffer(1, h)
	for _, v := range []ops.Tensor{res, x, nw} {
		b.Fill(v, 0.01)
	}
	for _, sh := range []struct {
		what      string
		k, n      int
		swiglu    bool
		nextWidth int
	}{{"o then gate|up", 4096, 4096, false, 28672}, {"down then qkv", 14336, 4096, true, 6144}} {
		in := b.Buffer(1, sh.k)
		if sh.swiglu {
			in = b.Buffer(1, 2*sh.k)
		}
		act, w, next, out := b.Buffer(1, sh.k), b.Buffer(sh.n, sh.k), b.Buffer(sh.nextWidth, h), b.Buffer(1, sh.nextWidth)
		for _, v := range []ops.Tensor{in, w, next} {
			b.Fill(v, 0.01)
		}
		project := func() {
			if sh.swiglu {
				b.LinearSwiGLU(x, in, act, w)
			} else {
				b.Linear(x, in, w, nil)
			}
		}
		add := func() {
			fused := sh.swiglu && b.LinearSwiGLUResidual(res, spare, in, w, nw) || !sh.swiglu && b.LinearResidual(res, spare, in, w, nw)
			require.True(t, fused)
		}
		for _, path := range []struct {
			name string
			fn   func()
		}{
			{"separate", func() {
				project()
				b.NormLinear(out, ops.PreNorm{X: x, Res: res, Spare: spare, Weight: nw, Eps: 1e-5}, next, nil)
			}},
			{"fused", func() {
				add()
				b.NormLinear(out, ops.PreNorm{Res: res, Spare: spare, Weight: nw, Eps: 1e-5, Summed: true}, next, nil)
			}},
			{"projection", project},
			{"projection+add", add},
			{"RMSNorm+next", func() {
				b.NormLinear(out, ops.PreNorm{X: x, Res: res, Spare: spare, Weight: nw, Eps: 1e-5}, next, nil)
			}},
			{"next", func() { b.Linear(out, spare, next, nil) }},
		} {
			benchDevice(t, b, fmt.Sprintf("%s: %s m=1", sh.what, path.name), path.fn, nil)
		}
	}
}
