package cpu

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// TestFP8Linear: a block-scaled fp8 weight [5, 7] in 2x3 blocks (partial at both edges),
// handed over in two parts, gives exactly the Linear of its dequantized float32 weight
// float(q) * scale[n/2, k/3]; the activations are not quantized.
func TestFP8Linear(t *testing.T) {
	b := New(2)
	defer b.Close()
	const n, k, bn, bk = 5, 7, 2, 3
	q := make([]byte, n*k)
	for i := range q {
		q[i] = byte((i*37 + 11) % 256)
		if q[i]&0x7f == 0x7f {
			q[i] = 0x42
		}
	}
	sc := []float32{0.5, 2, 0.125, 3, 1.5, 0.25, 7, 0.75, 1}
	d := ops.WeightDesc{Format: ops.BlockFP8, DType: ops.F8E4M3, Scales: &ops.WeightScales{
		DType: ops.F32, Shape: []int{3, 3}, Block: []int{bn, bk}, Raw: [][]byte{f32Bytes(sc[:6]), f32Bytes(sc[6:])}}}
	w, err := b.Weight("w", d, []int{n, k}, q[:2*k], q[2*k:])
	require.NoError(t, err)
	deq := make([]float32, n*k)
	for r := 0; r < n; r++ {
		for c := 0; c < k; c++ {
			deq[r*k+c] = ops.F8E4M3ToFloat32(q[r*k+c]) * sc[(r/bn)*3+c/bk]
			require.Equal(t, deq[r*k+c], w.(*Tensor).at(r*k+c))
		}
	}
	x := FromFloat32([]float32{0.3, -1.25, 2, 0.1, -0.7, 1.9, 0.01, 1, 2, 3, 4, 5, 6, -7}, 2, k)
	got, want := FromFloat32(make([]float32, 2*n), 2, n), FromFloat32(make([]float32, 2*n), 2, n)
	b.Linear(got, x, w, nil)
	b.Linear(want, x, FromFloat32(deq, n, k), nil)
	require.Equal(t, want.f32, got.f32)
}

// TestFP8WeightRefuses: descriptors that do not fit the shape are refused.
func TestFP8WeightRefuses(t *testing.T) {
	b := New(1)
	defer b.Close()
	desc := func(dt ops.DType, sshape, block []int, nscales int) ops.WeightDesc {
		return ops.WeightDesc{Format: ops.BlockFP8, DType: dt, Scales: &ops.WeightScales{
			DType: ops.F32, Shape: sshape, Block: block, Raw: [][]byte{make([]byte, 4*nscales)}}}
	}
	for _, tc := range []struct {
		d     ops.WeightDesc
		shape []int
		bytes int
		want  string
	}{
		{desc(ops.BF16, []int{1, 1}, []int{2, 2}, 1), []int{2, 2}, 4, "needs float8_e4m3fn"},
		{desc(ops.F8E4M3, []int{1, 2}, []int{2, 2}, 2), []int{2, 2}, 4, "fp8 scales [1 2] for shape [2 2] and block [2 2] (want [1 1])"},
		{desc(ops.F8E4M3, []int{1, 1}, []int{2, 2}, 1), []int{2, 2}, 3, "3 bytes for fp8 shape [2 2]"},
		{desc(ops.F8E4M3, []int{1, 1}, []int{2, 2}, 2), []int{2, 2}, 4, "2 fp8 scales"},
		{desc(ops.F8E4M3, []int{1, 1}, []int{0, 2}, 1), []int{2, 2}, 4, "block [0 2]"},
		{ops.WeightDesc{Format: ops.BlockFP8, DType: ops.F8E4M3}, []int{2, 2}, 4, "needs float8_e4m3fn"},
	} {
		_, err := b.Weight("w", tc.d, tc.shape, make([]byte, tc.bytes))
		require.ErrorContains(t, err, tc.want)
		require.ErrorContains(t, err, "weight w")
	}
	_, err := b.Weight("w", ops.Plain(ops.F8E4M3), []int{2, 2}, make([]byte, 4))
	require.ErrorIs(t, err, ops.ErrUnsupportedWeight)
}
