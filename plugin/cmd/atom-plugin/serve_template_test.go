package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/engine/tokenizer"
)

// modelWithTemplate copies qwen2-bf16 with its chat template replaced.
func modelWithTemplate(t *testing.T, template string) string {
	t.Helper()
	src := "../../../testdata/models/qwen2-bf16"
	dir := t.TempDir()
	entries, err := os.ReadDir(src)
	require.NoError(t, err)
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		require.NoError(t, err)
		if e.Name() == "tokenizer_config.json" {
			var cfg map[string]any
			require.NoError(t, json.Unmarshal(data, &cfg))
			cfg["chat_template"] = template
			data, err = json.Marshal(cfg)
			require.NoError(t, err)
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, e.Name()), data, 0o644))
	}
	return dir
}

func TestServeRefusesARunawayChatTemplate(t *testing.T) {
	for _, tc := range []struct{ name, template, want string }{
		{"recursion", `{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}`, "macro f recursion deeper than 64"},
		{"parse", `{% for m in messages %}`, "does not parse"},
		{"include", `{% include 'other.jinja' %}`, "not allowed in a chat template"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := modelWithTemplate(t, tc.template)
			var stderr bytes.Buffer
			err := runServe([]string{"--model", dir, "--port", "0", "--kv-cache-memory", "8388608"}, io.Discard, &stderr)
			require.ErrorIs(t, err, tokenizer.ErrTemplate)
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, dir)
		})
	}
}
