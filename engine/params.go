package engine

import (
	"fmt"
	"math"
)

// SamplingParams are a request's decoding controls, with vLLM's meanings.
type SamplingParams struct {
	N                 int      `msgpack:"n" json:"n"`                                   // sequences to return for the prompt
	Temperature       float64  `msgpack:"temperature" json:"temperature"`               // 0 is greedy
	TopP              float64  `msgpack:"top_p" json:"top_p"`                           // (0, 1]
	TopK              int      `msgpack:"top_k" json:"top_k"`                           // 0 or -1: off
	MinP              float64  `msgpack:"min_p" json:"min_p"`                           // [0, 1]
	Seed              *int64   `msgpack:"seed" json:"seed"`                             // per-request generator
	RepetitionPenalty float64  `msgpack:"repetition_penalty" json:"repetition_penalty"` // 1: off; prompt and output tokens
	PresencePenalty   float64  `msgpack:"presence_penalty" json:"presence_penalty"`     // [-2, 2]; output tokens
	FrequencyPenalty  float64  `msgpack:"frequency_penalty" json:"frequency_penalty"`   // [-2, 2]; output tokens
	MaxTokens         int      `msgpack:"max_tokens" json:"max_tokens"`                 // 0: up to the model length
	MinTokens         int      `msgpack:"min_tokens" json:"min_tokens"`                 // stop tokens are masked before this
	IgnoreEOS         bool     `msgpack:"ignore_eos" json:"ignore_eos"`
	StopTokenIDs      []int32  `msgpack:"stop_token_ids" json:"stop_token_ids"`
	Stop              []string `msgpack:"stop" json:"stop"`         // stop strings, not included in the output
	Logprobs          int      `msgpack:"logprobs" json:"logprobs"` // top alternatives per token; the sampled token's logprob is always returned
	SkipSpecialTokens bool     `msgpack:"skip_special_tokens" json:"skip_special_tokens"`
}

// DefaultSamplingParams is greedy-free sampling at temperature 1 with nothing filtered, like vLLM's defaults.
func DefaultSamplingParams() SamplingParams {
	return SamplingParams{N: 1, Temperature: 1, TopP: 1, RepetitionPenalty: 1, SkipSpecialTokens: true}
}

// MaxLogprobs bounds the top-N logprobs a request may ask for.
const MaxLogprobs = 20

// Normalize fills zero values that mean "unset" (N, TopP, RepetitionPenalty) and validates
// every field, naming the first bad one. MaxTokens 0 is unset too: the request runs up to the
// engine's max_model_len and finishes with "length" there, never later (the bridge's hosts send
// 0 for "no limit"); the OpenAI server and `atom-plugin generate` refuse 0 as vLLM does.
func (p *SamplingParams) Normalize(vocab int) error {
	if p.N == 0 {
		p.N = 1
	}
	if p.TopP == 0 {
		p.TopP = 1
	}
	if p.RepetitionPenalty == 0 {
		p.RepetitionPenalty = 1
	}
	if p.TopK < 0 {
		p.TopK = 0
	}
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("%w: %s must be %s, got %v", ErrInvalidParams, field, want, v)
	}
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case p.N < 1 || p.N > 128:
		return bad("n", p.N, "in [1, 128]")
	case !finite(p.Temperature) || p.Temperature < 0:
		return bad("temperature", p.Temperature, ">= 0")
	case !finite(p.TopP) || p.TopP <= 0 || p.TopP > 1:
		return bad("top_p", p.TopP, "in (0, 1]")
	case vocab > 0 && p.TopK > vocab:
		return bad("top_k", p.TopK, fmt.Sprintf("at most the vocabulary size %d (or -1)", vocab))
	case !finite(p.MinP) || p.MinP < 0 || p.MinP > 1:
		return bad("min_p", p.MinP, "in [0, 1]")
	case !finite(p.RepetitionPenalty) || p.RepetitionPenalty <= 0 || p.RepetitionPenalty > 100:
		return bad("repetition_penalty", p.RepetitionPenalty, "in (0, 100]")
	case !finite(p.PresencePenalty) || p.PresencePenalty < -2 || p.PresencePenalty > 2:
		return bad("presence_penalty", p.PresencePenalty, "in [-2, 2]")
	case !finite(p.FrequencyPenalty) || p.FrequencyPenalty < -2 || p.FrequencyPenalty > 2:
		return bad("frequency_penalty", p.FrequencyPenalty, "in [-2, 2]")
	case p.MaxTokens < 0:
		return bad("max_tokens", p.MaxTokens, ">= 0")
	case p.MinTokens < 0 || (p.MaxTokens > 0 && p.MinTokens > p.MaxTokens):
		return bad("min_tokens", p.MinTokens, "in [0, max_tokens]")
	case p.Logprobs < 0 || p.Logprobs > MaxLogprobs:
		return bad("logprobs", p.Logprobs, fmt.Sprintf("in [0, %d]", MaxLogprobs))
	}
	for _, id := range p.StopTokenIDs {
		if id < 0 || (vocab > 0 && int(id) >= vocab) {
			return bad("stop_token_ids", id, fmt.Sprintf("token ids in [0, %d)", vocab))
		}
	}
	for _, s := range p.Stop {
		if s == "" {
			return bad("stop", `""`, "non-empty strings")
		}
	}
	return nil
}
