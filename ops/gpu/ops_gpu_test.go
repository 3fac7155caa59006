//go:build gpu

package gpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/hipkernels"
	"github.com/atom-go/atom/ops"
	"github.com/atom-go/atom/ops/cpu"
)

func TestRMSNorm(t *testing.T) {
	for _, dt := range testDTypes {
		b, c := newGPU(t, dt), newCPU(t)
		for _, sh := range [][2]int{{1, 64}, {7, 1000}, {33, 4096}, {130, 2050}} {
			rows, cols := sh[0], sh[1]
			w := weight(t, b, c, randVals(dt, cols, 1), cols)
			x := activation(b, randVals(dt, rows*cols, 1), rows, cols)
			out := output(b, c, rows, cols)
			b.RMSNorm(out.g, x.g, nil, w.g, 1e-6)
			c.RMSNorm(out.c, x.c, nil, w.c, 1e-6)
			compare(t, fmt.Sprintf("RMSNorm %dx%d", rows, cols), dt, read(b, out.g), out.c.Float32())

			res := activation(b, randVals(dt, rows*cols, 2), rows, cols)
			out = output(b, c, rows, cols)
			b.RMSNorm(out.g, x.g, res.g, w.g, 1e-5)
			c.RMSNorm(out.c, x.c, res.c, w.c, 1e-5)
			compare(t, fmt.Sprintf("RMSNorm+residual out %dx%d", rows, cols), dt, read(b, out.g), out.c.Float32())
			compare(t, fmt.Sprintf("RMSNorm+residual sum %dx%d", rows, cols), dt, read(b, res.g), res.c.Float32())
		}
	}
}

func TestHeadRMSNorm(t *testing.T) {
	for _, dt := range testDTypes {
		b, c := newGPU(t, dt), newCPU(t)
		for _, sh := range [][3]int{{3, 8, 128}, {40, 4, 16}, {17, 2, 96}, {5, 3, 256}} {
			rows, heads, hd := sh[0], sh[1], sh[2]
			w := weight(t, b, c, randVals(dt, hd, 1), hd)
			x := activation(b, randVals(dt, rows*heads*hd, 3), rows, heads*hd)
			b.HeadRMSNorm(x.g, w.g, hd, 1e-6)
			c.HeadRMSNorm(x.c, w.c, hd, 1e-6)
			compare(t, fmt.Sprintf("HeadRMSNorm %dx%dx%d", rows, heads, hd), dt, read(b, x.g), x.c.Float32())
		}
	}
}

func TestLinear(t *testing.T) {
	for _, dt := range testDTypes {
		b, c := newGPU(t, dt), newCPU(t)
		for i, sh := range [][3]int{{1, 64, 384}, {7, 1000, 33}, {33, 4096, 1024}, {300, 512, 2050}, {5, 96, 130}, {64, 64, 64}} {
			m, k, n := sh[0], sh[1], sh[2]
			w := weight(t, b, c, randVals(dt, n*k, 1/math.Sqrt(float64(k))), n, k)
			x := activation(b, randVals(dt, m*k, 1), m, k)
			out := output(b, c, m, n)
			var bias pair
			name := fmt.Sprintf("Linear m=%d k=%d n=%d", m, k, n)
			if i%2 == 1 {
				bias = weight(t, b, c, randVals(dt, n, 1), n)
				b.Linear(out.g, x.g, w.g, bias.g)
				c.Linear(out.c, x.c, w.c, bias.c)
				name += " +bias"
			} else {
				b.Linear(out.g, x.g, w.g, nil)
				c.Linear(out.c, x.c, w.c, nil)
			}
			compare(t, name, dt, read(b, out.g), out.c.Float32())
		}
	}
}

func TestSiluMul(t *testing.T) {
	for _, dt := range testDTypes {
		b, c := newGPU(t, dt), newCPU(t)
		for _, sh := range [][2]int{{1, 7}, {3, 100}, {65, 14336}} {
			rows, cols := sh[0], sh[1]
			g := activation(b, randVals(dt, rows*cols, 2), rows, cols)
			u := activation(b, randVals(dt, rows*cols, 1), rows, cols)
			out := output(b, c, rows, cols)
			b.SiluMul(out.g, g.g, u.g)
			c.SiluMul(out.c, g.c, u.c)
			compare(t, fmt.Sprintf("SiluMul %dx%d", rows, cols), dt, read(b, out.g), out.c.Float32())
		}
	}
}

