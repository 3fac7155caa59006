//go:build gpu

package gpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
	"github.com/atom-go/atom/ops/cpu"
)

// fp8Pair uploads one random block-scaled FP8 weight [n, k] (codes of every finite e4m3 value,
// scales spread over two decades) to both backends.
func fp8Pair(t *testing.T, b *Backend, c *cpu.Backend, n, k, bn, bk int) pair {
	codes := make([]byte, n*k)
	for i := range codes {
		for {
			codes[i] = byte(rng.IntN(256))
			if codes[i]&0x7f != 0x7f { // not NaN
				break
			}
		}
	}
	sn, sk := (n+bn-1)/bn, (k+bk-1)/bk
	scales := make([]byte, 4*sn*sk)
	for i := 0; i < sn*sk; i++ {
		binary.LittleEndian.PutUint32(scales[4*i:], math.Float32bits(float32(math.Pow(10, -3-2*rng.Float64()))))
	}
	d := ops.WeightDesc{Format: ops.BlockFP8, DType: ops.F8E4M3,
		Scales: &ops.WeightScales{DType: ops.F32, Shape: []int{sn, sk}, Block: []int{bn, bk}, Raw: [][]byte{scales}}}
	g, err := b.Weight("w", d, []int{n, k}, codes[:n*k/2], codes[n*k/2:]) // in two parts, as a fused weight comes
	require.NoError(t, err)
	ct, err := c.Weight("w", d, []int{n, k}, codes)
	require.NoError(t, err)
	return pair{g: g.(*Tensor), c: ct.(*cpu.Tensor)}
}

// TestLinearFP8: the FP8 skinny kernel (m <= 16, in passes of 8) and the dequantize-then-GEMM path
// against the cpu's exact dequantized Linear, at shapes with partial scale blocks on both edges
// and rows that the device pads to whole 16-byte chunks. Larger batches of 128x128 blocks in 16
// bits take the FP8 GEMM, which quantizes the activations: TestLinearFP8GEMM.
func TestLinearFP8(t *testing.T) {
	for _, dt := range testDTypes {
		b, c := newGPU(t, dt), newCPU(t)
		for _, sh := range []struct{ n, k, bn, bk int }{{200, 320, 128, 128}, {4096, 4096, 128, 128}, {96, 64, 8, 16}, {37, 48, 16, 32},
			{64, 120, 8, 16}, {24, 40, 16, 16}} { // the last two: rows of K not whole 16-byte chunks (padded on the device)
			w := fp8Pair(t, b, c, sh.n, sh.k, sh.bn, sh.bk)
			bias := weight(t, b, c, randVals(dt, sh.n, 0.1), sh.n)
			for _, m := range []int{1, 2, 3, 8, 9, 16, 17, 64} {
				if m > fp8MaxGemvRows && dt != ops.F32 && sh.bn == 128 && sh.bk == 128 {
					continue
				}
				for _, withBias := range []bool{false, true} {
					x := activation(b, randVals(dt, m*sh.k, 1), m, sh.k)
					out := output(b, c, m, sh.n)
					if withBias {
						b.Linear(out.g, x.g, w.g, bias.g)
						c.Linear(out.c, x.c, w.c, bias.c)
					} else {
						b.Linear(out.g, x.g, w.g, nil)
						c.Linear(out.c, x.c, w.c, nil)
					}
					compare(t, fmt.Sprintf("LinearFP8 n=%d k=%d blocks %dx%d m=%d bias %v", sh.n, sh.k, sh.bn, sh.bk, m, withBias),
						dt, read(b, out.g), out.c.Float32())
				}
			}
		}
	}
}

// TestLinearFP8Channel: per-channel FP8 weights (compressed-tensors' "channel" and "tensor"
// strategies, one scale a row) on the skinny kernel and the dequantize-then-GEMM path, against
// the cpu's exact dequantized Linear; K = 120 is not whole 16-byte chunks.
func TestLinearFP8Channel(t *testing.T) {
	for _, dt := range testDTypes {
		b, c := newGPU(t, dt), newCPU(t)
		for _, sh := range []struct{ n, k int }{{200, 320}, {64, 120}} {
			codes := make([]byte, sh.n*sh.k)
			for i := range codes {
				codes[i] = byte(rng.IntN(256)) &^ 0x01 // never 0x7f or 0xff (NaN)
			}
			scales := make([]byte, 4*sh.n)
			for i := range sh.n {
				binary.LittleEndian.PutUint32(scales[4*i:], math.Float32bits(float32(math.Pow(10, -3-2*rng.Float64()))))
			}
			d := ops.WeightDesc{Format: ops.ChannelFP8, DType: ops.F8E4M3,
				Scales: &ops.WeightScales{DType: ops.F32, Shape: []int{sh.n}, Block: []int{1, sh.k}, Raw: [][]byte{scales}}}
			g, err := b.Weight("w", d, []int{sh.n, sh.k}, codes[:sh.n*sh.k/2], codes[sh.n*sh.k/2:])
			require.NoError(t, err)
			ct, err := c.Weight("w", d, []int{sh.n, sh.k}, codes)
			require.NoError(t, err)
			for _, m := range []int{1, 3, 9, 16, 17, 64} {
				x := activation(b, randVals(dt, m*sh.k, 1), m, sh.k)
				out := output(b, c, m, sh.n)
				b.Linear(out.g, x.g, g, nil)
				c.Linear(out.c, x.c, ct, nil)
				compare(t, fmt.Sprintf("LinearFP8Channel n=%d k=%d m=%d", sh.n, sh.k, m), dt, read(b, out.g), out.c.Float32())
			}
		}
	}
}

