package openai

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
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
	streams []*engine.Stream
	events  chan event
	start   time.Time
	first   time.Time
	tokens  int
}

// submit admits one engine request per prompt; on any failure the ones already admitted are
// cancelled.
func (s *Server) submit(ctx context.Context, id string, prompts [][]int32, p engine.SamplingParams) (*call, error) {
	c := &call{events: make(chan event, 64), start: time.Now()}
	for i, ids := range prompts {
		rid := id
		if len(prompts) > 1 {
			rid = id + "-" + itoa(i)
		}
		st, err := s.eng.Generate(engine.Request{ID: rid, PromptIDs: ids, Params: p})
		if err != nil {
			c.cancel()
			return nil, err
		}
		c.streams = append(c.streams, st)
	}
	for i, st := range c.streams {
		go func() {
			for {
				outs, err := st.Next(ctx)
				if errors.Is(err, io.EOF) {
					c.events <- event{prompt: i, err: io.EOF}
					return
				}
				if err != nil {
					st.Cancel() // the client went away or the engine failed: free the request
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

// each calls fn for every output until all streams end; it returns the first error.
func (c *call) each(fn func(prompt int, o engine.Output) error) error {
	var first error
	for open := len(c.streams); open > 0; {
		ev := <-c.events
		if ev.err != nil {
			open--
			if !errors.Is(ev.err, io.EOF) && first == nil {
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
	return first
}

func (c *call) cancel() {
	for _, st := range c.streams {
		st.Cancel()
	}
}

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
