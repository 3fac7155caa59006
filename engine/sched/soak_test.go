package sched

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeModel stands in for the forward pass. Each KV slot records the
// identity of the token computed there together with its whole prefix, as
// real KV depends on every earlier token. Reading a slot and finding another
// identity means the scheduler handed a sequence foreign or unwritten KV.
type fakeModel struct {
	bs  int
	kv  [][]uint64
	ids map[*Sequence][]uint64
}

func newFakeModel(numBlocks, bs int) *fakeModel {
	kv := make([][]uint64, numBlocks)
	for i := range kv {
		kv[i] = make([]uint64, bs)
	}
	return &fakeModel{bs: bs, kv: kv, ids: map[*Sequence][]uint64{}}
}

// ident returns the prefix identity of every position of seq.
func (m *fakeModel) ident(seq *Sequence) []uint64 {
	id := m.ids[seq]
	for p := len(id); p < seq.Len(); p++ {
		prev := rootHash
		if p > 0 {
			prev = id[p-1]
		}
		id = append(id, hashBlock(prev, seq.TokenIDs[p:p+1])|1) // never 0, the unwritten value
	}
	m.ids[seq] = id
	return id
}

// forward writes the KV of every item, then checks what attention reads:
// all positions up to the last computed one. Writing first for the whole
// batch mirrors a real model, which writes each layer's KV for all tokens
// before that layer's attention reads it; sequences sharing blocks filled in
// the same step depend on it. tables are the block tables at schedule time.
func (m *fakeModel) forward(items []Item, tables [][]int32) error {
	for i, it := range items {
		id := m.ident(it.Seq)
		for p := it.Start; p < it.Start+it.NumTokens; p++ {
			m.kv[tables[i][p/m.bs]][p%m.bs] = id[p]
		}
	}
	for i, it := range items {
		id := m.ident(it.Seq)
		for p := 0; p < it.Start+it.NumTokens; p++ {
			if got := m.kv[tables[i][p/m.bs]][p%m.bs]; got != id[p] {
				return fmt.Errorf("%q reads wrong KV at position %d (block %d)", it.Seq.ID, p, tables[i][p/m.bs])
			}
		}
	}
	return nil
}

// soak drives a scheduler with random arrivals, finishes and aborts.
type soak struct {
	t     *testing.T
	s     *Scheduler
	m     *fakeModel
	rng   *rand.Rand
	pre   [][]int32 // shared prompt prefixes ("system prompts")
	next  int       // id counter
	stats map[string]int
}

func (k *soak) prompt() []int32 {
	maxLen := k.s.cfg.MaxModelLen - 1
	var p []int32
	switch r := k.rng.IntN(10); {
	case r < 7:
		p = slices.Clone(k.pre[k.rng.IntN(len(k.pre))])
	case r < 8: // long prompt
		for range 1 + k.rng.IntN(maxLen) {
			p = append(p, int32(k.rng.IntN(50)))
		}
	}
	for range 1 + k.rng.IntN(8) {
		p = append(p, int32(k.rng.IntN(4)))
	}
	return p[:min(len(p), maxLen)]
}

// live returns the waiting and running sequences in a deterministic order.
func (k *soak) live() []*Sequence { return slices.Concat(k.s.running, k.s.waiting) }

func (k *soak) abortRandom(during bool) {
	live := k.live()
	if len(live) == 0 {
		return
	}
	seq := live[k.rng.IntN(len(live))]
	state := seq.Status.String()
	switch {
	case seq.Status == Waiting && seq.NumPreemptions() > 0:
		state = "preempted"
	case seq.Status == Running && seq.NumComputed < seq.NumPromptTokens:
		state = "mid-prefill"
	}
	if during {
		state += " during a step"
	}
	k.stats["abort "+state]++
	require.True(k.t, k.s.Abort(seq.ID))
}

