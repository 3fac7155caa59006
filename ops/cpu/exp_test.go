package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestExpKernelsMatchMath runs the exp kernels in use (softmax's shifted exp and its sum, and
// silu·up) against float64 math at lengths around the vector width, over the range softmax and
// silu see, the clamped ends included.
func TestExpKernelsMatchMath(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 31))
	for _, n := range []int{1, 7, 8, 9, 16, 61, 1536} {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.Float64()*60 - 50)
		}
		x[0] = -1000 // exp underflows: a tiny non-negative weight
		m := float32(rng.Float64()*4 - 2)
		got := append([]float32(nil), x...)
		sum := expShift(got, m)
		var want float64
		for i, v := range x {
			e := math.Exp(float64(v - m))
			want += float64(float32(e))
			require.InDelta(t, e, got[i], 4e-7*e+1e-37, "exp, n=%d, x=%v", n, v)
		}
		require.InDelta(t, want, sum, 1e-6*want+1e-37, "sum, n=%d", n)
		gate, up, dst := randRow(rng, n), randRow(rng, n), make([]float32, n)
		for i := range gate {
			gate[i] *= 8
		}
		gate[0] = -200
		siluMul(dst, gate, up)
		for i, g := range gate {
			w := float64(g) / (1 + math.Exp(-float64(g))) * float64(up[i])
			require.InDelta(t, w, dst[i], 1e-6*math.Abs(w)+1e-30, "silu, n=%d, g=%v", n, g)
		}
	}
}
