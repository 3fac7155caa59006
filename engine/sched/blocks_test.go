package sched

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHashBlockChaining(t *testing.T) {
	a, b := []int32{1, 2, 3, 4}, []int32{5, 6, 7, 8}
	tests := []struct {
		name  string
		x, y  uint64
		equal bool
	}{
		{"same parent and tokens", hashBlock(rootHash, a), hashBlock(rootHash, a), true},
		{"same tokens, different parent", hashBlock(rootHash, b), hashBlock(hashBlock(rootHash, a), b), false},
		{"same parent, different tokens", hashBlock(rootHash, a), hashBlock(rootHash, b), false},
		{"token order matters", hashBlock(rootHash, []int32{1, 2}), hashBlock(rootHash, []int32{2, 1}), false},
		{"token width matters", hashBlock(rootHash, []int32{256}), hashBlock(rootHash, []int32{1}), false},
		{"negative tokens hash", hashBlock(rootHash, []int32{-1}), hashBlock(rootHash, []int32{-1}), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.equal, tc.x == tc.y)
		})
	}

	t.Run("sequence hashes chain", func(t *testing.T) {
		s1 := NewSequence("1", cat(a, b))
		s2 := NewSequence("2", cat(b, b))
		h1, h2 := s1.hashes(2, 4), s2.hashes(2, 4)
		require.Equal(t, hashBlock(rootHash, a), h1[0])
		require.Equal(t, hashBlock(h1[0], b), h1[1])
		require.NotEqual(t, h1[1], h2[1], "equal block tokens, different parents")
		// Recomputed for another block size.
		require.Equal(t, hashBlock(rootHash, []int32{1, 2}), s1.hashes(1, 2)[0])
	})
}

func TestAllocateAndFree(t *testing.T) {
	tests := []struct {
		name       string
		numTokens  []int // successive Allocate calls on one sequence
		wantOK     bool  // of the last call
		wantTable  []int32
		wantFreeAf int
	}{
		{"nothing", []int{0}, true, nil, 8},
		{"one token", []int{1}, true, []int32{0}, 7},
		{"exactly one block", []int{4}, true, []int32{0}, 7},
		{"one past a block", []int{5}, true, []int32{0, 1}, 6},
		{"grow in steps", []int{3, 4, 9, 9}, true, []int32{0, 1, 2}, 5},
		{"whole cache", []int{32}, true, []int32{0, 1, 2, 3, 4, 5, 6, 7}, 0},
		{"more than the cache", []int{33}, false, nil, 8},
		{"grow past the cache keeps the table", []int{8, 33}, false, []int32{0, 1}, 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bm := NewBlockManager(8, 4, true)
			seq := NewSequence("s", seqRange(1, 40))
			var ok bool
			for _, n := range tc.numTokens {
				can := bm.CanAllocate(seq, n)
				ok = bm.Allocate(seq, n)
				require.Equal(t, can, ok)
			}
			require.Equal(t, tc.wantOK, ok)
			require.Equal(t, tc.wantTable, seq.BlockTable)
			require.Equal(t, tc.wantFreeAf, bm.NumFreeBlocks())
			require.Equal(t, 8-tc.wantFreeAf, bm.UsedBlocks())
			require.NoError(t, checkBlockManager(bm))

			bm.Free(seq)
			require.Empty(t, seq.BlockTable)
			require.Equal(t, 8, bm.NumFreeBlocks())
			require.Zero(t, bm.UsedBlocks())
			require.NoError(t, checkBlockManager(bm))
		})
	}
}

func TestOutOfBlocks(t *testing.T) {
	bm := NewBlockManager(4, 2, true)
	a := NewSequence("a", seqRange(1, 5))
	require.True(t, bm.Allocate(a, 5)) // blocks 0,1,2; [1,2] and [3,4] cached
	b := NewSequence("b", seqRange(1, 8))
	require.False(t, bm.CanAllocate(b, 3))
	require.False(t, bm.Allocate(b, 3), "needs 2 blocks, 1 free")
	require.Empty(t, b.BlockTable)
	require.Equal(t, 1, bm.NumFreeBlocks())

	bm.Free(a) // queue: 3, 2, 1, 0
	x := NewSequence("x", []int32{70, 71})
	require.True(t, bm.Allocate(x, 2))
	require.Equal(t, []int32{3}, x.BlockTable)

	// b hits blocks 0 and 1, which sit in the free queue: taking them
	// leaves a single block for new allocations.
	cached, n := bm.ComputedPrefix(b)
	require.Equal(t, []int32{0, 1}, cached)
	require.Equal(t, 4, n)
	require.False(t, bm.Admit(b, cached, 8), "needs 2 new blocks, 1 left after the hits")
	require.Empty(t, b.BlockTable)
	require.Equal(t, 3, bm.NumFreeBlocks())
	require.Zero(t, bm.PrefixCacheQueries(), "a failed admission is not counted")
	require.NoError(t, checkBlockManager(bm))

	require.True(t, bm.Admit(b, cached, 6))
	require.Equal(t, []int32{0, 1, 2}, b.BlockTable)
	require.Zero(t, bm.NumFreeBlocks())
	require.Equal(t, int64(8), bm.PrefixCacheQueries())
	require.Equal(t, int64(4), bm.PrefixCacheHits())
	require.NoError(t, checkBlockManager(bm))
}

