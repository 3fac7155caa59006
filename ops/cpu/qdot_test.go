package cpu

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// randBlocks makes n random blocks of a ggml type: f16 scales in a realistic range, random
// quants and sub-block scales (Q8_0's -128 included, which the vector kernel must read as
// |w| = 128).
func randBlocks(rng *rand.Rand, t ops.GGMLType, n int) []byte {
	bb := t.BlockBytes()
	out := make([]byte, n*bb)
	for b := 0; b < n; b++ {
		blk := out[b*bb : (b+1)*bb]
		for i := range blk {
			blk[i] = byte(rng.IntN(256))
		}
		switch t {
		case ops.GGMLQ6_K:
			binary.LittleEndian.PutUint16(blk[208:], toF16(float32(rng.NormFloat64()*0.001)))
		case ops.GGMLQ4_K, ops.GGMLQ5_K:
			// d and dmin times 6-bit scales and mins
			binary.LittleEndian.PutUint16(blk, toF16(float32(rng.NormFloat64()*0.001)))
			binary.LittleEndian.PutUint16(blk[2:], toF16(float32(rng.NormFloat64()*0.002)))
		default:
			binary.LittleEndian.PutUint16(blk, toF16(float32(rng.NormFloat64()*0.01)))
		}
		if t == ops.GGMLQ4_1 || t == ops.GGMLQ5_1 {
			binary.LittleEndian.PutUint16(blk[2:], toF16(float32(rng.NormFloat64()*0.05)))
		}
	}
	return out
}

func randRow(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

// TestQDotKernelsMatchGo runs the vector kernels against the portable Go ones on fresh random
// weights and activations, for block counts that are odd (the kernels take blocks in pairs),
// one, and a model row's, with activations that include all-zero blocks.
func TestQDotKernelsMatchGo(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no AVX2+FMA+F16C here: the portable kernels are the only ones")
	}
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	kinds := []struct {
		typ      ops.GGMLType
		vec, ref qDotFunc
	}{
		{ops.GGMLQ4_0, dotQ4_0Vec, dotQ4_0Go},
		{ops.GGMLQ4_1, dotQ4_1Vec, dotQ4_1Go},
		{ops.GGMLQ8_0, dotQ8_0Vec, dotQ8_0Go},
	}
	for _, kind := range kinds {
		for _, nb := range []int{1, 2, 3, 5, 18, 48, 49} {
			w := randBlocks(rng, kind.typ, nb)
			x := randRow(rng, nb*qBlock)
			if nb > 2 {
				clear(x[qBlock : 2*qBlock]) // a zero block: d = 0
			}
			a, ds := make([]int8, len(x)), make([]float32, 2*nb)
			quantizeRow(a, ds, x)
			want, got := kind.ref(w, a, ds), kind.vec(w, a, ds)
			// Both sum exact int32 block products; only the float accumulation order differs.
			var scale float64
			for b := 0; b < nb; b++ {
				scale += math.Abs(float64(f16le(w[b*kind.typ.BlockBytes():]) * ds[2*b] * 127 * 128 * 32))
			}
			require.InDelta(t, want, got, 1e-5*scale+1e-6, "%v, %d blocks", kind.typ, nb)
		}
	}
}

// TestQDotX4MatchesGo runs the four-row kernels against four portable single-row dots, and
// requires them bit-identical to the vector single-row kernels.
func TestQDotX4MatchesGo(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no AVX2+FMA+F16C here: the portable kernels are the only ones")
	}
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	kinds := []struct {
		typ      ops.GGMLType
		x4       qDot4Func
		one, ref qDotFunc
	}{
		{ops.GGMLQ4_1, dotQ4_1x4Vec, dotQ4_1Vec, dotQ4_1Go},
		{ops.GGMLQ8_0, dotQ8_0x4Vec, dotQ8_0Vec, dotQ8_0Go},
	}
	for _, kind := range kinds {
		for _, nb := range []int{1, 2, 3, 18, 48} {
			testQDotX4(t, rng, kind.typ, nb, kind.x4, kind.one, kind.ref)
		}
	}
}

