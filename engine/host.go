package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"

	"github.com/atom-go/atom/ops"
)

// Host-scheduled execution: a host (vLLM v1's scheduler, through the plugin's ExecuteModel)
// decides every step's batch and where each token's KV lives; the engine keeps what the host
// does not send again (the tokens it sampled, each request's sampler state), runs the forward
// pass over the host's block tables and samples. SGLang's slot indices fit the same model with
// a block size of 1 (a slot is then a block id).

// Errors of host-scheduled execution, besides ErrInvalidRequest, ErrInvalidParams,
// ErrUnknownRequest and ErrClosed.
var (
	// ErrHostMode: the KV cache belongs to a host session, so the engine's own scheduler must
	// not run (the plugin refuses Generate once a session started).
	ErrHostMode = errors.New("the engine is in host-scheduled mode")
	// ErrBusy: a host session cannot start while engine-scheduled requests run.
	ErrBusy = errors.New("engine busy")
	// ErrRequestExists: a new host request reuses the id of one the engine still has state for.
	ErrRequestExists = errors.New("request already exists")
)

// MaxHostRequests bounds the requests a host session keeps state for.
const MaxHostRequests = 1 << 16

// HostStep is one step scheduled by the host (vLLM's SchedulerOutput, validated for shape by
// package bridge and converted by the plugin).
type HostStep struct {
	New          []HostNewRequest
	Cached       []HostCachedRequest
	NumScheduled map[string]int // tokens computed this step, per scheduled request
	Finished     []string       // freed before the step; unknown ids are ignored
	// Drafts are the speculative tokens scheduled for verification, per request (vLLM's
	// scheduled_spec_decode_tokens): they follow the request's known tokens and its scheduled
	// chunk ends with them (spec_host.go).
	Drafts map[string][]int32
}

// HostNewRequest is a request scheduled for the first time.
type HostNewRequest struct {
	ID        string
	PromptIDs []int32
	// Params are validated with Normalize; N is ignored (the host expands n into requests),
	// and so are the stop conditions (the host applies them), except that stop tokens are
	// masked before MinTokens.
	Params SamplingParams
	// WantLogprobs asks for the sampled token's logprob and rank, plus Params.Logprobs top ids.
	WantLogprobs bool
	BlockIDs     []int32
	NumComputed  int // prompt tokens already in the KV cache
	// OutputOffset (a request recomputed after its engine died): the last OutputOffset of
	// PromptIDs are outputs an earlier engine sampled; they count as outputs for the host's
	// num_output_tokens, penalties, min_tokens and the sampler's draws. Less than
	// len(PromptIDs).
	OutputOffset int
}

// HostCachedRequest is a request the engine has state for, scheduled again.
type HostCachedRequest struct {
	ID string
	// Resumed (after preemption): NewBlockIDs replace the block table instead of extending it.
	Resumed     bool
	NewBlockIDs []int32
	NumComputed int
	// NumOutput is the host's count of sampled tokens, or -1 when it does not say; sampled
	// tokens beyond it are forgotten, fewer than it are an error.
	NumOutput int
}

// HostOutput is the result of a step; its lists are parallel to IDs (new requests first, then
// cached ones, in the step's order).
type HostOutput struct {
	IDs []string
	// Sampled has one token, none for a prefill chunk short of the known tokens, or, after a
	// verify chunk, the accepted drafts followed by the target's own token.
	Sampled [][]int32
	// Logprobs has one row per token of Sampled[i]; nil where nothing was sampled or none
	// was asked for.
	Logprobs [][]HostLogprob
	// Drafts are the speculative tokens proposed for each request's next step (nil: none),
	// which the host may schedule as HostStep.Drafts.
	Drafts [][]int32
}

// HostLogprob is the sampled token with its raw logprob and top alternatives, and its rank
// (the number of tokens at least as likely, itself included, as vLLM counts it).
type HostLogprob struct {
	Sample
	Rank int
}

// HostSession is the engine's state for one host: the KV cache geometry the host allocates
// from and the requests it scheduled. Methods are safe to call from any goroutine; they run
// on the engine's loop goroutine.
type HostSession struct {
	e         *Engine
	runner    *Runner
	numBlocks int
	blockSize int
	reqs      map[string]*hostRequest // owned by the loop goroutine
}

type hostRequest struct {
	tokens    []int32 // prompt, then sampled tokens
	numPrompt int
	params    SamplingParams
	logprobs  bool
	blocks    []int32
	rng       *rand.Rand
	seed      uint64 // keys the device sampler's draws
	stopIDs   []int32
	draft     draftState // a draft model's bookkeeping (spec_host_draft.go)
}

