package engine

import (
	"fmt"

	"github.com/atom-go/atom/models"
)

// GenerateBatch admits several requests in one trip through the loop, all or none: a fan-out
// request (many prompts, or n choices each) is queued between two steps instead of one request
// per step, and a refusal of any of them leaves none behind. Errors are those of Generate.
func (e *Engine) GenerateBatch(reqs []Request) ([]*Stream, error) {
	for i := range reqs {
		if err := reqs[i].Params.Normalize(e.model.VocabSize); err != nil {
			return nil, err
		}
		if err := e.checkPrompt(reqs[i].PromptIDs); err != nil {
			return nil, err
		}
		if reqs[i].ID == "" {
			return nil, fmt.Errorf("%w: empty request id", ErrInvalidRequest)
		}
	}
	errc := make(chan error, 1)
	streams := make([]*Stream, 0, len(reqs))
	ok := e.send(func() {
		for _, r := range reqs {
			st, err := e.admit(r)
			if err != nil {
				for _, prev := range streams {
					e.abort(prev.id, "abort")
				}
				streams = streams[:0]
				errc <- err
				return
			}
			streams = append(streams, st)
		}
		errc <- nil
	})
	if !ok {
		return nil, ErrClosed
	}
	if err := <-errc; err != nil {
		return nil, err
	}
	return streams, nil
}

// AbortBatch ends the given requests in one trip through the loop, whatever their state
// (waiting sequences included); unknown ids are ignored.
func (e *Engine) AbortBatch(ids []string) {
	e.send(func() {
		for _, id := range ids {
			e.abort(id, "abort")
		}
	})
}

// StatsNow returns the engine's state without waiting for a step: a fresh snapshot when the
// loop is between steps, else the one taken at the end of the last step. Stale reports which
// it is. Metrics and health checks use it so that a scrape never waits for a long prefill.
func (e *Engine) StatsNow() (st Stats, stale bool) {
	done := make(chan struct{})
	select {
	case e.cmds <- func() { e.snapshot(); close(done) }:
		// The loop took the command, so it is not inside a step: the snapshot is immediate.
		<-done
	default:
		stale = true
	}
	e.statsMu.Lock()
	defer e.statsMu.Unlock()
	return e.stats, stale
}

// SetLayerHook installs fn as the model's layer hook (see models.Model.SetLayerHook; nil
// removes it), from the loop so that no step sees it half installed. Tests use it to hold a
// step in progress; it reports false once the engine is closed.
func (e *Engine) SetLayerHook(fn func(layer int, hidden []float32, cols int)) bool {
	var m models.Model = e.runner.model
	done := make(chan struct{})
	if !e.send(func() { m.SetLayerHook(fn); close(done) }) {
		return false
	}
	<-done
	return true
}
