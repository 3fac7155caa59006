package openai

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/atom-go/atom/engine"
	"github.com/atom-go/atom/engine/tokenizer"
)

type chatRequest struct {
	commonRequest
	Messages            []chatMessage `json:"messages"`
	MaxCompletionTokens *int          `json:"max_completion_tokens"`
	Logprobs            bool          `json:"logprobs"`
	TopLogprobs         *int          `json:"top_logprobs"`
	AddGenerationPrompt *bool         `json:"add_generation_prompt"`
	chatOnlyUnsupported
}

// chatMessage accepts content as a string or as a list of {"type": "text", "text": ...} parts.
type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	// Name is accepted and not passed to the template (OpenAI's participant name).
	Name *string `json:"name"`
}

func (m chatMessage) text() (string, *apiError) {
	if len(m.Content) == 0 || string(m.Content) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(m.Content, &parts); err != nil {
		return "", badRequest("messages", "message content must be a string or a list of parts")
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type != "text" {
			return "", badRequest("messages", "content part type %q is not supported (text only)", p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

type chatLogprob struct {
	Token       string        `json:"token"`
	Logprob     float32       `json:"logprob"`
	Bytes       []int         `json:"bytes"`
	TopLogprobs []chatLogprob `json:"top_logprobs,omitempty"`
}

// parseChat decodes and validates a chat body into a prompt and engine parameters the engine
// will accept.
func (s *Server) parseChat(body []byte) (*chatRequest, []int32, engine.SamplingParams, *apiError) {
	var req chatRequest
	var p engine.SamplingParams
	if e := decodeJSON(body, &req); e != nil {
		return nil, nil, p, e
	}
	if e := s.checkModel(req.Model); e != nil {
		return nil, nil, p, e
	}
	if e := checkUnsupported(&req.chatOnlyUnsupported); e != nil {
		return nil, nil, p, e
	}
	field := "max_tokens"
	if req.MaxCompletionTokens != nil {
		req.MaxTokens, field = req.MaxCompletionTokens, "max_completion_tokens"
	}
	p, e := req.params(&s.opts, s.m.vocab)
	if e == nil && req.TopLogprobs != nil {
		if *req.TopLogprobs < 0 || *req.TopLogprobs > engine.MaxLogprobs {
			e = badRequest("top_logprobs", "top_logprobs must be in [0, %d]", engine.MaxLogprobs)
		} else if !req.Logprobs {
			e = badRequest("top_logprobs", "top_logprobs needs logprobs: true")
		} else {
			p.Logprobs = *req.TopLogprobs
		}
	}
	var prompt []int32
	if e == nil {
		prompt, e = s.chatPrompt(&req)
	}
	if e == nil {
		e = maxTokens(&p, req.MaxTokens != nil, s.m.maxLen, s.m.maxLen, len(prompt), field)
	}
	if e == nil {
		e = normalize(&p, s.m.vocab)
	}
	if e != nil {
		return nil, nil, p, e
	}
	return &req, prompt, p, nil
}

// chat serves POST /v1/chat/completions.
func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	body, release, e := s.readBody(w, r)
	if e != nil {
		writeError(w, e)
		return
	}
	req, prompt, p, e := s.parseChat(body)
	body = nil
	release()
	if e != nil {
		writeError(w, e)
		return
	}
	id := newID("chatcmpl-")
	c, err := s.submit(r.Context(), id, [][]int32{prompt}, p)
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	defer c.finish()
	base := map[string]any{"id": id, "created": time.Now().Unix(), "model": s.name}
	if req.Stream {
		s.chatStream(w, r, req, c, base, len(prompt), p.N)
		return
	}
	type choice struct {
		Index        int            `json:"index"`
		Message      map[string]any `json:"message"`
		Logprobs     any            `json:"logprobs"`
		FinishReason string         `json:"finish_reason"`
		StopReason   any            `json:"stop_reason"`
		TokenIDs     []int32        `json:"token_ids,omitempty"`
	}
	texts := make([]strings.Builder, p.N)
	choices := make([]choice, p.N)
	lps := make([][]chatLogprob, p.N)
	err = c.each(func(_ int, o engine.Output) error {
		texts[o.Index].WriteString(o.Text)
		ch := &choices[o.Index]
		ch.Index = o.Index
		if req.ReturnTokenIDs {
			ch.TokenIDs = append(nonNil(ch.TokenIDs), o.TokenIDs...)
		}
		if req.Logprobs {
			lps[o.Index] = append(lps[o.Index], s.chatLogprobs(o.Logprobs)...)
		}
		if o.Finished {
			ch.FinishReason, ch.StopReason = o.FinishReason, o.StopReason
		}
		return nil
	})
	if err != nil {
		if !clientGone(w, r, err) {
			writeError(w, toAPIError(err))
		}
		return
	}
	for i := range choices {
		choices[i].Message = map[string]any{"role": "assistant", "content": texts[i].String()}
		if req.Logprobs {
			choices[i].Logprobs = map[string]any{"content": nonNilLP(lps[i])}
		}
	}
	s.metrics.observeLatency(c)
	out := with(with(base, "object", "chat.completion"), "choices", choices)
	writeJSON(w, http.StatusOK, with(out, "usage", usage{len(prompt), c.tokens, len(prompt) + c.tokens}))
}

func (s *Server) chatStream(w http.ResponseWriter, r *http.Request, req *chatRequest, c *call, base map[string]any, promptLen, n int) {
	st := newSSE(w)
	base = with(base, "object", "chat.completion.chunk")
	// The first chunk of each choice announces the assistant role, as OpenAI does.
	for i := 0; i < n; i++ {
		_ = st.send(with(base, "choices", []any{map[string]any{"index": i, "delta": map[string]any{"role": "assistant", "content": ""}, "logprobs": nil, "finish_reason": nil}}))
	}
	err := c.each(func(_ int, o engine.Output) error {
		ch := map[string]any{"index": o.Index, "delta": map[string]any{"content": o.Text}, "logprobs": nil, "finish_reason": nil}
		if req.Logprobs {
			ch["logprobs"] = map[string]any{"content": nonNilLP(s.chatLogprobs(o.Logprobs))}
		}
		if req.ReturnTokenIDs {
			ch["token_ids"] = nonNil(o.TokenIDs)
		}
		if o.Finished {
			ch["finish_reason"], ch["stop_reason"] = o.FinishReason, o.StopReason
		}
		return st.send(with(base, "choices", []any{ch}))
	})
	s.endStream(w, r, st, err, &req.commonRequest, c, base, promptLen)
}

// chatPrompt renders the messages with the model's chat template and tokenizes them. A
// message that alone exceeds the context is refused before anything is rendered.
func (s *Server) chatPrompt(req *chatRequest) ([]int32, *apiError) {
	tok := s.m.tok
	if tok == nil || !tok.HasChatTemplate() {
		return nil, badRequest("messages", "this model has no chat template: use /v1/completions")
	}
	if len(req.Messages) == 0 {
		return nil, badRequest("messages", "messages must not be empty")
	}
	msgs := make([]tokenizer.Message, len(req.Messages))
	for i, m := range req.Messages {
		switch m.Role {
		case "system", "user", "assistant", "developer":
		default:
			return nil, badRequest("messages", "message %d: unsupported role %q", i, m.Role)
		}
		text, e := m.text()
		if e != nil {
			return nil, e
		}
		if len(text) > s.m.maxLen*directBytesPerToken {
			over, err := countOver(tok, text, false, s.m.maxLen)
			if err != nil {
				return nil, badRequest("messages", "tokenize: %v", err)
			}
			if over {
				return nil, contextError("messages", s.m.maxLen, s.m.maxLen, true)
			}
		}
		msgs[i] = tokenizer.Message{Role: m.Role, Content: text}
	}
	genPrompt := req.AddGenerationPrompt == nil || *req.AddGenerationPrompt
	rendered, err := tok.ApplyChatTemplate(msgs, genPrompt)
	if err != nil {
		return nil, badRequest("messages", "%s", templateProblem(err))
	}
	ids, over, err := encodeBounded(tok, rendered, false, s.m.maxLen)
	switch {
	case err != nil:
		return nil, badRequest("messages", "tokenize: %v", err)
	case over && ids == nil:
		return nil, contextError("messages", s.m.maxLen, s.m.maxLen, true)
	case over:
		return nil, contextError("messages", s.m.maxLen, len(ids), false)
	case len(ids) == 0:
		return nil, badRequest("messages", "the rendered messages are empty")
	}
	return ids, nil
}

func (s *Server) chatLogprobs(samples []engine.Sample) []chatLogprob {
	out := make([]chatLogprob, 0, len(samples))
	for _, smp := range samples {
		lp := s.chatLogprob(smp.Token, smp.Logprob)
		lp.TopLogprobs = []chatLogprob{}
		for i, id := range smp.TopIDs {
			lp.TopLogprobs = append(lp.TopLogprobs, s.chatLogprob(id, smp.TopLogprobs[i]))
		}
		out = append(out, lp)
	}
	return out
}

func (s *Server) chatLogprob(id int32, lp float32) chatLogprob {
	t := s.tokenText(id)
	b := make([]int, len(t))
	for i := 0; i < len(t); i++ {
		b[i] = int(t[i])
	}
	return chatLogprob{Token: t, Logprob: lp, Bytes: b}
}

func nonNilLP(x []chatLogprob) []chatLogprob {
	if x == nil {
		return []chatLogprob{}
	}
	return x
}

// goInternals are fragments of Go formatting (of syntax nodes, values and
// types) that a client must never see in a template error.
var goInternals = []string{"map[", "&{", "<Token", "*gonja", "gonja.", "exec.", "nodes.", "reflect.", "0x", "%!"}

// maxTemplateProblem bounds the template error text a client is sent.
const maxTemplateProblem = 400

// templateProblem is what a client is told about a chat template that
// failed on its messages: the template's problem, in words.
func templateProblem(err error) string {
	msg := err.Error()
	for _, prefix := range []string{"apply chat template: ", "render template: "} {
		msg = strings.TrimPrefix(msg, prefix)
	}
	for _, frag := range goInternals {
		if strings.Contains(msg, frag) {
			return "chat template: the template failed to render these messages"
		}
	}
	if len(msg) > maxTemplateProblem {
		cut := maxTemplateProblem
		for cut > 0 && msg[cut]&0xc0 == 0x80 {
			cut--
		}
		msg = msg[:cut] + "..."
	}
	if !strings.HasPrefix(msg, "chat template") {
		msg = "chat template: " + msg
	}
	return msg
}
