package engine

import (
	"context"
	"io"
	"sync"
)

// Output is one increment of one choice of a request.
type Output struct {
	RequestID string `json:"request_id"`
	// Index is the choice (0..n-1) this increment belongs to.
	Index int `json:"index"`
	// TokenIDs are the tokens generated since the previous increment of this choice.
	TokenIDs []int32 `json:"token_ids"`
	// Text is the detokenized text since the previous increment (stop strings excluded).
	Text string `json:"text"`
	// Logprobs has one entry per token of TokenIDs.
	Logprobs []Sample `json:"logprobs,omitempty"`
	// Finished is set on the last increment of a choice, with FinishReason "stop", "length" or "abort".
	Finished     bool   `json:"finished"`
	FinishReason string `json:"finish_reason,omitempty"`
	// StopReason is the stop string or stop token that ended the choice, when one did.
	StopReason any `json:"stop_reason,omitempty"`
	// NumPromptTokens and NumCachedTokens describe the prompt (set on every increment).
	NumPromptTokens int `json:"num_prompt_tokens"`
	NumCachedTokens int `json:"num_cached_tokens"`
}

// Stream delivers a request's outputs. The engine appends without ever blocking, however slow
// the reader; Next hands over everything pending at once.
type Stream struct {
	id      string
	engine  *Engine
	mu      sync.Mutex
	pending []Output
	open    int // choices not finished yet
	err     error
	notify  chan struct{}
}

func newStream(e *Engine, id string, n int) *Stream {
	return &Stream{id: id, engine: e, open: n, notify: make(chan struct{}, 1)}
}

// ID returns the request id.
func (s *Stream) ID() string { return s.id }

func (s *Stream) push(o Output) {
	s.mu.Lock()
	s.pending = append(s.pending, o)
	if o.Finished {
		s.open--
	}
	s.mu.Unlock()
	s.signal()
}

func (s *Stream) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
	s.signal()
}

func (s *Stream) signal() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// Next waits for outputs and returns all pending ones. It returns io.EOF after the last
// choice finished and everything was read, the engine's error if it failed, or ctx's error.
func (s *Stream) Next(ctx context.Context) ([]Output, error) {
	for {
		s.mu.Lock()
		out, open, err := s.pending, s.open, s.err
		s.pending = nil
		s.mu.Unlock()
		if len(out) > 0 {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if open == 0 {
			return nil, io.EOF
		}
		select {
		case <-s.notify:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Collect reads the stream to its end and merges each choice's increments.
func (s *Stream) Collect(ctx context.Context) ([]Output, error) {
	var choices []Output
	for {
		outs, err := s.Next(ctx)
		if err == io.EOF {
			return choices, nil
		}
		if err != nil {
			return choices, err
		}
		for _, o := range outs {
			for len(choices) <= o.Index {
				choices = append(choices, Output{RequestID: s.id, Index: len(choices)})
			}
			c := &choices[o.Index]
			c.TokenIDs = append(c.TokenIDs, o.TokenIDs...)
			c.Text += o.Text
			c.Logprobs = append(c.Logprobs, o.Logprobs...)
			c.Finished, c.FinishReason, c.StopReason = o.Finished, o.FinishReason, o.StopReason
			c.NumPromptTokens, c.NumCachedTokens = o.NumPromptTokens, o.NumCachedTokens
		}
	}
}

// Cancel aborts the request; its unfinished choices end with FinishReason "abort".
func (s *Stream) Cancel() { s.engine.Abort(s.id) }
