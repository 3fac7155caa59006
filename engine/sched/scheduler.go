package sched

import (
	"errors"
	"fmt"
	"slices"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultMaxNumSeqs          = 256
	DefaultMaxNumBatchedTokens = 8192
)

// Config sizes the KV cache and bounds each step.
type Config struct {
	// NumBlocks is the number of KV-cache blocks; all are usable.
	NumBlocks int
	// BlockSize is the number of token slots per block.
	BlockSize int
	// MaxNumSeqs bounds the number of running sequences (0: 256).
	MaxNumSeqs int
	// MaxNumBatchedTokens is the token budget of one step, shared by
	// prefill chunks and decodes (0: 8192).
	MaxNumBatchedTokens int
	// MaxModelLen bounds prompt plus generated tokens of a sequence
	// (0: NumBlocks*BlockSize). It may not exceed NumBlocks*BlockSize:
	// every sequence must fit in the cache on its own, or it could be
	// preempted forever.
	MaxModelLen int
	// EnablePrefixCaching shares full blocks between sequences with equal
	// token prefixes.
	EnablePrefixCaching bool
	// LongPrefillTokenThreshold, when positive, caps the tokens one
	// sequence gets in a step, so a long prompt cannot take the whole
	// budget from the others.
	LongPrefillTokenThreshold int
	// LookaheadTokens (vLLM's num_lookahead_tokens) gives a sampling item
	// KV slots for that many tokens past its chunk, up to MaxModelLen, and
	// AcceptDrafts keeps them: a draft model writes its KV for the tokens
	// it proposes after the step, before the next Schedule (spec.go).
	LookaheadTokens int
}

// Errors returned by New and Add. Add wraps them with the offending lengths;
// test with errors.Is.
var (
	ErrInvalidConfig   = errors.New("sched: invalid config")
	ErrEmptyPrompt     = errors.New("sched: empty prompt")
	ErrPromptTooLong   = errors.New("sched: prompt too long")
	ErrDuplicateID     = errors.New("sched: duplicate sequence id")
	ErrInvalidSequence = errors.New("sched: invalid sequence")
)

// Item asks the model to compute Seq.TokenIDs[Start:Start+NumTokens], whose
// KV slots are already allocated in Seq.BlockTable. Start equals
// Seq.NumComputed when the batch is scheduled.
type Item struct {
	// Seq is the sequence to compute.
	Seq *Sequence
	// Start is the position of the first token to compute.
	Start int
	// NumTokens is the number of tokens to compute, at least 1.
	NumTokens int
	// Sample says the chunk ends at the last known token, so the engine
	// samples the next token from the logits of its last position. It is
	// false for a chunk of a prompt that is not the last one.
	Sample bool
}

// Batch is the work of one step: running sequences first (oldest first),
// then newly admitted ones. It is empty only when nothing can run.
type Batch struct {
	// Items lists the work, at most one item per sequence.
	Items []Item
	// NumTokens is the sum of the items' NumTokens, at most
	// MaxNumBatchedTokens.
	NumTokens int
	// Preempted lists the sequences that lost their blocks in this step;
	// they are waiting again and will recompute. The engine drops any
	// per-step state it keeps for them.
	Preempted []*Sequence
}

// Scheduler decides each step which tokens of which sequences to compute,
// vLLM-v1 style: one token budget, prefill chunks and decodes mixed in one
// batch, FCFS admission, recompute preemption of the newest sequence when
// blocks run out.
//
// A Scheduler is not safe for concurrent use.
type Scheduler struct {
	cfg     Config
	bm      *BlockManager
	waiting []*Sequence // admission order; preempted sequences go first
	running []*Sequence // admission order; the last is the preemption victim
	byID    map[string]*Sequence
	// numPreemptions is cumulative over the scheduler's life.
	numPreemptions int64
}

