package sched

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// seqRange returns tokens start, start+1, ..., start+n-1.
func seqRange(start, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(start + i)
	}
	return out
}

// cat concatenates token slices.
func cat(parts ...[]int32) []int32 { return slices.Concat(parts...) }

// newSched returns a scheduler for cfg or fails the test.
func newSched(t *testing.T, cfg Config) *Scheduler {
	t.Helper()
	s, err := New(cfg)
	require.NoError(t, err)
	return s
}

// addSeq adds a new sequence or fails the test.
func addSeq(t *testing.T, s *Scheduler, id string, prompt []int32) *Sequence {
	t.Helper()
	seq := NewSequence(id, prompt)
	require.NoError(t, s.Add(seq))
	return seq
}

// step runs Schedule, checks the batch, commits it and appends tok to every
// sampled sequence.
func step(t *testing.T, s *Scheduler, tok int32) Batch {
	t.Helper()
	b := s.Schedule()
	require.NoError(t, checkBatch(s, b))
	s.Commit(b)
	for _, it := range b.Items {
		if it.Sample {
			s.AppendToken(it.Seq, tok)
		}
	}
	require.NoError(t, checkScheduler(s, true))
	return b
}

// itemOf returns the item of seq in b.
func itemOf(t *testing.T, b Batch, seq *Sequence) Item {
	t.Helper()
	for _, it := range b.Items {
		if it.Seq == seq {
			return it
		}
	}
	t.Fatalf("sequence %q not in batch %+v", seq.ID, b)
	return Item{}
}

// checkBlockManager verifies the block manager's internal consistency.
func checkBlockManager(bm *BlockManager) error {
	// The free queue, walked both ways, holds exactly the blocks marked free.
	n, prev := 0, noBlock
	for id := bm.head; id != noBlock; id = bm.blocks[id].next {
		b := bm.blocks[id]
		if !b.free || b.refCount != 0 || b.prev != prev {
			return fmt.Errorf("free queue: block %d free=%v ref=%d prev=%d want prev %d", id, b.free, b.refCount, b.prev, prev)
		}
		if n++; n > len(bm.blocks) {
			return fmt.Errorf("free queue has a cycle")
		}
		prev = id
	}
	if prev != bm.tail || n != bm.numFree {
		return fmt.Errorf("free queue: %d blocks ending at %d, want %d ending at %d", n, prev, bm.numFree, bm.tail)
	}
	free := 0
	for id, b := range bm.blocks {
		switch {
		case b.refCount < 0:
			return fmt.Errorf("block %d has refcount %d", id, b.refCount)
		case b.free != (b.refCount == 0):
			return fmt.Errorf("block %d: free=%v but refcount %d", id, b.free, b.refCount)
		case b.hashed && bm.cache[b.hash] != int32(id):
			return fmt.Errorf("hashed block %d not in the cache map", id)
		case b.hashed && len(b.tokens) != bm.blockSize:
			return fmt.Errorf("hashed block %d keeps %d tokens", id, len(b.tokens))
		}
		if b.free {
			free++
		}
	}
	if free != bm.numFree {
		return fmt.Errorf("%d blocks marked free, numFree %d", free, bm.numFree)
	}
	for h, id := range bm.cache {
		if b := bm.blocks[id]; !b.hashed || b.hash != h {
			return fmt.Errorf("cache entry %x -> %d, block has hashed=%v hash %x", h, id, b.hashed, b.hash)
		}
	}
	if !bm.prefixCaching && len(bm.cache) != 0 {
		return fmt.Errorf("prefix caching off but %d cached blocks", len(bm.cache))
	}
	return nil
}