// StartHostSession hands the KV cache to a host: numBlocks blocks of blockSize tokens. With
// the engine's block size and at most its blocks, the engine's cache is reused; another block
// size gets a new cache that must fit in as many tokens as the engine's. It fails with ErrBusy
// while engine-scheduled requests run. Once a session started, the engine must not serve
// Generate again (its prefix cache would read blocks the host overwrote).
func (e *Engine) StartHostSession(numBlocks, blockSize int) (*HostSession, error) {
	if blockSize <= 0 || blockSize > 1024 || numBlocks <= 0 {
		return nil, fmt.Errorf("%w: %d KV blocks of %d tokens: want at least 1 block of 1..1024 tokens", ErrInvalidRequest, numBlocks, blockSize)
	}
	var h *HostSession
	var err error
	if !e.call(func() { h, err = e.startHost(numBlocks, blockSize) }) {
		return nil, ErrClosed
	}
	return h, err
}

func (e *Engine) startHost(numBlocks, blockSize int) (*HostSession, error) {
	if len(e.reqs) > 0 || e.sched.HasWork() {
		return nil, fmt.Errorf("%w: %d engine-scheduled requests are running", ErrBusy, len(e.reqs))
	}
	have := e.runner.numBlocks
	h := &HostSession{e: e, runner: e.runner, numBlocks: numBlocks, blockSize: blockSize, reqs: map[string]*hostRequest{}}
	switch {
	case blockSize == e.runner.blockSize && numBlocks <= have:
	case e.drafter != nil:
		return nil, fmt.Errorf("%w: %d KV blocks of %d tokens: with a draft model or MTP layer the host must use the engine's blocks (at most %d of %d tokens), which the draft's cache shares",
			ErrInvalidRequest, numBlocks, blockSize, have, e.runner.blockSize)
	case int64(numBlocks)*int64(blockSize) <= int64(have)*int64(e.runner.blockSize):
		r, err := NewRunner(e.runner.model, e.runner.be, e.runner.limits, numBlocks, blockSize)
		if err != nil {
			return nil, fmt.Errorf("allocate the host's KV cache: %w", err)
		}
		r.decodeSeqs, r.verifyRows = e.runner.decodeSeqs, e.runner.verifyRows
		// The host's decode steps replay graphs as the engine's would: captured over its cache.
		if err := setupGraphs(e.cfg, r, e.maxModelLen, e.log); err != nil {
			return nil, fmt.Errorf("capture decode graphs for the host's KV cache: %w", err)
		}
		h.runner = r
	default:
		return nil, fmt.Errorf("%w: %d KV blocks of %d tokens exceed the cache the engine was loaded with (%d blocks of %d); load with a larger --num-kv-blocks or --kv-cache-memory",
			ErrInvalidRequest, numBlocks, blockSize, have, e.runner.blockSize)
	}
	e.hostMode = true
	return h, nil
}

// call runs fn on the loop goroutine and waits for it to return; false when the engine is
// closed (fn did not run). A panic in fn is recovered on the loop, which goes on, and raised
// again in the caller's goroutine (the plugin turns it into an Internal error).
func (e *Engine) call(fn func()) bool {
	done := make(chan error, 1)
	if !e.send(func() {
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Errorf("panic on the engine loop: %v\n%s", p, debug.Stack())
				return
			}
			done <- nil
		}()
		fn()
	}) {
		return false
	}
	if err := <-done; err != nil {
		panic(err)
	}
	return true
}

// NumBlocks and BlockSize are the session's KV cache geometry.
func (h *HostSession) NumBlocks() int { return h.numBlocks }

// BlockSize is the number of tokens of one KV block.
func (h *HostSession) BlockSize() int { return h.blockSize }

// NumRequests returns how many requests the session keeps state for.
func (h *HostSession) NumRequests() int {
	n := 0
	if !h.e.call(func() { n = len(h.reqs) }) {
		return 0
	}
	return n
}

// Drop forgets a request's state; false when the session has none for id.
func (h *HostSession) Drop(id string) (bool, error) {
	found := false
	if !h.e.call(func() { _, found = h.reqs[id]; delete(h.reqs, id) }) {
		return false, ErrClosed
	}
	return found, nil
}