func TestEmbeddingAndGatherRows(t *testing.T) {
	for _, dt := range testDTypes {
		b, c := newGPU(t, dt), newCPU(t)
		for _, cols := range []int{128, 130, 129, 64, 1} {
			vocab := 1000
			table := weight(t, b, c, randVals(dt, vocab*cols, 1), vocab, cols)
			ids := make([]int32, 77)
			for i := range ids {
				ids[i] = int32(rng.IntN(vocab))
			}
			ids[0], ids[1] = 0, int32(vocab-1)
			out := output(b, c, len(ids), cols)
			b.Embedding(out.g, table.g, ids)
			c.Embedding(out.c, table.c, ids)
			compare(t, fmt.Sprintf("Embedding cols=%d", cols), dt, read(b, out.g), out.c.Float32())

			rows := []int32{76, 0, 5, 5, 40}
			sel := output(b, c, len(rows), cols)
			b.GatherRows(sel.g, out.g, rows)
			c.GatherRows(sel.c, out.c, rows)
			compare(t, fmt.Sprintf("GatherRows cols=%d", cols), dt, read(b, sel.g), sel.c.Float32())
		}
		require.Panics(t, func() { b.Embedding(b.Buffer(1, 8), b.Buffer(4, 8), []int32{4}) }, "id past the vocabulary")
	}
}

func TestWeightConversion(t *testing.T) {
	b := newGPU(t, ops.BF16)
	vals := make([]float32, 1000)
	for i := range vals {
		vals[i] = float32(rng.NormFloat64() * 3)
	}
	raw32 := make([]byte, 4*len(vals))
	raw16 := make([]byte, 2*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(raw32[4*i:], math.Float32bits(v))
		binary.LittleEndian.PutUint16(raw16[2*i:], F16FromFloat32(v))
	}
	for _, src := range []struct {
		dt  ops.DType
		raw []byte
	}{{ops.F32, raw32}, {ops.F16, raw16}} {
		w, err := b.Weight("conv", ops.Plain(src.dt), []int{10, 100}, src.raw)
		require.NoError(t, err)
		got := read(b, w.(*Tensor))
		for i, v := range vals {
			want := roundTo(ops.BF16, elemToFloat32(src.raw, src.dt, i))
			require.Equalf(t, want, got[i], "element %d of %v weight %v", i, src.dt, v)
		}
		record("%-44s %-8v exact", "Weight upload converted from "+src.dt.String(), ops.BF16)
	}
	_, err := b.Weight("short", ops.Plain(ops.BF16), []int{10, 10}, raw16[:10])
	require.Error(t, err)
}

func TestArgmaxRows(t *testing.T) {
	b := newGPU(t, ops.BF16)
	rows, cols := 9, 151936
	vals := randVals(ops.BF16, rows*cols, 1)
	vals[3*cols+7] = 100 // ties: the first index wins
	vals[3*cols+9] = 100
	vals[5*cols+cols-1] = 50
	x := activation(b, vals, rows, cols)
	ids, err := b.alloc(4 * rows)
	require.NoError(t, err)
	require.NoError(t, b.lib.ArgmaxRows(b.kdt, ids, x.g.ptr, rows, cols, b.stream))
	host, err := b.lib.HostAlloc(4 * rows)
	require.NoError(t, err)
	defer b.lib.HostFree(host)
	require.NoError(t, b.lib.MemcpyD2H(host, ids, 4*rows, b.stream))
	require.NoError(t, b.Synchronize())
	raw := hipkernels.HostBytes(host, 4*rows)
	for r := 0; r < rows; r++ {
		best := 0
		for i := 1; i < cols; i++ {
			if vals[r*cols+i] > vals[r*cols+best] {
				best = i
			}
		}
		require.Equal(t, int32(best), int32(binary.LittleEndian.Uint32(raw[4*r:])), "row %d", r)
	}
	record("%-44s %-8v exact", fmt.Sprintf("ArgmaxRows %dx%d", rows, cols), ops.BF16)
}

