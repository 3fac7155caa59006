package cpu

import (
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// TestFP8KVCache: the fp8 cache stores e4m3(x / scale) of exactly the rows the float32 cache
// stores (through both rope paths, per-layer scales), and attention over it equals the
// reference attention over a float32 cache holding the values read back, float(code) · scale.
func TestFP8KVCache(t *testing.T) {
	b := New(2)
	defer b.Close()
	const heads, kvHeads, hd, rows, blocks, blockSize = 4, 2, 8, 6, 3, 4
	qw, kvw := heads*hd, kvHeads*hd
	rope, err := ops.NewRoPE(hd, hd, 10000, ops.RoPEScaling{}, 64)
	require.NoError(t, err)
	meta := &ops.AttnMetadata{Positions: []int32{0, 1, 2, 3, 4, 5}, SlotMapping: []int32{8, 9, 10, 11, 0, 1},
		QueryStart: []int32{0, rows}, SeqLens: []int32{rows}, BlockTables: []int32{2, 0, 1}, BlockTableStride: 3}
	src := make([]float32, rows*(qw+2*kvw))
	for i := range src {
		src[i] = 3 * float32(math.Sin(float64(i)*0.37))
	}
	ks, vs := []float32{1, 0.005}, []float32{0.5, 0.02}
	ref, err := b.NewKVCache(2, blocks, blockSize, kvHeads, hd)
	require.NoError(t, err)
	f8, err := b.NewFP8KVCache(2, blocks, blockSize, kvHeads, hd, ks, vs)
	require.NoError(t, err)
	f8split, err := b.NewFP8KVCache(2, blocks, blockSize, kvHeads, hd, ks, vs)
	require.NoError(t, err)
	shape := ops.AttnShape{NumHeads: heads, NumKVHeads: kvHeads, HeadDim: hd, Scale: 0.35}
	rc, fc, sc := ref.(*KVCache), f8.(*KVCache), f8split.(*KVCache)
	for layer := range 2 {
		qkv := FromFloat32(slices.Clone(src), rows, qw+2*kvw)
		qRef, qF8 := b.Buffer(rows, qw), b.Buffer(rows, qw)
		b.RopeWriteKVFused(qRef, qkv, rope, nil, ref, layer, meta)
		b.RopeWriteKVFused(qF8, qkv, rope, nil, f8, layer, meta)
		require.Equal(t, qRef.(*Tensor).f32, qF8.(*Tensor).f32, "q")
		q, k, v := b.Buffer(rows, qw), b.Buffer(rows, kvw), b.Buffer(rows, kvw)
		b.SplitCols(FromFloat32(slices.Clone(src), rows, qw+2*kvw), q, k, v)
		b.RopeWriteKV(q, k, v, rope, f8split, layer, meta)
		require.Equal(t, fc.f8.k[layer], sc.f8.k[layer], "layer %d: split and fused k", layer)
		require.Equal(t, fc.f8.v[layer], sc.f8.v[layer], "layer %d: split and fused v", layer)
		deq, err := b.NewKVCache(1, blocks, blockSize, kvHeads, hd)
		require.NoError(t, err)
		dc := deq.(*KVCache)
		for _, slot := range meta.SlotMapping {
			for i := int(slot) * kvw; i < int(slot+1)*kvw; i++ {
				require.Equal(t, ops.Float32ToF8E4M3(rc.k[layer][i]/ks[layer]), fc.f8.k[layer][i], "layer %d k %d", layer, i)
				require.Equal(t, ops.Float32ToF8E4M3(rc.v[layer][i]/vs[layer]), fc.f8.v[layer][i], "layer %d v %d", layer, i)
				dc.k[0][i] = ops.F8E4M3ToFloat32(fc.f8.k[layer][i]) * ks[layer]
				dc.v[0][i] = ops.F8E4M3ToFloat32(fc.f8.v[layer][i]) * vs[layer]
			}
		}
		want, got := b.Buffer(rows, qw), b.Buffer(rows, qw)
		b.Attention(want, qRef, deq, 0, meta, shape)
		b.Attention(got, qF8, f8, layer, meta, shape)
		require.Equal(t, want.(*Tensor).f32, got.(*Tensor).f32, "layer %d attention", layer)
	}
	// Layer 1's scale is small: the values past 448 · 0.005 saturate, so the scale matters.
	require.Contains(t, fc.f8.k[1], byte(0x7e))
	for _, bad := range [][]float32{{1, 0}, {1, float32(math.NaN())}, {-1, 1}, {1}} {
		_, err := b.NewFP8KVCache(2, blocks, blockSize, kvHeads, hd, bad, []float32{1, 1})
		require.Error(t, err, "%v", bad)
	}
	c, err := ops.NewKVCacheFor(b, ops.KVCacheSpec{Layers: []ops.KVLayerSpec{
		{Kind: ops.KVPair, Heads: kvHeads, HeadDim: hd, DType: ops.F8E4M3, KScale: 2, VScale: 3}}}, blocks, blockSize)
	require.NoError(t, err)
	require.Equal(t, []float32{2}, c.(*KVCache).f8.kScale)
	require.Equal(t, []float32{3}, c.(*KVCache).f8.vScale)
}
