package models

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"github.com/atom-go/atom/ops/offheap"
)

// Checkpoint is a Hugging Face model directory: its config and its memory-mapped tensors.
type Checkpoint struct {
	Dir     string
	Config  *Config
	files   []*safetensorsFile
	tensors map[string]*TensorInfo
	meta    map[string]any // GGUF metadata; nil for safetensors
	// owned holds tensors converted on load (dequantized GGUF weights), outside the Go heap so
	// that they do not raise the collector's heap goal by their size.
	owned   []*offheap.Block
	ownedMu sync.Mutex // blocks are dequantized on first use, possibly by several ranks at once
}

// allocOwned returns n zeroed bytes that live until Close.
func (c *Checkpoint) allocOwned(n int) ([]byte, error) {
	if n == 0 {
		return []byte{}, nil
	}
	b, err := offheap.Alloc(n)
	if err != nil {
		return nil, err
	}
	c.ownedMu.Lock()
	defer c.ownedMu.Unlock()
	c.owned = append(c.owned, b)
	return b.Bytes(), nil
}

// OpenCheckpoint reads config.json (and generation_config.json when present) and maps
// model.safetensors or the shards named by model.safetensors.index.json. A path to a .gguf
// file is opened with OpenGGUF; a directory without safetensors that holds one .gguf file
// (GGUFInDir) loads its weights from that file, with config.json checked against it. The errors
// name what is missing: the path itself (wrapping fs.ErrNotExist), or what a directory lacks.
func OpenCheckpoint(dir string) (*Checkpoint, error) {
	return OpenCheckpointWith(dir, OpenOptions{})
}

// OpenOptions are the choices of OpenCheckpointWith.
type OpenOptions struct {
	// KeepBlocks keeps a GGUF file's Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K tensors as their ggml blocks
	// (TensorInfo.Blocks, handed to a backend that has kernels for them) instead of
	// dequantizing them to float32 at open; a backend without such kernels gets them
	// dequantized on first use. The cpu backend's block kernels quantize activations to 8 bits
	// and are an approximation of the float32 weights (the exact reference).
	KeepBlocks bool
}

// OpenCheckpointWith is OpenCheckpoint with options.
func OpenCheckpointWith(dir string, o OpenOptions) (*Checkpoint, error) {
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// Said plainly ("PATH: no such file or directory"): looking for config.json inside a
		// missing .gguf path used to report the config.json.
		return nil, fmt.Errorf("open checkpoint: %s: %w", dir, pathErr(err))
	case err != nil:
		return nil, fmt.Errorf("open checkpoint: %w", err)
	case !st.IsDir() && filepath.Ext(dir) == ".gguf":
		return openGGUF(dir, o)
	case !st.IsDir():
		return nil, fmt.Errorf("open checkpoint %s: %s", dir, wantCheckpoint)
	}
	file, err := GGUFInDir(dir)
	if err != nil {
		return nil, err
	}
	if _, cerr := os.Stat(filepath.Join(dir, "config.json")); errors.Is(cerr, fs.ErrNotExist) {
		if file != "" {
			return nil, fmt.Errorf("open checkpoint %s: %s has no config.json beside it: pass the .gguf file itself, "+
				"or write the directory with `atom-plugin gguf-dir`: %w", dir, filepath.Base(file), cerr)
		}
		return nil, fmt.Errorf("open checkpoint %s: no config.json and no .gguf file: %s: %w", dir, wantCheckpoint, cerr)
	}
	if file != "" {
		return openGGUFDir(dir, file, o)
	}
	cfg, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	ck := &Checkpoint{Dir: dir, Config: cfg, tensors: map[string]*TensorInfo{}}
	files, err := shardFiles(dir)
	if err != nil {
		return nil, err
	}
	for _, name := range files {
		sf, err := openSafetensors(filepath.Join(dir, name))
		if err != nil {
			ck.Close()
			return nil, fmt.Errorf("open checkpoint %s: %w", dir, err)
		}
		ck.files = append(ck.files, sf)
		for tn, ti := range sf.tensors {
			if prev, dup := ck.tensors[tn]; dup {
				ck.Close()
				return nil, fmt.Errorf("open checkpoint %s: tensor %s is in both %s and %s", dir, tn, prev.File, ti.File)
			}
			ck.tensors[tn] = ti
		}
	}
	if err := ck.checkShapes(); err != nil {
		ck.Close()
		return nil, err
	}
	return ck, nil
}

// pathErr is the reason of a *fs.PathError (ENOENT: "no such file or directory"), so that
// the message names the path once.
func pathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// wantCheckpoint says what a model path must be.
const wantCheckpoint = "want a checkpoint directory (config.json + *.safetensors) or a GGUF file (.gguf)"

// shardFiles lists the safetensors files of a checkpoint directory.
func shardFiles(dir string) ([]string, error) {
	idxPath := filepath.Join(dir, "model.safetensors.index.json")
	if b, err := os.ReadFile(idxPath); err == nil {
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(b, &idx); err != nil {
			return nil, fmt.Errorf("%s: %w", idxPath, err)
		}
		seen := map[string]bool{}
		var files []string
		for tensor, f := range idx.WeightMap {
			if f != filepath.Base(f) {
				return nil, fmt.Errorf("%s: tensor %s maps to %q, which is not a file name in the directory", idxPath, tensor, f)
			}
			if !seen[f] {
				seen[f] = true
				files = append(files, f)
			}
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("%s: empty weight_map", idxPath)
		}
		sort.Strings(files)
		return files, nil
	}
	single := filepath.Join(dir, "model.safetensors")
	if _, err := os.Stat(single); err != nil {
		return nil, fmt.Errorf("open checkpoint %s: config.json but no model.safetensors, model.safetensors.index.json or .gguf file: %s", dir, wantCheckpoint)
	}
	return []string{"model.safetensors"}, nil
}

// Tensor returns a tensor by checkpoint name.
func (c *Checkpoint) Tensor(name string) (*TensorInfo, error) {
	t, ok := c.tensors[name]
	if !ok {
		return nil, fmt.Errorf("checkpoint %s: %w %s", c.Dir, ErrMissingTensor, name)
	}
	return t, nil
}

// HasBlocks reports whether any tensor is kept as ggml blocks (OpenOptions.KeepBlocks).
func (c *Checkpoint) HasBlocks() bool {
	for _, t := range c.tensors {
		if t.Blocks != nil {
			return true
		}
	}
	return false
}

// Has reports whether the checkpoint holds name.
func (c *Checkpoint) Has(name string) bool { _, ok := c.tensors[name]; return ok }

// Names lists every tensor name, sorted.
func (c *Checkpoint) Names() []string {
	out := make([]string, 0, len(c.tensors))
	for n := range c.tensors {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Close unmaps every file and frees the converted tensors. Weights the cpu backend views in
// place become invalid.
func (c *Checkpoint) Close() {
	for _, f := range c.files {
		f.close()
	}
	for _, b := range c.owned {
		_ = b.Free()
	}
	c.files, c.owned = nil, nil
}
