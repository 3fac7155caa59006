package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGenerateMaxTokens: --max-tokens below 1 is refused before the model loads, with the way
// out; left out, the default (32) applies and the generation ends.
func TestGenerateMaxTokens(t *testing.T) {
	model := testModel(t, "llama-bf16")
	base := []string{"generate", "--model", model, "--device", "cpu", "--kv-cache-memory", "16777216",
		"--prompt-ids", "1,2,3", "--ignore-eos"}
	for _, tc := range []struct {
		name    string
		flags   []string
		code    int
		stderr  string
		summary string
	}{
		{"zero", []string{"--max-tokens", "0"}, 1, "--max-tokens must be >= 1, got 0: leave the flag out for the default (32), or give N >= 1", ""},
		{"negative", []string{"--max-tokens=-5"}, 1, "--max-tokens must be >= 1, got -5", ""},
		{"one", []string{"--max-tokens", "1"}, 0, "", "[1 tokens,"},
		{"default", nil, 0, "", "[32 tokens,"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := runPlugin(t, append(append([]string{}, base...), tc.flags...)...)
			require.Equal(t, tc.code, code, "stderr: %s", stderr)
			require.Contains(t, stderr, tc.stderr)
			require.Contains(t, stdout, tc.summary)
			if tc.code != 0 {
				require.NotContains(t, stderr, "loading weights", "refused before loading")
			}
		})
	}
	// --handshake refuses it too, before starting the plugin.
	_, stderr, code := runPlugin(t, "--handshake", "--max-tokens", "0")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "--max-tokens must be >= 1, got 0: leave the flag out for the default (8)")
}

// TestGenerateHelpSaysTheMaxTokensDefault: --help names what happens without --max-tokens.
func TestGenerateHelpSaysTheMaxTokensDefault(t *testing.T) {
	_, stderr, code := runPlugin(t, "generate", "--help")
	require.Equal(t, 0, code)
	require.Contains(t, stderr, "most tokens to generate, >= 1")
	require.Contains(t, stderr, "(default 32)")
}

// TestGenerateSpeculativeConfig: generate takes --speculative-config as vLLM spells it,
// reports the drafts' acceptance in --json, gives the tokens it gives without speculation
// (greedy) with n-gram drafts, a draft model and an MTP layer, and refuses hostile values before
// loading the model.
func TestGenerateSpeculativeConfig(t *testing.T) {
	model := testModel(t, "qwen3-bf16")
	base := []string{"generate", "--model", model, "--device", "cpu", "--kv-cache-memory", "16777216",
		"--prompt-ids", "5,6,7,8,5,6,7,8,5,6,7,8", "--ignore-eos", "--temperature", "0", "--max-tokens", "24", "--json"}
	plain, stderr, code := runPlugin(t, base...)
	require.Equal(t, 0, code, "stderr: %s", stderr)
	var want, got struct {
		TokenIDs   []int32        `json:"token_ids"`
		SpecDecode map[string]any `json:"spec_decode"`
	}
	require.NoError(t, json.Unmarshal([]byte(plain), &want))
	require.Nil(t, want.SpecDecode)
	out, stderr, code := runPlugin(t, append(base, "--speculative-config",
		`{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3}`)...)
	require.Equal(t, 0, code, "stderr: %s", stderr)
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Equal(t, want.TokenIDs, got.TokenIDs)
	require.Contains(t, got.SpecDecode, "acceptance_rate")
	require.Contains(t, got.SpecDecode, "mean_accepted_length")
	require.Positive(t, got.SpecDecode["num_draft_tokens"])

	// A draft model: the target drafting for itself has every draft accepted.
	out, stderr, code = runPlugin(t, append(base, "--speculative-config",
		`{"method": "draft_model", "model": "`+model+`", "num_speculative_tokens": 3}`)...)
	require.Equal(t, 0, code, "stderr: %s", stderr)
	got.SpecDecode = nil
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Equal(t, want.TokenIDs, got.TokenIDs)
	require.Equal(t, 1.0, got.SpecDecode["acceptance_rate"])
	require.Positive(t, got.SpecDecode["num_draft_tokens"])

	// DeepSeek-V3's MTP layer (testdata's is random: its drafts are mostly rejected).
	ds := append([]string{"generate", "--model", testModel(t, "deepseek_v3-bf16")}, base[3:]...)
	plain, stderr, code = runPlugin(t, ds...)
	require.Equal(t, 0, code, "stderr: %s", stderr)
	require.NoError(t, json.Unmarshal([]byte(plain), &want))
	out, stderr, code = runPlugin(t, append(ds, "--speculative-config", `{"method": "deepseek_mtp", "num_speculative_tokens": 2}`)...)
	require.Equal(t, 0, code, "stderr: %s", stderr)
	got.SpecDecode = nil
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Equal(t, want.TokenIDs, got.TokenIDs)
	require.Positive(t, got.SpecDecode["num_draft_tokens"])

	for _, tc := range []struct{ cfg, msg string }{
		{`{"method": "ngram", "num_speculative_tokens": 17}`, "num_speculative_tokens must be in [1, 16]"},
		{`{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 3, "prompt_lookup_max": 2}`, "prompt_lookup_min 3 exceeds prompt_lookup_max 2"},
		{`{"method": "eagle", "model": "x", "num_speculative_tokens": 1}`, "not supported yet"},
		{`not json`, "invalid --speculative-config"},
	} {
		_, stderr, code := runPlugin(t, append(base, "--speculative-config", tc.cfg)...)
		require.Equal(t, 1, code)
		require.Contains(t, stderr, tc.msg)
		require.NotContains(t, stderr, "loading weights", "refused before loading")
	}
}
