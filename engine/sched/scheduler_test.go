package sched

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNewValidatesConfig(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr bool
	}{
		{"no blocks", Config{BlockSize: 4}, true},
		{"no block size", Config{NumBlocks: 4}, true},
		{"negative MaxNumSeqs", Config{NumBlocks: 4, BlockSize: 4, MaxNumSeqs: -1}, true},
		{"negative budget", Config{NumBlocks: 4, BlockSize: 4, MaxNumBatchedTokens: -1}, true},
		{"negative threshold", Config{NumBlocks: 4, BlockSize: 4, LongPrefillTokenThreshold: -1}, true},
		{"negative MaxModelLen", Config{NumBlocks: 4, BlockSize: 4, MaxModelLen: -1}, true},
		{"MaxModelLen beyond the cache", Config{NumBlocks: 4, BlockSize: 4, MaxModelLen: 17}, true},
		{"MaxModelLen equal to the cache", Config{NumBlocks: 4, BlockSize: 4, MaxModelLen: 16}, false},
		{"defaults", Config{NumBlocks: 4, BlockSize: 4}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(tc.cfg)
			if tc.wantErr {
				require.ErrorIs(t, err, ErrInvalidConfig)
				return
			}
			require.NoError(t, err)
			cfg := s.Config()
			require.Equal(t, DefaultMaxNumSeqs, cfg.MaxNumSeqs)
			require.Equal(t, DefaultMaxNumBatchedTokens, cfg.MaxNumBatchedTokens)
			require.Equal(t, 16, cfg.MaxModelLen)
			require.False(t, s.HasWork())
			require.Empty(t, s.Schedule().Items, "an idle scheduler returns an empty batch")
		})
	}
}

func TestAddRejects(t *testing.T) {
	s := newSched(t, Config{NumBlocks: 4, BlockSize: 4, MaxModelLen: 16})
	addSeq(t, s, "dup", []int32{1})
	tests := []struct {
		name    string
		seq     *Sequence
		wantErr error
		wantMsg string
	}{
		{"empty prompt", NewSequence("e", nil), ErrEmptyPrompt, ""},
		{"no prompt tokens", &Sequence{ID: "p", TokenIDs: []int32{1}}, ErrEmptyPrompt, ""},
		{"prompt count beyond tokens", &Sequence{ID: "q", TokenIDs: []int32{1}, NumPromptTokens: 2}, ErrInvalidSequence, ""},
		{"nil", nil, ErrInvalidSequence, ""},
		{"prompt of MaxModelLen leaves no room", NewSequence("l", seqRange(0, 16)), ErrPromptTooLong, "16 tokens, MaxModelLen 16"},
		{"prompt over MaxModelLen", NewSequence("m", seqRange(0, 40)), ErrPromptTooLong, "40 tokens"},
		{"duplicate id", NewSequence("dup", []int32{2}), ErrDuplicateID, "dup"},
		{"longest allowed prompt", NewSequence("ok", seqRange(0, 15)), nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Add(tc.seq)
			if tc.wantErr == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.wantErr)
			require.Contains(t, err.Error(), tc.wantMsg)
		})
	}
	require.Equal(t, 2, s.Stats().Waiting)
}

func TestChunkedPrefill(t *testing.T) {
	tests := []struct {
		name      string
		budget    int
		threshold int
		promptLen int
		chunks    []int
	}{
		{"fits the budget", 100, 0, 20, []int{20}},
		{"exactly the budget", 8, 0, 8, []int{8}},
		{"chunked by the budget", 8, 0, 20, []int{8, 8, 4}},
		{"chunked by the threshold", 8, 5, 12, []int{5, 5, 2}},
		{"threshold above the budget", 4, 6, 10, []int{4, 4, 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSched(t, Config{NumBlocks: 64, BlockSize: 4, MaxNumBatchedTokens: tc.budget, LongPrefillTokenThreshold: tc.threshold})
			seq := addSeq(t, s, "a", seqRange(1, tc.promptLen))
			start := 0
			for i, n := range tc.chunks {
				b := step(t, s, 7)
				require.Len(t, b.Items, 1)
				last := i == len(tc.chunks)-1
				require.Equal(t, Item{Seq: seq, Start: start, NumTokens: n, Sample: last}, b.Items[0])
				require.Equal(t, n, b.NumTokens)
				start += n
			}
			require.Equal(t, tc.promptLen+1, seq.Len())
			b := step(t, s, 8)
			require.Equal(t, []Item{{Seq: seq, Start: tc.promptLen, NumTokens: 1, Sample: true}}, b.Items)
			require.Equal(t, []int32{7, 8}, seq.OutputTokenIDs())
			require.Equal(t, 2, seq.NumGenerated())
		})
	}
}

