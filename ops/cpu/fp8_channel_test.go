package cpu

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// fp8Codes returns n float8_e4m3fn codes (no NaN) from a seed.
func fp8Codes(n, seed int) []byte {
	q := make([]byte, n)
	for i := range q {
		q[i] = byte((i*37 + seed) % 256)
		if q[i]&0x7f == 0x7f {
			q[i] = 0x42
		}
	}
	return q
}

// TestFP8ChannelLinear: a per-channel fp8 weight [3, 5] (one scale per row, as per-tensor parts
// of different scales are handed over too) gives exactly the Linear of float(q) * scale[n].
func TestFP8ChannelLinear(t *testing.T) {
	b := New(1)
	defer b.Close()
	const n, k = 3, 5
	q := fp8Codes(n*k, 11)
	sc := []float32{0.5, 0.5, 3}
	d := ops.WeightDesc{Format: ops.ChannelFP8, DType: ops.F8E4M3, Scales: &ops.WeightScales{
		DType: ops.F32, Shape: []int{n}, Block: []int{1, k}, Raw: [][]byte{f32Bytes(sc[:2]), f32Bytes(sc[2:])}}}
	w, err := b.Weight("w", d, []int{n, k}, q[:2*k], q[2*k:])
	require.NoError(t, err)
	deq := make([]float32, n*k)
	for r := 0; r < n; r++ {
		for c := 0; c < k; c++ {
			deq[r*k+c] = ops.F8E4M3ToFloat32(q[r*k+c]) * sc[r]
		}
	}
	x := FromFloat32([]float32{0.3, -1.25, 2, 0.1, -0.7, 1, 2, 3, 4, 5}, 2, k)
	got, want := FromFloat32(make([]float32, 2*n), 2, n), FromFloat32(make([]float32, 2*n), 2, n)
	b.Linear(got, x, w, nil)
	b.Linear(want, x, FromFloat32(deq, n, k), nil)
	require.Equal(t, want.f32, got.f32)
	for _, tc := range []struct {
		block, sshape []int
		want          string
	}{
		{[]int{2, k}, []int{n}, "per-channel shape [3 5] with block [2 5]"},
		{[]int{1, k}, []int{n, 1}, "fp8 scales [3 1] for shape [3 5]"},
	} {
		bad := ops.WeightDesc{Format: ops.ChannelFP8, DType: ops.F8E4M3, Scales: &ops.WeightScales{
			DType: ops.F32, Shape: tc.sshape, Block: tc.block, Raw: [][]byte{f32Bytes(sc)}}}
		_, err := b.Weight("w", bad, []int{n, k}, q)
		require.ErrorContains(t, err, tc.want)
	}
}

// TestFP8Experts: stacked block-scaled experts [2, 3, 4] (blocks 2x3, partial at both edges)
// are dequantized to float32 at load: expert e, element (r, c) is float(q) * s[e, r/2, c/3].
func TestFP8Experts(t *testing.T) {
	b := New(1)
	defer b.Close()
	const e, n, k = 2, 3, 4
	q := fp8Codes(e*n*k, 5)
	sc := []float32{1, 2, 3, 4, 0.5, 0.25, 8, 16}
	d := ops.WeightDesc{Format: ops.BlockFP8, DType: ops.F8E4M3, Scales: &ops.WeightScales{
		DType: ops.F32, Shape: []int{e, 2, 2}, Block: []int{2, 3}, Raw: [][]byte{f32Bytes(sc[:4]), f32Bytes(sc[4:])}}}
	w, err := b.Weight("w13", d, []int{e, n, k}, q[:n*k], q[n*k:])
	require.NoError(t, err)
	wt := w.(*Tensor)
	require.Equal(t, ops.F32, wt.dt)
	require.Equal(t, []int{e, n, k}, wt.shape)
	for x := 0; x < e; x++ {
		for r := 0; r < n; r++ {
			for c := 0; c < k; c++ {
				i := (x*n+r)*k + c
				require.Equal(t, ops.F8E4M3ToFloat32(q[i])*sc[x*4+(r/2)*2+c/3], wt.f32[i], "expert %d (%d, %d)", x, r, c)
			}
		}
	}
	d.Scales.Shape = []int{2, 2}
	_, err = b.Weight("w13", d, []int{e, n, k}, q)
	require.ErrorContains(t, err, "fp8 scales [2 2] for shape [2 3 4] and block [2 3] (want [2 2 2])")
}

// TestFP8ChannelExperts: stacked per-channel experts [2, 3, 4] (scales [2, 3], one a row) are
// dequantized to float32 at load: expert e, element (r, c) is float(q) * s[e, r].
func TestFP8ChannelExperts(t *testing.T) {
	b := New(1)
	defer b.Close()
	const e, n, k = 2, 3, 4
	q := fp8Codes(e*n*k, 9)
	sc := []float32{1, 2, 3, 0.5, 0.25, 8}
	d := ops.WeightDesc{Format: ops.ChannelFP8, DType: ops.F8E4M3, Scales: &ops.WeightScales{
		DType: ops.F32, Shape: []int{e, n}, Block: []int{1, k}, Raw: [][]byte{f32Bytes(sc[:3]), f32Bytes(sc[3:])}}}
	w, err := b.Weight("w2", d, []int{e, n, k}, q[:n*k], q[n*k:])
	require.NoError(t, err)
	wt := w.(*Tensor)
	require.Equal(t, ops.F32, wt.dt)
	for i := range e * n * k {
		require.Equal(t, ops.F8E4M3ToFloat32(q[i])*sc[i/k], wt.f32[i], "element %d", i)
	}
	d.Scales.Shape = []int{e * n}
	_, err = b.Weight("w2", d, []int{e, n, k}, q)
	require.ErrorContains(t, err, "fp8 scales [6] for shape [2 3 4] and block [1 4] (want [2 3])")
}
