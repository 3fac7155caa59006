package sched

import (
	"fmt"
	"slices"
)

// Status is the lifecycle state of a Sequence inside a Scheduler.
type Status int

const (
	// Waiting sequences are queued for admission: new ones, and preempted
	// ones that will recompute their KV. A waiting sequence holds no blocks.
	Waiting Status = iota
	// Running sequences were admitted; they hold blocks for their computed
	// tokens and are scheduled every step until they finish or are preempted.
	Running
	// Finished sequences stopped, hit a length limit or were aborted; their
	// blocks were released and the scheduler no longer knows them.
	Finished
)

// String returns the status name, for logs and test failures.
func (st Status) String() string {
	switch st {
	case Waiting:
		return "Waiting"
	case Running:
		return "Running"
	case Finished:
		return "Finished"
	}
	return fmt.Sprintf("Status(%d)", int(st))
}

// Sequence is one request as the scheduler sees it: token ids, how many of
// them already have KV in the cache, and where that KV lives.
//
// The exported fields are read by the engine; only the Scheduler and
// BlockManager change them once the sequence was added.
type Sequence struct {
	// ID identifies the request; unique among live sequences of a Scheduler.
	ID string
	// TokenIDs is the prompt followed by the generated tokens. The engine
	// appends through Scheduler.AppendToken, never directly, and never
	// modifies existing entries: block hashes are computed from them. (A
	// draft model grows its capacity and writes its proposals past its end,
	// where SetDrafts then appends them.)
	TokenIDs []int32
	// NumPromptTokens is the length of the prompt prefix of TokenIDs.
	NumPromptTokens int
	// NumComputed is the number of leading tokens whose KV is in the cache.
	// It is reset to 0 on preemption (the KV is recomputed on readmission).
	NumComputed int
	// NumCachedPrompt is the number of leading tokens served by the prefix
	// cache at the last admission. For a fresh request these are all prompt
	// tokens; a preempted request recomputes prompt and generated tokens, so
	// after readmission it may also count generated tokens.
	NumCachedPrompt int
	// BlockTable lists the physical KV blocks of the sequence, in position
	// order. It is empty while the sequence is waiting or finished.
	BlockTable []int32
	// Status is the lifecycle state.
	Status Status

	// blockHashes[i] is the chained hash of full block i of TokenIDs for
	// block size hashBlockSize. It is computed lazily and survives
	// preemption: the tokens of a full block never change, so neither does
	// its hash.
	blockHashes   []uint64
	hashBlockSize int
	// numRegistered counts the leading BlockTable entries already offered to
	// the prefix cache (cache hits, or full blocks registered at scheduling),
	// so each block is registered once.
	numRegistered int
	// numPreemptions counts how often this sequence lost its KV.
	numPreemptions int
	// pending counts the tokens at the end of TokenIDs that are placeholders
	// for draws still on the device (Scheduler.ScheduleAhead); their blocks
	// are not hashed until ResolvePending fills them in.
	pending int
	// drafts counts the speculative tokens at the end of TokenIDs (Scheduler.SetDrafts): they
	// get KV slots and are computed by the verify step but are never hashed, and
	// AcceptDrafts drops the rejected ones.
	drafts int
}

// NewSequence returns a waiting sequence whose tokens are a copy of prompt;
// the copy keeps later changes by the caller from invalidating block hashes.
func NewSequence(id string, prompt []int32) *Sequence {
	return &Sequence{
		ID:              id,
		TokenIDs:        slices.Clone(prompt),
		NumPromptTokens: len(prompt),
		Status:          Waiting,
	}
}

// Len returns the number of tokens: prompt plus generated.
func (s *Sequence) Len() int { return len(s.TokenIDs) }

// NumPending returns how many of the last tokens are placeholders for draws not yet known.
func (s *Sequence) NumPending() int { return s.pending }

// NumDrafts returns how many of the last tokens are speculative drafts awaiting verification.
func (s *Sequence) NumDrafts() int { return s.drafts }

// NumGenerated returns the number of tokens generated so far.
func (s *Sequence) NumGenerated() int { return len(s.TokenIDs) - s.NumPromptTokens }

// OutputTokenIDs returns the generated tokens (a view, not a copy).
func (s *Sequence) OutputTokenIDs() []int32 { return s.TokenIDs[s.NumPromptTokens:] }

// NumPreemptions returns how often the sequence was preempted.
func (s *Sequence) NumPreemptions() int { return s.numPreemptions }

// hashes returns the chained hashes of the first n full blocks of s for
// block size bs, extending the memoized list as needed.
func (s *Sequence) hashes(n, bs int) []uint64 {
	if s.hashBlockSize != bs {
		s.blockHashes, s.hashBlockSize = s.blockHashes[:0], bs
	}
	for i := len(s.blockHashes); i < n; i++ {
		parent := rootHash
		if i > 0 {
			parent = s.blockHashes[i-1]
		}
		s.blockHashes = append(s.blockHashes, hashBlock(parent, s.TokenIDs[i*bs:(i+1)*bs]))
	}
	return s.blockHashes[:n]
}
