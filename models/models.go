// Package models holds the model families atom-go runs, their registry (Hugging Face
// "architectures" name -> family) and checkpoint loading (config.json, safetensors).
// A model is written once against ops.Backend. models imports ops and the standard library,
// never engine.
package models

import (
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/atom-go/atom/ops"
)

// ErrUnknownArchitecture is returned for an "architectures" name no family serves.
var ErrUnknownArchitecture = errors.New("unknown architecture")

// Model is a causal language model bound to a backend.
type Model interface {
	// Config is the checkpoint's configuration.
	Config() *Config
	// Forward runs the decoder over a flattened batch, writing each token's K and V into cache,
	// and returns the final-normed hidden states [len(ids), hidden]. The result is valid until
	// the next call.
	Forward(ids []int32, meta *ops.AttnMetadata, cache ops.KVCache) ops.Tensor
	// NewKVCache allocates the paged cache this model's Forward writes: numBlocks blocks of
	// blockSize tokens for every layer (split across ranks under tensor parallelism).
	NewKVCache(numBlocks, blockSize int) (ops.KVCache, error)
	// Logits projects the selected rows of hidden to [len(rows), vocab].
	Logits(hidden ops.Tensor, rows []int32) ops.Tensor
	// SetLayerHook, when fn is non-nil, calls fn with each layer's output hidden states
	// (index 0 is the embedding), for debugging against a reference implementation.
	SetLayerHook(fn func(layer int, hidden []float32, cols int))
}

// Options sizes a model's workspaces.
type Options struct {
	// MaxTokens is the most tokens one Forward call carries.
	MaxTokens int
	// MaxSeqs is the most sequences one Forward call carries (logit rows).
	MaxSeqs int
	// Progress, when set, is told the checkpoint bytes handed to the backend so far and
	// their total, after each tensor.
	Progress func(done, total int64)
}

type family struct {
	load func(ck *Checkpoint, be ops.Backend, opt Options) (Model, error)
}

var registry = map[string]family{}

func register(arch string, f family) { registry[arch] = f }

// decoderFamilies are the registered architectures built by decoder, with their options;
// tensor-parallel loading builds one decoder per rank from them.
var decoderFamilies = map[string]decoderOptions{}

func registerDecoder(arch string, opt decoderOptions) {
	decoderFamilies[arch] = opt
	register(arch, family{load: func(ck *Checkpoint, be ops.Backend, o Options) (Model, error) {
		return loadDecoder(ck, be, o, opt)
	}})
}

// Architectures lists the supported "architectures" names.
func Architectures() []string {
	out := make([]string, 0, len(registry))
	for a := range registry {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// Load builds the model for the checkpoint's architecture on the backend.
func Load(ck *Checkpoint, be ops.Backend, opt Options) (Model, error) {
	f, ok := registry[ck.Config.Architecture]
	if !ok {
		return nil, fmt.Errorf("load %s: %w %q (supported: %v)", ck.Dir, ErrUnknownArchitecture, ck.Config.Architecture, Architectures())
	}
	if opt.MaxTokens <= 0 || opt.MaxSeqs <= 0 {
		return nil, fmt.Errorf("load %s: MaxTokens and MaxSeqs must be positive", ck.Dir)
	}
	m, err := f.load(ck, be, opt)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", ck.Dir, err)
	}
	return m, nil
}

// weightLoader fetches checkpoint tensors onto a backend, checking each shape.
type weightLoader struct {
	ck       *Checkpoint
	be       ops.Backend
	progress func(done, total int64)
	done     int64
	total    int64
}

func newWeightLoader(ck *Checkpoint, be ops.Backend, progress func(done, total int64)) *weightLoader {
	w := &weightLoader{ck: ck, be: be, progress: progress}
	for _, t := range ck.tensors {
		w.total += int64(len(t.Data))
	}
	return w
}

func (w *weightLoader) get(name string, shape ...int) (ops.Tensor, error) {
	ti, err := w.tensorInfo(name, shape)
	if err != nil {
		return nil, err
	}
	return w.upload(ti, ti.Shape, ti.Data)
}

// tensorInfo finds a tensor and checks its shape against the config's.
func (w *weightLoader) tensorInfo(name string, shape []int) (*TensorInfo, error) {
	ti, err := w.ck.Tensor(name)
	if err != nil {
		return nil, err
	}
	if !slices.Equal(ti.Shape, shape) {
		return nil, fmt.Errorf("%s: tensor %s has shape %v, the config implies %v", ti.File, name, ti.Shape, shape)
	}
	return ti, nil
}

// upload hands data (all of ti, or a shard of it) to the backend and reports progress.
func (w *weightLoader) upload(ti *TensorInfo, shape []int, data ...[]byte) (ops.Tensor, error) {
	t, err := w.be.Weight(ti.Name, ops.Plain(ti.DType), shape, data...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ti.File, err)
	}
	if w.progress != nil {
		for _, d := range data {
			w.done += int64(len(d))
		}
		w.done = min(w.done, w.total)
		w.progress(w.done, w.total)
	}
	return t, nil
}
