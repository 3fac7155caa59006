package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestModelPathErrors: a --model path that does not exist is named as missing by every command
// that reads it, not reported as a missing config.json or tokenizer; a directory that is no
// checkpoint says what one holds.
func TestModelPathErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no", "such", "file.gguf")
	empty := t.TempDir()
	for _, tc := range []struct {
		name    string
		args    []string
		wants   []string
		notWant string
	}{
		{"generate missing gguf", []string{"generate", "--model", missing, "--prompt-ids", "1"},
			[]string{missing, "no such file or directory"}, "config.json"},
		{"tokenize missing gguf", []string{"tokenize", "--model", missing, "--text", "hi"},
			[]string{missing, "no such file or directory"}, "tokenizer.json"},
		{"generate empty directory", []string{"generate", "--model", empty, "--device", "cpu", "--prompt-ids", "1"},
			[]string{empty, "no config.json and no .gguf file", "want a checkpoint directory (config.json + *.safetensors) or a GGUF file (.gguf)"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := runPlugin(t, tc.args...)
			require.Equal(t, 1, code, "stderr: %s", stderr)
			for _, w := range tc.wants {
				require.Contains(t, stderr, w)
			}
			if tc.notWant != "" {
				require.NotContains(t, stderr, tc.notWant)
			}
		})
	}
}
