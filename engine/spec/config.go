// Package spec holds speculative decoding's host-side pieces: the --speculative-config
// settings and the n-gram (prompt lookup) proposer. The engine runs a draft model's proposals
// (engine/spec_draft.go) and verifies every method's drafts (engine/spec_step.go); the
// scheduler reserves their KV slots and rolls rejected ones back.
package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// MaxSpeculativeTokens bounds num_speculative_tokens: a verify step computes 1+K positions per
// sequence, and beyond a few tokens acceptance of n-gram drafts falls off anyway.
const MaxSpeculativeTokens = 16

// maxLookup bounds prompt_lookup_max: the proposer compares up to that many tokens at every
// position of the context each step.
const maxLookup = 1024

// implemented names the methods for error messages.
const implemented = `"ngram", "draft_model" and "mtp" (DeepSeek-V3)`

// ErrInvalidConfig wraps every refusal of a --speculative-config value.
var ErrInvalidConfig = errors.New("invalid --speculative-config")

// Methods atom-go implements, as vLLM spells them.
const (
	// MethodNgram is prompt lookup: drafts copied from the sequence's own earlier tokens.
	MethodNgram = "ngram"
	// MethodDraftModel is a smaller checkpoint sharing the target's vocabulary, run
	// autoregressively with its own paged KV cache.
	MethodDraftModel = "draft_model"
	// MethodMTP is DeepSeek-V3's multi-token-prediction layer, stored in the target's
	// checkpoint (vLLM also spells it "deepseek_mtp"), reused for every draft.
	MethodMTP = "mtp"
)

// Config is the subset of vLLM's SpeculativeConfig that atom-go implements, spelled as vLLM's
// JSON spells it.
type Config struct {
	// Method is the drafting method: MethodNgram, MethodDraftModel or MethodMTP.
	Method string `json:"method"`
	// Model is the draft checkpoint's directory (or GGUF file) for MethodDraftModel; for
	// MethodMTP, the checkpoint holding the MTP layer when not the target's (empty: the
	// target's).
	Model string `json:"model,omitempty"`
	// NumSpeculativeTokens is K, the most drafts proposed per sequence and step.
	NumSpeculativeTokens int `json:"num_speculative_tokens"`
	// PromptLookupMin and PromptLookupMax bound the length of the n-gram matched against the
	// sequence's earlier tokens.
	PromptLookupMin int `json:"prompt_lookup_min"`
	// PromptLookupMax: see PromptLookupMin.
	PromptLookupMax int `json:"prompt_lookup_max"`
}

// rawConfig detects unset fields, which vLLM fills in from one another.
type rawConfig struct {
	Method               *string `json:"method"`
	Model                *string `json:"model"`
	NumSpeculativeTokens *int    `json:"num_speculative_tokens"`
	PromptLookupMin      *int    `json:"prompt_lookup_min"`
	PromptLookupMax      *int    `json:"prompt_lookup_max"`
}