func testQDotX4(t *testing.T, rng *rand.Rand, typ ops.GGMLType, nb int, x4 qDot4Func, one, ref qDotFunc) {
	{
		k := nb * qBlock
		w := randBlocks(rng, typ, nb)
		x := randRow(rng, 4*k)
		a, ds := make([]int8, 4*k), make([]float32, 4*2*nb)
		for i := range 4 {
			quantizeRow(a[i*k:(i+1)*k], ds[i*2*nb:(i+1)*2*nb], x[i*k:(i+1)*k])
		}
		var got [4]float32
		x4(w, a, ds, k, &got)
		for i := range 4 {
			// Bit for bit the single-row vector kernel: a row's logits must not depend on
			// the rows batched with it.
			require.Equal(t, one(w, a[i*k:(i+1)*k], ds[i*2*nb:(i+1)*2*nb]), got[i], "%v, %d blocks, row %d", typ, nb, i)
			want := ref(w, a[i*k:(i+1)*k], ds[i*2*nb:(i+1)*2*nb])
			var scale float64
			for b := 0; b < nb; b++ {
				scale += math.Abs(float64(f16le(w[b*typ.BlockBytes():]) * ds[i*2*nb+2*b] * 127 * 128 * 32))
			}
			require.InDelta(t, want, got[i], 1e-5*scale+1e-6, "%v, %d blocks, row %d", typ, nb, i)
		}
	}
}

// TestQDotApproximatesDequantized checks the Go kernels themselves: a block dot with 8-bit
// activations is the dequantized weight's float dot up to the activations' rounding.
func TestQDotApproximatesDequantized(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, typ := range []ops.GGMLType{ops.GGMLQ4_0, ops.GGMLQ4_1, ops.GGMLQ8_0} {
		for _, nb := range []int{1, 7, 18} {
			k := nb * qBlock
			raw := randBlocks(rng, typ, nb)
			w := make([]float32, k)
			(&qData{typ: typ, raw: raw, n: 1, k: k, rowBytes: len(raw)}).row(0, w)
			x := randRow(rng, k)
			a, ds := make([]int8, k), make([]float32, 2*nb)
			quantizeRow(a, ds, x)
			var exact, bound float64
			for i := range x {
				exact += float64(w[i]) * float64(x[i])
				// |x - d·q| <= d/2 per element, d = max|x|/127 of its block.
				bound += math.Abs(float64(w[i])) * float64(ds[2*(i/qBlock)]) / 2
			}
			got := qDotFor(typ)(raw, a, ds)
			require.InDelta(t, exact, got, bound*1.01+1e-5, "%v, %d blocks", typ, nb)
		}
	}
}

// TestF32KernelsMatchGo checks the vector float32 dot and axpy against the Go loops at
// lengths around the vector width and the 32-wide unrolling.
func TestF32KernelsMatchGo(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no AVX2+FMA here")
	}
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	for _, n := range []int{0, 1, 7, 8, 9, 31, 32, 33, 63, 64, 100, 577} {
		a, b := randRow(rng, n), randRow(rng, n)
		var abs float64
		for i := range a {
			abs += math.Abs(float64(a[i] * b[i]))
		}
		require.InDelta(t, dot(a, b), dotF32Vec(a, b), 1e-5*abs+1e-6, "dot, n=%d", n)
		want, got := append([]float32(nil), a...), append([]float32(nil), a...)
		axpyGo(want, 0.37, b)
		axpyF32Vec(got, 0.37, b)
		for i := range want {
			require.InDelta(t, want[i], got[i], 1e-6*(1+math.Abs(float64(want[i]))), "axpy, n=%d, i=%d", n, i)
		}
	}
}

