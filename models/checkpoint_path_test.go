package models

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOpenCheckpointSaysWhatIsMissing: a model path that is not a checkpoint is reported as
// what it is (a missing path, a file of another kind, a directory lacking config.json), never
// as a missing config.json inside a path that does not exist.
func TestOpenCheckpointSaysWhatIsMissing(t *testing.T) {
	tmp := t.TempDir()
	tiny, err := filepath.Abs(filepath.Join("..", "testdata", "gguf", "tiny-llama.gguf"))
	require.NoError(t, err)
	for _, tc := range []struct {
		name     string
		path     func(t *testing.T) string
		notExist bool
		want     []string
		notWant  string
	}{
		{"missing gguf file", func(t *testing.T) string { return filepath.Join(tmp, "no", "such", "file.gguf") },
			true, []string{filepath.Join(tmp, "no", "such", "file.gguf"), "no such file or directory"}, "config.json"},
		{"missing directory", func(t *testing.T) string { return filepath.Join(tmp, "nothing-here") },
			true, []string{filepath.Join(tmp, "nothing-here"), "no such file or directory"}, "config.json"},
		{"file of another kind", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "model.bin")
			require.NoError(t, os.WriteFile(p, []byte("x"), 0o644))
			return p
		}, false, []string{"model.bin", "want a checkpoint directory (config.json + *.safetensors) or a GGUF file (.gguf)"}, ""},
		{"empty directory", func(t *testing.T) string { return t.TempDir() },
			true, []string{"no config.json and no .gguf file", "want a checkpoint directory (config.json + *.safetensors) or a GGUF file (.gguf)"}, ""},
		{"gguf without config.json", func(t *testing.T) string {
			dir := t.TempDir()
			require.NoError(t, os.Symlink(tiny, filepath.Join(dir, "model.gguf")))
			return dir
		}, true, []string{"model.gguf has no config.json beside it", "pass the .gguf file itself", "atom-plugin gguf-dir"}, ""},
		{"config.json without weights", func(t *testing.T) string {
			dir := copyCheckpoint(t, "llama-bf16")
			require.NoError(t, os.Remove(filepath.Join(dir, "model.safetensors")))
			return dir
		}, false, []string{"no model.safetensors, model.safetensors.index.json or .gguf file"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path(t)
			ck, err := OpenCheckpoint(path)
			if ck != nil {
				ck.Close()
			}
			require.Error(t, err)
			require.Equal(t, tc.notExist, errors.Is(err, fs.ErrNotExist), "%v", err)
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
			if tc.notWant != "" {
				require.NotContains(t, err.Error(), tc.notWant)
			}
		})
	}
	// The GGUF file itself opens.
	ck, err := OpenCheckpoint(tiny)
	require.NoError(t, err)
	ck.Close()
}
