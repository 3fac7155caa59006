package spec

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSpecParse(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    *Config
		wantErr string
	}{
		{in: "", want: nil},
		{in: `{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 4}`,
			want: &Config{Method: "ngram", NumSpeculativeTokens: 3, PromptLookupMin: 2, PromptLookupMax: 4}},
		{in: `{"method": "ngram", "num_speculative_tokens": 3}`, want: &Config{Method: "ngram", NumSpeculativeTokens: 3, PromptLookupMin: 5, PromptLookupMax: 5}},
		{in: `{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}`, want: &Config{Method: "ngram", NumSpeculativeTokens: 3, PromptLookupMin: 3, PromptLookupMax: 3}},
		{in: `{"method": "ngram", "num_speculative_tokens": 0}`, wantErr: "num_speculative_tokens must be in [1, 16]"},
		{in: `{"method": "ngram", "num_speculative_tokens": 17}`, wantErr: "num_speculative_tokens must be in [1, 16]"},
		{in: `{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4, "prompt_lookup_max": 2}`, wantErr: "prompt_lookup_min 4 exceeds prompt_lookup_max 2"},
		{in: `{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 0, "prompt_lookup_max": 2}`, wantErr: "at least 1"},
		{in: `{"method": "draft_model", "model": "/m/small", "num_speculative_tokens": 2}`,
			want: &Config{Method: "draft_model", Model: "/m/small", NumSpeculativeTokens: 2}},
		// vLLM infers draft_model from a model without a method, and ngram from the model "[ngram]".
		{in: `{"model": "/m/small", "num_speculative_tokens": 4}`, want: &Config{Method: "draft_model", Model: "/m/small", NumSpeculativeTokens: 4}},
		{in: `{"model": "[ngram]", "num_speculative_tokens": 2}`, want: &Config{Method: "ngram", NumSpeculativeTokens: 2, PromptLookupMin: 5, PromptLookupMax: 5}},
		{in: `{"method": "draft_model", "num_speculative_tokens": 2}`, wantErr: "needs \"model\""},
		{in: `{"method": "draft_model", "model": "x"}`, wantErr: "num_speculative_tokens is required for method draft_model"},
		{in: `{"method": "draft_model", "model": "x", "num_speculative_tokens": 17}`, wantErr: "num_speculative_tokens must be in [1, 16]"},
		{in: `{"method": "draft_model", "model": "x", "num_speculative_tokens": 2, "prompt_lookup_max": 3}`, wantErr: "apply to method ngram only"},
		{in: `{"method": "mtp", "num_speculative_tokens": 2}`, want: &Config{Method: "mtp", NumSpeculativeTokens: 2}},
		{in: `{"method": "deepseek_mtp", "num_speculative_tokens": 3}`, want: &Config{Method: "mtp", NumSpeculativeTokens: 3}},
		{in: `{"method": "mtp", "model": "/m/ds", "num_speculative_tokens": 1}`, want: &Config{Method: "mtp", Model: "/m/ds", NumSpeculativeTokens: 1}},
		{in: `{"method": "mtp", "num_speculative_tokens": 2, "prompt_lookup_min": 2}`, wantErr: "apply to method ngram only"},
		{in: `{"method": "mtp"}`, wantErr: "num_speculative_tokens is required for method mtp"},
		{in: `{"method": "qwen3_next_mtp", "num_speculative_tokens": 2}`, wantErr: "not supported yet"},
		{in: `{"method": "eagle", "model": "x", "num_speculative_tokens": 2}`, wantErr: "not supported yet"},
		{in: `{"method": "magic"}`, wantErr: "unknown method"},
		{in: `{"num_speculative_tokens": 2}`, wantErr: "method is required"},
		{in: `{"method": "ngram"}`, wantErr: "num_speculative_tokens is required"},
		{in: `{"method": "ngram", "num_speculative_tokens": 2, "model": "x"}`, wantErr: "ngram takes no model"},
		{in: `{"method": "ngram", "num_speculative_tokens": 2, "draft_tensor_parallel_size": 1}`, wantErr: "unknown field"},
		{in: `{"method": "ngram", "num_speculative_tokens": "2"}`, wantErr: "invalid --speculative-config"},
		{in: `[1]`, wantErr: "invalid --speculative-config"},
		{in: `{"method": "ngram", "num_speculative_tokens": 2} {}`, wantErr: "trailing data"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			c, err := Parse(tc.in)
			if tc.wantErr != "" {
				require.ErrorIs(t, err, ErrInvalidConfig)
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, c)
		})
	}
}

func TestSpecPropose(t *testing.T) {
	for _, tc := range []struct {
		name     string
		toks     []int32
		min, max int
		k        int
		want     []int32
	}{
		// vLLM's docstring example: [4,2,3] has no match, [2,3] matches at 1, 3 tokens follow.
		{"docstring", []int32{1, 2, 3, 4, 2, 3}, 2, 3, 4, []int32{4, 2, 3}},
		{"k caps", []int32{1, 2, 3, 4, 2, 3}, 2, 3, 1, []int32{4}},
		{"no match", []int32{1, 2, 3, 4, 5}, 1, 3, 3, nil},
		{"too short", []int32{1}, 2, 3, 3, nil},
		// The earliest occurrence of the longest n-gram wins, as in vLLM.
		{"earliest", []int32{7, 8, 1, 7, 8, 2, 7, 8}, 2, 2, 2, []int32{1, 7}},
		// A longer match beats an earlier shorter one.
		{"longest", []int32{8, 5, 9, 7, 8, 6, 9, 7, 8}, 1, 3, 2, []int32{6, 9}},
		// An occurrence may overlap the suffix: a run repeats itself.
		{"overlap", []int32{5, 5, 5, 5}, 2, 3, 3, []int32{5}},
		{"min respected", []int32{1, 2, 9, 2}, 2, 3, 3, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Config{Method: "ngram", NumSpeculativeTokens: tc.k, PromptLookupMin: tc.min, PromptLookupMax: tc.max}
			require.NoError(t, c.Validate())
			got := c.Propose(nil, tc.toks, tc.k)
			require.Equal(t, tc.want, got)
		})
	}
}
