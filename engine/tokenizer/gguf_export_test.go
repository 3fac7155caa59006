package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// exportTexts exercise digits, Unicode, whitespace runs, added tokens and byte fallback.
var exportTexts = []string{
	"", "a", "ab ab  ab", "Hello, world!", "1234567890 12 3.14159", "x=12+21;\ty = 0x1F",
	"  leading and trailing  ", "tabs\t\tand\n\nnewlines\r\n end", "   \n  \t ",
	"héllo wörld, 日本語のテキスト, emoji 🤖👍🏽", "é", "abc bc a", "don't you'll I'M",
	"<|endoftext|>a<|im_end|> b", "<s>abc</s>", "<tool>ab<tool>", "a</s>b<unk>",
}

// sentencePieceMeta is TestFromGGUFSentencePiece's vocabulary.
func sentencePieceMeta() map[string]any {
	return map[string]any{
		"tokenizer.ggml.model":            "llama",
		"tokenizer.ggml.tokens":           []string{"<unk>", "<s>", "</s>", "<0xC3>", "<0xA9>", "▁", "a", "b", "c", "ab", "bc", "▁a", "▁abc", "abc"},
		"tokenizer.ggml.token_type":       []int32{2, 3, 3, 6, 6, 1, 1, 1, 1, 1, 1, 1, 1, 1},
		"tokenizer.ggml.scores":           []float32{0, 0, 0, 0, 0, -1, -2, -3, -4, -10, -5, -6, -20, -30},
		"tokenizer.ggml.bos_token_id":     uint32(1),
		"tokenizer.ggml.eos_token_id":     uint32(2),
		"tokenizer.ggml.unknown_token_id": uint32(0),
		"tokenizer.chat_template":         "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{{ eos_token }}{% endfor %}",
	}
}

// loadExported writes GGUFToHF's files to a directory and loads them with Load.
func loadExported(t *testing.T, meta map[string]any) *Tokenizer {
	t.Helper()
	files, err := GGUFToHF(meta)
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer.json"), files.TokenizerJSON, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), files.TokenizerConfigJSON, 0o644))
	tok, err := Load(dir)
	require.NoError(t, err)
	return tok
}

// requireSameTokenizer checks that two tokenizers encode, decode, and render chats alike.
func requireSameTokenizer(t *testing.T, want, got *Tokenizer, texts []string) {
	t.Helper()
	for _, text := range texts {
		for _, special := range []bool{true, false} {
			w, err := want.Encode(text, special)
			require.NoError(t, err)
			g, err := got.Encode(text, special)
			require.NoError(t, err)
			require.Equal(t, w, g, "encode %q (add special tokens %v)", text, special)
			require.Equal(t, want.Decode(w, false), got.Decode(g, false), "decode %q", text)
			require.Equal(t, want.Decode(w, true), got.Decode(g, true), "decode %q skipping special tokens", text)
		}
	}
	require.Equal(t, want.VocabSize(), got.VocabSize())
	for _, f := range []func(*Tokenizer) (int32, bool){(*Tokenizer).BOSTokenID, (*Tokenizer).EOSTokenID} {
		wid, wok := f(want)
		gid, gok := f(got)
		require.Equal(t, []any{wid, wok}, []any{gid, gok})
	}
	wb, wset := want.AddBOSToken()
	gb, gset := got.AddBOSToken()
	require.Equal(t, []bool{wb, wset}, []bool{gb, gset})
	msgs := []Message{{Role: "user", Content: "ab 12"}, {Role: "assistant", Content: "bc"}}
	for _, gen := range []bool{false, true} {
		w, werr := want.ApplyChatTemplate(msgs, gen)
		g, gerr := got.ApplyChatTemplate(msgs, gen)
		require.Equal(t, werr == nil, gerr == nil)
		require.Equal(t, w, g)
	}
}

