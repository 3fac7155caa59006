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

// TestLogSumExp checks the logits normalizer against float64 math on rows the size of small
// and large vocabularies, with logits spread as a model's are.
func TestLogSumExp(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 33))
	for _, n := range []int{1, 5, 8, 13, 49152, 151936} {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64()*3 - 4)
		}
		mx := math.Inf(-1)
		for _, v := range x {
			mx = math.Max(mx, float64(v))
		}
		var s float64
		for _, v := range x {
			s += math.Exp(float64(v) - mx)
		}
		require.InDelta(t, mx+math.Log(s), LogSumExp(x), 2e-6*(1+math.Abs(mx+math.Log(s))), "n=%d", n)
	}
}
