package engine

import (
	"fmt"
	"time"

	"github.com/atom-go/atom/engine/sched"
)

// admit creates the request's choices and hands their sequences to the scheduler. Choices of
// one request share their prompt's KV blocks through the prefix cache.
func (e *Engine) admit(req Request) (*Stream, error) {
	if e.hostMode {
		return nil, fmt.Errorf("%w: Generate is refused once a host session owns the KV cache", ErrHostMode)
	}
	if _, dup := e.reqs[req.ID]; dup {
		return nil, fmt.Errorf("%w: request id %q is already running", ErrInvalidRequest, req.ID)
	}
	p := req.Params
	if req.OutputOffset < 0 || req.OutputOffset >= len(req.PromptIDs) || (req.OutputOffset > 0 && p.N > 1) {
		return nil, fmt.Errorf("%w: output offset %d: want 0..%d (the prompt's length - 1), and n = 1 when set",
			ErrInvalidRequest, req.OutputOffset, len(req.PromptIDs)-1)
	}
	r := &request{id: req.ID, params: p, stream: newStream(e, req.ID, p.N)}
	r.stopIDs = append(r.stopIDs, p.StopTokenIDs...)
	if !p.IgnoreEOS {
		r.stopIDs = append(r.stopIDs, e.eos...)
	}
	for _, s := range p.Stop {
		r.holdLen = max(r.holdLen, len(s)-1)
	}
	for i := 0; i < p.N; i++ {
		c := &choice{req: r, index: i, seq: sched.NewSequence(fmt.Sprintf("%s/%d", req.ID, i), req.PromptIDs), draft: draftState{done: -1}}
		c.rng, c.seed = choiceRNG(e.rng, p.Seed, i)
		c.drawBase = req.OutputOffset
		skipDraws(c.rng, req.OutputOffset)
		if e.tok != nil {
			c.detok = e.tok.NewDetokenizer(p.SkipSpecialTokens)
		}
		if err := e.sched.Add(c.seq); err != nil {
			for _, prev := range r.choices {
				e.sched.Abort(prev.seq.ID)
				delete(e.bySeq, prev.seq)
			}
			return nil, fmt.Errorf("%w: %v", ErrInvalidRequest, err)
		}
		r.choices = append(r.choices, c)
		e.bySeq[c.seq] = c
	}
	e.reqs[req.ID] = r
	return r.stream, nil
}

// abort ends every unfinished choice of a request with reason.
func (e *Engine) abort(id, reason string) {
	r, ok := e.reqs[id]
	if !ok {
		return
	}
	for _, c := range r.choices {
		if !c.finished {
			e.sched.Abort(c.seq.ID)
			e.finish(c, nil, nil, reason, nil)
		}
	}
}

// step runs one scheduled batch through the model and hands each sampled token to its choice.
func (e *Engine) step() error {
	if e.flight != nil {
		return e.stepQueued()
	}
	start := time.Now()
	batch := e.sched.Schedule()
	if len(batch.Items) == 0 {
		return errNoProgress
	}
	e.draftPreempted(batch)
	e.work, e.stepChoices = e.work[:0], e.stepChoices[:0]
	var prompt int64
	for _, it := range batch.Items {
		if e.drafter != nil {
			e.stepChoices = append(e.stepChoices, e.bySeq[it.Seq])
		}
		w := Work{Tokens: it.Seq.TokenIDs, Start: it.Start, NumTokens: it.NumTokens,
			BlockTable: it.Seq.BlockTable, Sample: it.Sample}
		if it.Sample {
			w.Drafts = it.Seq.NumDrafts()
		}
		e.work = append(e.work, w)
		if it.Start < it.Seq.NumPromptTokens {
			prompt += int64(min(it.NumTokens, it.Seq.NumPromptTokens-it.Start))
		}
	}
	if queued, err := e.queueBatch(batch); queued || err != nil {
		return err
	}
	sampled, samples, err := e.runAndSample(batch)
	if err != nil {
		return err
	}
	// sampled has one entry per row: a verify chunk's sequence appears once per verified
	// position, its rows contiguous (spec_step.go).
	var generated int64
	for i := 0; i < len(sampled); {
		seq := sampled[i]
		c := e.bySeq[seq]
		if d := seq.NumDrafts(); d > 0 {
			generated += int64(e.verify(c, samples[i:i+d+1], i))
			i += d + 1
			continue
		}
		s := samples[i]
		i++
		e.draftAccepted(c, 0)
		e.sched.AppendToken(seq, s.Token)
		reason, stop := e.finishReason(c, s.Token)
		e.emit(c, s, reason, stop)
		generated++
		e.propose(c)
	}
	if e.drafter != nil {
		if err := e.draftAfterStep(batch.Items, e.stepChoices, e.work); err != nil {
			return err
		}
	}
	e.updateStats(prompt, generated, time.Since(start))
	return nil
}

// emit sends one token's increment, finishing the choice when a stop condition holds.
func (e *Engine) emit(c *choice, s Sample, reason string, stop any) {
	text, stopStr := c.textDelta(s.Token, reason != "")
	if stopStr != "" {
		reason, stop = "stop", stopStr
	}
	if reason != "" {
		e.sched.Finish(c.seq)
		e.finish(c, []int32{s.Token}, []Sample{s}, reason, stop, text)
		return
	}
	c.req.stream.push(e.output(c, []int32{s.Token}, []Sample{s}, text))
}

func (e *Engine) output(c *choice, toks []int32, lps []Sample, text string) Output {
	return Output{RequestID: c.req.id, Index: c.index, TokenIDs: toks, Text: text, Logprobs: lps,
		NumPromptTokens: c.seq.NumPromptTokens, NumCachedTokens: c.seq.NumCachedPrompt}
}

// finish sends a choice's last increment and forgets the request once all its choices ended.
func (e *Engine) finish(c *choice, toks []int32, lps []Sample, reason string, stop any, text ...string) {
	c.finished = true
	delete(e.bySeq, c.seq)
	o := e.output(c, toks, lps, "")
	if len(text) > 0 {
		o.Text = text[0]
	}
	o.Finished, o.FinishReason, o.StopReason = true, reason, stop
	c.req.stream.push(o)
	for _, other := range c.req.choices {
		if !other.finished {
			return
		}
	}
	delete(e.reqs, c.req.id)
}

// snapshot copies the scheduler's counters into the stats; called on the loop goroutine.
func (e *Engine) snapshot() {
	st := e.sched.Stats()
	e.statsMu.Lock()
	e.stats.Stats, e.stats.NumRequests = st, len(e.reqs)
	e.statsMu.Unlock()
}

func (e *Engine) updateStats(prompt, generated int64, d time.Duration) {
	e.snapshot()
	e.statsMu.Lock()
	defer e.statsMu.Unlock()
	s := &e.stats
	s.PromptTokens += prompt
	s.GeneratedTokens += generated
	s.Steps++
	s.LastStepDuration = d
	if d > 0 {
		// An exponential moving average over roughly the last 20 steps.
		rate := float64(generated) / d.Seconds()
		s.TokensPerSecond += (rate - s.TokensPerSecond) / 20
	}
}
