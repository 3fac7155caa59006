package ops

import (
	"errors"
	"fmt"
)

// ErrUnsupportedKVCache is returned for a KV cache spec the backend cannot allocate.
var ErrUnsupportedKVCache = errors.New("unsupported KV cache")

// KVKind is what one layer's cache stores per token (vLLM's attention spec kinds).
type KVKind uint8

// The cache kinds.
const (
	// KVPair stores a key and a value vector for each KV head (GQA, MHA).
	KVPair KVKind = iota
	// KVLatent stores one compressed vector per token that keys and values are projected from
	// (DeepSeek's MLA: kv_lora_rank + the rope dimensions).
	KVLatent
)

func (k KVKind) String() string {
	switch k {
	case KVPair:
		return "k/v"
	case KVLatent:
		return "latent"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// KVLayerSpec is one layer's KV cache on one rank, declared by the model's attention layer.
type KVLayerSpec struct {
	Kind KVKind
	// Heads are this rank's KV heads (KVPair), 1 for KVLatent.
	Heads int
	// HeadDim is the elements of one head's key (and of its value), or of the latent vector.
	HeadDim int
	// DType is the element type the cache holds (the backend's activation dtype, or F8E4M3 for
	// an fp8 KV cache).
	DType DType
	// KScale and VScale are an F8E4M3 cache's per-layer scales: a key k is stored as
	// e4m3(k / KScale) and read as float(code) · KScale (the checkpoint's k_scale / v_scale,
	// 1 where it has none, as vLLM).
	KScale, VScale float32
	// SlidingWindow, when positive, is the most recent positions the layer attends to; 0: the
	// whole context.
	SlidingWindow int
}

// TokenBytes is the cache bytes one token takes in the layer.
func (s KVLayerSpec) TokenBytes() int64 {
	n := int64(s.Heads) * int64(s.HeadDim) * int64(s.DType.Size())
	if s.Kind == KVPair {
		n *= 2
	}
	return n
}

// KVCacheSpec is a model's KV cache as its layers declare it: what the engine, the
// host-scheduled mode and the plugin size the cache from.
type KVCacheSpec struct {
	// Layers is one rank's spec of every layer, in order.
	Layers []KVLayerSpec
	// Ranks is the number of tensor-parallel ranks, each holding a cache of Layers.
	Ranks int
}

// BlockBytes is the bytes one block of blockSize tokens takes on one rank, over all layers.
func (s KVCacheSpec) BlockBytes(blockSize int) int64 {
	var n int64
	for _, l := range s.Layers {
		n += l.TokenBytes()
	}
	return n * int64(blockSize)
}

// NewKVCacheFor allocates the cache spec describes on be: numBlocks blocks of blockSize tokens
// in every layer. The backends hold K/V pairs of one shape in every layer, in their activation
// dtype, or (an MLABackend) latent vectors of one width in every layer; another spec is
// refused with ErrUnsupportedKVCache. A sliding-window layer keeps every position as a full
// one does (its Attention reads only the window): the cache is sized by the whole context.
func NewKVCacheFor(be Backend, spec KVCacheSpec, numBlocks, blockSize int) (KVCache, error) {
	if len(spec.Layers) == 0 {
		return nil, fmt.Errorf("%w: no layers", ErrUnsupportedKVCache)
	}
	first := spec.Layers[0]
	if first.Kind == KVLatent {
		return newLatentKVCacheFor(be, spec, numBlocks, blockSize)
	}
	for i, l := range spec.Layers {
		if l.Kind != KVPair || l.SlidingWindow < 0 || l.Heads != first.Heads || l.HeadDim != first.HeadDim || l.DType != first.DType {
			return nil, fmt.Errorf("%w on the %s backend: layer %d is %+v, layer 0 %+v", ErrUnsupportedKVCache, be.Name(), i, l, first)
		}
	}
	if first.DType == F8E4M3 {
		fb, ok := be.(FP8KVBackend)
		if !ok {
			return nil, fmt.Errorf("%w on the %s backend: an fp8 KV cache (--kv-cache-dtype fp8)", ErrUnsupportedKVCache, be.Name())
		}
		ks, vs := make([]float32, len(spec.Layers)), make([]float32, len(spec.Layers))
		for i, l := range spec.Layers {
			ks[i], vs[i] = l.KScale, l.VScale
		}
		return fb.NewFP8KVCache(len(spec.Layers), numBlocks, blockSize, first.Heads, first.HeadDim, ks, vs)
	}
	return be.NewKVCache(len(spec.Layers), numBlocks, blockSize, first.Heads, first.HeadDim)
}

// FP8KVBackend is a backend that can hold an fp8 (e4m3) KV cache: K and V of every layer
// stored as float8_e4m3fn codes of the values divided by the layer's scale. A backend without
// it refuses such a spec with ErrUnsupportedKVCache (--device auto then serves on the cpu).
type FP8KVBackend interface {
	NewFP8KVCache(layers, numBlocks, blockSize, kvHeads, headDim int, kScale, vScale []float32) (KVCache, error)
}
