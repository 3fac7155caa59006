package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/atom-go/atom/engine"
)

// commonRequest holds the sampling fields shared by completions and chat completions,
// including vLLM's extensions (top_k, min_p, repetition_penalty, min_tokens, ignore_eos,
// stop_token_ids, skip_special_tokens, return_token_ids).
type commonRequest struct {
	Model             string          `json:"model"`
	MaxTokens         *int            `json:"max_tokens"`
	Temperature       *float64        `json:"temperature"`
	TopP              *float64        `json:"top_p"`
	TopK              *int            `json:"top_k"`
	MinP              *float64        `json:"min_p"`
	N                 *int            `json:"n"`
	Stream            bool            `json:"stream"`
	StreamOptions     *streamOptions  `json:"stream_options"`
	Stop              json.RawMessage `json:"stop"`
	StopTokenIDs      []int32         `json:"stop_token_ids"`
	Seed              *int64          `json:"seed"`
	PresencePenalty   *float64        `json:"presence_penalty"`
	FrequencyPenalty  *float64        `json:"frequency_penalty"`
	RepetitionPenalty *float64        `json:"repetition_penalty"`
	MinTokens         int             `json:"min_tokens"`
	IgnoreEOS         bool            `json:"ignore_eos"`
	SkipSpecialTokens *bool           `json:"skip_special_tokens"`
	ReturnTokenIDs    bool            `json:"return_token_ids"`
	LogitBias         json.RawMessage `json:"logit_bias"`
	BestOf            *int            `json:"best_of"`
	ResponseFormat    json.RawMessage `json:"response_format"`
	Tools             json.RawMessage `json:"tools"`
	ToolChoice        json.RawMessage `json:"tool_choice"`

	// Accepted and ignored: they change nothing about the answer.
	User              json.RawMessage `json:"user"`
	Metadata          json.RawMessage `json:"metadata"`
	Store             json.RawMessage `json:"store"`
	ServiceTier       json.RawMessage `json:"service_tier"`
	ParallelToolCalls json.RawMessage `json:"parallel_tool_calls"`
	RequestID         json.RawMessage `json:"request_id"`

	unsupportedFields
}

type streamOptions struct {
	IncludeUsage         bool `json:"include_usage"`
	ContinuousUsageStats bool `json:"continuous_usage_stats"`
}