// Parse reads a --speculative-config JSON object. The empty string means no speculation and
// returns nil. Unknown fields and methods are refused rather than ignored, so that a vLLM
// setting atom-go does not implement is never silently dropped.
func Parse(s string) (*Config, error) {
	if len(bytes.TrimSpace([]byte(s))) == 0 {
		return nil, nil
	}
	var raw rawConfig
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%w: %v (atom-go reads method, model, num_speculative_tokens, prompt_lookup_min, prompt_lookup_max)", ErrInvalidConfig, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data after the JSON object", ErrInvalidConfig)
	}
	c := &Config{}
	if raw.Model != nil {
		c.Model = *raw.Model
	}
	switch {
	case raw.Method != nil:
		c.Method = *raw.Method
	case c.Model == "ngram" || c.Model == "[ngram]":
		// vLLM's older spelling: the method named as the model.
		c.Method, c.Model = MethodNgram, ""
	case c.Model != "":
		// vLLM infers a draft model from a model without a method (EAGLE, Medusa and MTP
		// checkpoints, which atom-go does not run, are told apart by their configs there).
		c.Method = MethodDraftModel
	default:
		return nil, fmt.Errorf("%w: method is required (atom-go implements %s)", ErrInvalidConfig, implemented)
	}
	switch c.Method {
	case MethodNgram:
		if c.Model != "" {
			return nil, fmt.Errorf("%w: method ngram takes no model, got %q", ErrInvalidConfig, c.Model)
		}
	case MethodDraftModel:
		if c.Model == "" {
			return nil, fmt.Errorf("%w: method draft_model needs \"model\": the draft checkpoint", ErrInvalidConfig)
		}
		if raw.PromptLookupMin != nil || raw.PromptLookupMax != nil {
			return nil, fmt.Errorf("%w: prompt_lookup_min and prompt_lookup_max apply to method ngram only", ErrInvalidConfig)
		}
	case MethodMTP, "deepseek_mtp":
		// vLLM folds its per-family MTP spellings into "mtp".
		c.Method = MethodMTP
		if raw.PromptLookupMin != nil || raw.PromptLookupMax != nil {
			return nil, fmt.Errorf("%w: prompt_lookup_min and prompt_lookup_max apply to method ngram only", ErrInvalidConfig)
		}
	case "eagle", "eagle3", "medusa", "mlp_speculator", "ernie_mtp", "qwen3_next_mtp", "mimo_mtp", "glm4_moe_mtp", "longcat_flash_mtp", "suffix":
		return nil, fmt.Errorf("%w: method %q is not supported yet (atom-go implements %s)", ErrInvalidConfig, c.Method, implemented)
	default:
		return nil, fmt.Errorf("%w: unknown method %q (atom-go implements %s)", ErrInvalidConfig, c.Method, implemented)
	}
	if raw.NumSpeculativeTokens == nil {
		return nil, fmt.Errorf("%w: num_speculative_tokens is required for method %s", ErrInvalidConfig, c.Method)
	}
	c.NumSpeculativeTokens = *raw.NumSpeculativeTokens
	if c.Method != MethodNgram {
		return c, c.Validate()
	}
	// vLLM's defaults: both unset gives 5 and 5; one set gives the other its value.
	switch {
	case raw.PromptLookupMin == nil && raw.PromptLookupMax == nil:
		c.PromptLookupMin, c.PromptLookupMax = 5, 5
	case raw.PromptLookupMin == nil:
		c.PromptLookupMin, c.PromptLookupMax = *raw.PromptLookupMax, *raw.PromptLookupMax
	case raw.PromptLookupMax == nil:
		c.PromptLookupMin, c.PromptLookupMax = *raw.PromptLookupMin, *raw.PromptLookupMin
	default:
		c.PromptLookupMin, c.PromptLookupMax = *raw.PromptLookupMin, *raw.PromptLookupMax
	}
	return c, c.Validate()
}

// Validate checks the ranges of a configuration.
func (c *Config) Validate() error {
	switch {
	case c.Method != MethodNgram && c.Method != MethodDraftModel && c.Method != MethodMTP:
		return fmt.Errorf("%w: method %q is not supported yet (atom-go implements %s)", ErrInvalidConfig, c.Method, implemented)
	case c.NumSpeculativeTokens < 1 || c.NumSpeculativeTokens > MaxSpeculativeTokens:
		return fmt.Errorf("%w: num_speculative_tokens must be in [1, %d], got %d", ErrInvalidConfig, MaxSpeculativeTokens, c.NumSpeculativeTokens)
	case c.Method == MethodDraftModel && c.Model == "":
		return fmt.Errorf("%w: method draft_model needs \"model\": the draft checkpoint", ErrInvalidConfig)
	case c.Method != MethodNgram:
		return nil
	case c.PromptLookupMin < 1 || c.PromptLookupMax < 1:
		return fmt.Errorf("%w: prompt_lookup_min and prompt_lookup_max must be at least 1, got %d and %d", ErrInvalidConfig, c.PromptLookupMin, c.PromptLookupMax)
	case c.PromptLookupMin > c.PromptLookupMax:
		return fmt.Errorf("%w: prompt_lookup_min %d exceeds prompt_lookup_max %d", ErrInvalidConfig, c.PromptLookupMin, c.PromptLookupMax)
	case c.PromptLookupMax > maxLookup:
		return fmt.Errorf("%w: prompt_lookup_max must be at most %d, got %d", ErrInvalidConfig, maxLookup, c.PromptLookupMax)
	}
	return nil
}
