package models

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
	"github.com/atom-go/atom/ops/cpu"
)

// TestRankedModelDrivesEachRank: driving every rank through RankedModel (OnRanks for each
// rank's Forward and vocabulary-slice Logits, then GatherLogits) gives exactly the logits of
// the model's own Forward and Logits, at TP=2 and at a forced TP=1, which also equals Load.
func TestRankedModelDrivesEachRank(t *testing.T) {
	ck, err := OpenCheckpoint("../testdata/models/qwen3-bf16")
	require.NoError(t, err)
	defer ck.Close()
	opt := Options{MaxTokens: 64, MaxSeqs: 4}
	const bs = 4
	ids := []int32{1, 17, 42, 99, 7, 200, 201, 5}
	meta := &ops.AttnMetadata{QueryStart: []int32{0, 5, 7, 8}, SeqLens: []int32{5, 2, 1}, BlockTableStride: 2,
		Positions: []int32{0, 1, 2, 3, 4, 0, 1, 0}, SlotMapping: []int32{8, 9, 10, 11, 12, 20, 21, 30},
		BlockTables: []int32{2, 3, 5, 6, 7, 1}}
	rows := []int32{4, 6, 7}
	vocab := ck.Config.VocabSize
	read := func(be ops.Backend, t ops.Tensor) []float32 {
		out := make([]float32, len(rows)*vocab)
		be.ReadRows(t, out)
		return out
	}

	single := cpu.New(1)
	defer single.Close()
	m1, err := Load(ck, single, opt)
	require.NoError(t, err)
	c1, err := m1.NewKVCache(16, bs)
	require.NoError(t, err)
	plain := read(single, m1.Logits(m1.Forward(ids, meta, c1), rows))

	for _, tp := range []int{1, 2} {
		var bes []ops.Backend
		for r := 0; r < tp; r++ {
			b := cpu.New(1)
			defer b.Close()
			bes = append(bes, b)
		}
		m, err := LoadParallelForced(ck, bes, cpu.NewGroup(tp), opt)
		require.NoError(t, err)
		rm, ok := m.(RankedModel)
		require.True(t, ok, "tp=%d", tp)
		require.Equal(t, tp, rm.Ranks())
		cache, err := m.NewKVCache(16, bs)
		require.NoError(t, err)
		want := read(bes[0], m.Logits(m.Forward(ids, meta, cache), rows))
		if tp == 1 {
			require.Equal(t, plain, want, "a forced one-rank model computes what Load's does")
		}
		slices := make([]ops.Tensor, tp)
		next := 0
		seen := make([]ops.Backend, tp)
		rm.OnRanks(cache, func(rank int, be ops.Backend, part Model, shard ops.KVCache) {
			seen[rank] = be                                                  // no require here: rank 1 runs on another goroutine
			slices[rank] = part.Logits(part.Forward(ids, meta, shard), rows) // rewrites the same KV
		})
		require.Equal(t, bes, seen)
		for r := 0; r < tp; r++ {
			lo, hi := rm.VocabSlice(r)
			require.Equal(t, next, lo, "tp=%d: rank %d's slice follows the previous", tp, r)
			next = hi
		}
		require.Equal(t, vocab, next)
		got := read(bes[0], rm.GatherLogits(len(rows), func(rank int) ops.Tensor { return slices[rank] }))
		require.Equal(t, want, got, "tp=%d", tp)
		require.Panics(t, func() { rm.OnRanks(c1, func(int, ops.Backend, Model, ops.KVCache) {}) }, "a foreign cache")
		m.(interface{ Close() }).Close()
	}
}

// TestLoadParallelRefusesNoRanks: the forced constructor still needs a backend and a group.
func TestLoadParallelRefusesNoRanks(t *testing.T) {
	ck, err := OpenCheckpoint("../testdata/models/llama-bf16")
	require.NoError(t, err)
	defer ck.Close()
	_, err = LoadParallelForced(ck, nil, cpu.NewGroup(0), Options{MaxTokens: 8, MaxSeqs: 1})
	require.ErrorContains(t, err, "a group of 0 ranks is needed")
	_, err = LoadParallelForced(ck, []ops.Backend{cpu.New(1)}, nil, Options{MaxTokens: 8, MaxSeqs: 1})
	require.ErrorContains(t, err, "a group of 1 ranks is needed")
}
