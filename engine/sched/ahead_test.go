package sched

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// aheadSetup runs two sequences (prompts of 3 and 4 tokens, block size 4) through their
// prefill; each then waits for the token its step drew.
func aheadSetup(t *testing.T, cfg Config) (*Scheduler, *Sequence, *Sequence) {
	t.Helper()
	s := newSched(t, cfg)
	a := addSeq(t, s, "a", seqRange(10, 3))
	b := addSeq(t, s, "b", seqRange(20, 4))
	batch := s.Schedule()
	require.Len(t, batch.Items, 2)
	s.Commit(batch)
	return s, a, b
}

func TestScheduleAheadDecodesWithPlaceholders(t *testing.T) {
	s, a, b := aheadSetup(t, Config{NumBlocks: 8, BlockSize: 4, EnablePrefixCaching: true})
	batch, ok := s.ScheduleAhead([]*Sequence{a, b})
	require.True(t, ok)
	require.Equal(t, []Item{{Seq: a, Start: 3, NumTokens: 1, Sample: true}, {Seq: b, Start: 4, NumTokens: 1, Sample: true}}, batch.Items)
	require.Equal(t, 2, batch.NumTokens)
	require.Equal(t, 1, a.NumPending())
	require.Len(t, a.BlockTable, 1, "a's placeholder fills its first block")
	require.Len(t, b.BlockTable, 2, "b's placeholder opens a second block")
	require.Zero(t, s.BlockManager().NumCachedBlocks()-1, "only b's all-prompt block is hashed, not a's block ending in a placeholder")
	require.Panics(t, func() { s.AppendToken(a, 7) }, "a pending token must be resolved first")
	s.Commit(batch)
	require.NoError(t, checkScheduler(s, true))

	s.ResolvePending(a, 7)
	s.ResolvePending(b, 8)
	require.Equal(t, cat(seqRange(10, 3), []int32{7}), a.TokenIDs)
	require.Zero(t, a.NumPending())
	require.Panics(t, func() { s.ResolvePending(a, 1) })
	s.AppendToken(a, 9)
	s.AppendToken(b, 9)
	next := step(t, s, 5)
	require.Len(t, next.Items, 2)
	require.Equal(t, 2, s.BlockManager().NumCachedBlocks(), "a's first block is hashed once its token is known")
	hit := NewSequence("c", cat(seqRange(10, 3), []int32{7}, []int32{1}))
	_, n := s.BlockManager().ComputedPrefix(hit)
	require.Equal(t, 4, n, "the resolved block serves a later prompt")
}

func TestScheduleAheadRefuses(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		setup func(t *testing.T, s *Scheduler, a, b *Sequence) []*Sequence
	}{
		{"a sequence waiting", Config{NumBlocks: 8, BlockSize: 4}, func(t *testing.T, s *Scheduler, a, b *Sequence) []*Sequence {
			addSeq(t, s, "w", seqRange(0, 2))
			return []*Sequence{a, b}
		}},
		{"not the running list", Config{NumBlocks: 8, BlockSize: 4}, func(t *testing.T, s *Scheduler, a, b *Sequence) []*Sequence {
			return []*Sequence{b, a}
		}},
		{"a sequence finished", Config{NumBlocks: 8, BlockSize: 4}, func(t *testing.T, s *Scheduler, a, b *Sequence) []*Sequence {
			s.Finish(b)
			return []*Sequence{a, b}
		}},
		{"a token not yet computed", Config{NumBlocks: 8, BlockSize: 4}, func(t *testing.T, s *Scheduler, a, b *Sequence) []*Sequence {
			s.AppendToken(a, 1)
			return []*Sequence{a, b}
		}},
		{"too few free blocks", Config{NumBlocks: 2, BlockSize: 4}, func(t *testing.T, s *Scheduler, a, b *Sequence) []*Sequence {
			return []*Sequence{a, b} // b's fifth token needs a third block
		}},
		{"one token short of MaxModelLen", Config{NumBlocks: 8, BlockSize: 4, MaxModelLen: 5}, func(t *testing.T, s *Scheduler, a, b *Sequence) []*Sequence {
			return []*Sequence{a, b}
		}},
		{"over the token budget", Config{NumBlocks: 8, BlockSize: 4, MaxNumBatchedTokens: 1}, func(t *testing.T, s *Scheduler, a, b *Sequence) []*Sequence {
			return []*Sequence{a, b}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSched(t, tc.cfg)
			a := addSeq(t, s, "a", seqRange(10, 3))
			b := addSeq(t, s, "b", seqRange(20, 4))
			for a.NumComputed < a.Len() || b.NumComputed < b.Len() {
				s.Commit(s.Schedule())
			}
			seqs := tc.setup(t, s, a, b)
			lens, free := []int{a.Len(), b.Len()}, s.BlockManager().NumFreeBlocks()
			_, ok := s.ScheduleAhead(seqs)
			require.False(t, ok)
			require.Equal(t, lens, []int{a.Len(), b.Len()}, "no placeholder appended")
			require.Equal(t, free, s.BlockManager().NumFreeBlocks(), "no block taken")
			require.Zero(t, a.NumPending()+b.NumPending())
		})
	}
}

func TestResolvePendingAfterFinishIsNoOp(t *testing.T) {
	s, a, b := aheadSetup(t, Config{NumBlocks: 8, BlockSize: 4})
	batch, ok := s.ScheduleAhead([]*Sequence{a, b})
	require.True(t, ok)
	s.Commit(batch)
	s.Finish(a)
	s.ResolvePending(a, 3)
	s.ResolvePending(b, 4)
	require.Equal(t, int32(4), b.TokenIDs[b.Len()-1])
	require.NoError(t, checkScheduler(s, true))
}
