package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/atom-go/atom/engine/sched"
	"github.com/atom-go/atom/engine/spec"
	"github.com/atom-go/atom/engine/tokenizer"
	"github.com/atom-go/atom/models"
	"github.com/atom-go/atom/ops"
)

// Engine runs requests on one model. A single goroutine (the loop) owns the scheduler, the
// runner and every request's state; callers talk to it through commands and read Streams.
type Engine struct {
	cfg         Config
	backend     string // what serves and why (resolveDevice)
	model       *models.Config
	tok         *tokenizer.Tokenizer // nil when the checkpoint has no tokenizer files
	runner      *Runner
	sched       *sched.Scheduler
	maxModelLen int
	eos         []int32
	log         *slog.Logger

	cmds    chan func()
	stop    chan struct{}
	stopped chan struct{}
	closeMu sync.Once
	release func() // frees the backend once the loop is gone

	// Owned by the loop goroutine.
	hostMode bool // a host session owns the KV cache: Generate is refused
	reqs     map[string]*request
	bySeq    map[*sched.Sequence]*choice
	sampler  sampler      // host-scheduled sessions
	pool     *samplerPool // engine-scheduled steps
	rng      *rand.Rand
	work     []Work
	flight   *flight      // a queued step whose draw is not read yet (ahead.go)
	flights  [2]flight    // the storage flight points into
	gate     *StepGate    // tests only (testhook.go)
	spec     *spec.Config // nil: no speculative decoding (spec_step.go)
	draftBuf []int32      // the proposer's output, reused
	// drafter runs the draft model or MTP layer of --speculative-config methods draft_model and
	// mtp (nil otherwise); stepChoices holds the choices of the step's items for it, captured
	// before sampling.
	drafter     *drafter
	stepChoices []*choice
	// specOracle replaces the n-gram proposer in tests (spec_test.go): drafts that are the
	// target's own continuation put stops inside accepted runs on purpose.
	specOracle func(dst, toks []int32, k int) []int32
	// specLogits is the last host-sampled step's logits, which verifySampled reads; a view of
	// the runner's buffer, valid until the next step.
	specLogits []float32
	// onDeviceLost is told when a step failed on a lost device (OnDeviceLost).
	onDeviceLost func(error)

	statsMu sync.Mutex
	stats   Stats
}

// Stats is the engine's state for metrics: the scheduler's counters plus throughput.
type Stats struct {
	sched.Stats
	NumRequests      int     // live requests
	PromptTokens     int64   // cumulative prompt tokens computed (not served from cache)
	GeneratedTokens  int64   // cumulative sampled tokens
	Steps            int64   // cumulative forward passes
	TokensPerSecond  float64 // generated tokens per second over the last steps
	LastStepDuration time.Duration
	// Speculative decoding, as vLLM's counters: verify steps' sequences that carried drafts,
	// drafts proposed and verified, drafts accepted.
	SpecNumDrafts         int64
	SpecNumDraftTokens    int64
	SpecNumAcceptedTokens int64
}

// SpecAcceptanceRate is the fraction of proposed drafts accepted (0 before any verify step).
func (s Stats) SpecAcceptanceRate() float64 {
	if s.SpecNumDraftTokens == 0 {
		return 0
	}
	return float64(s.SpecNumAcceptedTokens) / float64(s.SpecNumDraftTokens)
}

// SpecMeanAcceptedLength is vLLM's mean acceptance length: tokens emitted per verify step, the
// accepted drafts plus the target's own token (0 before any verify step).
func (s Stats) SpecMeanAcceptedLength() float64 {
	if s.SpecNumDrafts == 0 {
		return 0
	}
	return 1 + float64(s.SpecNumAcceptedTokens)/float64(s.SpecNumDrafts)
}

// Tokenizer returns the model's tokenizer, or nil when the checkpoint has none.
func (e *Engine) Tokenizer() *tokenizer.Tokenizer { return e.tok }

// ModelConfig returns the checkpoint's configuration.
func (e *Engine) ModelConfig() *models.Config { return e.model }

// MaxModelLen is the longest prompt plus output the engine serves.
func (e *Engine) MaxModelLen() int { return e.maxModelLen }

// NumKVBlocks is the size of the KV cache in blocks.
func (e *Engine) NumKVBlocks() int { return e.runner.numBlocks }

// Config returns the engine's settings.
func (e *Engine) Config() Config { return e.cfg }

