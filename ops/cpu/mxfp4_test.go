package cpu

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// TestDequantizeMXFP4: every one of the 16 E2M1 codes in both nibbles, at scale 2^0, at the
// smallest scale (2^-127, subnormal float32) and the largest (2^127); scale 0xFF and
// mismatched lengths refused.
func TestDequantizeMXFP4(t *testing.T) {
	mags := []float64{0, 0.5, 1, 1.5, 2, 3, 4, 6}
	codes := make([]byte, 16) // one block: byte j holds code j (low) and code 15-j (high)
	for j := range codes {
		codes[j] = byte(j) | byte(15-j)<<4
	}
	for _, s := range []byte{127, 0, 1, 126, 128, 254} {
		dst := make([]float32, 32)
		require.NoError(t, DequantizeMXFP4(dst, codes, []byte{s}))
		for j := range 16 {
			for i, c := range []int{j, 15 - j} {
				want := mags[c&7] * math.Pow(2, float64(int(s)-127))
				if c&8 != 0 {
					want = -want
				}
				require.Equal(t, float32(want), dst[2*j+i], "scale %d code %d", s, c)
			}
		}
	}
	require.ErrorContains(t, DequantizeMXFP4(make([]float32, 32), codes, []byte{0xFF}), "0xFF")
	require.Error(t, DequantizeMXFP4(make([]float32, 31), codes, []byte{127}))
	require.Error(t, DequantizeMXFP4(make([]float32, 64), codes, []byte{127, 127}))
}

// TestMXFP4Weight: Backend.Weight dequantizes a [E, N, K] MXFP4 weight (codes and scales in
// parts) to float32; descriptors that do not fit the shape are refused.
func TestMXFP4Weight(t *testing.T) {
	b := New(1)
	defer b.Close()
	const e, n, k = 2, 3, 64
	codes := make([]byte, e*n*k/2)
	scales := make([]byte, e*n*k/32)
	for i := range codes {
		codes[i] = byte(i * 37)
	}
	for i := range scales {
		scales[i] = byte(120 + i)
	}
	desc := func(shape ...int) ops.WeightDesc {
		return ops.WeightDesc{Format: ops.MXFP4, DType: ops.U8, Scales: &ops.WeightScales{DType: ops.U8, Shape: shape,
			Block: []int{1, 32}, Raw: [][]byte{scales[:len(scales)/2], scales[len(scales)/2:]}}}
	}
	w, err := b.Weight("w", desc(e, n, k/32), []int{e, n, k}, codes[:len(codes)/2], codes[len(codes)/2:])
	require.NoError(t, err)
	got := w.(*Tensor).f32
	want := make([]float32, e*n*k)
	require.NoError(t, DequantizeMXFP4(want, codes, scales))
	require.Equal(t, want, got)
	require.Equal(t, float32(ops.E2M1[codes[0]&0xF])*float32(math.Pow(2, -7)), got[0])

	for _, c := range []struct {
		name  string
		d     ops.WeightDesc
		shape []int
		raw   []byte
	}{
		{"k not a multiple of 32", desc(e, n, 1), []int{e, n, 48}, codes[:e*n*24]},
		{"scales of another shape", desc(e, n, 1), []int{e, n, k}, codes},
		{"too few code bytes", desc(e, n, k/32), []int{e, n, k}, codes[:10]},
		{"fp8 dtype", func() ops.WeightDesc { d := desc(e, n, k/32); d.DType = ops.F8E4M3; return d }(), []int{e, n, k}, codes},
		{"block of 16", func() ops.WeightDesc { d := desc(e, n, k/32); d.Scales.Block = []int{1, 16}; return d }(), []int{e, n, k}, codes},
		{"no scales", ops.WeightDesc{Format: ops.MXFP4, DType: ops.U8}, []int{e, n, k}, codes},
		{"one dimension", desc(k / 32), []int{k}, codes[:k/2]},
	} {
		_, err := b.Weight("w", c.d, c.shape, c.raw)
		require.Error(t, err, c.name)
	}
	scales[3] = 0xFF
	_, err = b.Weight("w", desc(e, n, k/32), []int{e, n, k}, codes)
	require.ErrorContains(t, err, "0xFF")
}