// New validates cfg, fills in defaults and returns an idle scheduler.
func New(cfg Config) (*Scheduler, error) {
	if cfg.MaxNumSeqs == 0 {
		cfg.MaxNumSeqs = DefaultMaxNumSeqs
	}
	if cfg.MaxNumBatchedTokens == 0 {
		cfg.MaxNumBatchedTokens = DefaultMaxNumBatchedTokens
	}
	capacity := cfg.NumBlocks * cfg.BlockSize
	if cfg.MaxModelLen == 0 {
		cfg.MaxModelLen = capacity
	}
	switch {
	case cfg.NumBlocks <= 0 || cfg.BlockSize <= 0:
		return nil, fmt.Errorf("%w: NumBlocks %d and BlockSize %d must be positive", ErrInvalidConfig, cfg.NumBlocks, cfg.BlockSize)
	case cfg.MaxNumSeqs < 0 || cfg.MaxNumBatchedTokens < 0 || cfg.MaxModelLen < 0 || cfg.LongPrefillTokenThreshold < 0 || cfg.LookaheadTokens < 0:
		return nil, fmt.Errorf("%w: negative limit in %+v", ErrInvalidConfig, cfg)
	case cfg.MaxModelLen > capacity:
		return nil, fmt.Errorf("%w: MaxModelLen %d exceeds the KV cache (%d blocks of %d = %d tokens)",
			ErrInvalidConfig, cfg.MaxModelLen, cfg.NumBlocks, cfg.BlockSize, capacity)
	}
	return &Scheduler{
		cfg:  cfg,
		bm:   NewBlockManager(cfg.NumBlocks, cfg.BlockSize, cfg.EnablePrefixCaching),
		byID: make(map[string]*Sequence),
	}, nil
}

// Config returns the configuration with defaults filled in.
func (s *Scheduler) Config() Config { return s.cfg }

// BlockManager returns the scheduler's block manager, for inspection.
func (s *Scheduler) BlockManager() *BlockManager { return s.bm }

// Add queues seq for admission. It rejects an empty prompt, a prompt that
// leaves no room for one generated token within MaxModelLen (the sampled
// token would push the sequence past it), a prompt that needs more blocks
// than the cache has, and an ID already waiting or running.
func (s *Scheduler) Add(seq *Sequence) error {
	switch {
	case seq == nil:
		return fmt.Errorf("%w: nil", ErrInvalidSequence)
	case seq.Len() == 0 || seq.NumPromptTokens == 0:
		return fmt.Errorf("%w: sequence %q has %d tokens, %d of them prompt", ErrEmptyPrompt, seq.ID, seq.Len(), seq.NumPromptTokens)
	case seq.NumPromptTokens < 0 || seq.NumPromptTokens > seq.Len():
		return fmt.Errorf("%w: sequence %q has NumPromptTokens %d of %d tokens", ErrInvalidSequence, seq.ID, seq.NumPromptTokens, seq.Len())
	case len(seq.BlockTable) != 0 || seq.Status == Running:
		return fmt.Errorf("%w: sequence %q is running or holds blocks", ErrInvalidSequence, seq.ID)
	case seq.Len() >= s.cfg.MaxModelLen:
		return fmt.Errorf("%w: sequence %q has %d tokens, MaxModelLen %d leaves room for at most %d",
			ErrPromptTooLong, seq.ID, seq.Len(), s.cfg.MaxModelLen, s.cfg.MaxModelLen-1)
	case s.bm.blocksFor(seq.Len()) > s.bm.NumBlocks():
		// Unreachable while MaxModelLen fits the cache (New checks that),
		// kept so the promise holds on its own.
		return fmt.Errorf("%w: sequence %q needs %d blocks for %d tokens, the cache has %d",
			ErrPromptTooLong, seq.ID, s.bm.blocksFor(seq.Len()), seq.Len(), s.bm.NumBlocks())
	}
	if _, dup := s.byID[seq.ID]; dup {
		return fmt.Errorf("%w: %q", ErrDuplicateID, seq.ID)
	}
	seq.NumComputed, seq.NumCachedPrompt, seq.Status = 0, 0, Waiting
	s.byID[seq.ID] = seq
	s.waiting = append(s.waiting, seq)
	return nil
}

