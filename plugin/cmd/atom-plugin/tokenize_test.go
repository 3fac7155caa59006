package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// smolLM2GGUF is the packaged real model (testdata/gguf/fetch.sh), with transformers' token ids
// of it in smollm2_reference.json.
var smolLM2GGUF = filepath.Join("..", "..", "..", "testdata", "external", "smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")

// TestTokenizeGGUF: tokenize --model FILE.gguf reads the file's tokenizer and gives
// transformers' token ids, for a text and for a chat rendered with the file's template.
func TestTokenizeGGUF(t *testing.T) {
	if _, err := os.Stat(smolLM2GGUF); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is missing in CI: run testdata/gguf/fetch.sh", smolLM2GGUF)
		}
		t.Skipf("%s absent: run testdata/gguf/fetch.sh", smolLM2GGUF)
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "testdata", "gguf", "smollm2_reference.json"))
	require.NoError(t, err)
	var ref struct {
		Texts []struct {
			Text string  `json:"text"`
			IDs  []int32 `json:"ids"`
		} `json:"texts"`
		Chats []struct {
			Text     string            `json:"text"`
			IDs      []int32           `json:"ids"`
			Messages []json.RawMessage `json:"messages"`
		} `json:"chats"`
	}
	require.NoError(t, json.Unmarshal(b, &ref))
	require.NotEmpty(t, ref.Texts)
	require.NotEmpty(t, ref.Chats)
	msgs, err := json.Marshal(ref.Chats[0].Messages)
	require.NoError(t, err)
	msgFile := filepath.Join(t.TempDir(), "chat.json")
	require.NoError(t, os.WriteFile(msgFile, msgs, 0o644))

	for _, tc := range []struct {
		name     string
		args     []string
		wantIDs  []int32
		wantText string
	}{
		{"text", []string{"--text", ref.Texts[0].Text}, ref.Texts[0].IDs, ref.Texts[0].Text},
		{"chat", []string{"--messages", msgFile, "--add-generation-prompt"}, ref.Chats[0].IDs, ref.Chats[0].Text},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"tokenize", "--model", smolLM2GGUF, "--json"}, tc.args...)
			stdout, stderr, code := runPlugin(t, args...)
			require.Equal(t, 0, code, "stderr: %s", stderr)
			var got struct {
				TokenIDs []int32 `json:"token_ids"`
				Text     string  `json:"text"`
			}
			require.NoError(t, json.Unmarshal([]byte(stdout), &got), stdout)
			require.Equal(t, tc.wantIDs, got.TokenIDs)
			require.Equal(t, tc.wantText, got.Text)
		})
	}
}

// TestModelFlagHelpMentionsGGUF: every command's --help says that --model may be a GGUF file.
func TestModelFlagHelpMentionsGGUF(t *testing.T) {
	const want = "checkpoint directory (config.json + safetensors) or GGUF file"
	for _, cmd := range [][]string{
		{"--help"}, {"generate", "--help"}, {"serve", "--help"}, {"tokenize", "--help"},
		{"replay", "--help"}, {"--handshake", "--help"},
	} {
		t.Run(cmd[0], func(t *testing.T) {
			stdout, stderr, code := runPlugin(t, cmd...)
			require.Equal(t, 0, code, "stderr: %s", stderr)
			require.Contains(t, stdout+stderr, want)
			require.Contains(t, stdout+stderr, "FILE.gguf")
		})
	}
}
