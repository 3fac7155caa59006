package engine

import (
	"fmt"

	"github.com/atom-go/atom/ops"
)

// Queued steps: the runner's half of scheduling ahead (sched.ScheduleAhead). A decode step is
// queued with its draw left on the device (ops.QueuedSampler); the next step may be queued
// before that draw is read, fed row for row with its tokens on the device, so the device goes
// from one step to the next without waiting for the host. Only decode batches replayed from a
// single-rank graph are queued (the fed ids are copied into the graph's inputs); queueEager
// lets the cpu tests run the same bookkeeping on the eager path, where feeding means reading
// the previous draw first.

// queuedDraw is one queued step's draw; toks holds its results once collected early (an eager
// fed step reads its predecessor's draw before running).
type queuedDraw struct {
	rows      int
	collected bool
	toks      []ops.SampledToken
}

// CanQueue reports whether a decode step of n sequences whose longest computes position
// maxStart can be queued: the sampler queues draws and a graph replays the batch.
func (r *Runner) CanQueue(n, maxStart int) bool {
	if _, ok := r.sampler.(ops.QueuedSampler); !ok || n <= 0 || len(r.queue) == ops.MaxQueuedDraws {
		return false
	}
	if r.queueEager {
		return true
	}
	dg := r.graphs
	return dg != nil && dg.ranked == nil && n <= dg.sizes[len(dg.sizes)-1] && (maxStart+r.blockSize)/r.blockSize <= dg.in.Stride()
}

// QueueSampled runs a decode batch like RunSampled but returns before its draw is known (see
// CollectSampled). With fed set, each item's input token (Tokens[Start], a placeholder) is the
// token the previous queued step drew for the same row. The batch must pass CanQueue.
func (r *Runner) QueueSampled(work []Work, params []ops.RowSampling, fed bool) error {
	qs, ok := r.sampler.(ops.QueuedSampler)
	if !ok {
		return fmt.Errorf("QueueSampled: the %s backend does not queue draws", r.be.Name())
	}
	if fed && len(r.queue) == 0 {
		return fmt.Errorf("QueueSampled: fed from a draw that is not queued")
	}
	if err := r.prepare(work); err != nil {
		return err
	}
	if len(params) != len(work) || len(r.sampleRows) != len(work) || len(r.ids) != len(work) {
		return fmt.Errorf("%w: QueueSampled takes one sampled token per item: %d items, %d tokens, %d params",
			ErrInvalidRequest, len(work), len(r.ids), len(params))
	}
	var logits ops.Tensor
	if g := r.graphFor(work); g != nil && r.graphs.ranked == nil && !r.queueEager {
		var err error
		if logits, err = r.replay(g, fed, params); err != nil {
			return err
		}
	} else if r.queueEager {
		if fed {
			if err := r.feedFromPrevious(); err != nil {
				return err
			}
			r.fedSteps++
		}
		r.eagerSteps++
		logits = r.model.Logits(r.model.Forward(r.ids, &r.meta, r.cache), r.sampleRows)
	} else {
		return fmt.Errorf("QueueSampled: no graph replays a decode batch of %d", len(work))
	}
	if err := qs.QueueSample(logits, params); err != nil {
		return err
	}
	r.queue = append(r.queue, queuedDraw{rows: len(params)})
	return nil
}

// feedFromPrevious reads the last queued draw (keeping it for CollectSampled) and puts its
// tokens into the prepared batch's ids, as the device feed does.
func (r *Runner) feedFromPrevious() error {
	last := &r.queue[len(r.queue)-1]
	if len(r.queue) > 1 && !r.queue[0].collected {
		return fmt.Errorf("QueueSampled: two draws to read before feeding")
	}
	if !last.collected {
		last.toks = make([]ops.SampledToken, last.rows)
		if _, err := r.sampler.(ops.QueuedSampler).CollectSample(last.toks); err != nil {
			return err
		}
		last.collected = true
	}
	if len(r.ids) > last.rows {
		return fmt.Errorf("QueueSampled: %d rows fed from a draw of %d", len(r.ids), last.rows)
	}
	for i := range r.ids {
		r.ids[i] = max(last.toks[i].Token, 0)
	}
	return nil
}

// CollectSampled waits for the oldest queued step's draw and returns its tokens, one per row,
// in a buffer reused by the next call.
func (r *Runner) CollectSampled() ([]ops.SampledToken, error) {
	if len(r.queue) == 0 {
		return nil, fmt.Errorf("CollectSampled: no step queued")
	}
	d := r.queue[0]
	if cap(r.sampled) < d.rows {
		r.sampled = make([]ops.SampledToken, d.rows)
	}
	out := r.sampled[:d.rows]
	if d.collected {
		copy(out, d.toks)
	} else if _, err := r.sampler.(ops.QueuedSampler).CollectSample(out); err != nil {
		return nil, err
	}
	r.queue = append(r.queue[:0], r.queue[1:]...)
	return out, nil
}

// Queued returns how many queued steps are not collected yet.
func (r *Runner) Queued() int { return len(r.queue) }

// DropQueued forgets the queued steps after a failure; the backend's queue is reset too.
func (r *Runner) DropQueued() {
	r.queue = r.queue[:0]
	if d, ok := r.sampler.(interface{ DropDraws() error }); ok {
		_ = d.DropDraws()
	}
}
