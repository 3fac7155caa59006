package cpu

import (
	"math"
	"slices"
	"testing"

	"github.com/atom-go/atom/ops"
)

// TestRopeWriteKVFused checks the fused-input RoPE + KV store against SplitCols + RopeWriteKV:
// the same q and caches bit for bit, and qkv left unchanged. One shape rotates part of each head.
func TestRopeWriteKVFused(t *testing.T) {
	b := New(3)
	defer b.Close()
	for _, sh := range []struct{ heads, kvHeads, hd, rot int }{{8, 2, 16, 16}, {6, 3, 20, 12}} {
		rope, err := ops.NewRoPE(sh.hd, sh.rot, 10000, ops.RoPEScaling{}, 256)
		if err != nil {
			t.Fatal(err)
		}
		const rows, blocks, blockSize = 7, 4, 4
		qw, kvw := sh.heads*sh.hd, sh.kvHeads*sh.hd
		meta := &ops.AttnMetadata{Positions: []int32{3, 9, 0, 17, 5, 11, 2}, SlotMapping: []int32{14, 2, 7, 0, 9, 15, 4},
			QueryStart: []int32{0, rows}, SeqLens: []int32{18}, BlockTables: []int32{0, 1, 2, 3}, BlockTableStride: 4}
		src := make([]float32, rows*(qw+2*kvw))
		for i := range src {
			src[i] = float32(math.Sin(float64(i) * 0.37))
		}
		qkv := FromFloat32(slices.Clone(src), rows, qw+2*kvw)
		q, k, v := b.Buffer(rows, qw), b.Buffer(rows, kvw), b.Buffer(rows, kvw)
		want, _ := b.NewKVCache(1, blocks, blockSize, sh.kvHeads, sh.hd)
		b.SplitCols(qkv, q, k, v)
		b.RopeWriteKV(q, k, v, rope, want, 0, meta)

		gotQ := b.Buffer(rows, qw)
		got, _ := b.NewKVCache(1, blocks, blockSize, sh.kvHeads, sh.hd)
		b.RopeWriteKVFused(gotQ, qkv, rope, got, 0, meta)
		wc, gc := want.(*KVCache), got.(*KVCache)
		for name, pair := range map[string][2][]float32{"q": {q.(*Tensor).f32, gotQ.(*Tensor).f32},
			"k cache": {wc.k[0], gc.k[0]}, "v cache": {wc.v[0], gc.v[0]}, "qkv": {src, qkv.f32}} {
			if !slices.Equal(pair[0], pair[1]) {
				t.Errorf("%+v: %s differs from the split path", sh, name)
			}
		}
	}
}
