package models

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// A GGUF directory is what `atom-plugin gguf-dir FILE.gguf DIR` writes so that frameworks which
// read a Hugging Face directory themselves (vLLM, SGLang) can be pointed at a GGUF file: a
// config.json (and tokenizer files) derived from the file's metadata beside exactly one .gguf
// file (usually a symlink) and no safetensors. atom-go loads the weights from the .gguf file;
// the config.json must agree with it.

// GGUFInDir returns the path of the single .gguf file of a checkpoint directory that holds no
// safetensors weights, or "" when dir is not such a directory. More than one .gguf file there
// is an error; a path that cannot be listed is not a GGUF directory.
func GGUFInDir(dir string) (string, error) {
	for _, name := range []string{"model.safetensors", "model.safetensors.index.json"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return "", nil
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", nil // not a readable directory: LoadConfig says why
	}
	var found []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".gguf") && !e.IsDir() {
			found = append(found, e.Name())
		}
	}
	switch len(found) {
	case 0:
		return "", nil
	case 1:
		return filepath.Join(dir, found[0]), nil
	}
	sort.Strings(found)
	return "", fmt.Errorf("open checkpoint %s: %d .gguf files (%s): a GGUF checkpoint directory holds exactly one", dir, len(found), strings.Join(found, ", "))
}

// openGGUFDir opens the GGUF file of a GGUF directory and checks that the directory's
// config.json describes it; generation_config.json's defaults apply as for safetensors.
func openGGUFDir(dir, file string, o OpenOptions) (*Checkpoint, error) {
	dirCfg, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	ck, err := openGGUF(file, o)
	if err != nil {
		return nil, err
	}
	if err := sameModel(dirCfg, ck.Config); err != nil {
		ck.Close()
		return nil, fmt.Errorf("open checkpoint %s: config.json does not describe %s (%w): rewrite the directory with `atom-plugin gguf-dir`",
			dir, filepath.Base(file), err)
	}
	ck.Dir = dir
	ck.Config.GenerationConfig = dirCfg.GenerationConfig
	return ck, nil
}

// sameModel reports the first field where a directory's config.json and the GGUF metadata
// disagree about the model's shape.
func sameModel(dir, gguf *Config) error {
	fields := []struct {
		name      string
		got, want any
	}{
		{"architectures", dir.Architecture, gguf.Architecture},
		{"hidden_size", dir.HiddenSize, gguf.HiddenSize},
		{"intermediate_size", dir.Intermediate, gguf.Intermediate},
		{"num_hidden_layers", dir.NumLayers, gguf.NumLayers},
		{"num_attention_heads", dir.NumHeads, gguf.NumHeads},
		{"num_key_value_heads", dir.NumKVHeads, gguf.NumKVHeads},
		{"head_dim", dir.HeadDim, gguf.HeadDim},
		{"vocab_size", dir.VocabSize, gguf.VocabSize},
		{"tie_word_embeddings", dir.TieEmbeddings, gguf.TieEmbeddings},
		{"rope_theta", dir.RoPETheta, gguf.RoPETheta},
		{"rope_scaling", dir.RoPEScaling, gguf.RoPEScaling},
		{"rms_norm_eps", dir.RMSNormEps, gguf.RMSNormEps},
	}
	for _, f := range fields {
		if f.got != f.want {
			return fmt.Errorf("%s is %v, the file's metadata says %v", f.name, f.got, f.want)
		}
	}
	return nil
}

// ReadGGUFConfig reads the model configuration and the metadata of a GGUF file without
// loading its weights: the metadata and tensor table are validated as OpenGGUF does, and Llama
// 3 RoPE scaling is read from rope_freqs.weight, but nothing is dequantized.
func ReadGGUFConfig(path string) (*Config, map[string]any, error) {
	m, err := mapGGUF(path)
	if err != nil {
		return nil, nil, fmt.Errorf("open gguf: %w", err)
	}
	ck := &Checkpoint{Dir: path, files: []*safetensorsFile{{path: path, mapping: m}}, tensors: map[string]*TensorInfo{}}
	defer ck.Close() // the metadata is copied out of the mapping; the config holds no view of it
	g, arch, cfg, err := parseGGUFConfig(path, m)
	if err != nil {
		return nil, nil, err
	}
	ck.Config, ck.meta = cfg, g.meta
	for _, t := range g.tensors {
		if t.name != "rope_freqs.weight" {
			continue
		}
		noAlloc := func(int) ([]byte, error) { return nil, errors.New("rope_freqs.weight must be float32") }
		ti, _, err := ggufTensorInfo(path, t, cfg, arch, noAlloc, false)
		if err != nil {
			return nil, nil, err
		}
		ck.tensors[ti.Name] = ti
	}
	if err := ck.ggufLlama3Scaling(path); err != nil {
		return nil, nil, err
	}
	return cfg, g.meta, nil
}
