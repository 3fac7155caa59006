// Package models holds the model families atom-go runs, one file each composing the layers of
// package models/layers (llama.go, qwen2.go, qwen3.go), their registry (Hugging Face
// "architectures" name -> family), tensor parallelism over any family (parallel.go) and
// checkpoint loading (config.json, safetensors, GGUF). A model is written once against
// ops.Backend.
//
// models imports models/layers, models/formats, ops (and ops/offheap) and the standard library,
// never engine.
package models

import (
	"errors"
	"fmt"
	"sort"

	"github.com/atom-go/atom/models/formats"
	"github.com/atom-go/atom/models/layers"
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
	// KVCacheSpec is the KV cache the model's layers declare, per layer, for one rank: what the
	// engine, the host-scheduled mode and the plugin size the cache from.
	KVCacheSpec() ops.KVCacheSpec
	// NewKVCache allocates the paged cache this model's Forward writes, as KVCacheSpec
	// describes it: numBlocks blocks of blockSize tokens for every layer (on every rank under
	// tensor parallelism).
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
	// FP8KV stores the KV cache as float8_e4m3fn with the checkpoint's per-layer k/v scales
	// (--kv-cache-dtype fp8); a backend without an fp8 cache refuses it when the cache is made.
	FP8KV bool
}

// builder builds one rank's part of a family's model from layers; it reports errors through
// c (layers.Context.Err).
type builder func(c *layers.Context, cfg *Config) rankModel

// rankModel is one rank's part of a model (the whole model without tensor parallelism).
type rankModel interface {
	Model
	base() *causalLM
}

var registry = map[string]builder{}

// register serves the architectures with one family's builder (a family file may serve
// several architectures that share its shape).
func register(b builder, archs ...string) {
	for _, a := range archs {
		registry[a] = b
	}
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
	b, ok := registry[ck.Config.Architecture]
	if !ok {
		return nil, fmt.Errorf("load %s: %w %q (supported: %v)", ck.Dir, ErrUnknownArchitecture, ck.Config.Architecture, Architectures())
	}
	if opt.MaxTokens <= 0 || opt.MaxSeqs <= 0 {
		return nil, fmt.Errorf("load %s: MaxTokens and MaxSeqs must be positive", ck.Dir)
	}
	m, err := buildRank(ck, be, opt, layers.Single(), b)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", ck.Dir, err)
	}
	return m, nil
}

// buildRank builds shard's part of the model on be, its linear layers in the weight format the
// config's quantization_config names (refused, before any weight is read, where none serves it).
func buildRank(ck *Checkpoint, be ops.Backend, opt Options, sh layers.Shard, b builder) (rankModel, error) {
	format, err := formats.For(ck.Config.Quant)
	if err != nil {
		return nil, fmt.Errorf("quantization_config: %w", err)
	}
	var total int64
	for _, t := range ck.tensors {
		total += t.Size()
	}
	load := formats.NewLoader(ck, be, total, opt.Progress)
	c := layers.NewContext(be, sh, load, format, opt.MaxTokens, opt.MaxSeqs)
	m := b(c, ck.Config)
	if err := c.Err(); err != nil {
		return nil, err
	}
	if opt.FP8KV {
		if err := applyFP8KV(ck, &m.base().kv); err != nil {
			return nil, fmt.Errorf("--kv-cache-dtype fp8: %w", err)
		}
	}
	load.Done()
	return m, nil
}
