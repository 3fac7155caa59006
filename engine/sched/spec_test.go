package sched

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSpecDraftsScheduledVerifiedAndRolledBack: drafts get budget and KV slots in one sampled
// chunk, are never hashed, and AcceptDrafts keeps the accepted ones and frees the blocks that
// held only rejected ones; the budget trims drafts, MaxModelLen caps them, preemption drops
// them.
func TestSpecDraftsScheduledVerifiedAndRolledBack(t *testing.T) {
	s := newSched(t, Config{NumBlocks: 8, BlockSize: 4, MaxModelLen: 20, EnablePrefixCaching: true})
	seq := addSeq(t, s, "a", seqRange(1, 7))
	step(t, s, 100) // prefill: 8 tokens, 7 computed
	require.Zero(t, s.SetDrafts(seq, nil))
	require.Equal(t, 5, s.SetDrafts(seq, []int32{101, 102, 103, 104, 105}))
	require.Zero(t, s.SetDrafts(seq, []int32{9}), "drafts already set")
	require.Equal(t, 13, seq.Len())
	require.Equal(t, 5, seq.NumDrafts())

	b := s.Schedule()
	require.Len(t, b.Items, 1)
	require.Equal(t, Item{Seq: seq, Start: 7, NumTokens: 6, Sample: true}, b.Items[0])
	require.Len(t, seq.BlockTable, 4)
	require.Equal(t, 2, s.bm.NumCachedBlocks(), "only blocks of known tokens are hashed")
	s.Commit(b)

	s.AcceptDrafts(seq, 1)
	require.Equal(t, cat(seqRange(1, 7), []int32{100, 101}), seq.TokenIDs)
	require.Equal(t, 9, seq.NumComputed)
	require.Zero(t, seq.NumDrafts())
	require.Len(t, seq.BlockTable, 3, "the block holding only rejected drafts is freed")
	require.Equal(t, 8-3, s.bm.NumFreeBlocks())
	s.AppendToken(seq, 7)
	b = s.Schedule()
	require.Equal(t, Item{Seq: seq, Start: 9, NumTokens: 1, Sample: true}, b.Items[0])
	s.Commit(b)
	s.AppendToken(seq, 8)

	// MaxModelLen caps the drafts: all accepted plus the verify step's token fit within 20.
	require.Equal(t, 20-11-1, s.SetDrafts(seq, seqRange(200, 16)))
	s.preempt(s.running[0])
	s.running = s.running[:0]
	require.Zero(t, seq.NumDrafts(), "preemption drops the drafts")
	require.Equal(t, 11, seq.Len())
	require.Equal(t, 8, s.bm.NumFreeBlocks())

	// A small budget trims the drafts so the verify chunk still ends at the last token.
	s2 := newSched(t, Config{NumBlocks: 8, BlockSize: 4, MaxNumBatchedTokens: 3})
	seq2 := addSeq(t, s2, "b", seqRange(1, 2))
	step(t, s2, 50)
	require.Equal(t, 4, s2.SetDrafts(seq2, seqRange(60, 4)))
	b = s2.Schedule()
	require.Equal(t, Item{Seq: seq2, Start: 2, NumTokens: 3, Sample: true}, b.Items[0])
	require.Equal(t, 2, seq2.NumDrafts())
	s2.Commit(b)
	s2.AcceptDrafts(seq2, 2)
	require.Equal(t, 5, seq2.NumComputed)
	s2.Finish(seq2)
	require.Equal(t, 8, s2.bm.NumFreeBlocks())
}

// TestSpecLookaheadSlots: with LookaheadTokens, a sampling chunk gets KV slots for that many
// tokens past it (within MaxModelLen), a prefill chunk that does not sample gets none, and
// AcceptDrafts keeps the lookahead slots past the accepted tokens; finishing frees them all.
func TestSpecLookaheadSlots(t *testing.T) {
	s := newSched(t, Config{NumBlocks: 10, BlockSize: 4, MaxModelLen: 24, MaxNumBatchedTokens: 5, LookaheadTokens: 3})
	seq := addSeq(t, s, "a", seqRange(1, 7))
	b := s.Schedule()
	require.Equal(t, Item{Seq: seq, Start: 0, NumTokens: 5, Sample: false}, b.Items[0])
	require.Len(t, seq.BlockTable, 2, "a chunk that does not sample gets no lookahead")
	s.Commit(b)
	b = s.Schedule()
	require.Equal(t, Item{Seq: seq, Start: 5, NumTokens: 2, Sample: true}, b.Items[0])
	require.Len(t, seq.BlockTable, 3, "7 tokens + 3 lookahead")
	s.Commit(b)
	s.AppendToken(seq, 100)

	require.Equal(t, 3, s.SetDrafts(seq, []int32{101, 102, 103}))
	b = s.Schedule()
	require.Equal(t, Item{Seq: seq, Start: 7, NumTokens: 4, Sample: true}, b.Items[0])
	require.Len(t, seq.BlockTable, 4, "11 tokens + 3 lookahead")
	s.Commit(b)
	s.AcceptDrafts(seq, 0)
	require.Equal(t, 8, seq.Len())
	require.Len(t, seq.BlockTable, 3, "8 tokens + 3 lookahead keep 3 blocks")

	// Near MaxModelLen the lookahead stops there.
	for seq.Len() < 22 {
		s.AppendToken(seq, 7)
	}
	s.Abort("a")
	seq2 := addSeq(t, s, "b", seqRange(1, 22))
	for range 5 {
		b = s.Schedule()
		s.Commit(b)
		if b.Items[0].Sample {
			break
		}
	}
	require.Len(t, seq2.BlockTable, 6, "22 tokens + lookahead capped at 24")
	s.Finish(seq2)
	require.Equal(t, 10, s.bm.NumFreeBlocks())

	_, err := New(Config{NumBlocks: 1, BlockSize: 4, LookaheadTokens: -1})
	require.ErrorIs(t, err, ErrInvalidConfig)
}