// params converts the request into engine sampling parameters and validates them as the
// engine will (so that a request that passes is admitted); n is bounded by opts.
func (c *commonRequest) params(opts *Options, vocab int) (engine.SamplingParams, *apiError) {
	p := engine.DefaultSamplingParams()
	if e := checkUnsupported(&c.unsupportedFields); e != nil {
		return p, e
	}
	if !isNull(c.LogitBias) && compact(c.LogitBias) != "{}" {
		return p, badRequest("logit_bias", "logit_bias is not supported")
	}
	if c.BestOf != nil && (c.N == nil || *c.BestOf != *c.N) && *c.BestOf != 1 {
		return p, badRequest("best_of", "best_of other than n is not supported")
	}
	if !isNull(c.ResponseFormat) {
		var rf struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(c.ResponseFormat, &rf) != nil || rf.Type != "text" {
			return p, badRequest("response_format", "only response_format {\"type\": \"text\"} is supported (no JSON mode or structured output)")
		}
	}
	if !isNull(c.Tools) && compact(c.Tools) != "[]" {
		return p, badRequest("tools", "tool calling is not supported")
	}
	if tc := compact(c.ToolChoice); !isNull(c.ToolChoice) && tc != `"none"` && tc != `"auto"` {
		return p, badRequest("tool_choice", "tool calling is not supported: tool_choice may only be \"none\" or \"auto\"")
	}
	if c.StreamOptions != nil && c.StreamOptions.ContinuousUsageStats {
		return p, badRequest("stream_options", "stream_options.continuous_usage_stats is not supported")
	}
	if c.MaxTokens != nil {
		if *c.MaxTokens < 1 {
			return p, badRequest("max_tokens", "max_tokens must be at least 1, got %d", *c.MaxTokens)
		}
		p.MaxTokens = *c.MaxTokens
	}
	setF := func(dst *float64, src *float64) {
		if src != nil {
			*dst = *src
		}
	}
	setF(&p.Temperature, c.Temperature)
	setF(&p.TopP, c.TopP)
	setF(&p.MinP, c.MinP)
	setF(&p.PresencePenalty, c.PresencePenalty)
	setF(&p.FrequencyPenalty, c.FrequencyPenalty)
	setF(&p.RepetitionPenalty, c.RepetitionPenalty)
	// The engine reads a zero top_p or repetition_penalty as unset; over HTTP they are values,
	// and invalid ones (vLLM refuses both).
	if c.TopP != nil && *c.TopP <= 0 {
		return p, badRequest("top_p", "top_p must be in (0, 1], got %v", *c.TopP)
	}
	if c.RepetitionPenalty != nil && *c.RepetitionPenalty <= 0 {
		return p, badRequest("repetition_penalty", "repetition_penalty must be greater than zero, got %v", *c.RepetitionPenalty)
	}
	if c.TopK != nil {
		// vLLM: 0 disables top-k, -1 is quietly accepted as disabled too, below -1 is an error.
		if *c.TopK < -1 {
			return p, badRequest("top_k", "top_k must be 0 (disable), or at least 1, got %d", *c.TopK)
		}
		p.TopK = max(*c.TopK, 0)
	}
	if c.N != nil {
		if *c.N < 1 || *c.N > opts.MaxN {
			return p, badRequest("n", "n must be in [1, %d], got %d", opts.MaxN, *c.N)
		}
		p.N = *c.N
	}
	if c.MinTokens < 0 {
		return p, badRequest("min_tokens", "min_tokens must be greater than or equal to 0, got %d", c.MinTokens)
	}
	if c.SkipSpecialTokens != nil {
		p.SkipSpecialTokens = *c.SkipSpecialTokens
	}
	p.Seed, p.MinTokens, p.IgnoreEOS, p.StopTokenIDs = c.Seed, c.MinTokens, c.IgnoreEOS, c.StopTokenIDs
	stop, e := stopStrings(c.Stop)
	if e != nil {
		return p, e
	}
	if len(stop) > maxStopStrings {
		return p, badRequest("stop", "at most %d stop strings, got %d", maxStopStrings, len(stop))
	}
	p.Stop = stop
	return p, nil
}

// normalize runs the engine's own validation, so that a request the server accepts is one
// the engine admits; its message names the field.
func normalize(p *engine.SamplingParams, vocab int) *apiError {
	if err := p.Normalize(vocab); err != nil {
		msg := strings.TrimPrefix(err.Error(), engine.ErrInvalidParams.Error()+": ")
		field, _, _ := strings.Cut(msg, " ")
		if !errors.Is(err, engine.ErrInvalidParams) {
			field = ""
		}
		return badRequest(field, "%s", msg)
	}
	return nil
}

// maxTokens sets the output budget against the remaining context: an explicit max_tokens that
// does not fit is refused as vLLM does; the default is clamped to what remains.
func maxTokens(p *engine.SamplingParams, explicit bool, defaultMax, maxLen, promptLen int, field string) *apiError {
	room := maxLen - promptLen
	if !explicit {
		p.MaxTokens = min(defaultMax, room)
		return nil
	}
	if p.MaxTokens > room {
		return badRequest(field, "'max_tokens' or 'max_completion_tokens' is too large: %d. This model's maximum context length is %d tokens and your request has %d input tokens (%d > %d - %d)",
			p.MaxTokens, maxLen, promptLen, p.MaxTokens, maxLen, promptLen)
	}
	return nil
}

// maxStopStrings bounds the stop strings of a request: each is searched for after every token.
const maxStopStrings = 64

func isNull(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }

// stopStrings accepts null, a string or a list of strings.
func stopStrings(raw json.RawMessage) ([]string, *apiError) {
	if isNull(raw) {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, badRequest("stop", "stop must be a string or a list of strings")
	}
	return many, nil
}

// checkModel refuses a request for a model this server does not serve.
func (s *Server) checkModel(name string) *apiError {
	if name != "" && name != s.name {
		return apiErr(404, "NotFoundError", "model", fmt.Sprintf("The model `%s` does not exist; this server serves `%s`", name, s.name))
	}
	return nil
}