// Schedule builds the next batch and allocates its KV blocks.
//
//  1. Running sequences, oldest first, each get Len()-NumComputed tokens (a
//     decode wants 1, a partly prefilled prompt the rest), capped by the
//     remaining budget and LongPrefillTokenThreshold: chunked prefill. When
//     blocks run out, the newest running sequence is preempted (blocks
//     freed, recompute later) until the allocation fits; if the sequence
//     being scheduled is itself the newest, it is preempted and the pass
//     stops.
//  2. If nothing was preempted, waiting sequences are admitted in FCFS order
//     while budget, MaxNumSeqs and blocks allow. Each reuses its cached
//     prefix and gets a chunk of what remains; a preempted sequence
//     recomputes prompt and generated tokens and then samples. Admission
//     stops at the first sequence that does not fit, so none overtakes it.
//     It is skipped after a preemption because the blocks just freed are
//     for the running sequences, not for newcomers that would cause the
//     next preemption.
func (s *Scheduler) Schedule() Batch {
	var b Batch
	budget := s.cfg.MaxNumBatchedTokens

	for i := 0; i < len(s.running) && budget > 0; {
		seq := s.running[i]
		want := seq.Len() - seq.NumComputed
		n := s.chunk(want, budget)
		if seq.drafts > 0 && n < want {
			// A verify chunk is all or nothing: drafts that do not fit the budget are dropped.
			s.trimDrafts(seq, min(seq.drafts, want-n))
			n = min(n, seq.Len()-seq.NumComputed)
		}
		if n <= 0 {
			// Sampled but the engine appended nothing yet: nothing to do.
			i++
			continue
		}
		scheduled := true
		for !s.bm.Allocate(seq, s.withLookahead(seq, seq.NumComputed+n)) {
			victim := s.running[len(s.running)-1]
			s.running[len(s.running)-1] = nil // no stale pointer in the backing array
			s.running = s.running[:len(s.running)-1]
			s.preempt(victim)
			b.Preempted = append(b.Preempted, victim)
			if victim == seq {
				scheduled = false
				break
			}
		}
		if !scheduled {
			break
		}
		b.add(seq, n)
		budget -= n
		i++
	}

	for len(b.Preempted) == 0 && len(s.waiting) > 0 && budget > 0 && len(s.running) < s.cfg.MaxNumSeqs {
		seq := s.waiting[0]
		cached, numCached := s.bm.ComputedPrefix(seq)
		n := s.chunk(seq.Len()-numCached, budget)
		if !s.bm.Admit(seq, cached, s.withLookahead(seq, numCached+n)) {
			break
		}
		s.waiting[0] = nil
		s.waiting = s.waiting[1:]
		seq.NumComputed, seq.NumCachedPrompt, seq.Status = numCached, numCached, Running
		s.running = append(s.running, seq)
		b.add(seq, n)
		budget -= n
	}
	return b
}

// chunk caps the tokens a sequence wants by the budget and the long-prefill
// threshold.
func (s *Scheduler) chunk(want, budget int) int {
	if t := s.cfg.LongPrefillTokenThreshold; t > 0 {
		want = min(want, t)
	}
	return min(want, budget)
}

// withLookahead is the KV a chunk of seq ending at end needs: end, plus LookaheadTokens when
// the chunk samples, within MaxModelLen.
func (s *Scheduler) withLookahead(seq *Sequence, end int) int {
	if s.cfg.LookaheadTokens == 0 || end != seq.Len() {
		return end
	}
	return max(end, min(end+s.cfg.LookaheadTokens, s.cfg.MaxModelLen))
}

// add appends an item for the next n tokens of seq.
func (b *Batch) add(seq *Sequence, n int) {
	start := seq.NumComputed
	b.Items = append(b.Items, Item{Seq: seq, Start: start, NumTokens: n, Sample: start+n == seq.Len()})
	b.NumTokens += n
}