// TestLinearSwiGLUFP8: the MLP's down projection of FP8 codes (SiLU-and-mul, then the FP8 Linear;
// at 40 rows in 16 bits the FP8 GEMM, compared with the cpu's Linear of the activations as it
// quantizes them, from their 16-bit rounding).
func TestLinearSwiGLUFP8(t *testing.T) {
	for _, dt := range testDTypes {
		b, c := newGPU(t, dt), newCPU(t)
		const n, k = 256, 512
		w := fp8Pair(t, b, c, n, k, 128, 128)
		for _, m := range []int{1, 4, 40} {
			gu := activation(b, randVals(dt, m*2*k, 1), m, 2*k)
			act := output(b, c, m, k)
			out := output(b, c, m, n)
			b.LinearSwiGLU(out.g, gu.g, act.g, w.g)
			c.LinearSwiGLU(out.c, gu.c, act.c, w.c)
			want := out.c.Float32()
			if m > fp8MaxGemvRows && dt != ops.F32 {
				a := act.c.Float32()[:m*k]
				for i := range a {
					a[i] = roundTo(dt, a[i])
				}
				want = fp8GEMMWant(c, w.c, nil, a, m, k, n)
			}
			compare(t, fmt.Sprintf("LinearSwiGLUFP8 m=%d", m), dt, read(b, out.g), want)
		}
	}
}

// TestFP8WeightRefusals: what the gpu cannot serve is ErrUnsupportedWeight (so --device auto
// moves to the cpu), damaged scales a plain error naming the weight.
func TestFP8WeightRefusals(t *testing.T) {
	b := newGPU(t, ops.BF16)
	desc := func(shape, block []int) ops.WeightDesc {
		return ops.WeightDesc{Format: ops.BlockFP8, DType: ops.F8E4M3,
			Scales: &ops.WeightScales{DType: ops.F32, Shape: shape, Block: block, Raw: [][]byte{make([]byte, 4*shape[0]*shape[1])}}}
	}
	_, err := b.Weight("experts", desc([]int{1, 1}, []int{128, 128}), []int{4, 64, 64}, make([]byte, 4*64*64))
	require.ErrorIs(t, err, ops.ErrUnsupportedWeight)
	_, err = b.Weight("odd", desc([]int{1, 1}, []int{8, 8}), []int{8, 8}, make([]byte, 64))
	require.ErrorIs(t, err, ops.ErrUnsupportedWeight)
	_, err = b.Weight("q_proj", desc([]int{2, 1}, []int{16, 16}), []int{16, 16}, make([]byte, 256))
	require.ErrorContains(t, err, "q_proj: scales [2 1]")
	require.NotErrorIs(t, err, ops.ErrUnsupportedWeight)
	channel := ops.WeightDesc{Format: ops.ChannelFP8, DType: ops.F8E4M3,
		Scales: &ops.WeightScales{DType: ops.F32, Shape: []int{16}, Block: []int{1, 8}, Raw: [][]byte{make([]byte, 64)}}}
	_, err = b.Weight("o_proj", channel, []int{16, 16}, make([]byte, 256))
	require.ErrorContains(t, err, "o_proj: per-channel fp8 [16, 16] in 1x8 blocks (want 1x16)")
}

// BenchmarkLinearFP8 times the 8B gate|up projection (28672 x 4096) at decode batch sizes in
// FP8 codes against the same shape in bf16, reporting the weight bytes read per second.
func BenchmarkLinearFP8(bb *testing.B) {
	b := newGPU(bb, ops.BF16)
	w8, n, k := bench8BGateUp(bb, b)
	w16 := b.Buffer(n, k)
	b.Fill(w16, 0.01)
	for _, m := range []int{1, 8, 16} {
		x, out := b.Buffer(m, k), b.Buffer(m, n)
		b.Fill(x, 0.5)
		for _, c := range []struct {
			name  string
			w     ops.Tensor
			bytes float64
		}{{"fp8", w8, float64(n * k)}, {"bf16", w16, float64(2 * n * k)}} {
			benchDevice(bb, b, fmt.Sprintf("%s/m=%d", c.name, m), func() { b.Linear(out, x, c.w, nil) },
				func(bb *testing.B, ms float64) { bb.ReportMetric(c.bytes/ms/1e6, "GB/s") })
		}
	}
}
