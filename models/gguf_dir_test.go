package models

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops/cpu"
)

// ggufView makes a GGUF directory of path as `atom-plugin gguf-dir` does (config files and a
// link; the tokenizer files are engine/tokenizer's business).
func ggufView(t *testing.T, path string) string {
	t.Helper()
	cfg, _, err := ReadGGUFConfig(path)
	require.NoError(t, err)
	dir := t.TempDir()
	b, err := cfg.HFConfigJSON()
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644))
	b, err = cfg.HFGenerationConfigJSON()
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "generation_config.json"), b, 0o644))
	abs, err := filepath.Abs(path)
	require.NoError(t, err)
	require.NoError(t, os.Symlink(abs, filepath.Join(dir, "model.gguf")))
	return dir
}

// greedyTokens runs n greedy steps of a checkpoint's model on the cpu backend.
func greedyTokens(t *testing.T, ck *Checkpoint, prompt []int32, n int) []int32 {
	t.Helper()
	be := cpu.New(0)
	defer be.Close()
	m, err := Load(ck, be, Options{MaxTokens: 64, MaxSeqs: 1})
	require.NoError(t, err)
	c := ck.Config
	const blockSize, blocks = 4, 8
	cache, err := be.NewKVCache(c.NumLayers, blocks, blockSize, c.NumKVHeads, c.HeadDim)
	require.NoError(t, err)
	var out []int32
	ids, ctx := prompt, 0
	logits := make([]float32, c.VocabSize)
	for step := 0; step < n; step++ {
		h := m.Forward(ids, singleSeq(ctx, len(ids), blockSize, blocks), cache)
		be.ReadRows(m.Logits(h, []int32{int32(len(ids) - 1)}), logits)
		best := 0
		for i, v := range logits {
			require.False(t, math.IsNaN(float64(v)))
			if v > logits[best] {
				best = i
			}
		}
		ctx += len(ids)
		ids = []int32{int32(best)}
		out = append(out, int32(best))
	}
	return out
}

// TestGGUFDirLoadsLikeTheFile: a GGUF directory (config.json written by HFConfigJSON beside a
// link to the file) opens with the file's config, weights and greedy tokens, for tiny-llama
// and for every dense testdata checkpoint converted to GGUF (RoPE default, linear, Llama 3 from
// rope_freqs.weight, YaRN; biases; q/k norms; Mistral's window).
func TestGGUFDirLoadsLikeTheFile(t *testing.T) {
	files := map[string]string{"tiny-llama": tinyLlama}
	for _, dir := range testCheckpoints(t) {
		cfg, err := LoadConfig(dir)
		require.NoError(t, err)
		if cfg.Quantization != "" {
			continue // a quantized checkpoint is not converted to GGUF
		}
		if cfg.MoE.NumExperts > 0 {
			continue
		}
		hf, err := OpenCheckpoint(dir)
		require.NoError(t, err)
		path := filepath.Join(t.TempDir(), filepath.Base(dir)+".gguf")
		hfToGGUF(t, hf, path)
		hf.Close()
		files[filepath.Base(dir)] = path
	}
	for name, path := range files {
		t.Run(name, func(t *testing.T) {
			file, err := OpenGGUF(path)
			require.NoError(t, err)
			defer file.Close()
			light, _, err := ReadGGUFConfig(path)
			require.NoError(t, err)
			require.Equal(t, file.Config, light, "ReadGGUFConfig against OpenGGUF")

			dir := ggufView(t, path)
			got, err := GGUFInDir(dir)
			require.NoError(t, err)
			require.Equal(t, filepath.Join(dir, "model.gguf"), got)
			view, err := OpenCheckpoint(dir)
			require.NoError(t, err)
			defer view.Close()
			require.Equal(t, dir, view.Dir)
			require.NotNil(t, view.GGUFMetadata())
			require.Equal(t, file.Config.StopTokenIDs(), view.Config.StopTokenIDs())
			want, have := *file.Config, *view.Config
			want.GenerationConfig, have.GenerationConfig = GenerationConfig{}, GenerationConfig{}
			require.Equal(t, want, have)
			require.Equal(t, file.Names(), view.Names())

			// config.json parses back to the same model on its own, too.
			parsed, err := LoadConfig(dir)
			require.NoError(t, err)
			require.NoError(t, sameModel(parsed, file.Config))

			prompt := []int32{1, 5, 9, 33, 17}
			require.Equal(t, greedyTokens(t, file, prompt, 4), greedyTokens(t, view, prompt, 4))
		})
	}
}

func TestGGUFDirRefuses(t *testing.T) {
	dir := ggufView(t, tinyLlama)
	require.NoError(t, os.Symlink(tinyLlama, filepath.Join(dir, "other.gguf")))
	_, err := OpenCheckpoint(dir)
	require.ErrorContains(t, err, "2 .gguf files (model.gguf, other.gguf): a GGUF checkpoint directory holds exactly one")
	require.NoError(t, os.Remove(filepath.Join(dir, "other.gguf")))

	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	require.NoError(t, err)
	edited := strings.Replace(string(b), `"num_hidden_layers": 2`, `"num_hidden_layers": 3`, 1)
	require.NotEqual(t, string(b), edited)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(edited), 0o644))
	_, err = OpenCheckpoint(dir)
	require.ErrorContains(t, err, "config.json does not describe model.gguf (num_hidden_layers is 3, the file's metadata says 2)")

	// Safetensors win: a directory with model.safetensors is not a GGUF directory.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "model.safetensors"), nil, 0o644))
	got, err := GGUFInDir(dir)
	require.NoError(t, err)
	require.Empty(t, got)
}
