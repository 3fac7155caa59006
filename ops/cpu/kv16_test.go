package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// TestF32ToF16 checks the rounding against exhaustive widening: every binary16 value rounds
// to itself, and a value between two neighbours rounds to the nearer (ties to even).
func TestF32ToF16(t *testing.T) {
	for h := range 1 << 16 {
		f := ops.F16ToFloat32(uint16(h))
		if math.IsNaN(float64(f)) {
			require.True(t, math.IsNaN(float64(ops.F16ToFloat32(f32ToF16(f)))))
			continue
		}
		require.Equal(t, uint16(h), f32ToF16(f), "h=%#04x (%g)", h, f)
	}
	cases := []struct {
		in   float32
		want uint16
	}{
		{1 + 1.0/2048, 0x3c00},                // a tie below: to even (1.0)
		{1 + 3.0/2048, 0x3c02},                // a tie: to even (1 + 2/1024)
		{1 + 1.0/2048 + 1e-7, 0x3c01},         // just above the tie
		{65520, 0x7c00},                       // rounds past the largest finite to infinity
		{65519, 0x7bff},                       // the largest finite
		{float32(math.Ldexp(1, -25)), 0},      // half the smallest subnormal: a tie to even (0)
		{float32(math.Ldexp(1.5, -25)), 1},    // above it: the smallest subnormal
		{float32(math.Ldexp(1, -14)), 0x0400}, // the smallest normal
		{-2, 0xc000},
	}
	for _, c := range cases {
		require.Equal(t, c.want, f32ToF16(c.in), "%g", c.in)
	}
}

// TestPutF16MatchesGo checks the vector float16 rounding against the portable one, bit for
// bit, over lengths with and without a tail and values across binary16's range (subnormals,
// ties, overflow, infinities); a NaN must stay a NaN.
func TestPutF16MatchesGo(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no vector kernels on this cpu")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{0, 1, 7, 8, 9, 16, 61, 192} {
		src := make([]float32, n)
		for i := range src {
			src[i] = float32(math.Ldexp(rng.NormFloat64(), rng.IntN(44)-28))
			switch rng.IntN(16) {
			case 0:
				src[i] = float32(math.Inf(1 - 2*rng.IntN(2)))
			case 1:
				src[i] = float32(1 + float64(2*rng.IntN(4)+1)/2048) // a tie
			}
		}
		want, got := make([]uint16, n), make([]uint16, n)
		putF16Go(want, src)
		putF16Vec(got, src)
		require.Equal(t, want, got, "n=%d", n)
	}
	nan := []float32{float32(math.NaN()), 1, 2, 3, 4, 5, 6, 7}
	got := make([]uint16, len(nan))
	putF16Vec(got, nan)
	require.True(t, math.IsNaN(float64(ops.F16ToFloat32(got[0]))))
}

// TestAttn16KernelsMatchGo runs the vector float16-row attention kernels against the Go loops.
func TestAttn16KernelsMatchGo(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 19))
	for _, c := range []struct{ hd, g, n, stride int }{{64, 3, 16, 192}, {64, 1, 1, 64}, {128, 4, 5, 512}, {32, 2, 7, 96}, {24, 2, 4, 48}} {
		q, kf := randRow(rng, c.g*c.hd), randRow(rng, c.n*c.stride)
		k := make([]uint16, len(kf))
		putF16(k, kf)
		ostride := c.n + 3
		want, got := make([]float32, c.g*ostride), make([]float32, c.g*ostride)
		attnScores16Go(q, k, c.stride, c.n, c.hd, c.g, 0.125, want, ostride)
		attnScores16(q, k, c.stride, c.n, c.hd, c.g, 0.125, got, ostride)
		for i := range want {
			require.InDelta(t, want[i], got[i], 1e-4*(1+math.Abs(float64(want[i]))), "scores %+v, %d", c, i)
		}
		w, acc0 := randRow(rng, c.g*ostride), randRow(rng, c.g*c.hd)
		wantAcc, gotAcc := append([]float32(nil), acc0...), append([]float32(nil), acc0...)
		attnAccum16Go(wantAcc, k, c.stride, c.n, c.hd, c.g, w, ostride)
		attnAccum16(gotAcc, k, c.stride, c.n, c.hd, c.g, w, ostride)
		for i := range wantAcc {
			require.InDelta(t, wantAcc[i], gotAcc[i], 1e-4*(1+math.Abs(float64(wantAcc[i]))), "accum %+v, %d", c, i)
		}
	}
}
