package sched

import "fmt"

// Speculative decoding (vLLM v1's scheduling of spec tokens): the engine appends a decode
// sequence's drafts to its tokens with SetDrafts; Schedule then gives the sequence 1+k tokens
// of budget and KV slots for all of them, as one chunk whose every position is verified. After
// the step, AcceptDrafts keeps the accepted drafts (their KV is valid) and rolls the rejected
// ones back: their tokens go, their KV slots are forgotten and blocks holding nothing else are
// freed, except those of the LookaheadTokens slots past the sequence, which a draft model
// writes next. Drafts are never hashed into the prefix cache; accepted ones are registered
// like any token once a later Allocate covers their blocks.

// SetDrafts appends drafts to seq, a running sequence waiting to compute its last sampled
// token, and returns how many it took: at most enough that accepting all of them plus the
// verify step's own token stays within MaxModelLen. It takes none from a sequence in any
// other state (mid-prefill, pending tokens, drafts already set).
func (s *Scheduler) SetDrafts(seq *Sequence, drafts []int32) int {
	if seq.Status != Running || seq.pending > 0 || seq.drafts > 0 || seq.NumComputed != seq.Len()-1 {
		return 0
	}
	n := min(len(drafts), s.cfg.MaxModelLen-seq.Len()-1)
	if n <= 0 {
		return 0
	}
	seq.TokenIDs = append(seq.TokenIDs, drafts[:n]...)
	seq.drafts = n
	return n
}

// AcceptDrafts ends the verification of seq's drafts after its verify step was committed: the
// first accepted drafts stay as computed tokens, the others are removed with their KV slots,
// and blocks that held only rejected drafts are freed. A finished sequence is left alone. It
// panics when accepted is out of range or the verify step was not committed.
func (s *Scheduler) AcceptDrafts(seq *Sequence, accepted int) {
	if seq.Status == Finished || seq.drafts == 0 {
		return
	}
	if accepted < 0 || accepted > seq.drafts || seq.NumComputed != seq.Len() {
		panic(fmt.Sprintf("sched: AcceptDrafts(%q, %d): %d drafts, %d of %d tokens computed",
			seq.ID, accepted, seq.drafts, seq.NumComputed, seq.Len()))
	}
	rejected := seq.drafts - accepted
	seq.drafts = rejected
	s.trimDrafts(seq, rejected)
	seq.drafts = 0
	seq.NumComputed = seq.Len()
	keep := s.bm.blocksFor(max(seq.Len(), min(seq.Len()+s.cfg.LookaheadTokens, s.cfg.MaxModelLen)))
	for i := len(seq.BlockTable) - 1; i >= keep; i-- {
		s.bm.unref(seq.BlockTable[i])
	}
	seq.BlockTable = seq.BlockTable[:min(keep, len(seq.BlockTable))]
}

// trimDrafts removes the last n drafts of seq and any computed count past the new end.
func (s *Scheduler) trimDrafts(seq *Sequence, n int) {
	if n <= 0 {
		return
	}
	seq.TokenIDs = seq.TokenIDs[:seq.Len()-n]
	seq.drafts -= n
	seq.NumComputed = min(seq.NumComputed, seq.Len())
}
