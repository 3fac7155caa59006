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

// fp8ActTolerance bounds the relative error (‖got − want‖ / ‖want‖ over the output) of the FP8
// GEMM against the exact dequantized-weight Linear: the activations are rounded to e4m3, whose
// 3 mantissa bits leave each within 2⁻⁴ of itself (about 2.5% RMS on normal values).
const fp8ActTolerance = 5e-2

// fp8QuantRef quantizes the rows of x [m, k] as atomk_quant_fp8 does (per row and 128 columns,
// s = max(amax, 1e-10) / 448, codes e4m3(x / s)): the codes [m, k rounded up to 16], the scales
// [ceil(k/128), m], and x as the GEMM sees it (each code times its scale).
func fp8QuantRef(x []float32, m, k int) (codes []byte, scales, seen []float32) {
	kp, groups := (k+15)/16*16, (k+127)/128
	codes, scales, seen = make([]byte, m*kp), make([]float32, groups*m), make([]float32, m*k)
	for r := range m {
		for g := range groups {
			lo, hi := r*k+g*128, r*k+min(k, g*128+128)
			var amax float32
			for _, v := range x[lo:hi] {
				amax = max(amax, float32(math.Abs(float64(v))))
			}
			s := max(amax, 1e-10) / 448
			scales[g*m+r] = s
			for i := lo; i < hi; i++ {
				q := ops.Float32ToF8E4M3(x[i] / s)
				codes[r*kp+i-r*k] = q
				seen[i] = ops.F8E4M3ToFloat32(q) * s
			}
		}
	}
	return codes, scales, seen
}

// readBytes copies n bytes of device memory to the host.
func readBytes(t *testing.T, b *Backend, p hipkernels.Ptr, n int) []byte {
	host, err := b.lib.HostAlloc(n)
	require.NoError(t, err)
	defer b.lib.HostFree(host)
	require.NoError(t, b.lib.MemcpyD2H(host, p, n, b.stream))
	require.NoError(t, b.Synchronize())
	return append([]byte(nil), hipkernels.HostBytes(host, n)...)
}

// TestQuantFP8: the activation quantization against fp8QuantRef, value for value (codes
// compared decoded, so that a signed zero equals zero; the padding of each row must be zero).
func TestQuantFP8(t *testing.T) {
	for _, dt := range []ops.DType{ops.BF16, ops.F16} {
		b := newGPU(t, dt)
		for _, sh := range []struct{ m, k int }{{1, 8}, {3, 136}, {17, 320}, {5, 1544}, {64, 4096}} {
			vals := randVals(dt, sh.m*sh.k, 2)
			for c := range min(sh.k, 128) { // an all-zero group: the eps scale, zero codes
				vals[c] = 0
			}
			vals[len(vals)-1] = roundTo(dt, 300) // an outlier: its group's other codes get small
			x := activation(b, vals, sh.m, sh.k)
			kp, groups := (sh.k+15)/16*16, (sh.k+127)/128
			codes, err := b.alloc(sh.m * kp)
			require.NoError(t, err)
			scales, err := b.alloc(4 * groups * sh.m)
			require.NoError(t, err)
			require.NoError(t, b.lib.Memset(codes, 0x7f, sh.m*kp, b.stream)) // NaN codes: every one must be written
			require.NoError(t, b.lib.QuantFP8(b.kdt, codes, scales, x.g.ptr, sh.m, sh.k, b.stream))
			gotCodes, gotScales := readBytes(t, b, codes, sh.m*kp), readBytes(t, b, scales, 4*groups*sh.m)
			wantCodes, wantScales, _ := fp8QuantRef(vals, sh.m, sh.k)
			name := fmt.Sprintf("QuantFP8 m=%d k=%d", sh.m, sh.k)
			for i, w := range wantScales {
				require.Equalf(t, w, math.Float32frombits(binary.LittleEndian.Uint32(gotScales[4*i:])), "%s (%v): scale %d (group %d, row %d)",
					name, dt, i, i/sh.m, i%sh.m)
			}
			for i, w := range wantCodes {
				require.Equalf(t, ops.F8E4M3ToFloat32(w), ops.F8E4M3ToFloat32(gotCodes[i]), "%s (%v): code of row %d column %d (x %v)",
					name, dt, i/kp, i%kp, vals[min(i/kp*sh.k+i%kp, len(vals)-1)])
			}
			record("%-44s %-8v exact", name, dt)
		}
	}
}

