package sched

import "fmt"

// Scheduling ahead (vLLM's async scheduling): while a decode step runs on the device, the
// engine schedules and launches the next one, whose input tokens are the draws of the running
// step, fed on the device. The scheduler then holds a placeholder for each such token (the
// sequence's pending token) until the engine reads the draw and resolves it. Placeholders
// never reach the prefix cache: a block is hashed only once all its tokens are known.

// ScheduleAhead schedules the next decode step of seqs, which must be the running sequences in
// order, before the tokens their running step draws are known: each gets a pending token (a
// placeholder 0 that ResolvePending replaces) and the KV slot for it, in a batch of one sampled
// token per sequence. It changes nothing and returns false unless that batch is exactly what
// Schedule would return and needs no preemption: nothing waiting, seqs equal to the running
// list, every one fully computed with no pending token and at least two tokens short of
// MaxModelLen, the token budget and the free blocks enough for all of them.
func (s *Scheduler) ScheduleAhead(seqs []*Sequence) (Batch, bool) {
	if len(seqs) == 0 || len(s.waiting) > 0 || len(seqs) != len(s.running) || len(seqs) > s.cfg.MaxNumBatchedTokens {
		return Batch{}, false
	}
	need := 0
	for i, seq := range seqs {
		if s.running[i] != seq || seq.NumComputed != seq.Len() || seq.pending > 0 || seq.Len()+2 > s.cfg.MaxModelLen {
			return Batch{}, false
		}
		need += s.bm.blocksFor(seq.Len()+1) - len(seq.BlockTable)
	}
	if need > s.bm.NumFreeBlocks() {
		return Batch{}, false
	}
	var b Batch
	for _, seq := range seqs {
		seq.TokenIDs = append(seq.TokenIDs, 0)
		seq.pending++
		if !s.bm.Allocate(seq, seq.Len()) {
			panic(fmt.Sprintf("sched: ScheduleAhead: allocation for %q failed after the capacity check", seq.ID))
		}
		b.add(seq, 1)
	}
	return b, true
}

// ResolvePending replaces the oldest pending token of seq by tok, the draw it stood for. It is
// a no-op for a sequence finished meanwhile and panics when seq has no pending token.
func (s *Scheduler) ResolvePending(seq *Sequence, tok int32) {
	if seq.Status == Finished {
		return
	}
	if seq.pending == 0 {
		panic(fmt.Sprintf("sched: ResolvePending: %q has no pending token", seq.ID))
	}
	seq.TokenIDs[seq.Len()-seq.pending] = tok
	seq.pending--
}