// Execute runs one host-scheduled step. The step is checked whole before anything changes: on
// error the session's state is as it was, and the error wraps ErrInvalidRequest,
// ErrInvalidParams, ErrUnknownRequest, ErrRequestExists or ErrClosed.
func (h *HostSession) Execute(step *HostStep) (*HostOutput, error) {
	var out *HostOutput
	var err error
	if !h.e.call(func() {
		defer func() {
			if p := recover(); p != nil {
				_ = h.e.deviceLost() // OnDeviceLost runs before the panic reaches the caller
				panic(p)
			}
		}()
		if out, err = h.execute(step); err != nil {
			if lost := h.e.deviceLost(); lost != nil && !errors.Is(err, ops.ErrDeviceLost) {
				err = fmt.Errorf("%w (the step failed with: %v)", lost, err)
			}
		}
	}) {
		return nil, ErrClosed
	}
	return out, err
}

// planned is one scheduled request of a step: its state after the step's updates (not yet
// stored) and its share of the forward pass.
type planned struct {
	id    string
	req   *hostRequest
	isNew bool
	work  Work
}

// numRows is how many logits rows p's work samples.
func (p *planned) numRows() int {
	if !p.work.Sample {
		return 0
	}
	return 1 + p.work.Drafts
}

func (h *HostSession) execute(step *HostStep) (*HostOutput, error) {
	finished := make(map[string]bool, len(step.Finished))
	for _, id := range step.Finished {
		finished[id] = true
	}
	live := func(id string) (*hostRequest, bool) {
		r, ok := h.reqs[id]
		return r, ok && !finished[id]
	}
	plan := make([]planned, 0, len(step.New)+len(step.Cached))
	seen := make(map[string]bool, cap(plan))
	added := 0
	for i := range step.New {
		nr := &step.New[i]
		if _, ok := live(nr.ID); ok {
			return nil, fmt.Errorf("%w: new request %q: the engine still has its state; finish it (finished_req_ids) before scheduling the id again", ErrRequestExists, nr.ID)
		}
		if _, ok := h.reqs[nr.ID]; !ok {
			added++
		}
		r, err := h.newRequest(nr)
		if err != nil {
			return nil, fmt.Errorf("new request %q: %w", nr.ID, err)
		}
		hostDraftStart(r, nr.NumComputed, true)
		p, err := h.schedule(step, nr.ID, r, nr.NumComputed, seen)
		if err != nil {
			return nil, err
		}
		p.isNew = true
		plan = append(plan, p)
	}
	if len(h.reqs)+added > MaxHostRequests {
		return nil, fmt.Errorf("%w: more than %d requests with state", ErrInvalidRequest, MaxHostRequests)
	}
	for i := range step.Cached {
		cr := &step.Cached[i]
		old, ok := live(cr.ID)
		if !ok {
			return nil, fmt.Errorf("%w: cached request %q: the engine has no state for it (never scheduled as new, or finished)", ErrUnknownRequest, cr.ID)
		}
		r, err := h.update(old, cr)
		if err != nil {
			return nil, fmt.Errorf("cached request %q: %w", cr.ID, err)
		}
		hostDraftStart(r, cr.NumComputed, cr.Resumed)
		p, err := h.schedule(step, cr.ID, r, cr.NumComputed, seen)
		if err != nil {
			return nil, err
		}
		plan = append(plan, p)
	}
	for id := range step.Drafts {
		if !seen[id] {
			return nil, fmt.Errorf("%w: scheduled_spec_decode_tokens names %q, which is not scheduled", ErrInvalidRequest, id)
		}
	}
	if len(seen) != len(step.NumScheduled) {
		for id := range step.NumScheduled {
			if !seen[id] {
				return nil, fmt.Errorf("%w: num_scheduled_tokens names %q, which is not scheduled", ErrInvalidRequest, id)
			}
		}
	}
	work := make([]Work, len(plan))
	for i := range plan {
		work[i] = plan[i].work
	}
	logits, toks, err := h.run(plan, work)
	if err != nil {
		return nil, err
	}
	// The step ran: commit.
	for id := range finished {
		delete(h.reqs, id)
	}
	out := &HostOutput{IDs: make([]string, len(plan)), Sampled: make([][]int32, len(plan)), Logprobs: make([][]HostLogprob, len(plan)),
		Drafts: make([][]int32, len(plan))}
	vocab, row := h.e.model.VocabSize, 0
	for i := range plan {
		p := &plan[i]
		h.reqs[p.id] = p.req
		out.IDs[i], out.Sampled[i] = p.id, []int32{}
		if !p.work.Sample {
			continue
		}
		r := p.req
		switch {
		case toks != nil:
			s := deviceSample(toks[row])
			r.tokens = append(r.tokens, s.Token)
			out.Sampled[i] = []int32{s.Token}
		case p.work.Drafts > 0:
			out.Sampled[i], out.Logprobs[i] = h.verify(r, p.work.Tokens, p.work.Drafts, logits[row*vocab:(row+1+p.work.Drafts)*vocab])
		default:
			raw := logits[row*vocab : (row+1)*vocab]
			want := 0
			if r.logprobs {
				want = r.params.Logprobs
			}
			s := h.e.sampler.sample(raw, &sampleInput{params: &r.params, prompt: r.tokens[:r.numPrompt],
				output: r.tokens[r.numPrompt:], rng: r.rng, stopIDs: r.stopIDs, wantTopN: want})
			r.tokens = append(r.tokens, s.Token)
			out.Sampled[i] = []int32{s.Token}
			if r.logprobs {
				out.Logprobs[i] = []HostLogprob{{Sample: s, Rank: rank(raw, s.Token)}}
			}
		}
		row += p.numRows()
		out.Drafts[i] = h.propose(r)
	}
	switch d := h.e.drafter; {
	case d == nil:
	case d.mtp != nil:
		h.hostMTPAfterStep(plan, out.Drafts)
	default:
		h.hostDraftAfterStep(plan, out.Drafts)
	}
	return out, nil
}