// checkScheduler verifies queue and block bookkeeping: every refcount equals
// the number of block-table entries naming that block. committed says the
// last batch was committed, so tables cover exactly the computed tokens (plus
// the LookaheadTokens slots of a sampling chunk).
func checkScheduler(s *Scheduler, committed bool) error {
	bm := s.bm
	if err := checkBlockManager(bm); err != nil {
		return err
	}
	if len(s.running) > s.cfg.MaxNumSeqs {
		return fmt.Errorf("%d running > MaxNumSeqs %d", len(s.running), s.cfg.MaxNumSeqs)
	}
	if len(s.byID) != len(s.running)+len(s.waiting) {
		return fmt.Errorf("byID has %d, queues %d+%d", len(s.byID), len(s.running), len(s.waiting))
	}
	refs := make([]int, bm.NumBlocks())
	for _, seq := range s.running {
		if seq.Status != Running || s.byID[seq.ID] != seq {
			return fmt.Errorf("running %q has status %v", seq.ID, seq.Status)
		}
		if seq.NumComputed > seq.Len() || seq.Len() > s.cfg.MaxModelLen {
			return fmt.Errorf("%q: computed %d, len %d, max %d", seq.ID, seq.NumComputed, seq.Len(), s.cfg.MaxModelLen)
		}
		// A sampling chunk's table also covers LookaheadTokens past it, within MaxModelLen.
		ahead := func(n int) int { return bm.blocksFor(max(n, min(n+s.cfg.LookaheadTokens, s.cfg.MaxModelLen))) }
		lo, hi := bm.blocksFor(seq.NumComputed), ahead(seq.Len())
		if committed {
			hi = ahead(seq.NumComputed)
		}
		if n := len(seq.BlockTable); n < lo || n > hi {
			return fmt.Errorf("%q: %d blocks for %d computed of %d tokens", seq.ID, n, seq.NumComputed, seq.Len())
		}
		seen := map[int32]bool{}
		for i, id := range seq.BlockTable {
			if seen[id] {
				return fmt.Errorf("%q: block %d twice in its table", seq.ID, id)
			}
			seen[id] = true
			refs[id]++
			// A cached block in a table must hold that position's content.
			if b := bm.blocks[id]; b.hashed && (i >= seq.numRegistered || b.hash != seq.hashes(i+1, bm.blockSize)[i]) {
				return fmt.Errorf("%q: block %d at %d has a foreign hash", seq.ID, id, i)
			}
		}
	}
	for _, seq := range s.waiting {
		if seq.Status != Waiting || len(seq.BlockTable) != 0 || seq.NumComputed != 0 || s.byID[seq.ID] != seq {
			return fmt.Errorf("waiting %q: status %v, %d blocks, computed %d", seq.ID, seq.Status, len(seq.BlockTable), seq.NumComputed)
		}
	}
	for id, b := range bm.blocks {
		if b.refCount != refs[id] {
			return fmt.Errorf("block %d: refcount %d, referenced %d times", id, b.refCount, refs[id])
		}
	}
	return nil
}

// checkBatch verifies a batch just returned by Schedule.
func checkBatch(s *Scheduler, b Batch) error {
	total, seen := 0, map[*Sequence]bool{}
	for _, it := range b.Items {
		seq := it.Seq
		switch {
		case seen[seq]:
			return fmt.Errorf("%q scheduled twice", seq.ID)
		case it.NumTokens <= 0:
			return fmt.Errorf("%q scheduled with %d tokens", seq.ID, it.NumTokens)
		case seq.Status != Running:
			return fmt.Errorf("%q scheduled while %v", seq.ID, seq.Status)
		case it.Start != seq.NumComputed || it.Start+it.NumTokens > seq.Len():
			return fmt.Errorf("%q: item [%d,+%d) computed %d len %d", seq.ID, it.Start, it.NumTokens, seq.NumComputed, seq.Len())
		case it.Sample != (it.Start+it.NumTokens == seq.Len()):
			return fmt.Errorf("%q: Sample=%v for [%d,+%d) of %d", seq.ID, it.Sample, it.Start, it.NumTokens, seq.Len())
		case len(seq.BlockTable)*s.cfg.BlockSize < it.Start+it.NumTokens:
			return fmt.Errorf("%q: %d blocks cannot hold %d tokens", seq.ID, len(seq.BlockTable), it.Start+it.NumTokens)
		case s.cfg.LongPrefillTokenThreshold > 0 && it.NumTokens > s.cfg.LongPrefillTokenThreshold:
			return fmt.Errorf("%q: %d tokens over the threshold %d", seq.ID, it.NumTokens, s.cfg.LongPrefillTokenThreshold)
		}
		seen[seq] = true
		total += it.NumTokens
	}
	if total != b.NumTokens || total > s.cfg.MaxNumBatchedTokens {
		return fmt.Errorf("batch has %d tokens, says %d, budget %d", total, b.NumTokens, s.cfg.MaxNumBatchedTokens)
	}
	for _, p := range b.Preempted {
		if p.Status != Waiting || seen[p] {
			return fmt.Errorf("preempted %q is %v / scheduled %v", p.ID, p.Status, seen[p])
		}
	}
	if len(b.Items) == 0 && len(s.running) > 0 {
		for _, seq := range s.running {
			if seq.NumComputed < seq.Len() {
				return fmt.Errorf("empty batch but %q has work", seq.ID)
			}
		}
	}
	if len(b.Items) == 0 && len(s.running) == 0 && len(s.waiting) > 0 {
		return fmt.Errorf("empty batch with %d waiting and an idle cache", len(s.waiting))
	}
	return nil
}