func TestPrefillAndDecodeMixed(t *testing.T) {
	s := newSched(t, Config{NumBlocks: 64, BlockSize: 4, MaxNumBatchedTokens: 10})
	a := addSeq(t, s, "a", seqRange(1, 3))
	b := addSeq(t, s, "b", seqRange(100, 20))
	c := addSeq(t, s, "c", seqRange(200, 2))
	want := [][]Item{
		{{a, 0, 3, true}, {b, 0, 7, false}}, // c waits: budget spent
		{{a, 3, 1, true}, {b, 7, 9, false}},
		{{a, 4, 1, true}, {b, 16, 4, true}, {c, 0, 2, true}},
		{{a, 5, 1, true}, {b, 20, 1, true}, {c, 2, 1, true}},
	}
	for i, items := range want {
		batch := step(t, s, 1)
		require.Equal(t, items, batch.Items, "step %d", i)
		require.LessOrEqual(t, batch.NumTokens, 10)
	}
}

func TestMaxNumSeqs(t *testing.T) {
	s := newSched(t, Config{NumBlocks: 64, BlockSize: 4, MaxNumSeqs: 2})
	a := addSeq(t, s, "a", []int32{1, 2})
	b := addSeq(t, s, "b", []int32{3, 4})
	c := addSeq(t, s, "c", []int32{5, 6})
	batch := step(t, s, 9)
	require.Equal(t, []Item{{a, 0, 2, true}, {b, 0, 2, true}}, batch.Items)
	require.Equal(t, Stats{Running: 2, Waiting: 1, KVBlocksUsed: 2, KVBlocksTotal: 64, KVCacheUsage: 2.0 / 64}, s.Stats())

	s.Finish(a)
	batch = step(t, s, 9)
	require.Equal(t, []Item{{b, 2, 1, true}, {c, 0, 2, true}}, batch.Items)
}

// preemptionSetup runs two 3-token prompts on a 4-block cache of 2-token
// blocks until the third step, where a's decode needs a block and b, the
// newest, is preempted. Tokens appended are 101, 102, ...
func preemptionSetup(t *testing.T, prefixCaching bool) (s *Scheduler, a, b *Sequence, batch Batch) {
	s = newSched(t, Config{NumBlocks: 4, BlockSize: 2, MaxModelLen: 8, EnablePrefixCaching: prefixCaching})
	a = addSeq(t, s, "a", []int32{1, 2, 3})
	b = addSeq(t, s, "b", []int32{4, 5, 6})
	require.Equal(t, []Item{{a, 0, 3, true}, {b, 0, 3, true}}, step(t, s, 101).Items)
	require.Equal(t, []Item{{a, 3, 1, true}, {b, 3, 1, true}}, step(t, s, 102).Items)
	batch = step(t, s, 103)
	require.Equal(t, []Item{{a, 4, 1, true}}, batch.Items)
	require.Equal(t, []*Sequence{b}, batch.Preempted)
	return s, a, b, batch
}