func TestGGUFToHFMatchesFromGGUF(t *testing.T) {
	cases := []struct {
		name string
		meta map[string]any
	}{
		{"gpt2 smollm", tinyGPT2Meta()},
		{"gpt2 default pre, bos added", withMeta(func(m map[string]any) {
			delete(m, "tokenizer.ggml.pre")
			m["tokenizer.ggml.add_bos_token"] = true
			m["tokenizer.ggml.add_eos_token"] = true
		})},
		{"gpt2 llama-bpe", withMeta(func(m map[string]any) { m["tokenizer.ggml.pre"] = "llama-bpe" })},
		{"gpt2 qwen2 named templates", withMeta(func(m map[string]any) {
			m["tokenizer.ggml.pre"] = "qwen2"
			m["tokenizer.chat_templates"] = []string{"tool_use"}
			m["tokenizer.chat_template.tool_use"] = "tools: {{ messages | length }}"
		})},
		{"spm", sentencePieceMeta()},
		{"spm no prefix, no bos", func() map[string]any {
			m := sentencePieceMeta()
			m["tokenizer.ggml.add_space_prefix"] = false
			m["tokenizer.ggml.add_bos_token"] = false
			return m
		}()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want, err := FromGGUF(c.meta)
			require.NoError(t, err)
			got := loadExported(t, c.meta)
			requireSameTokenizer(t, want, got, exportTexts)
			if _, named := c.meta["tokenizer.chat_templates"]; named {
				require.Equal(t, want.config.Templates, got.config.Templates)
			}
		})
	}
}

// TestGGUFToHFMatchesHuggingFace round-trips the fetched Hugging Face tokenizers through
// GGUF metadata and back to tokenizer.json (skipped when they are not fetched).
func TestGGUFToHFMatchesHuggingFace(t *testing.T) {
	for _, c := range []struct {
		name, pre string
		spm       bool
	}{{"llama3", "llama-bpe", false}, {"qwen3", "qwen2", false}, {"llama2", "", true}} {
		t.Run(c.name, func(t *testing.T) {
			externalTokenizer(t, c.name)
			meta := metaFromTokenizerJSON(t, filepath.Join(testdataDir, "..", "external", "tokenizers", c.name), c.pre, c.spm)
			want, err := FromGGUF(meta)
			require.NoError(t, err)
			texts := append([]string(nil), exportTexts...)
			for _, e := range loadReference(t, c.name).Encode {
				texts = append(texts, e.Text)
			}
			requireSameTokenizer(t, want, loadExported(t, meta), texts)
		})
	}
}

func TestGGUFToHFRefusesWhatItCannotExpress(t *testing.T) {
	meta := withMeta(func(m map[string]any) {
		m["tokenizer.ggml.tokens"] = []string{"<|endoftext|>", "<|im_end|>", "a", "b", "Ġ", "1", "2", "ab", "Ġa", "Ġab", "12", "<|im_end|>"}
	})
	_, err := GGUFToHF(meta)
	require.ErrorContains(t, err, `token "<|im_end|>" is both id 1 and id 11`)

	_, err = GGUFToHF(withMeta(func(m map[string]any) { m["tokenizer.ggml.pre"] = "no-such-pre" }))
	require.ErrorContains(t, err, `unsupported pre-tokenizer "no-such-pre"`)

	// A plain duplicate keeps its last id, as FromGGUF's vocabulary does.
	dup := withMeta(func(m map[string]any) {
		m["tokenizer.ggml.tokens"] = []string{"<|endoftext|>", "<|im_end|>", "a", "b", "Ġ", "1", "2", "ab", "Ġa", "Ġab", "12", "b"}
		m["tokenizer.ggml.token_type"] = []int32{3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}
	})
	files, err := GGUFToHF(dup)
	require.NoError(t, err)
	var tj struct {
		Model struct {
			Vocab map[string]int32 `json:"vocab"`
		} `json:"model"`
	}
	require.NoError(t, json.Unmarshal(files.TokenizerJSON, &tj))
	require.Equal(t, int32(11), tj.Model.Vocab["b"])
	want, err := FromGGUF(dup)
	require.NoError(t, err)
	got := loadExported(t, dup)
	for _, text := range []string{"ab b", "bbb"} {
		w, _ := want.Encode(text, true)
		g, _ := got.Encode(text, true)
		require.Equal(t, w, g, text)
	}
}
