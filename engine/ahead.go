package engine

import (
	"fmt"
	"time"

	"github.com/atom-go/atom/engine/sched"
)

// Scheduling ahead (vLLM's async scheduling), for decode batches replayed from graphs with
// device sampling: a step is queued and, while the device runs it, the next step of the same
// sequences is scheduled (sched.ScheduleAhead: a pending token per sequence) and queued fed
// with its draw on the device (Runner.QueueSampled); only then are the first step's tokens
// read and handed out. The device so goes from step to step without waiting for the host's
// scheduling, uploads and launch. A chain ends when its batch would change (a request waits
// or one finished), a sequence reaches its last token, or a row needs the host sampler; the
// queued step is then read and the next step is scheduled as usual. A sequence finishing at
// a token the next queued step was fed computes one extra step, whose result is dropped.

// flight is a queued step whose draw is not read yet: its sampled sequences in row order.
type flight struct {
	seqs []*sched.Sequence
}

// queueBatch queues batch instead of running it when it is a decode batch that can chain:
// every item one sampled token, sampled on the device, replayed from a graph. It reports
// whether it did; the draw is read by the next step (stepQueued).
func (e *Engine) queueBatch(batch sched.Batch) (bool, error) {
	if e.cfg.NoAsyncScheduling || len(batch.Preempted) > 0 || !e.queueable(batch.Items) {
		return false, nil
	}
	if err := e.runner.QueueSampled(e.work, e.pool.params, false); err != nil {
		return false, err
	}
	e.sched.Commit(batch)
	e.flight = e.newFlight(batch.Items)
	return true, nil
}

// queueable checks the items of a decode batch that is about to be queued, and fills in
// e.pool.params with their device sampling controls.
func (e *Engine) queueable(items []sched.Item) bool {
	maxStart := 0
	for _, it := range items {
		if it.NumTokens != 1 || !it.Sample {
			return false
		}
		maxStart = max(maxStart, it.Start)
	}
	return e.runner.DeviceSampling() && e.runner.CanQueue(len(items), maxStart) && e.deviceParams(items)
}

// deviceParams fills e.pool.params with the items' device sampling controls; false when a row
// needs the host sampler.
func (e *Engine) deviceParams(items []sched.Item) bool {
	e.pool.params = e.pool.params[:0]
	for _, it := range items {
		c := e.bySeq[it.Seq]
		if c == nil {
			return false
		}
		p, n := &c.req.params, it.Seq.NumGenerated()
		if !deviceEligible(p, n, c.req.stopIDs, p.Logprobs) {
			return false
		}
		e.pool.params = append(e.pool.params, rowSampling(p, c.seed, c.drawBase+n))
	}
	return true
}

// newFlight records the queued batch's sequences in the flight that is not in use (the
// engine alternates two, so a step allocates nothing once they have grown).
func (e *Engine) newFlight(items []sched.Item) *flight {
	f := &e.flights[0]
	if e.flight == f {
		f = &e.flights[1]
	}
	f.seqs = f.seqs[:0]
	for _, it := range items {
		f.seqs = append(f.seqs, it.Seq)
	}
	return f
}

// stepQueued queues the next step of the flight's sequences when it can, then reads the
// flight's draw and hands the tokens out.
func (e *Engine) stepQueued() error {
	start := time.Now()
	f := e.flight
	var next *flight
	if e.chainable(f) {
		if batch, ok := e.sched.ScheduleAhead(f.seqs); ok {
			e.work = e.work[:0]
			for _, it := range batch.Items {
				e.work = append(e.work, Work{Tokens: it.Seq.TokenIDs, Start: it.Start, NumTokens: 1,
					BlockTable: it.Seq.BlockTable, Sample: true})
			}
			if !e.deviceParams(batch.Items) {
				return fmt.Errorf("engine: a step scheduled ahead needs the host sampler")
			}
			if err := e.runner.QueueSampled(e.work, e.pool.params, true); err != nil {
				return err
			}
			e.sched.Commit(batch)
			next = e.newFlight(batch.Items)
		}
	}
	toks, err := e.runner.CollectSampled()
	if err != nil {
		return err
	}
	generated := int64(0)
	for i, seq := range f.seqs {
		c := e.bySeq[seq]
		if c == nil || seq.Status == sched.Finished {
			continue // finished or aborted while its draw was queued
		}
		generated++
		s := deviceSample(toks[i])
		if next != nil {
			e.sched.ResolvePending(seq, s.Token)
		} else {
			e.sched.AppendToken(seq, s.Token)
		}
		reason, stop := e.finishReason(c, s.Token)
		e.emit(c, s, reason, stop)
	}
	e.flight = next
	e.updateStats(0, generated, time.Since(start))
	return nil
}

// chainable reports whether the next step of the flight's sequences may be queued before its
// draw is read: no sequence ends with this draw (max_tokens, the model length), every next
// row can be sampled on the device and a graph replays the next step.
func (e *Engine) chainable(f *flight) bool {
	maxStart := 0
	for _, seq := range f.seqs {
		c := e.bySeq[seq]
		if c == nil {
			return false
		}
		p, n := &c.req.params, seq.NumGenerated()+1
		if (p.MaxTokens > 0 && n >= p.MaxTokens) || seq.Len()+2 > e.maxModelLen ||
			!deviceEligible(p, n, c.req.stopIDs, p.Logprobs) {
			return false
		}
		maxStart = max(maxStart, seq.Len())
	}
	return e.runner.CanQueue(len(f.seqs), maxStart)
}