func TestPreemptionRecomputesPromptAndOutput(t *testing.T) {
	for _, caching := range []bool{false, true} {
		t.Run(map[bool]string{false: "no prefix cache", true: "prefix cache"}[caching], func(t *testing.T) {
			s, a, b, _ := preemptionSetup(t, caching)
			require.Equal(t, Waiting, b.Status)
			require.Zero(t, b.NumComputed)
			require.Empty(t, b.BlockTable)
			require.Equal(t, 1, b.NumPreemptions())
			st := s.Stats()
			require.Equal(t, int64(1), st.NumPreemptions)
			require.Equal(t, 1, st.Running)
			require.Equal(t, 1, st.Waiting)

			// a keeps decoding; b does not fit back (3 blocks, 1 free).
			require.Equal(t, []Item{{a, 5, 1, true}}, step(t, s, 104).Items)
			require.Equal(t, []Item{{a, 6, 1, true}}, step(t, s, 105).Items)
			require.True(t, s.AtMaxModelLen(a))
			require.Equal(t, []int32{1, 2, 3, 101, 102, 103, 104, 105}, a.TokenIDs)
			s.Finish(a)

			// b recomputes prompt and generated tokens, then samples. Its
			// cached blocks were all evicted by a's growth.
			batch := step(t, s, 106)
			require.Equal(t, []Item{{b, 0, 5, true}}, batch.Items)
			require.Zero(t, b.NumCachedPrompt)
			require.Equal(t, []int32{4, 5, 6, 101, 102, 106}, b.TokenIDs)
			require.Equal(t, []Item{{b, 5, 1, true}}, step(t, s, 107).Items)
		})
	}
}

func TestPreemptedResumesFromPrefixCache(t *testing.T) {
	s, a, b, _ := preemptionSetup(t, true)
	s.Finish(a) // b's first block [4 5] is still cached
	batch := step(t, s, 104)
	require.Equal(t, []Item{{b, 2, 3, true}}, batch.Items)
	require.Equal(t, 2, b.NumCachedPrompt)
	st := s.Stats()
	require.Equal(t, int64(3+3+5), st.PrefixCacheQueries)
	require.Equal(t, int64(2), st.PrefixCacheHits)
	require.InDelta(t, 2.0/11, st.PrefixCacheHitRate, 1e-9)
}

func TestPreemptSelfStopsTheRunningPass(t *testing.T) {
	s := newSched(t, Config{NumBlocks: 4, BlockSize: 2})
	a := addSeq(t, s, "a", []int32{1, 2, 3})
	b := addSeq(t, s, "b", []int32{4, 5, 6, 7})
	step(t, s, 9)
	c := addSeq(t, s, "c", []int32{8})
	// a's decode fits its blocks; b, the newest, needs a fifth block.
	batch := step(t, s, 9)
	require.Equal(t, []Item{{a, 3, 1, true}}, batch.Items, "c would fit, but nothing is admitted in a step that preempted")
	require.Equal(t, []*Sequence{b}, batch.Preempted)
	require.Equal(t, Waiting, b.Status)
	require.Equal(t, 2, s.BlockManager().UsedBlocks())
	require.Equal(t, []*Sequence{b, c}, s.waiting)

	// b needs 3 blocks, 1 is free after a grew: c waits behind it (FCFS).
	batch = step(t, s, 9)
	require.Equal(t, []Item{{a, 4, 1, true}}, batch.Items)
	require.Equal(t, Waiting, c.Status)
}

func TestPreemptSeveralKeepsFCFS(t *testing.T) {
	s := newSched(t, Config{NumBlocks: 4, BlockSize: 1, MaxNumSeqs: 3})
	a := addSeq(t, s, "a", []int32{1})
	b := addSeq(t, s, "b", []int32{2})
	c := addSeq(t, s, "c", []int32{3})
	d := addSeq(t, s, "d", []int32{4})
	step(t, s, 10)
	// An engine that appends several tokens at once (as speculative
	// decoding would) makes a want 3 blocks; 1 is free.
	s.AppendToken(a, 11)
	s.AppendToken(a, 12)
	batch := s.Schedule()
	require.NoError(t, checkBatch(s, batch))
	require.Equal(t, []Item{{a, 1, 3, true}}, batch.Items)
	require.Equal(t, []*Sequence{c, b}, batch.Preempted, "newest first")
	require.Equal(t, []*Sequence{b, c, d}, s.waiting, "preempted go first, in admission order")
}