// fp8GEMMWant is the cpu's Linear of x [m, k] as the FP8 GEMM sees it (fp8QuantRef's values).
func fp8GEMMWant(c *cpu.Backend, w, bias ops.Tensor, x []float32, m, k, n int) []float32 {
	_, _, seen := fp8QuantRef(x, m, k)
	out := c.Buffer(m, n)
	c.Linear(out, cpu.FromFloat32(seen, m, k), w, bias)
	return out.(*cpu.Tensor).Float32()
}

// compareFP8Act checks an FP8 GEMM's output against the exact dequantized-weight Linear at
// fp8ActTolerance and records the error.
func compareFP8Act(t *testing.T, name string, dt ops.DType, got, want []float32) {
	t.Helper()
	e := relErr(got, want)
	recordErr(result{kind: "FP8act", name: name, dt: dt, val: e, limit: fp8ActTolerance})
	require.LessOrEqualf(t, e, fp8ActTolerance, "%s (%v): relative error %.3e against the unquantized activations", name, dt, e)
}

// TestLinearFP8GEMM: Linear of 128x128 block-scaled FP8 weights above the decode batch sizes,
// which runs cuBLASLt's block-scaled FP8 GEMM. Against the cpu's Linear of the activations as
// quantized (fp8QuantRef) at the dtype's usual tolerance, and against the exact dequantized-weight
// Linear of the unquantized activations at fp8ActTolerance. Shapes with partial scale blocks on
// both edges, rows of K padded to 16 bytes, and more rows than the scratch holds codes of (the
// GEMM then runs in several calls).
func TestLinearFP8GEMM(t *testing.T) {
	for _, dt := range []ops.DType{ops.BF16, ops.F16} {
		for _, sh := range []struct {
			n, k int
			ms   []int
		}{
			{256, 512, []int{4, 5, 12, 17, 100}}, // whole blocks; 5 and 17: groups of 4 rows and an overlapping last one
			{200, 320, []int{17, 33, 1024}},      // partial blocks; the scratch (200·320·2 bytes) holds 385 rows' codes
			{1000, 1544, []int{24, 257, 777}},    // K = 12·128 + 8: rows padded to 1552, a last block of 8 columns
			{4096, 4096, []int{17, 256}},
		} {
			b, c := newGPU(t, dt), newCPU(t) // a fresh backend: its scratch is this weight's
			w := fp8Pair(t, b, c, sh.n, sh.k, 128, 128)
			bias := weight(t, b, c, randVals(dt, sh.n, 0.1), sh.n)
			for _, m := range sh.ms {
				for _, withBias := range []bool{false, true} {
					vals := randVals(dt, m*sh.k, 1)
					x := activation(b, vals, m, sh.k)
					out := output(b, c, m, sh.n)
					var gb, cb ops.Tensor
					if withBias {
						gb, cb = bias.g, bias.c
					}
					b.Linear(out.g, x.g, w.g, gb)
					require.Falsef(t, b.fp8Unsupported, "the library has no FP8 GEMM for n=%d k=%d m=%d (the log says why)", sh.n, sh.k, m)
					got := read(b, out.g)
					name := fmt.Sprintf("LinearFP8GEMM n=%d k=%d m=%d bias %v", sh.n, sh.k, m, withBias)
					compare(t, name, dt, got, fp8GEMMWant(c, w.c, cb, vals, m, sh.k, sh.n))
					c.Linear(out.c, x.c, w.c, cb)
					compareFP8Act(t, name, dt, got, out.c.Float32())
				}
			}
		}
	}
}

