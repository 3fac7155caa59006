package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/engine/tokenizer"
	"github.com/atom-go/atom/models"
)

// ggufDirTexts exercise digits, Unicode, whitespace runs and special tokens.
var ggufDirTexts = []string{
	"The quick brown fox", "1234567890 and 3.14159", "héllo wörld 日本語 🤖", "  spaces   and\ttabs\n\nnewlines ",
	"<|im_start|>user\nhi<|im_end|>", "<s>t3 t4</s>", "don't you'll",
}

// ggufDirOutputs runs greedy requests on an engine over model and returns the tokens, with the
// engine's tokenizer encodings of texts and a rendered chat.
func ggufDirOutputs(t *testing.T, model string, prompts [][]int32) (outs [][]int32, enc [][]int32, chat string) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Model, cfg.MaxNumBatchedTokens, cfg.MaxNumSeqs, cfg.KVCacheMemory = model, 256, 8, 16<<20
	e, err := New(cfg, quiet)
	require.NoError(t, err)
	defer e.Close()
	tok := e.Tokenizer()
	require.NotNil(t, tok, "%s: no tokenizer", model)
	for _, text := range ggufDirTexts {
		ids, err := tok.Encode(text, true)
		require.NoError(t, err)
		enc = append(enc, ids)
	}
	chat, err = tok.ApplyChatTemplate([]tokenizer.Message{{Role: "user", Content: "Tell me a story"}}, true)
	require.NoError(t, err)
	if prompts == nil {
		prompts = enc
	}
	reqs := make([]Request, len(prompts))
	for i, p := range prompts {
		if len(p) == 0 {
			p = []int32{1}
		}
		reqs[i] = Request{ID: fmt.Sprint(i), PromptIDs: p, Params: greedy(6)}
	}
	for _, st := range submitAll(t, e, reqs) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		o, err := st.Collect(ctx)
		cancel()
		require.NoError(t, err)
		require.Len(t, o, 1)
		outs = append(outs, o[0].TokenIDs)
	}
	return outs, enc, chat
}

// TestGGUFDirServesLikeTheFile: WriteGGUFDir's directory loads in atom-go with the same config
// as the GGUF file, its tokenizer.json (loaded by this package's tokenizer code) encodes like
// the file's own tokenizer, and greedy generation gives exactly the same tokens. (The models
// package checks the directory's weights and config for tiny-llama and converted checkpoints.)
func TestGGUFDirServesLikeTheFile(t *testing.T) {
	for _, c := range []struct {
		name, file string
		external   bool
	}{
		{"smollm2", smolLM2GGUF, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.external {
				requireSmolLM2GGUF(t)
			}
			dir := filepath.Join(t.TempDir(), "view")
			res, err := WriteGGUFDir(c.file, dir, false)
			require.NoError(t, err)
			require.True(t, res.Tokenizer)
			require.ElementsMatch(t, ggufDirFiles, res.Files)
			target, err := os.Readlink(filepath.Join(dir, GGUFDirModel))
			require.NoError(t, err)
			require.True(t, filepath.IsAbs(target))

			want, _, err := models.ReadGGUFConfig(c.file)
			require.NoError(t, err)
			got, err := models.LoadConfig(dir)
			require.NoError(t, err)
			require.Equal(t, want.StopTokenIDs(), got.StopTokenIDs())
			got.GenerationConfig, want.GenerationConfig = models.GenerationConfig{}, models.GenerationConfig{}
			require.Equal(t, want, got, "config.json read back")

			fileOuts, fileEnc, fileChat := ggufDirOutputs(t, c.file, nil)
			dirOuts, dirEnc, dirChat := ggufDirOutputs(t, dir, fileEnc)
			require.Equal(t, fileEnc, dirEnc, "tokenizer.json encodes like the GGUF tokenizer")
			require.Equal(t, fileChat, dirChat)
			require.Equal(t, fileOuts, dirOuts, "greedy tokens")

			tok, err := LoadTokenizer(c.file)
			require.NoError(t, err)
			ids, err := tok.Encode(ggufDirTexts[1], true)
			require.NoError(t, err)
			require.Equal(t, fileEnc[1], ids)
		})
	}
}

func TestWriteGGUFDirRefuses(t *testing.T) {
	tiny := filepath.Join("..", "testdata", "gguf", "tiny-llama.gguf")
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "model.safetensors"), []byte("x"), 0o644))
	_, err := WriteGGUFDir(tiny, dir, false)
	require.ErrorContains(t, err, "already holds other files (model.safetensors)")

	_, err = WriteGGUFDir(filepath.Join(dir, "missing.gguf"), t.TempDir(), false)
	require.ErrorContains(t, err, "missing.gguf")

	// tiny-llama's tokenizer metadata is not a working tokenizer (its merges name tokens it
	// does not have): refused, nothing written.
	view := filepath.Join(t.TempDir(), "v")
	_, err = WriteGGUFDir(tiny, view, false)
	require.ErrorContains(t, err, `tokenizer.ggml.merges[0] "t 3" uses a token that is not in tokenizer.ggml.tokens`)
	_, err = os.Stat(view)
	require.ErrorIs(t, err, os.ErrNotExist)

	// Rewriting a directory it wrote is fine; copy copies.
	requireSmolLM2GGUF(t)
	_, err = WriteGGUFDir(smolLM2GGUF, view, false)
	require.NoError(t, err)
	_, err = WriteGGUFDir(smolLM2GGUF, view, true)
	require.NoError(t, err)
	st, err := os.Lstat(filepath.Join(view, GGUFDirModel))
	require.NoError(t, err)
	require.True(t, st.Mode().IsRegular())
}