// Backend says what serves the model and why: "cpu (--device auto found no usable GPU: ...)"
// or "gpu: NVIDIA H200, 132 SMs, 139.8 GiB (--device auto)".
func (e *Engine) Backend() string { return e.backend }

// Stats returns the engine's current state, read between steps so it is consistent with
// every output already delivered; after Close it returns the last snapshot.
func (e *Engine) Stats() Stats {
	done := make(chan struct{})
	if e.send(func() { e.snapshot(); close(done) }) {
		<-done
	}
	e.statsMu.Lock()
	defer e.statsMu.Unlock()
	return e.stats
}

// Generate admits a request and returns its stream. Invalid parameters or prompts are refused
// here, synchronously, with an error wrapping ErrInvalidParams or ErrInvalidRequest.
func (e *Engine) Generate(req Request) (*Stream, error) {
	if err := req.Params.Normalize(e.model.VocabSize); err != nil {
		return nil, err
	}
	if err := e.checkPrompt(req.PromptIDs); err != nil {
		return nil, err
	}
	if req.ID == "" {
		return nil, fmt.Errorf("%w: empty request id", ErrInvalidRequest)
	}
	errc := make(chan error, 1)
	var st *Stream
	if !e.send(func() { s, err := e.admit(req); st = s; errc <- err }) {
		return nil, ErrClosed
	}
	if err := <-errc; err != nil {
		return nil, err
	}
	return st, nil
}

func (e *Engine) checkPrompt(ids []int32) error {
	if len(ids) == 0 {
		return fmt.Errorf("%w: empty prompt", ErrInvalidRequest)
	}
	if len(ids) >= e.maxModelLen {
		return fmt.Errorf("%w: prompt of %d tokens leaves no room to generate within the model length %d",
			ErrInvalidRequest, len(ids), e.maxModelLen)
	}
	for _, id := range ids {
		if id < 0 || int(id) >= e.model.VocabSize {
			return fmt.Errorf("%w: prompt token id %d outside the vocabulary [0, %d)", ErrInvalidRequest, id, e.model.VocabSize)
		}
	}
	return nil
}

// Abort ends a request in whatever state it is; unknown ids are ignored.
func (e *Engine) Abort(id string) { e.send(func() { e.abort(id, "abort") }) }

// send hands fn to the loop; false when the engine is closed.
func (e *Engine) send(fn func()) bool {
	select {
	case e.cmds <- fn:
		return true
	case <-e.stopped:
		return false
	}
}

// Close stops the loop; pending requests end with ErrClosed. It is safe to call twice.
func (e *Engine) Close() {
	e.closeMu.Do(func() {
		close(e.stop)
		<-e.stopped
		if e.release != nil {
			e.release()
		}
	})
	<-e.stopped
}

// loop is the engine goroutine: apply commands, then step while there is work.
func (e *Engine) loop() {
	defer close(e.stopped)
	defer func() {
		for id, r := range e.reqs {
			r.stream.fail(ErrClosed)
			delete(e.reqs, id)
		}
	}()
	for {
		if !e.sched.HasWork() {
			select {
			case fn := <-e.cmds:
				fn()
			case <-e.stop:
				return
			}
		}
		for drained := false; !drained; {
			select {
			case fn := <-e.cmds:
				fn()
			case <-e.stop:
				return
			default:
				drained = true
			}
		}
		if e.passGate() && e.sched.HasWork() {
			if err := e.safeStep(); err != nil {
				if lost := e.deviceLost(); lost != nil && !errors.Is(err, ops.ErrDeviceLost) {
					err = fmt.Errorf("%w (the step failed with: %v)", lost, err)
				}
				e.failAll(err)
			}
			e.gate.stepped()
		}
	}
}

// safeStep runs a step, turning a panic (a device fault reported by the gpu backend, a bug)
// into an error so that the requests of the batch fail and the engine goes on.
func (e *Engine) safeStep() (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("engine step failed: %v", p)
		}
	}()
	return e.step()
}

// failAll ends every request with err: a forward pass failed and their state is unknown.
func (e *Engine) failAll(err error) {
	e.log.Error("step failed", "err", err)
	for id, r := range e.reqs {
		for _, c := range r.choices {
			if !c.finished {
				e.sched.Abort(c.seq.ID)
			}
		}
		r.stream.fail(err)
		delete(e.reqs, id)
	}
	clear(e.bySeq)
	e.flight = nil
	e.runner.DropQueued()
	// Blocks registered for the failed batch were never written: forget every cached prefix.
	e.sched.ResetPrefixCache()
}

var errNoProgress = errors.New("scheduler returned an empty batch while requests wait")
