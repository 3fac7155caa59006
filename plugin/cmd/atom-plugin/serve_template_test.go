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

// TestServeTemplateLimitFlags: the chat-template limits are the serve flags'; a template within
// the defaults is refused at start once a flag makes its limit smaller than what it renders.
func TestServeTemplateLimitFlags(t *testing.T) {
	// About 20 KB of text and 2000 loop steps for any conversation.
	dir := modelWithTemplate(t, `{% for i in range(2000) %}{{ '0123456789' }}{% endfor %}{{ messages[0]['content'] }}`)
	for _, tc := range []struct{ flag, want string }{
		{"--chat-template-max-output-bytes=4096", "output"},
		{"--chat-template-max-steps=1000", "steps"},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			err := runServe([]string{"--model", dir, "--port", "0", "--kv-cache-memory", "8388608", tc.flag}, io.Discard, io.Discard)
			require.ErrorIs(t, err, tokenizer.ErrTemplate)
			require.ErrorContains(t, err, tc.want)
		})
	}
	err := runServe([]string{"--model", dir, "--port", "0", "--kv-cache-memory", "8388608", "--chat-template-max-steps=0"}, io.Discard, io.Discard)
	require.ErrorContains(t, err, "must be positive")
}