func TestComputedPrefix(t *testing.T) {
	a := seqRange(1, 14) // 3 full blocks of 4 and 2 tokens
	tests := []struct {
		name       string
		prompt     []int32
		wantBlocks []int32
	}{
		{"identical prompt stops before the last token", a, []int32{0, 1, 2}},
		{"shared first two blocks", cat(a[:8], []int32{90, 91, 92, 93, 94}), []int32{0, 1}},
		{"diverges inside block 2", cat(a[:10], []int32{90, 91, 92}), []int32{0, 1}},
		{"different first token", cat([]int32{99}, a[1:]), nil},
		{"same block 1, different block 0 (chaining)", cat([]int32{99, 98, 97, 96}, a[4:]), nil},
		{"len-1 cap: exactly 3 blocks long", a[:12], []int32{0, 1}},
		{"len-1 cap: one past 3 blocks", a[:13], []int32{0, 1, 2}},
		{"len-1 cap: one block long", a[:4], nil},
		{"len-1 cap: one token", a[:1], nil},
		{"longer than the cached sequence", cat(a, seqRange(100, 20)), []int32{0, 1, 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bm := NewBlockManager(16, 4, true)
			owner := NewSequence("a", a)
			require.True(t, bm.Allocate(owner, len(a)))
			require.Equal(t, 3, bm.NumCachedBlocks(), "the partial last block is not cached")

			seq := NewSequence("b", tc.prompt)
			blocks, n := bm.ComputedPrefix(seq)
			require.Equal(t, tc.wantBlocks, blocks)
			require.Equal(t, 4*len(tc.wantBlocks), n)

			// Admission shares the hits with the owner.
			require.True(t, bm.Admit(seq, blocks, len(tc.prompt)))
			require.Equal(t, len(tc.prompt)/4, seq.numRegistered, "every full block offered to the cache")
			for i, id := range blocks {
				require.Equal(t, id, seq.BlockTable[i])
			}
			for _, id := range blocks {
				require.Equal(t, 2, bm.blocks[id].refCount)
			}
			require.Equal(t, 4+bm.blocksFor(len(tc.prompt))-len(blocks), bm.UsedBlocks())
			require.NoError(t, checkBlockManager(bm))
		})
	}
}

func TestEvictionOrder(t *testing.T) {
	t.Run("tail of a freed sequence first", func(t *testing.T) {
		bm := NewBlockManager(6, 2, true)
		a := NewSequence("a", seqRange(1, 6))
		require.True(t, bm.Allocate(a, 6))
		require.Equal(t, []int32{0, 1, 2}, a.BlockTable)
		bm.Free(a) // queue: 3 4 5 (never used) then 2 1 0
		require.Equal(t, 3, bm.NumCachedBlocks())

		c := NewSequence("c", seqRange(100, 8))
		require.True(t, bm.Allocate(c, 8))
		require.Equal(t, []int32{3, 4, 5, 2}, c.BlockTable, "a's last block is evicted first")

		again := NewSequence("a2", seqRange(1, 7))
		blocks, n := bm.ComputedPrefix(again)
		require.Equal(t, []int32{0, 1}, blocks)
		require.Equal(t, 4, n)
		require.NoError(t, checkBlockManager(bm))
	})

	t.Run("least recently freed sequence first", func(t *testing.T) {
		bm := NewBlockManager(4, 2, true)
		a := NewSequence("a", []int32{1, 2, 3, 4})
		b := NewSequence("b", []int32{5, 6, 7, 8})
		require.True(t, bm.Allocate(a, 4))
		require.True(t, bm.Allocate(b, 4))
		bm.Free(b) // queue: 3 2
		bm.Free(a) // queue: 3 2 1 0

		d := NewSequence("d", []int32{9, 10})
		require.True(t, bm.Allocate(d, 2))
		require.Equal(t, []int32{3}, d.BlockTable)

		bBlocks, _ := bm.ComputedPrefix(NewSequence("b2", []int32{5, 6, 7, 8, 9}))
		require.Equal(t, []int32{2}, bBlocks, "b's tail was evicted")
		a2 := NewSequence("a2", []int32{1, 2, 3, 4, 9})
		aBlocks, _ := bm.ComputedPrefix(a2)
		require.Equal(t, []int32{0, 1}, aBlocks, "a was freed later and survives")

		// A hit takes blocks out of the queue; the new block then evicts b.
		require.True(t, bm.Admit(a2, aBlocks, 5))
		require.Equal(t, []int32{0, 1, 2}, a2.BlockTable)
		require.Zero(t, bm.NumFreeBlocks())
		bBlocks, _ = bm.ComputedPrefix(NewSequence("b3", []int32{5, 6, 7, 8, 9}))
		require.Empty(t, bBlocks)
		require.NoError(t, checkBlockManager(bm))
	})
}

