package openai

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/atom-go/atom/engine"
)

// event is one output of one of a call's engine requests.
type event struct {
	prompt int // which engine request (prompt) it came from
	out    engine.Output
	err    error
}

// call is one HTTP request's engine requests, read together.
type call struct {
	s       *Server
	streams []Stream
	events  chan event
	closing <-chan struct{}
	seqs    int64
	start   time.Time
	first   time.Time
	tokens  int

	stopWatch  func() bool // stops the watch on the client's context
	cancelOnce sync.Once
	ended      bool // every stream reached its end: nothing to abort
}

// submit admits one engine request per prompt in a single step of the engine loop (all or
// none) and watches the client: when it goes away, every one of them is aborted at once,
// waiting sequences included. The caller must call finish.
func (s *Server) submit(ctx context.Context, id string, prompts [][]int32, p engine.SamplingParams) (*call, error) {
	seqs := int64(len(prompts) * p.N)
	if n := s.pending.Add(seqs); n > int64(s.opts.MaxPendingSeqs) {
		s.pending.Add(-seqs)
		return nil, apiErr(http.StatusServiceUnavailable, "server_error", "",
			fmt.Sprintf("the server is busy: %d sequences in flight, this request adds %d (--max-pending-seqs %d); retry later",
				n-seqs, seqs, s.opts.MaxPendingSeqs))
	}
	reqs := make([]engine.Request, len(prompts))
	for i, ids := range prompts {
		rid := id
		if len(prompts) > 1 {
			rid = id + "-" + itoa(i)
		}
		reqs[i] = engine.Request{ID: rid, PromptIDs: ids, Params: p}
	}
	streams, err := s.eng.GenerateBatch(reqs)
	if err != nil {
		s.pending.Add(-seqs)
		return nil, err
	}
	c := &call{s: s, streams: streams, events: make(chan event, 64), closing: s.closing, seqs: seqs, start: time.Now()}
	c.stopWatch = context.AfterFunc(ctx, c.cancel)
	for i, st := range c.streams {
		go func() {
			for {
				outs, err := st.Next(ctx)
				if err != nil {
					c.events <- event{prompt: i, err: err}
					return
				}
				for _, o := range outs {
					c.events <- event{prompt: i, out: o}
				}
			}
		}()
	}
	return c, nil
}

// each calls fn for every output until all streams end; it returns the first error, which is
// errShutdown when the server aborts the call.
func (c *call) each(fn func(prompt int, o engine.Output) error) error {
	var first error
	closing := c.closing
	eofs := 0
	for open := len(c.streams); open > 0; {
		var ev event
		select {
		case ev = <-c.events:
		case <-closing:
			closing = nil
			if first == nil {
				first = errShutdown
				c.cancel()
			}
			continue
		}
		if ev.err != nil {
			open--
			if errors.Is(ev.err, io.EOF) {
				eofs++
			} else if first == nil {
				first = ev.err
				c.cancel()
			}
			continue
		}
		if first != nil {
			continue
		}
		if c.first.IsZero() && len(ev.out.TokenIDs) > 0 {
			c.first = time.Now()
		}
		c.tokens += len(ev.out.TokenIDs)
		if err := fn(ev.prompt, ev.out); err != nil {
			first = err
			c.cancel()
		}
	}
	c.ended = eofs == len(c.streams)
	return first
}

// cancel aborts every engine request of the call in one trip through the engine loop.
func (c *call) cancel() {
	c.cancelOnce.Do(func() {
		ids := make([]string, len(c.streams))
		for i, st := range c.streams {
			ids[i] = st.ID()
		}
		c.s.eng.AbortBatch(ids)
	})
}

// finish releases the call: its requests are aborted unless they all ended, and its sequences
// leave the pending count.
func (c *call) finish() {
	c.stopWatch()
	if !c.ended {
		c.cancel()
	}
	c.s.pending.Add(-c.seqs)
}

// clientGone reports whether err means the client went away (its context ended, or a write to
// it failed), and marks the request's outcome as client_closed if so.
func clientGone(w http.ResponseWriter, r *http.Request, err error) bool {
	if r.Context().Err() != nil || errors.As(err, new(*clientWriteError)) {
		markClientGone(w)
		return true
	}
	return false
}

// clientWriteError is a failed write to the client: it went away or stopped reading.
type clientWriteError struct{ err error }

func (e *clientWriteError) Error() string { return "write to client: " + e.err.Error() }
func (e *clientWriteError) Unwrap() error { return e.err }

func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}
