package cpu

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// TestRopeWriteKVFused checks the fused-input RoPE + KV store against the split path it
// replaces (SplitCols, with a norm HeadRMSNorm of q and of k, then RopeWriteKV): the same q and
// caches bit for bit, and qkv left unchanged. One shape rotates part of each head.
func TestRopeWriteKVFused(t *testing.T) {
	b := New(3)
	defer b.Close()
	for _, sh := range []struct{ heads, kvHeads, hd, rot int }{{8, 2, 16, 16}, {6, 3, 20, 12}} {
		for _, withNorm := range []bool{false, true} {
			name := fmt.Sprintf("%+v norm %v", sh, withNorm)
			rope, err := ops.NewRoPE(sh.hd, sh.rot, 10000, ops.RoPEScaling{}, 256)
			require.NoError(t, err)
			const rows, blocks, blockSize = 7, 4, 4
			qw, kvw := sh.heads*sh.hd, sh.kvHeads*sh.hd
			meta := &ops.AttnMetadata{Positions: []int32{3, 9, 0, 17, 5, 11, 2}, SlotMapping: []int32{14, 2, 7, 0, 9, 15, 4},
				QueryStart: []int32{0, rows}, SeqLens: []int32{18}, BlockTables: []int32{0, 1, 2, 3}, BlockTableStride: 4}
			src := make([]float32, rows*(qw+2*kvw))
			for i := range src {
				src[i] = float32(math.Sin(float64(i) * 0.37))
			}
			var norm *ops.QKNorm
			if withNorm {
				qn, kn := make([]float32, sh.hd), make([]float32, sh.hd)
				for i := range qn {
					qn[i], kn[i] = 0.5+float32(i%5)*0.25, 1.5-float32(i%3)*0.5
				}
				norm = &ops.QKNorm{Q: FromFloat32(qn, sh.hd), K: FromFloat32(kn, sh.hd), Eps: 1e-6}
			}
			qkv := FromFloat32(slices.Clone(src), rows, qw+2*kvw)
			q, k, v := b.Buffer(rows, qw), b.Buffer(rows, kvw), b.Buffer(rows, kvw)
			want, err := b.NewKVCache(1, blocks, blockSize, sh.kvHeads, sh.hd)
			require.NoError(t, err)
			b.SplitCols(qkv, q, k, v)
			if norm != nil {
				b.HeadRMSNorm(q, norm.Q, sh.hd, norm.Eps)
				b.HeadRMSNorm(k, norm.K, sh.hd, norm.Eps)
			}
			b.RopeWriteKV(q, k, v, rope, want, 0, meta)

			gotQ := b.Buffer(rows, qw)
			got, err := b.NewKVCache(1, blocks, blockSize, sh.kvHeads, sh.hd)
			require.NoError(t, err)
			b.RopeWriteKVFused(gotQ, qkv, rope, norm, got, 0, meta)
			wc, gc := want.(*KVCache), got.(*KVCache)
			require.Equal(t, q.(*Tensor).f32, gotQ.(*Tensor).f32, name+": q")
			require.Equal(t, wc.k[0], gc.k[0], name+": k cache")
			require.Equal(t, wc.v[0], gc.v[0], name+": v cache")
			require.Equal(t, src, qkv.f32, name+": qkv written")
			if withNorm { // the norm must have changed something, or the check above proves little
				require.NotEqual(t, wc.k[0], mustRopeOnly(t, b, qkv, rope, sh.kvHeads, sh.hd, meta), name)
			}
			// A float16 cache holds the same K and V rounded, and q is the same.
			b16 := NewWith(3, Options{KVFloat16: true})
			c16, err := b16.NewKVCache(1, blocks, blockSize, sh.kvHeads, sh.hd)
			require.NoError(t, err)
			q16 := b16.Buffer(rows, qw)
			b16.RopeWriteKVFused(q16, qkv, rope, norm, c16, 0, meta)
			require.Equal(t, gotQ.(*Tensor).f32, q16.(*Tensor).f32, name+": q, float16 cache")
			k16, v16 := make([]uint16, len(wc.k[0])), make([]uint16, len(wc.v[0]))
			putF16(k16, wc.k[0])
			putF16(v16, wc.v[0])
			require.Equal(t, k16, c16.(*KVCache).k16[0], name+": k, float16 cache")
			require.Equal(t, v16, c16.(*KVCache).v16[0], name+": v, float16 cache")
			b16.Close()
		}
	}
}

// mustRopeOnly returns the k cache of the fused op without a norm.
func mustRopeOnly(t *testing.T, b *Backend, qkv *Tensor, rope *ops.RoPE, kvHeads, hd int, meta *ops.AttnMetadata) []float32 {
	c, err := b.NewKVCache(1, 4, 4, kvHeads, hd)
	require.NoError(t, err)
	b.RopeWriteKVFused(b.Buffer(qkv.rows(), qkv.cols()-2*kvHeads*hd), qkv, rope, nil, c, 0, meta)
	return c.(*KVCache).k[0]
}