// step runs one engine step; adding says new requests may arrive.
func (k *soak) step(adding bool) {
	t, s, rng := k.t, k.s, k.rng
	if adding && len(k.live()) < 16 && rng.IntN(2) == 0 {
		for range 1 + rng.IntN(2) {
			k.next++
			require.NoError(t, s.Add(NewSequence(fmt.Sprint("s", k.next), k.prompt())))
		}
		if live := k.live(); rng.IntN(10) == 0 {
			require.ErrorIs(t, s.Add(NewSequence(live[0].ID, []int32{1})), ErrDuplicateID)
		}
	}

	b := s.Schedule()
	require.NoError(t, checkBatch(s, b))
	require.NoError(t, checkScheduler(s, false))
	require.Equal(t, s.HasWork(), len(b.Items) > 0, "a batch is empty only when there is nothing to run")
	k.stats["preempted"] += len(b.Preempted)
	tables := make([][]int32, len(b.Items))
	for i, it := range b.Items {
		tables[i] = slices.Clone(it.Seq.BlockTable)
		if it.Start > 0 && it.Start == it.Seq.NumCachedPrompt && it.Seq.NumCachedPrompt > 0 {
			k.stats["admitted with cache hit"]++
		}
	}
	if rng.IntN(20) == 0 {
		k.abortRandom(true)
	}
	require.NoError(t, k.m.forward(b.Items, tables))
	s.Commit(b)

	for _, it := range b.Items {
		seq := it.Seq
		if !it.Sample || seq.Status == Finished {
			continue
		}
		if rng.IntN(10) == 0 {
			s.Finish(seq)
			continue
		}
		s.AppendToken(seq, int32(rng.IntN(4)))
		if s.AtMaxModelLen(seq) {
			s.Finish(seq)
		}
	}
	if rng.IntN(20) == 0 {
		k.abortRandom(false)
	}
	for seq := range k.m.ids {
		if seq.Status == Finished {
			delete(k.m.ids, seq)
		}
	}
	require.NoError(t, checkScheduler(s, true))
}

func TestSoak(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{"prefix cache", Config{NumBlocks: 12, BlockSize: 4, MaxNumSeqs: 6, MaxNumBatchedTokens: 24, MaxModelLen: 40, EnablePrefixCaching: true}},
		{"no prefix cache", Config{NumBlocks: 12, BlockSize: 4, MaxNumSeqs: 6, MaxNumBatchedTokens: 24, MaxModelLen: 40}},
		{"long-prefill threshold, block size 2", Config{NumBlocks: 16, BlockSize: 2, MaxNumSeqs: 8, MaxNumBatchedTokens: 16, MaxModelLen: 32, EnablePrefixCaching: true, LongPrefillTokenThreshold: 5}},
		{"block size 1, tiny budget", Config{NumBlocks: 20, BlockSize: 1, MaxNumSeqs: 4, MaxNumBatchedTokens: 6, MaxModelLen: 20, EnablePrefixCaching: true}},
		{"big blocks", Config{NumBlocks: 6, BlockSize: 8, MaxNumSeqs: 5, MaxNumBatchedTokens: 32, MaxModelLen: 48, EnablePrefixCaching: true}},
		// A draft model's slots past every sampling chunk (spec.go).
		{"lookahead", Config{NumBlocks: 14, BlockSize: 4, MaxNumSeqs: 6, MaxNumBatchedTokens: 24, MaxModelLen: 40, EnablePrefixCaching: true, LookaheadTokens: 3}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSched(t, tc.cfg)
			rng := rand.New(rand.NewPCG(uint64(i), 42))
			k := &soak{t: t, s: s, m: newFakeModel(tc.cfg.NumBlocks, tc.cfg.BlockSize), rng: rng, stats: map[string]int{}}
			for _, n := range []int{6, 9, 17} {
				var p []int32
				for range min(n, tc.cfg.MaxModelLen-2) {
					p = append(p, int32(rng.IntN(50)))
				}
				k.pre = append(k.pre, p)
			}
			for range 3000 {
				k.step(true)
			}
			for i := 0; s.HasWork(); i++ {
				require.Less(t, i, 10000, "drain does not terminate")
				k.step(false)
			}

			bm := s.BlockManager()
			require.Equal(t, bm.NumBlocks(), bm.NumFreeBlocks(), "every block is free at the end")
			require.Zero(t, bm.UsedBlocks())
			for id := range bm.blocks {
				require.Zero(t, bm.blocks[id].refCount)
			}
			require.NoError(t, checkBlockManager(bm))

			// The run must have exercised the interesting paths.
			st := s.Stats()
			t.Logf("stats %+v, events %v", st, k.stats)
			require.Positive(t, st.NumPreemptions)
			require.Equal(t, int64(k.stats["preempted"]), st.NumPreemptions)
			for _, ev := range []string{"abort Waiting", "abort Running", "abort preempted", "abort Running during a step"} {
				require.Positive(t, k.stats[ev], ev)
			}
			if tc.cfg.EnablePrefixCaching {
				require.Positive(t, st.PrefixCacheHits)
				require.Positive(t, k.stats["admitted with cache hit"])
			} else {
				require.Zero(t, st.PrefixCacheQueries)
			}
		})
	}
}