// preempt frees the blocks of a sequence taken out of running and queues it
// first for readmission, so FCFS order is kept among preempted sequences
// (victims are taken newest first and each goes in front of the last).
// Its KV is recomputed then, mostly from the prefix cache if the freed
// blocks were not evicted meanwhile.
func (s *Scheduler) preempt(seq *Sequence) {
	s.trimDrafts(seq, seq.drafts)
	s.bm.Free(seq)
	seq.NumComputed, seq.Status = 0, Waiting
	seq.numPreemptions++
	s.numPreemptions++
	s.waiting = slices.Insert(s.waiting, 0, seq)
}

// Commit records that the model computed the batch returned by the last
// Schedule: each item's tokens now have KV. Items of sequences finished or
// aborted since are skipped. It panics on a batch that does not match the
// sequences' state (committed twice, or not the last one scheduled).
func (s *Scheduler) Commit(b Batch) {
	for _, it := range b.Items {
		seq := it.Seq
		if seq.Status != Running {
			continue
		}
		if seq.NumComputed != it.Start || it.Start+it.NumTokens > len(seq.BlockTable)*s.cfg.BlockSize {
			panic(fmt.Sprintf("sched: Commit: stale item for %q (start %d, computed %d)", seq.ID, it.Start, seq.NumComputed))
		}
		seq.NumComputed += it.NumTokens
	}
}

// AppendToken appends a sampled token to seq. A token for a sequence that was
// finished or aborted meanwhile is dropped. It panics if the sequence would
// exceed MaxModelLen: the engine must finish a sequence once AtMaxModelLen
// reports true.
func (s *Scheduler) AppendToken(seq *Sequence, tok int32) {
	if seq.Status == Finished {
		return
	}
	if seq.pending > 0 {
		panic(fmt.Sprintf("sched: AppendToken: sequence %q has %d pending tokens to resolve first", seq.ID, seq.pending))
	}
	if seq.Len() >= s.cfg.MaxModelLen {
		panic(fmt.Sprintf("sched: AppendToken: sequence %q already has MaxModelLen=%d tokens", seq.ID, s.cfg.MaxModelLen))
	}
	seq.TokenIDs = append(seq.TokenIDs, tok)
}

// AtMaxModelLen reports whether seq reached MaxModelLen tokens and must be
// finished (finish reason "length").
func (s *Scheduler) AtMaxModelLen(seq *Sequence) bool { return seq.Len() >= s.cfg.MaxModelLen }

// Finish ends seq (stop token, length, or any reason): its blocks are freed
// and it leaves the scheduler. Finishing a sequence twice is a no-op.
func (s *Scheduler) Finish(seq *Sequence) {
	if seq.Status == Finished || s.byID[seq.ID] != seq {
		return
	}
	if seq.Status == Running {
		s.running = removeSeq(s.running, seq)
	} else {
		s.waiting = removeSeq(s.waiting, seq)
	}
	s.bm.Free(seq)
	seq.Status = Finished
	delete(s.byID, seq.ID)
}

// Abort ends the sequence with the given id in any state: waiting, running
// (decoding or mid-prefill) or preempted. It returns false if no live
// sequence has that id. If the sequence is part of a batch being computed,
// the engine still runs that batch as scheduled (other items may share its
// blocks); Commit skips it.
func (s *Scheduler) Abort(id string) bool {
	seq, ok := s.byID[id]
	if !ok {
		return false
	}
	s.Finish(seq)
	return true
}

// removeSeq deletes seq from list, keeping the order.
func removeSeq(list []*Sequence, seq *Sequence) []*Sequence {
	if i := slices.Index(list, seq); i >= 0 {
		return slices.Delete(list, i, i+1)
	}
	return list
}

// HasWork reports whether any sequence is waiting or running.
func (s *Scheduler) HasWork() bool { return len(s.waiting)+len(s.running) > 0 }

// ResetPrefixCache forgets all cached block hashes; see
// BlockManager.ResetPrefixCache.
func (s *Scheduler) ResetPrefixCache() { s.bm.ResetPrefixCache() }