func TestAbortInEveryState(t *testing.T) {
	tests := []struct {
		name string
		// setup returns the scheduler, the id to abort, and the sequence
		// (nil for an unknown id).
		setup    func(t *testing.T) (*Scheduler, string, *Sequence)
		wantUsed int // blocks used afterwards
	}{
		{"waiting", func(t *testing.T) (*Scheduler, string, *Sequence) {
			s := newSched(t, Config{NumBlocks: 4, BlockSize: 2})
			return s, "a", addSeq(t, s, "a", []int32{1, 2, 3})
		}, 0},
		{"running decode", func(t *testing.T) (*Scheduler, string, *Sequence) {
			s := newSched(t, Config{NumBlocks: 4, BlockSize: 2})
			a := addSeq(t, s, "a", []int32{1, 2, 3})
			addSeq(t, s, "b", []int32{4})
			step(t, s, 5)
			step(t, s, 5)
			return s, "a", a
		}, 1},
		{"mid-prefill", func(t *testing.T) (*Scheduler, string, *Sequence) {
			s := newSched(t, Config{NumBlocks: 4, BlockSize: 2, MaxNumBatchedTokens: 3})
			a := addSeq(t, s, "a", seqRange(1, 6))
			require.False(t, step(t, s, 5).Items[0].Sample)
			return s, "a", a
		}, 0},
		{"preempted", func(t *testing.T) (*Scheduler, string, *Sequence) {
			s, _, b, _ := preemptionSetup(t, true)
			return s, "b", b
		}, 3},
		{"unknown", func(t *testing.T) (*Scheduler, string, *Sequence) {
			s := newSched(t, Config{NumBlocks: 4, BlockSize: 2})
			return s, "nobody", nil
		}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, id, seq := tc.setup(t)
			require.Equal(t, seq != nil, s.Abort(id))
			require.False(t, s.Abort(id), "a second abort finds nothing")
			require.NoError(t, checkScheduler(s, true))
			require.Equal(t, tc.wantUsed, s.Stats().KVBlocksUsed)
			if seq != nil {
				require.Equal(t, Finished, seq.Status)
				require.Empty(t, seq.BlockTable)
			}
			// The rest keeps running to the end, leaving every block free.
			for i := 0; s.HasWork() && i < 20; i++ {
				for _, it := range step(t, s, 1).Items {
					if it.Sample {
						s.Finish(it.Seq)
					}
				}
			}
			require.False(t, s.HasWork())
			require.Zero(t, s.Stats().KVBlocksUsed)
		})
	}
}

func TestAbortDuringStepIsSkippedByCommit(t *testing.T) {
	s := newSched(t, Config{NumBlocks: 8, BlockSize: 2, MaxNumBatchedTokens: 4})
	a := addSeq(t, s, "a", seqRange(1, 6))
	b := s.Schedule()
	require.True(t, s.Abort("a"))
	require.NotPanics(t, func() { s.Commit(b) })
	require.Zero(t, a.NumComputed)
	s.AppendToken(a, 1) // dropped: a is finished
	require.Equal(t, 6, a.Len())
	require.NoError(t, checkScheduler(s, true))
}

func TestCommitRejectsStaleBatch(t *testing.T) {
	s := newSched(t, Config{NumBlocks: 8, BlockSize: 2})
	addSeq(t, s, "a", seqRange(1, 3))
	b := s.Schedule()
	s.Commit(b)
	require.Panics(t, func() { s.Commit(b) })
}

func TestMaxModelLen(t *testing.T) {
	s := newSched(t, Config{NumBlocks: 4, BlockSize: 2, MaxModelLen: 8})
	a := addSeq(t, s, "a", seqRange(1, 7))
	require.False(t, s.AtMaxModelLen(a))
	step(t, s, 50)
	require.True(t, s.AtMaxModelLen(a))
	require.Panics(t, func() { s.AppendToken(a, 51) })
	s.Finish(a)
	s.Finish(a) // no-op
	require.False(t, s.HasWork())
	require.Zero(t, s.Stats().KVBlocksUsed)
	// The id is free again once finished.
	addSeq(t, s, "a", []int32{1})
}

