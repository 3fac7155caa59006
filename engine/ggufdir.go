package engine

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/atom-go/atom/engine/tokenizer"
	"github.com/atom-go/atom/models"
)

// GGUFDirModel is the name of the GGUF file (link or copy) inside a directory WriteGGUFDir
// writes.
const GGUFDirModel = "model.gguf"

// ggufDirFiles are the files WriteGGUFDir writes; a directory holding nothing else may be
// rewritten.
var ggufDirFiles = []string{"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", GGUFDirModel}

// GGUFDirResult says what WriteGGUFDir wrote.
type GGUFDirResult struct {
	Files     []string // the files written, in dir
	Tokenizer bool     // tokenizer.json and tokenizer_config.json were written
}

// WriteGGUFDir makes dir a Hugging Face-style view of the GGUF file: config.json and
// generation_config.json from the file's metadata (through atom-go's own model config),
// tokenizer.json and tokenizer_config.json equivalent to the file's tokenizer and chat
// template (when it has one), and model.gguf, a symbolic link to the file (a copy when
// copyFile). Frameworks that read a checkpoint directory themselves (vLLM, SGLang) can then
// serve the GGUF through atom-go, which loads the weights from model.gguf. dir is created; an
// existing dir may hold only files this function writes (they are replaced).
func WriteGGUFDir(file, dir string, copyFile bool) (*GGUFDirResult, error) {
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, fmt.Errorf("gguf dir: %w", err)
	}
	if err := checkGGUFDir(dir); err != nil {
		return nil, err
	}
	cfg, meta, err := models.ReadGGUFConfig(abs)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	if out["config.json"], err = cfg.HFConfigJSON(); err != nil {
		return nil, err
	}
	if out["generation_config.json"], err = cfg.HFGenerationConfigJSON(); err != nil {
		return nil, err
	}
	res := &GGUFDirResult{}
	if _, ok := meta["tokenizer.ggml.model"]; ok {
		tf, err := tokenizer.GGUFToHF(meta)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if _, err := tokenizer.FromBytes(tf.TokenizerJSON); err != nil {
			return nil, fmt.Errorf("%s: the tokenizer.json written does not load: %w", file, err)
		}
		out["tokenizer.json"], out["tokenizer_config.json"] = tf.TokenizerJSON, tf.TokenizerConfigJSON
		res.Tokenizer = true
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("gguf dir: %w", err)
	}
	for _, name := range ggufDirFiles {
		b, ok := out[name]
		if !ok {
			continue
		}
		if err := writeFileAtomic(filepath.Join(dir, name), b); err != nil {
			return nil, fmt.Errorf("gguf dir: %w", err)
		}
		res.Files = append(res.Files, name)
	}
	if err := placeGGUF(abs, filepath.Join(dir, GGUFDirModel), copyFile); err != nil {
		return nil, fmt.Errorf("gguf dir: %w", err)
	}
	res.Files = append(res.Files, GGUFDirModel)
	return res, nil
}

// checkGGUFDir checks that dir does not exist or holds only files WriteGGUFDir writes.
func checkGGUFDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("gguf dir: %w", err)
	}
	known := map[string]bool{}
	for _, n := range ggufDirFiles {
		known[n] = true
	}
	var other []string
	for _, e := range entries {
		if !known[e.Name()] {
			other = append(other, e.Name())
		}
	}
	if len(other) > 0 {
		if len(other) > 5 {
			other = append(other[:5], "...")
		}
		return fmt.Errorf("gguf dir: %s already holds other files (%s): name a new or empty directory", dir, strings.Join(other, ", "))
	}
	return nil
}

// writeFileAtomic writes b to path through a temporary file renamed into place.
func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// placeGGUF links (or copies) the GGUF file to dst, replacing what is there.
func placeGGUF(src, dst string, copyFile bool) error {
	tmp := dst + ".tmp"
	_ = os.Remove(tmp)
	if !copyFile {
		if err := os.Symlink(src, tmp); err != nil {
			return err
		}
	} else if err := copyTo(src, tmp); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

func copyTo(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// LoadTokenizer loads the tokenizer of a model path as the engine would: a checkpoint
// directory's tokenizer.json (and tokenizer_config.json), else, for a GGUF file or a GGUF
// directory (models.GGUFInDir), the GGUF's own tokenizer; the GGUF's weights are not loaded.
// It returns nil and no error when the checkpoint has no tokenizer.
func LoadTokenizer(model string) (*tokenizer.Tokenizer, error) {
	gguf := ""
	st, err := os.Stat(model)
	if errors.Is(err, fs.ErrNotExist) {
		// Not "no tokenizer": the path itself is missing (a mistyped .gguf name, say).
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // named once: "PATH: no such file or directory"
		}
		return nil, fmt.Errorf("load tokenizer: %s: %w", model, err)
	}
	if err == nil && !st.IsDir() {
		gguf = model
	} else if !hasTokenizerJSON(model) {
		if gguf, err = models.GGUFInDir(model); err != nil {
			return nil, err
		}
		if gguf == "" {
			return nil, nil
		}
	}
	if gguf == "" {
		tok, err := tokenizer.Load(model)
		if err != nil {
			return nil, fmt.Errorf("load tokenizer: %w", err)
		}
		return tok, nil
	}
	_, meta, err := models.ReadGGUFConfig(gguf)
	if err != nil {
		return nil, err
	}
	return ggufTokenizer(model, meta)
}

// ggufTokenizer builds the tokenizer of GGUF metadata; nil when the file has none.
func ggufTokenizer(model string, meta map[string]any) (*tokenizer.Tokenizer, error) {
	if _, ok := meta["tokenizer.ggml.model"]; !ok {
		return nil, nil
	}
	tok, err := tokenizer.FromGGUF(meta)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer from %s: %w", model, err)
	}
	return tok, nil
}

func hasTokenizerJSON(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "tokenizer.json"))
	return err == nil
}