// TestQuantizeRow checks the activation quantization: per block d = max|x|/127, |x - d·q| <=
// d/2, and s = d·Σq.
func TestQuantizeRow(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	x := randRow(rng, 4*qBlock)
	clear(x[2*qBlock : 3*qBlock])
	a, ds := make([]int8, len(x)), make([]float32, 8)
	quantizeRow(a, ds, x)
	for b := 0; b < 4; b++ {
		d := ds[2*b]
		var amax float32
		var sum int32
		for j := 0; j < qBlock; j++ {
			amax = max(amax, float32(math.Abs(float64(x[b*qBlock+j]))))
			sum += int32(a[b*qBlock+j])
			require.InDelta(t, x[b*qBlock+j], d*float32(a[b*qBlock+j]), float64(d)/2+1e-7)
		}
		require.InDelta(t, amax/127, d, 1e-9)
		require.InDelta(t, d*float32(sum), ds[2*b+1], 1e-6)
	}
}

// toF16 narrows f (normal f16 range) to binary16 by truncation: any f16 is a valid scale.
func toF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign, exp, man := uint16(b>>16)&0x8000, int(b>>23&0xff)-127+15, b&0x7fffff
	if exp <= 0 {
		return sign
	}
	return sign | uint16(exp)<<10 | uint16(man>>13)
}

// TestAttnKernelsMatchGo runs the vector attention kernels (scores of g heads against n K
// rows, and the weighted sum of n V rows into g accumulators) against the Go loops, on rows
// strided as in the paged cache, at head sizes the vector kernels take and ones they leave to
// Go.
func TestAttnKernelsMatchGo(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 9))
	cases := []struct{ hd, g, n, stride int }{
		{64, 3, 16, 192}, {64, 1, 1, 64}, {128, 4, 5, 512}, {32, 2, 7, 96}, {16, 2, 3, 48}, {24, 2, 4, 48},
	}
	for _, c := range cases {
		q, kv := randRow(rng, c.g*c.hd), randRow(rng, c.n*c.stride)
		ostride := c.n + 3
		want, got := make([]float32, c.g*ostride), make([]float32, c.g*ostride)
		attnScoresGo(q, kv, c.stride, c.n, c.hd, c.g, 0.125, want, ostride)
		attnScores(q, kv, c.stride, c.n, c.hd, c.g, 0.125, got, ostride)
		for i := range want {
			require.InDelta(t, want[i], got[i], 1e-4*(1+math.Abs(float64(want[i]))), "scores %+v, %d", c, i)
		}
		w := randRow(rng, c.g*ostride)
		acc0 := randRow(rng, c.g*c.hd)
		wantAcc, gotAcc := append([]float32(nil), acc0...), append([]float32(nil), acc0...)
		attnAccumGo(wantAcc, kv, c.stride, c.n, c.hd, c.g, w, ostride)
		attnAccum(gotAcc, kv, c.stride, c.n, c.hd, c.g, w, ostride)
		for i := range wantAcc {
			require.InDelta(t, wantAcc[i], gotAcc[i], 1e-4*(1+math.Abs(float64(wantAcc[i]))), "accum %+v, %d", c, i)
		}
	}
}

// TestQuantizeKernelMatchesGo requires the vector activation quantizer bit-identical to the Go
// one (the model's results must not depend on the kernel set), on blocks of mixed scales, an
// all-zero block, and values at rounding ties.
func TestQuantizeKernelMatchesGo(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no AVX2 here")
	}
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 15))
	for _, nb := range []int{1, 2, 5, 48} {
		x := randRow(rng, nb*qBlock)
		for i := range x {
			x[i] *= float32(math.Pow(10, float64(i/qBlock%5-2)))
		}
		if nb > 1 {
			clear(x[qBlock : 2*qBlock])
			for j := range qBlock { // ties: x·id = k + 0.5 exactly
				x[j] = float32(j%8) + 0.5
			}
			x[0] = 127
		}
		wq, gq := make([]int8, len(x)), make([]int8, len(x))
		wd, gd := make([]float32, 2*nb), make([]float32, 2*nb)
		quantizeRowGo(wq, wd, x)
		quantizeRowVec(gq, gd, x)
		require.Equal(t, wq, gq, "%d blocks: quants", nb)
		require.Equal(t, wd, gd, "%d blocks: scales", nb)
	}
}