func TestSharedPrefixComputesOnlyNewTokens(t *testing.T) {
	prefix := seqRange(1, 40) // 10 blocks of 4
	tests := []struct {
		name        string
		prompt      []int32
		finishFirst bool // the first request is done before the second comes
		wantCached  int
	}{
		{"extends the prefix", cat(prefix[:32], seqRange(500, 5)), false, 32},
		{"identical prompt", prefix, false, 36},
		{"diverges inside a block", cat(prefix[:30], seqRange(500, 3)), false, 28},
		{"unrelated", seqRange(500, 9), false, 0},
		{"first request finished", cat(prefix[:32], seqRange(500, 5)), true, 32},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSched(t, Config{NumBlocks: 64, BlockSize: 4, EnablePrefixCaching: true})
			a := addSeq(t, s, "a", prefix)
			require.Equal(t, []Item{{a, 0, 40, true}}, step(t, s, 1).Items)
			if tc.finishFirst {
				s.Finish(a)
			}
			b := addSeq(t, s, "b", tc.prompt)
			it := itemOf(t, step(t, s, 1), b)
			require.Equal(t, tc.wantCached, b.NumCachedPrompt)
			require.Equal(t, Item{b, tc.wantCached, len(tc.prompt) - tc.wantCached, true}, it)
			require.Equal(t, prefix[:tc.wantCached], b.TokenIDs[:tc.wantCached])
			if !tc.finishFirst {
				require.Equal(t, a.BlockTable[:tc.wantCached/4], b.BlockTable[:tc.wantCached/4])
			}
			st := s.Stats()
			require.Equal(t, int64(40+len(tc.prompt)), st.PrefixCacheQueries)
			require.Equal(t, int64(tc.wantCached), st.PrefixCacheHits)
		})
	}
}

func TestIdenticalPromptsShareBlocksInOneStep(t *testing.T) {
	tests := []struct {
		name      string
		caching   bool
		wantItemB Item // Seq filled in below
		wantUsed  int
	}{
		{"prefix caching", true, Item{Start: 8, NumTokens: 2, Sample: true}, 4},
		{"no prefix caching", false, Item{Start: 0, NumTokens: 2, Sample: false}, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSched(t, Config{NumBlocks: 16, BlockSize: 4, MaxNumBatchedTokens: 12, EnablePrefixCaching: tc.caching})
			a := addSeq(t, s, "a", seqRange(1, 10))
			b := addSeq(t, s, "b", seqRange(1, 10))
			batch := s.Schedule()
			require.NoError(t, checkBatch(s, batch))
			tc.wantItemB.Seq = b
			require.Equal(t, []Item{{a, 0, 10, true}, tc.wantItemB}, batch.Items)
			require.Equal(t, 12, batch.NumTokens)
			require.Equal(t, tc.wantUsed, s.Stats().KVBlocksUsed)
			if tc.caching {
				// b reads the KV a writes in this very forward pass.
				require.Equal(t, a.BlockTable[:2], b.BlockTable[:2])
				require.Equal(t, 2, s.bm.blocks[a.BlockTable[0]].refCount)
				require.Equal(t, 8, b.NumCachedPrompt)
			}
			s.Commit(batch)
			require.NoError(t, checkScheduler(s, true))
		})
	}
}

func TestStats(t *testing.T) {
	s := newSched(t, Config{NumBlocks: 8, BlockSize: 4, EnablePrefixCaching: true})
	require.Equal(t, Stats{KVBlocksTotal: 8}, s.Stats())
	addSeq(t, s, "a", seqRange(1, 9))
	addSeq(t, s, "b", seqRange(1, 9))
	step(t, s, 1)
	require.Equal(t, Stats{
		Running: 2, KVBlocksUsed: 4, KVBlocksTotal: 8, KVCacheUsage: 0.5,
		PrefixCacheQueries: 18, PrefixCacheHits: 8, PrefixCacheHitRate: 8.0 / 18,
	}, s.Stats())
}

func TestStatusString(t *testing.T) {
	require.Equal(t, "Waiting", Waiting.String())
	require.Equal(t, "Running", Running.String())
	require.Equal(t, "Finished", Finished.String())
	require.Equal(t, "Status(7)", Status(7).String())
}
