package cpu

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// TestLinear16AgainstExact runs Linear over float16 and bfloat16 weights on the vector path
// (the 16-bit kernels, weights widened in registers) against the exact path (rows widened to
// float32, Go loops), within float32 rounding of the dot products, for input widths whole and
// not whole vectors of 16 and row counts around the four-row kernels, with a bias; and requires
// each row's result bit-identical alone and in the batch (batch invariance).
func TestLinear16AgainstExact(t *testing.T) { forEachKernelSet(t, testLinear16AgainstExact) }

func testLinear16AgainstExact(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 51))
	exact, vec := New(2), NewWith(2, Options{VectorFloat32: true})
	defer exact.Close()
	defer vec.Close()
	cases := []struct {
		dt         ops.DType
		rows, n, k int
	}{
		{ops.F16, 1, 9, 64}, {ops.F16, 6, 13, 100}, {ops.BF16, 9, 11, 48}, {ops.BF16, 4, 5, 7}, {ops.BF16, 70, 3, 576},
	}
	for _, c := range cases {
		raw := make([]byte, 2*c.n*c.k)
		for i := range c.n * c.k {
			v := float32(rng.NormFloat64() * 0.1)
			h := uint16(math.Float32bits(v) >> 16) // bfloat16 by truncation
			if c.dt == ops.F16 {
				h = f32ToF16(v)
			}
			binary.LittleEndian.PutUint16(raw[2*i:], h)
		}
		we, err := exact.Weight("w", ops.Plain(c.dt), []int{c.n, c.k}, raw)
		require.NoError(t, err)
		wv, err := vec.Weight("w", ops.Plain(c.dt), []int{c.n, c.k}, raw)
		require.NoError(t, err)
		bias := FromFloat32(randRow(rng, c.n), c.n)
		x := randRow(rng, c.rows*c.k)
		got, want := make([]float32, c.rows*c.n), make([]float32, c.rows*c.n)
		vec.Linear(FromFloat32(got, c.rows, c.n), FromFloat32(x, c.rows, c.k), wv, bias)
		exact.Linear(FromFloat32(want, c.rows, c.n), FromFloat32(x, c.rows, c.k), we, bias)
		for r := range c.rows {
			for j := range c.n {
				var abs float64
				for i := range c.k {
					abs += math.Abs(float64(we.(*Tensor).at(j*c.k+i) * x[r*c.k+i]))
				}
				require.InDelta(t, want[r*c.n+j], got[r*c.n+j], 1e-5*abs+1e-6, "%v %+v: row %d, feature %d", c.dt, c, r, j)
			}
			alone := make([]float32, c.n)
			vec.Linear(FromFloat32(alone, 1, c.n), FromFloat32(x[r*c.k:(r+1)*c.k], 1, c.k), wv, bias)
			require.Equal(t, got[r*c.n:(r+1)*c.n], alone, "%v %+v: row %d alone", c.dt, c, r)
		}
	}
}
