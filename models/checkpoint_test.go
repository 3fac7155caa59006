package models

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops/cpu"
)

// copyCheckpoint copies a testdata checkpoint so a test can damage it.
func copyCheckpoint(t *testing.T, name string) string {
	dst := t.TempDir()
	src := filepath.Join("../testdata/models", name)
	entries, err := os.ReadDir(src)
	require.NoError(t, err)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644))
	}
	return dst
}

// rewriteHeader edits the safetensors JSON header of path in place (data section unchanged).
func rewriteHeader(t *testing.T, path string, edit func(h map[string]map[string]any)) {
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	n := binary.LittleEndian.Uint64(b[:8])
	var h map[string]map[string]any
	require.NoError(t, json.Unmarshal(b[8:8+n], &h))
	edit(h)
	nb, err := json.Marshal(h)
	require.NoError(t, err)
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(nb)))
	out = append(append(out, nb...), b[8+n:]...)
	require.NoError(t, os.WriteFile(path, out, 0o644))
}

const probe = "model.layers.0.self_attn.q_proj.weight"

func TestBadCheckpointsGiveClearErrors(t *testing.T) {
	cases := []struct {
		name   string
		damage func(t *testing.T, dir string)
		want   []string // substrings of the error
	}{
		{"truncated file", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "model.safetensors")
			st, _ := os.Stat(p)
			require.NoError(t, os.Truncate(p, st.Size()-100))
		}, []string{"model.safetensors", "past the end", "truncated"}},
		{"truncated header", func(t *testing.T, dir string) {
			require.NoError(t, os.Truncate(filepath.Join(dir, "model.safetensors"), 50))
		}, []string{"model.safetensors", "header length"}},
		{"offsets lie", func(t *testing.T, dir string) {
			rewriteHeader(t, filepath.Join(dir, "model.safetensors"), func(h map[string]map[string]any) {
				off := h[probe]["data_offsets"].([]any)
				h[probe]["data_offsets"] = []any{off[0], off[1].(float64) + 2}
			})
		}, []string{"model.safetensors", probe, "needs"}},
		{"shape lies", func(t *testing.T, dir string) {
			rewriteHeader(t, filepath.Join(dir, "model.safetensors"), func(h map[string]map[string]any) {
				h[probe]["shape"] = []any{32, 64}
			})
		}, []string{probe, "shape [32 64]"}},
		{"overlapping tensors", func(t *testing.T, dir string) {
			rewriteHeader(t, filepath.Join(dir, "model.safetensors"), func(h map[string]map[string]any) {
				h["extra"] = map[string]any{"dtype": "BF16", "shape": []any{2}, "data_offsets": h[probe]["data_offsets"].([]any)[:1]}
				off := h[probe]["data_offsets"].([]any)
				h["extra"]["data_offsets"] = []any{off[0], off[0].(float64) + 4}
			})
		}, []string{"overlap"}},
		{"unknown dtype", func(t *testing.T, dir string) {
			rewriteHeader(t, filepath.Join(dir, "model.safetensors"), func(h map[string]map[string]any) {
				h[probe]["dtype"] = "I4"
			})
		}, []string{probe, "unsupported dtype"}},
		{"config shape disagrees", func(t *testing.T, dir string) {
			editConfig(t, dir, func(c map[string]any) { c["intermediate_size"] = 96 })
		}, []string{"model.safetensors", "tensor model.layers.0.mlp.down_proj.weight has shape [64 128], the config implies [64 96]"}},
		{"missing tensor", func(t *testing.T, dir string) {
			rewriteHeader(t, filepath.Join(dir, "model.safetensors"), func(h map[string]map[string]any) {
				delete(h, "model.norm.weight")
			})
		}, []string{"missing tensor", "model.norm.weight"}},
		{"unknown architecture", func(t *testing.T, dir string) {
			editConfig(t, dir, func(c map[string]any) { c["architectures"] = []any{"FancyNewForCausalLM"} })
		}, []string{"unknown architecture", "FancyNewForCausalLM"}},
		{"bad config json", func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte("{"), 0o644))
		}, []string{"config.json"}},
		{"heads not divisible", func(t *testing.T, dir string) {
			editConfig(t, dir, func(c map[string]any) { c["num_key_value_heads"] = 3 })
		}, []string{"num_key_value_heads"}},
		{"no weights", func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(filepath.Join(dir, "model.safetensors")))
		}, []string{"no model.safetensors"}},
	}
	be := cpu.New(1)
	defer be.Close()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyCheckpoint(t, "llama-bf16")
			tc.damage(t, dir)
			ck, err := OpenCheckpoint(dir)
			if err == nil {
				_, err = Load(ck, be, Options{MaxTokens: 8, MaxSeqs: 1})
				ck.Close()
			}
			require.Error(t, err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func editConfig(t *testing.T, dir string, edit func(map[string]any)) {
	p := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	var c map[string]any
	require.NoError(t, json.Unmarshal(b, &c))
	edit(c)
	b, err = json.Marshal(c)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, b, 0o644))
}

func TestShardedCheckpointMissingShard(t *testing.T) {
	dir := copyCheckpoint(t, "llama3-rope-f32")
	require.NoError(t, os.Remove(filepath.Join(dir, "model-00003-of-00008.safetensors")))
	_, err := OpenCheckpoint(dir)
	require.ErrorContains(t, err, "model-00003-of-00008.safetensors")
}

func TestConfigParsesLegacyAndNewRoPE(t *testing.T) {
	legacy, err := LoadConfig("../testdata/models/llama3-rope-f32")
	require.NoError(t, err)
	require.Equal(t, "llama3", legacy.RoPEScaling.Type)
	require.Equal(t, 500000.0, legacy.RoPETheta)
	require.True(t, legacy.TieEmbeddings)
	modern, err := LoadConfig("../testdata/models/llama-yarn-bf16")
	require.NoError(t, err)
	require.Equal(t, "yarn", modern.RoPEScaling.Type)
	require.Equal(t, 64, modern.RoPEScaling.OriginalMaxPos)
	require.Equal(t, []int32{2}, modern.StopTokenIDs())
}