func TestSharedBlockRefCounts(t *testing.T) {
	bm := NewBlockManager(8, 4, true)
	a := NewSequence("a", seqRange(1, 9))
	require.True(t, bm.Allocate(a, 9))
	require.Equal(t, []int32{0, 1, 2}, a.BlockTable)

	b := NewSequence("b", cat(seqRange(1, 8), []int32{50, 51, 52}))
	cached, n := bm.ComputedPrefix(b)
	require.Equal(t, 8, n)
	require.True(t, bm.Admit(b, cached, b.Len()))
	require.Equal(t, []int32{0, 1, 3}, b.BlockTable)
	refs := func() []int {
		out := make([]int, 4)
		for i := range out {
			out[i] = bm.blocks[i].refCount
		}
		return out
	}
	require.Equal(t, []int{2, 2, 1, 1}, refs())
	require.Equal(t, 4, bm.UsedBlocks())

	bm.Free(a)
	require.Equal(t, []int{1, 1, 0, 1}, refs(), "shared blocks outlive their first owner")
	require.Equal(t, 3, bm.UsedBlocks())
	require.NoError(t, checkBlockManager(bm))

	bm.Free(b)
	require.Equal(t, []int{0, 0, 0, 0}, refs())
	require.Zero(t, bm.UsedBlocks())

	// Reviving cached free blocks takes them out of the free queue.
	c := NewSequence("c", seqRange(1, 9))
	cached, _ = bm.ComputedPrefix(c)
	require.Equal(t, []int32{0, 1}, cached)
	require.True(t, bm.Admit(c, cached, 9))
	require.Equal(t, []int{1, 1, 0, 0}, refs()[:4])
	require.Equal(t, 3, bm.UsedBlocks())
	require.Equal(t, 5, bm.NumFreeBlocks())
	require.NoError(t, checkBlockManager(bm))
}

func TestPrefixCachingDisabled(t *testing.T) {
	bm := NewBlockManager(8, 4, false)
	a := NewSequence("a", seqRange(1, 12))
	require.True(t, bm.Allocate(a, 12))
	require.Zero(t, bm.NumCachedBlocks())
	bm.Free(a)

	b := NewSequence("b", seqRange(1, 12))
	blocks, n := bm.ComputedPrefix(b)
	require.Nil(t, blocks)
	require.Zero(t, n)
	require.True(t, bm.Admit(b, nil, 12))
	require.Zero(t, bm.PrefixCacheQueries())
	require.NoError(t, checkBlockManager(bm))
}

func TestDuplicateContentKeepsFirstBlock(t *testing.T) {
	bm := NewBlockManager(8, 4, true)
	a := NewSequence("a", seqRange(1, 8))
	b := NewSequence("b", seqRange(1, 8))
	require.True(t, bm.Allocate(a, 8)) // computed independently, no lookup
	require.True(t, bm.Allocate(b, 8))
	require.Equal(t, 2, bm.NumCachedBlocks())
	for _, id := range b.BlockTable {
		require.False(t, bm.blocks[id].hashed, "the second copy stays private")
	}
	blocks, _ := bm.ComputedPrefix(NewSequence("c", seqRange(1, 9)))
	require.Equal(t, a.BlockTable, blocks)
	require.NoError(t, checkBlockManager(bm))
}

func TestHashCollisionGuard(t *testing.T) {
	bm := NewBlockManager(8, 4, true)
	a := NewSequence("a", seqRange(1, 9))
	require.True(t, bm.Allocate(a, 9))
	// Pretend block 1's content collides with a's second block: same hash,
	// other tokens. The lookup must stop there.
	bm.blocks[1].tokens[0] = 999
	blocks, n := bm.ComputedPrefix(NewSequence("b", seqRange(1, 9)))
	require.Equal(t, []int32{0}, blocks)
	require.Equal(t, 4, n)
}

func TestResetPrefixCache(t *testing.T) {
	bm := NewBlockManager(8, 4, true)
	a := NewSequence("a", seqRange(1, 9))
	require.True(t, bm.Allocate(a, 9))
	b := NewSequence("b", seqRange(100, 8))
	require.True(t, bm.Allocate(b, 8))
	bm.Free(b)
	require.Equal(t, 4, bm.NumCachedBlocks())

	bm.ResetPrefixCache()
	require.Zero(t, bm.NumCachedBlocks())
	blocks, _ := bm.ComputedPrefix(NewSequence("c", seqRange(1, 9)))
	require.Empty(t, blocks)
	require.Equal(t, 3, bm.UsedBlocks(), "blocks in use stay with their sequence")
	require.NoError(t, checkBlockManager(bm))
}

func TestNewBlockManagerPanicsOnBadSize(t *testing.T) {
	require.Panics(t, func() { NewBlockManager(0, 4, true) })
	require.Panics(t, func() { NewBlockManager(4, 0, true) })
}
