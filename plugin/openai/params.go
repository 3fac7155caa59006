package openai

import (
	"encoding/json"
	"fmt"

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
	LogitBias         map[string]any  `json:"logit_bias"`
	BestOf            *int            `json:"best_of"`
	ResponseFormat    json.RawMessage `json:"response_format"`
	Tools             json.RawMessage `json:"tools"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// params converts the request into engine sampling parameters; defaultMax applies when the
// request gives no max_tokens.
func (c *commonRequest) params(defaultMax int) (engine.SamplingParams, *apiError) {
	p := engine.DefaultSamplingParams()
	if len(c.LogitBias) > 0 {
		return p, badRequest("logit_bias", "logit_bias is not supported")
	}
	if c.BestOf != nil && (c.N == nil || *c.BestOf != *c.N) && *c.BestOf != 1 {
		return p, badRequest("best_of", "best_of other than n is not supported")
	}
	if len(c.ResponseFormat) > 0 && string(c.ResponseFormat) != "null" {
		var rf struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(c.ResponseFormat, &rf) != nil || rf.Type != "text" {
			return p, badRequest("response_format", "only response_format {\"type\": \"text\"} is supported (no JSON mode or structured output)")
		}
	}
	if len(c.Tools) > 0 && string(c.Tools) != "null" && string(c.Tools) != "[]" {
		return p, badRequest("tools", "tool calling is not supported")
	}
	p.MaxTokens = defaultMax
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
	if c.TopP != nil && *c.TopP == 0 {
		return p, badRequest("top_p", "top_p must be in (0, 1], got 0")
	}
	if c.TopK != nil {
		p.TopK = *c.TopK
	}
	if c.N != nil {
		if *c.N < 1 {
			return p, badRequest("n", "n must be at least 1, got %d", *c.N)
		}
		p.N = *c.N
	}
	if c.SkipSpecialTokens != nil {
		p.SkipSpecialTokens = *c.SkipSpecialTokens
	}
	p.Seed, p.MinTokens, p.IgnoreEOS, p.StopTokenIDs = c.Seed, c.MinTokens, c.IgnoreEOS, c.StopTokenIDs
	stop, err := stopStrings(c.Stop)
	if err != nil {
		return p, err
	}
	p.Stop = stop
	return p, nil
}

// stopStrings accepts null, a string or a list of at most 4+ strings.
func stopStrings(raw json.RawMessage) ([]string, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
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
