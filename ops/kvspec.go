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
	// DType is the element type the cache holds (the backend's activation dtype).
	DType DType
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
// dtype, over the whole context; another spec is refused with ErrUnsupportedKVCache.
func NewKVCacheFor(be Backend, spec KVCacheSpec, numBlocks, blockSize int) (KVCache, error) {
	if len(spec.Layers) == 0 {
		return nil, fmt.Errorf("%w: no layers", ErrUnsupportedKVCache)
	}
	first := spec.Layers[0]
	for i, l := range spec.Layers {
		if l.Kind != KVPair || l.SlidingWindow != 0 || l.Heads != first.Heads || l.HeadDim != first.HeadDim || l.DType != first.DType {
			return nil, fmt.Errorf("%w on the %s backend: layer %d is %+v, layer 0 %+v", ErrUnsupportedKVCache, be.Name(), i, l, first)
		}
	}
	return be.NewKVCache(len(spec.Layers), numBlocks, blockSize, first.Heads, first.HeadDim)
}