// bench8BGateUp uploads the 8B gate|up projection (28672 x 4096) in 128x128 block-scaled FP8
// (codes of the lower half of the range, scales 1e-3).
func bench8BGateUp(bb *testing.B, b *Backend) (ops.Tensor, int, int) {
	const n, k = 28672, 4096
	codes := make([]byte, n*k)
	for i := range codes {
		codes[i] = byte(rng.IntN(0x7f))
	}
	sc := make([]byte, 4*(n/128)*(k/128))
	for i := 0; i < len(sc); i += 4 {
		binary.LittleEndian.PutUint32(sc[i:], math.Float32bits(1e-3))
	}
	w8, err := b.Weight("w", ops.WeightDesc{Format: ops.BlockFP8, DType: ops.F8E4M3,
		Scales: &ops.WeightScales{DType: ops.F32, Shape: []int{n / 128, k / 128}, Block: []int{128, 128}, Raw: [][]byte{sc}}},
		[]int{n, k}, codes)
	require.NoError(bb, err)
	return w8, n, k
}

// BenchmarkLinearFP8GEMM times the 8B gate|up projection in TFLOP/s of its 2·m·n·k: Linear in
// FP8 as shipped ("fp8": the skinny kernel up to 16 rows, above them the activations'
// quantization plus cuBLASLt's block-scaled GEMM) against bf16; the FP8 GEMM called directly at
// the skinny kernel's sizes ("fp8gemm", for where the switch between them belongs); and at
// prefill sizes the quantization alone and the dequantize-then-bf16-GEMM path the FP8 GEMM
// replaced.
func BenchmarkLinearFP8GEMM(bb *testing.B) {
	b := newGPU(bb, ops.BF16)
	w8, n, k := bench8BGateUp(bb, b)
	wf := w8.(*Tensor).fp8
	w16 := b.Buffer(n, k)
	b.Fill(w16, 0.01)
	for _, m := range []int{2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096} {
		x, out := b.Buffer(m, k), b.Buffer(m, n)
		b.Fill(x, 0.5)
		tflops := func(bb *testing.B, ms float64) { bb.ReportMetric(2*float64(m)*float64(n)*float64(k)/ms/1e9, "TFLOP/s") }
		xp, op := x.(*Tensor).ptr, out.(*Tensor).ptr
		benchDevice(bb, b, fmt.Sprintf("fp8/m=%d", m), func() { b.Linear(out, x, w8, nil) }, tflops)
		if m <= 16 && m%fp8GemmRowGroup == 0 { // the GEMM alone where the skinny kernel or a mixed batch serves
			benchDevice(bb, b, fmt.Sprintf("fp8gemm/m=%d", m), func() {
				b.must("GemmFP8", b.lib.GemmFP8(b.blas, b.stream, b.kdt, op, xp, b.fp8Scratch.ptr, wf, 0, m))
			}, tflops)
		}
		benchDevice(bb, b, fmt.Sprintf("bf16/m=%d", m), func() { b.Linear(out, x, w16, nil) }, tflops)
		if m >= 256 {
			benchDevice(bb, b, fmt.Sprintf("quant/m=%d", m), func() {
				b.must("QuantFP8", b.lib.QuantFP8(b.kdt, b.fp8Scratch.ptr, b.fp8Scratch.ptr+hipkernels.Ptr(m*k), xp, m, k, b.stream))
			}, nil)
			benchDevice(bb, b, fmt.Sprintf("dequant+bf16/m=%d", m), func() {
				b.must("DequantFP8", b.lib.DequantFP8(b.kdt, b.fp8Scratch.ptr, wf, b.stream))
				b.must("GemmBias", b.lib.GemmBias(b.blas, b.stream, b.kdt, b.kdt, op, xp, b.fp8Scratch.ptr, 0, m, n, k))
			}, tflops)
		}
	}
	require.False(bb, b.fp8Unsupported, "the library has no FP8 GEMM here (the log says why)")
}
