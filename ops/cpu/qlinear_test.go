package cpu

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// TestQLinearAgainstDequantized runs Linear on ggml blocks against Linear on the same weight
// dequantized to float32 (the exact path), within the 8-bit activations' rounding, for row
// counts around the four-row kernels and output widths that are not whole tiles, with a bias;
// and requires each row's result bit-identical alone and in the batch (batch invariance); with
// the vector kernels and with the portable ones.
func TestQLinearAgainstDequantized(t *testing.T) { forEachKernelSet(t, testQLinearAgainstDequantized) }

func testQLinearAgainstDequantized(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 13))
	cases := []struct {
		typ        ops.GGMLType
		rows, n, k int
	}{
		{ops.GGMLQ4_1, 1, 13, 64}, {ops.GGMLQ4_1, 7, 40, 96}, {ops.GGMLQ4_1, 70, 9, 32},
		{ops.GGMLQ8_0, 5, 17, 64}, {ops.GGMLQ4_0, 6, 11, 128}, {ops.GGMLQ4_0, 13, 10, 160},
		{ops.GGMLQ4_1, 21, 19, 576}, {ops.GGMLQ8_0, 11, 9, 224},
		{ops.GGMLQ5_0, 3, 7, 96}, {ops.GGMLQ5_1, 9, 5, 64}, {ops.GGMLQ5_0, 10, 6, 320}, {ops.GGMLQ5_1, 8, 3, 448}, {ops.GGMLQ4_K, 5, 6, 512}, {ops.GGMLQ4_K, 11, 3, 256}, {ops.GGMLQ5_K, 2, 5, 256},
		{ops.GGMLQ6_K, 9, 4, 512},
	}
	be := New(2)
	defer be.Close()
	be.portableBlocks = true
	for _, c := range cases {
		raw := randBlocks(rng, c.typ, c.n*c.k/c.typ.BlockElems())
		w, err := be.Weight("w", ops.WeightDesc{Format: ops.GGMLBlocks, GGML: c.typ}, []int{c.n, c.k}, raw)
		require.NoError(t, err)
		deq := make([]byte, 4*c.n*c.k)
		row := make([]float32, c.k)
		for r := range c.n {
			w.(*Tensor).row(r, row)
			for i, v := range row {
				binary.LittleEndian.PutUint32(deq[4*(r*c.k+i):], math.Float32bits(v))
			}
		}
		wf, err := be.Weight("wf", ops.Plain(ops.F32), []int{c.n, c.k}, deq)
		require.NoError(t, err)
		bias := FromFloat32(randRow(rng, c.n), c.n)
		x := randRow(rng, c.rows*c.k)
		got, want := make([]float32, c.rows*c.n), make([]float32, c.rows*c.n)
		be.Linear(FromFloat32(got, c.rows, c.n), FromFloat32(x, c.rows, c.k), w, bias)
		be.Linear(FromFloat32(want, c.rows, c.n), FromFloat32(x, c.rows, c.k), wf, bias)
		for r := range c.rows {
			// |x - d·q| <= d/2 per element, d = max|x|/127 of its block.
			var bound float64
			for j := range c.n {
				w.(*Tensor).row(j, row)
				var e float64
				for i, v := range row {
					amax := 0.0
					for _, xv := range x[r*c.k+i/qBlock*qBlock : r*c.k+(i/qBlock+1)*qBlock] {
						amax = math.Max(amax, math.Abs(float64(xv)))
					}
					e += math.Abs(float64(v)) * amax / 127 / 2
				}
				bound = math.Max(bound, e)
			}
			for j := range c.n {
				require.InDelta(t, want[r*c.n+j], got[r*c.n+j], bound*1.01+1e-5, "%v %+v: row %d, feature %d", c.typ, c, r, j)
			}
			alone := make([]float32, c.n)
			be.Linear(FromFloat32(alone, 1, c.n), FromFloat32(x[r*c.k:(r+1)*c.k], 1, c.k), w, bias)
			require.Equal(t, got[r*c.n:(r+1)*c.n], alone, "%v %+v: row %d alone", c.typ, c, r)
		}
	}
}

// TestQWeightRefusesBadBlocks: a ggml blocks weight that does not fit its shape, or of a type
// without kernels, is an error naming the problem, never a panic.
func TestQWeightRefusesBadBlocks(t *testing.T) {
	be := New(1)
	defer be.Close()
	cases := []struct {
		name  string
		typ   ops.GGMLType
		shape []int
		bytes int
		want  string
	}{
		{"columns not whole blocks", ops.GGMLQ4_1, []int{2, 48}, 80, "not whole"},
		{"short data", ops.GGMLQ8_0, []int{2, 64}, 135, "want 136"},
		{"1-D", ops.GGMLQ4_0, []int{64}, 36, "2-D"},
		{"no kernels", ops.GGMLType(11), []int{1, 256}, 110, "unsupported"}, // Q3_K
		{"K-quant columns not whole blocks", ops.GGMLQ4_K, []int{1, 288}, 162, "not whole"},
	}
	for _, c := range cases {
		want := c.want
		if c.typ == ops.GGMLQ4_K && groupKernels.of(c.typ) == nil {
			want = "no vector kernels" // an AVX2 cpu refuses the type before its shape
		}
		_, err := be.Weight("w", ops.WeightDesc{Format: ops.GGMLBlocks, GGML: c.typ}, c.shape, make([]byte, c.bytes))
		require.ErrorContains(t, err, want, c.name)
	}
}

// TestQuantizedPathAllocatesNothingPerToken: once its scratch has grown to the largest batch,
// the quantized Linear and the vector attention allocate no more for many rows than for one,
// and at most their parallel sections' closures.
func TestQuantizedPathAllocatesNothingPerToken(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	be := NewWith(2, Options{VectorFloat32: true})
	defer be.Close()
	const n, k, rows = 64, 128, 40
	w, err := be.Weight("w", ops.WeightDesc{Format: ops.GGMLBlocks, GGML: ops.GGMLQ4_1}, []int{n, k}, randBlocks(rng, ops.GGMLQ4_1, n*k/qBlock))
	require.NoError(t, err)
	x, out := FromFloat32(randRow(rng, rows*k), rows, k), be.Buffer(rows, n)
	cache, err := be.NewKVCache(1, 8, 16, 2, 64)
	require.NoError(t, err)
	q, ao := FromFloat32(randRow(rng, rows*4*64), rows, 4*64), be.Buffer(rows, 4*64)
	a := ops.AttnShape{NumHeads: 4, NumKVHeads: 2, HeadDim: 64, Scale: 0.125}
	allocs := func(r int) float64 {
		meta := &ops.AttnMetadata{QueryStart: []int32{0, int32(r)}, SeqLens: []int32{int32(r)}, BlockTables: []int32{0, 1, 2, 3, 4, 5, 6, 7}, BlockTableStride: 8}
		for p := range r {
			meta.Positions = append(meta.Positions, int32(p))
		}
		xv, ov, qv, aov := be.View(x, r), be.View(out, r), be.View(q, r), be.View(ao, r)
		return testing.AllocsPerRun(20, func() {
			be.Linear(ov, xv, w, nil)
			be.Attention(aov, qv, cache, 0, meta, a)
		})
	}
	many := allocs(rows) // grows the scratch first
	one := allocs(1)
	require.LessOrEqual(t, many, one, "allocations grow with the batch")
	require.LessOrEqual(t, one, 4.0) // the closures of four parallel sections
}
