package openai

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/atom-go/atom/engine"
)

type completionRequest struct {
	commonRequest
	Prompt   json.RawMessage `json:"prompt"`
	Logprobs *int            `json:"logprobs"`
	Echo     bool            `json:"echo"`
	Suffix   *string         `json:"suffix"`
	completionOnlyUnsupported
}

type completionChoice struct {
	Index        int                `json:"index"`
	Text         string             `json:"text"`
	Logprobs     *completionLogprob `json:"logprobs"`
	FinishReason *string            `json:"finish_reason"`
	StopReason   any                `json:"stop_reason,omitempty"`
	TokenIDs     []int32            `json:"token_ids,omitempty"`
	PromptIDs    []int32            `json:"prompt_token_ids,omitempty"`
}

type completionLogprob struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float32            `json:"token_logprobs"`
	TopLogprobs   []map[string]float32 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// parseCompletion decodes and validates a completions body into prompts and engine parameters
// the engine will accept.
func (s *Server) parseCompletion(body []byte) (*completionRequest, [][]int32, engine.SamplingParams, *apiError) {
	var req completionRequest
	var p engine.SamplingParams
	if e := decodeJSON(body, &req); e != nil {
		return nil, nil, p, e
	}
	if e := s.checkModel(req.Model); e != nil {
		return nil, nil, p, e
	}
	if e := checkUnsupported(&req.completionOnlyUnsupported); e != nil {
		return nil, nil, p, e
	}
	p, e := req.params(&s.opts, s.m.vocab)
	if e == nil && (req.Echo || req.Suffix != nil) {
		e = badRequest("echo", "echo and suffix are not supported")
	}
	if e == nil && req.Logprobs != nil {
		if *req.Logprobs < 0 || *req.Logprobs > engine.MaxLogprobs {
			e = badRequest("logprobs", "logprobs must be in [0, %d]", engine.MaxLogprobs)
		} else {
			p.Logprobs = *req.Logprobs
		}
	}
	if e != nil {
		return nil, nil, p, e
	}
	prompts, e := s.m.parsePrompt(req.Prompt, s.opts.MaxSeqsPerRequest, p.N)
	if e == nil {
		e = maxTokens(&p, req.MaxTokens != nil, 16, s.m.maxLen, longest(prompts), "max_tokens")
	}
	if e == nil {
		e = normalize(&p, s.m.vocab)
	}
	if e != nil {
		return nil, nil, p, e
	}
	return &req, prompts, p, nil
}

// completions serves POST /v1/completions.
func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	body, release, e := s.readBody(w, r)
	if e != nil {
		writeError(w, e)
		return
	}
	req, prompts, p, e := s.parseCompletion(body)
	body = nil
	release()
	if e != nil {
		writeError(w, e)
		return
	}
	id := newID("cmpl-")
	c, err := s.submit(r.Context(), id, prompts, p)
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	defer c.finish()
	base := map[string]any{"id": id, "object": "text_completion", "created": time.Now().Unix(), "model": s.name}
	promptTokens := 0
	for _, pr := range prompts {
		promptTokens += len(pr)
	}
	choice := func(prompt int, o engine.Output) completionChoice {
		ch := completionChoice{Index: prompt*p.N + o.Index, Text: o.Text}
		if req.ReturnTokenIDs {
			ch.TokenIDs = nonNil(o.TokenIDs)
		}
		if req.Logprobs != nil {
			ch.Logprobs = s.completionLogprobs(o.Logprobs)
		}
		if o.Finished {
			reason := o.FinishReason
			ch.FinishReason, ch.StopReason = &reason, o.StopReason
		}
		return ch
	}
	if req.Stream {
		st := newSSE(w)
		started := map[int]bool{}
		err := c.each(func(prompt int, o engine.Output) error {
			ch := choice(prompt, o)
			if req.ReturnTokenIDs && !started[ch.Index] {
				ch.PromptIDs = prompts[prompt]
			}
			started[ch.Index] = true
			return st.send(with(base, "choices", []completionChoice{ch}))
		})
		s.endStream(w, r, st, err, &req.commonRequest, c, base, promptTokens)
		return
	}
	choices := make([]completionChoice, len(prompts)*p.N)
	for i := range choices {
		choices[i].Index = i
	}
	err = c.each(func(prompt int, o engine.Output) error {
		ch := &choices[prompt*p.N+o.Index]
		part := choice(prompt, o)
		ch.Text += part.Text
		ch.FinishReason, ch.StopReason = part.FinishReason, part.StopReason
		if req.ReturnTokenIDs {
			ch.TokenIDs = append(nonNil(ch.TokenIDs), o.TokenIDs...)
			ch.PromptIDs = prompts[prompt]
		}
		if part.Logprobs != nil {
			ch.Logprobs = appendLogprobs(ch.Logprobs, part.Logprobs)
		}
		return nil
	})
	if err != nil {
		if !clientGone(w, r, err) {
			writeError(w, toAPIError(err))
		}
		return
	}
	s.metrics.observeLatency(c)
	writeJSON(w, http.StatusOK, with(with(base, "choices", choices), "usage", usage{promptTokens, c.tokens, promptTokens + c.tokens}))
}

// tokenText is how a token appears in logprobs; without a tokenizer, vLLM's "token_id:N".
func (s *Server) tokenText(id int32) string {
	if tok := s.m.tok; tok != nil {
		return tok.Decode([]int32{id}, false)
	}
	return "token_id:" + itoa(int(id))
}

func (s *Server) completionLogprobs(samples []engine.Sample) *completionLogprob {
	lp := &completionLogprob{Tokens: []string{}, TokenLogprobs: []float32{}, TopLogprobs: []map[string]float32{}, TextOffset: []int{}}
	for _, smp := range samples {
		lp.Tokens = append(lp.Tokens, s.tokenText(smp.Token))
		lp.TokenLogprobs = append(lp.TokenLogprobs, smp.Logprob)
		top := map[string]float32{}
		for i, id := range smp.TopIDs {
			top[s.tokenText(id)] = smp.TopLogprobs[i]
		}
		lp.TopLogprobs = append(lp.TopLogprobs, top)
		off := 0
		if n := len(lp.Tokens); n > 1 {
			off = lp.TextOffset[n-2] + len(lp.Tokens[n-2])
		}
		lp.TextOffset = append(lp.TextOffset, off)
	}
	return lp
}

func appendLogprobs(a, b *completionLogprob) *completionLogprob {
	if a == nil {
		return b
	}
	shift := 0
	if n := len(a.Tokens); n > 0 {
		shift = a.TextOffset[n-1] + len(a.Tokens[n-1])
	}
	for i := range b.TextOffset {
		b.TextOffset[i] += shift
	}
	a.Tokens = append(a.Tokens, b.Tokens...)
	a.TokenLogprobs = append(a.TokenLogprobs, b.TokenLogprobs...)
	a.TopLogprobs = append(a.TopLogprobs, b.TopLogprobs...)
	a.TextOffset = append(a.TextOffset, b.TextOffset...)
	return a
}

func with(m map[string]any, k string, v any) map[string]any {
	out := make(map[string]any, len(m)+1)
	for kk, vv := range m {
		out[kk] = vv
	}
	out[k] = v
	return out
}

func nonNil(ids []int32) []int32 {
	if ids == nil {
		return []int32{}
	}
	return ids
}