// run executes the step's forward pass. When the runner samples on the device and no sampled
// request needs its full row (penalties, a min_tokens mask, logprobs with their rank), the
// tokens come back sampled (toks); otherwise the logits do, for the host sampler.
func (h *HostSession) run(plan []planned, work []Work) (logits []float32, toks []ops.SampledToken, err error) {
	if len(work) == 0 {
		return nil, nil, nil
	}
	device := h.runner.DeviceSampling()
	var params []ops.RowSampling
	for i := range plan {
		if !plan[i].work.Sample {
			continue
		}
		// A verify chunk's rows are sampled in order on the host (spec_host.go).
		device = device && plan[i].work.Drafts == 0
		r := plan[i].req
		n := len(r.tokens) - r.numPrompt
		device = device && !r.logprobs && deviceEligible(&r.params, n, r.stopIDs, 0)
		params = append(params, rowSampling(&r.params, r.seed, n))
	}
	if device && len(params) > 0 {
		if toks, err = h.runner.RunSampled(work, params); err != nil {
			return nil, nil, fmt.Errorf("forward pass: %w", err)
		}
		return nil, toks, nil
	}
	if logits, err = h.runner.Run(work); err != nil {
		return nil, nil, fmt.Errorf("forward pass: %w", err)
	}
	return logits, nil, nil
}

// schedule checks one scheduled request's token range and builds its work.
func (h *HostSession) schedule(step *HostStep, id string, r *hostRequest, computed int, seen map[string]bool) (planned, error) {
	if seen[id] {
		return planned{}, fmt.Errorf("%w: request %q is scheduled twice", ErrInvalidRequest, id)
	}
	seen[id] = true
	k, ok := step.NumScheduled[id]
	if !ok || k <= 0 {
		return planned{}, fmt.Errorf("%w: request %q: num_scheduled_tokens is %d, want at least 1", ErrInvalidRequest, id, k)
	}
	drafts := step.Drafts[id]
	toks, err := h.withDrafts(r, drafts)
	if err != nil {
		return planned{}, fmt.Errorf("request %q: %w", id, err)
	}
	end := computed + k
	switch {
	case computed < 0 || computed > len(r.tokens):
		return planned{}, fmt.Errorf("%w: request %q: num_computed_tokens %d outside [0, %d]", ErrInvalidRequest, id, computed, len(r.tokens))
	case end > len(toks):
		return planned{}, fmt.Errorf("%w: request %q: %d tokens scheduled from %d run past its %d known tokens and %d drafts",
			ErrInvalidRequest, id, k, computed, len(r.tokens), len(drafts))
	case len(drafts) > 0 && (end != len(toks) || computed >= len(r.tokens)):
		return planned{}, fmt.Errorf("%w: request %q: %d tokens scheduled from %d do not end with its %d drafts after %d known tokens",
			ErrInvalidRequest, id, k, computed, len(drafts), len(r.tokens))
	case end > len(r.blocks)*h.blockSize:
		return planned{}, fmt.Errorf("%w: request %q: %d tokens need %d KV blocks of %d, its table has %d",
			ErrInvalidRequest, id, end, (end+h.blockSize-1)/h.blockSize, h.blockSize, len(r.blocks))
	}
	return planned{id: id, req: r, work: Work{Tokens: toks, Start: computed, NumTokens: k, BlockTable: r.blocks,
		Sample: end == len(toks), Drafts: len(drafts)}}, nil
}

// rank counts the tokens whose logit is at least tok's.
func rank(logits []float32, tok int32) int {
	n, v := 0, logits[tok]
	for _, x := range logits {
		if x >= v {
			n++
		}
	}
	return n
}
