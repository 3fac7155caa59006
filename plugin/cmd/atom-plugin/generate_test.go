package main

import (
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
