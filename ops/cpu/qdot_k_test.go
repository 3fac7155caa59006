package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// TestQDotKBlocksApproximateDequantized checks the kernels of the 5-bit and K-quant blocks:
// a block dot with 8-bit activations is the dequantized weight's float dot up to the
// activations' rounding (|x - d·q| <= d/2 per element, d = max|x|/127 of its block of 32).
func TestQDotKBlocksApproximateDequantized(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 41))
	for _, typ := range []ops.GGMLType{ops.GGMLQ5_0, ops.GGMLQ5_1, ops.GGMLQ4_K, ops.GGMLQ5_K, ops.GGMLQ6_K} {
		for _, k := range []int{256, 768} {
			nb := k / typ.BlockElems()
			raw := randBlocks(rng, typ, nb)
			w := make([]float32, k)
			(&qData{typ: typ, raw: raw, n: 1, k: k, rowBytes: len(raw)}).row(0, w)
			x := randRow(rng, k)
			clear(x[32:64]) // an all-zero activation block: d = 0
			a, ds := make([]int8, k), make([]float32, 2*k/qBlock)
			quantizeRow(a, ds, x)
			var exact, bound, abs float64
			for i := range x {
				exact += float64(w[i]) * float64(x[i])
				bound += math.Abs(float64(w[i])) * float64(ds[2*(i/qBlock)]) / 2
				abs += math.Abs(float64(w[i]) * float64(x[i]))
			}
			got := qDotFor(typ)(raw, a, ds)
			require.InDelta(t, exact, got, bound*1.01+1e-5*abs+1e-6, "%v, k=%d", typ, k)
		}
	}
}
