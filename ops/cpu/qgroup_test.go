package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// TestGroupKernelsMatchGo runs the grouped kernels (8 rows over one or three weight rows, 4
// rows and 1) against the portable single-row dots on fresh random weights and activations, for block counts around the groups
// of 4 (whole, with a tail of 1-3, fewer than one) and a model row's, and requires each row's
// result bit-identical from the three kernels (batch invariance).
func TestGroupKernelsMatchGo(t *testing.T) {
	if groupKernels == (groupKernelSet{}) {
		t.Skip("no AVX-512 VNNI here: no grouped kernels")
	}
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 21))
	kinds := []struct {
		typ ops.GGMLType
		ref qDotFunc
	}{
		{ops.GGMLQ4_0, dotQ4_0Go},
		{ops.GGMLQ4_1, dotQ4_1Go},
		{ops.GGMLQ5_0, dotQ5_0Go},
		{ops.GGMLQ5_1, dotQ5_1Go},
		{ops.GGMLQ8_0, dotQ8_0Go},
		{ops.GGMLQ4_K, dotQ4KGo},
		{ops.GGMLQ5_K, dotQ5KGo},
		{ops.GGMLQ6_K, dotQ6KGo},
	}
	for _, kind := range kinds {
		kern := groupKernels.of(kind.typ)
		require.NotNil(t, kern, "%v", kind.typ)
		for _, nb := range []int{1, 2, 3, 4, 5, 7, 8, 16, 18, 48, 49} {
			const rows = 8
			k := nb * qBlock
			if kind.typ.BlockElems() == 256 {
				if nb%8 != 0 {
					continue
				}
				nb /= 8 // weight blocks
			}
			nb32 := k / qBlock
			w := randBlocks(rng, kind.typ, nb)
			x := randRow(rng, rows*k)
			clear(x[k : k+qBlock]) // a zero block: d = 0
			a, ds := make([]int8, rows*k), make([]float32, rows*2*nb32)
			gb, gsc := groupGeometry(k, layoutOf(kind.typ))
			gq, gs := make([]int8, rows*gb), make([]float32, rows*gsc)
			for r := range rows {
				quantizeRow(a[r*k:(r+1)*k], ds[r*2*nb32:(r+1)*2*nb32], x[r*k:(r+1)*k])
				groupRow(gq[r*gb:(r+1)*gb], gs[r*gsc:(r+1)*gsc], a[r*k:(r+1)*k], ds[r*2*nb32:(r+1)*2*nb32], layoutOf(kind.typ))
			}
			var got8, got4, got1 [8]float32
			kern.x8r(&w[0], &gq[0], &gs[0], nb32, gb, 4*gsc, &got8[0], 1, 4, len(w))
			kern.x4(&w[0], &gq[0], &gs[0], nb32, gb, 4*gsc, &got4[0])
			kern.x4(&w[0], &gq[4*gb], &gs[4*gsc], nb32, gb, 4*gsc, &got4[4])
			for r := range rows {
				kern.x1(&w[0], &gq[r*gb], &gs[r*gsc], nb32, gb, 4*gsc, &got1[r])
			}
			// x8r over 3 weight rows (w, then two more), results strided as in an output matrix.
			w3 := append(append(append([]byte(nil), w...), randBlocks(rng, kind.typ, nb)...), randBlocks(rng, kind.typ, nb)...)
			const ostride = 5
			strided := make([]float32, rows*ostride)
			kern.x8r(&w3[0], &gq[0], &gs[0], nb32, gb, 4*gsc, &strided[0], 3, 4*ostride, len(w))
			for j := range 3 {
				for r := range rows {
					var one float32
					kern.x1(&w3[j*len(w)], &gq[r*gb], &gs[r*gsc], nb32, gb, 4*gsc, &one)
					require.Equal(t, one, strided[r*ostride+j], "%v, %d blocks, weight row %d, row %d: x8r against 1", kind.typ, nb, j, r)
				}
			}
			for r := range rows {
				require.Equal(t, got1[r], got8[r], "%v, %d blocks, row %d: 8 rows against 1", kind.typ, nb, r)
				require.Equal(t, got1[r], got4[r], "%v, %d blocks, row %d: 4 rows against 1", kind.typ, nb, r)
				want := kind.ref(w, a[r*k:(r+1)*k], ds[r*2*nb32:(r+1)*2*nb32])
				// Both sum exact int32 products; only the float accumulation order differs. The
				// bound is on the terms' magnitudes: for the blocks of 32, |d_w·d_a|·128·Σ|q_a| a
				// block (|q_w| and |m_w/d_w| below 128), tight enough that one wrong scale in a
				// block fails; the K-quants' sub-block scales take the looser 127·128·32.
				var scale float64
				for b := range nb32 {
					wb := b * qBlock / kind.typ.BlockElems() * kind.typ.BlockBytes()
					if kind.typ == ops.GGMLQ6_K {
						wb += 208
					}
					dd := math.Abs(float64(f16le(w[wb:]) * ds[r*2*nb32+2*b]))
					if kind.typ.BlockElems() != qBlock {
						scale += dd * 128 * 127 * 128 * 32
						continue
					}
					var sum float64
					for _, q := range a[r*k+b*qBlock : r*k+(b+1)*qBlock] {
						sum += math.Abs(float64(q))
					}
					scale += dd * 128 * sum
				}
				require.InDelta(t, want, got1[r], 1e-5*scale+1e-6, "%v, %d blocks, row %d", kind.typ, nb, r)
			}
		}
	}
}