// TestLinearSkinny runs every m of 1..17 through the skinny GEMM kernel (threshold raised so m =
// 17 takes two launches, 16 + 1 rows) at widths that cross the warp, block and 16-byte vector
// boundaries: k = 4100 and 13 are not whole vectors and fall back to the BLAS, as does an x
// that is not 16-byte aligned. n = 20000 and 9000 need more than one wave of blocks on an
// H200 at m <= 2 (one warp per row group at k = 264, several at 4096, a partial last group
// at 20000).
func TestLinearSkinny(t *testing.T) {
	for _, dt := range testDTypes {
		b, c := newGPU(t, dt), newCPU(t)
		require.NoError(t, b.SetGemvMaxM(64))
		for _, nk := range [][2]int{{1, 4096}, {33, 4096}, {4096, 4096}, {33, 4100}, {4096, 13}, {1, 13}, {40, 24}, {20000, 264}, {9000, 4096}} {
			n, k := nk[0], nk[1]
			w := weight(t, b, c, randVals(dt, n*k, 1/math.Sqrt(float64(k))), n, k)
			bias := weight(t, b, c, randVals(dt, n, 1), n)
			for m := 1; m <= 17; m++ {
				x := activation(b, randVals(dt, m*k, 1), m, k)
				out := output(b, c, m, n)
				name := fmt.Sprintf("LinearSkinny m=%d k=%d n=%d", m, k, n)
				if m%2 == 1 {
					b.Linear(out.g, x.g, w.g, bias.g)
					c.Linear(out.c, x.c, w.c, bias.c)
					name += " +bias"
				} else {
					b.Linear(out.g, x.g, w.g, nil)
					c.Linear(out.c, x.c, w.c, nil)
				}
				compare(t, name, dt, read(b, out.g), out.c.Float32())
			}
		}
		// x one element past an aligned start: not 16-byte aligned, so the BLAS serves it.
		m, k, n := 3, 4096, 33
		w := weight(t, b, c, randVals(dt, n*k, 1/math.Sqrt(float64(k))), n, k)
		vals := randVals(dt, m*k+1, 1)
		xs := activation(b, vals, 1, m*k+1)
		x := &Tensor{ptr: xs.g.ptr + hipkernels.Ptr(dt.Size()), dt: dt, shape: []int{m, k}}
		out := output(b, c, m, n)
		b.Linear(out.g, x, w.g, nil)
		c.Linear(out.c, cpu.FromFloat32(append([]float32(nil), vals[1:]...), m, k), w.c, nil)
		compare(t, "LinearSkinny unaligned x", dt, read(b, out.g), out.c.Float32())
		require.NoError(t, b.SetGemvMaxM(-1))
	}
}

func TestSiluMulFused(t *testing.T) {
	for _, dt := range testDTypes {
		b, c := newGPU(t, dt), newCPU(t)
		for _, sh := range [][2]int{{1, 7}, {3, 100}, {2, 14336}, {65, 1000}, {5, 4}} {
			rows, cols := sh[0], sh[1]
			gu := activation(b, randVals(dt, rows*2*cols, 2), rows, 2*cols)
			out := output(b, c, rows, cols)
			b.SiluMulFused(out.g, gu.g)
			c.SiluMulFused(out.c, gu.c)
			compare(t, fmt.Sprintf("SiluMulFused %dx%d", rows, cols), dt, read(b, out.g), out.c.Float32())
		}
	}
}

func TestSplitCols(t *testing.T) {
	for _, dt := range testDTypes {
		b, c := newGPU(t, dt), newCPU(t)
		for _, w := range [][3]int{{4096, 1024, 1024}, {8, 3, 5}, {128, 64, 0}, {7, 7, 7}} {
			for _, rows := range []int{1, 9} {
				src := activation(b, randVals(dt, rows*(w[0]+w[1]+w[2]), 1), rows, w[0]+w[1]+w[2])
				parts := []pair{output(b, c, rows, w[0]), output(b, c, rows, w[1])}
				if w[2] > 0 {
					parts = append(parts, output(b, c, rows, w[2]))
				}
				var gs, cs []ops.Tensor
				for _, p := range parts {
					gs, cs = append(gs, p.g), append(cs, p.c)
				}
				b.SplitCols(src.g, gs...)
				c.SplitCols(src.c, cs...)
				for i, p := range parts {
					compare(t, fmt.Sprintf("SplitCols %d rows, widths %v, part %d", rows, w, i), dt, read(b, p.g), p.c.Float32())
				}
			}
		}
	}
}

// TestWeightParts uploads a weight in parts (as the fused q|k|v and gate|up are handed over)
// and whole, from float32 and bfloat16 bytes into every compute dtype: the device copies must
// be equal; parts that do not add up to the shape, or split an element, are refused.
func TestWeightParts(t *testing.T) {
	for _, dt := range testDTypes {
		b := newGPU(t, dt)
		for _, from := range []ops.DType{ops.F32, ops.BF16} {
			const rows, cols = 37, 1000
			vals := randVals(ops.BF16, rows*cols, 1) // representable in every dtype
			raw := make([]byte, rows*cols*from.Size())
			fromFloat32(raw, from, vals)
			whole, err := b.Weight("w", ops.Plain(from), []int{rows, cols}, raw)
			require.NoError(t, err)
			row := cols * from.Size()
			parts, err := b.Weight("w", ops.Plain(from), []int{rows, cols}, raw[:3*row], raw[3*row:30*row], raw[30*row:])
			require.NoError(t, err)
			require.Equal(t, read(b, whole.(*Tensor)), read(b, parts.(*Tensor)), "%v from %v", dt, from)
			_, err = b.Weight("w", ops.Plain(from), []int{rows, cols}, raw[:3*row], raw[4*row:])
			require.Error(t, err)
			_, err = b.Weight("w", ops.Plain(from), []int{rows, cols}, raw[:3*row+1], raw[3*row+1:])
			require.Error(t, err)
		}
	}
}
