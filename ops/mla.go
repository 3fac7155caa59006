package ops

import "fmt"

// MLAShape is one Multi-head Latent Attention layer (DeepSeek V2/V3) on one rank.
type MLAShape struct {
	// Heads are this rank's query heads.
	Heads int
	// KVRank is kv_lora_rank, the latent kv_c's width; NopeDim and RopeDim are the widths of a
	// query head's parts without and with RoPE (qk_nope_head_dim, qk_rope_head_dim); VDim is a
	// value head's (v_head_dim).
	KVRank, NopeDim, RopeDim, VDim int
	// Scale multiplies q·k before the softmax: 1/sqrt(NopeDim+RopeDim), times YaRN's
	// mscale(factor, mscale_all_dim)² where the model uses it.
	Scale float32
	// Eps is kv_a_layernorm's epsilon.
	Eps float32
	// Interleaved rotates pairs (2i, 2i+1) by frequency i (DeepSeek's GPT-J layout: V2 always,
	// V3 under rope_interleave); otherwise i pairs with i+RopeDim/2 (neox).
	Interleaved bool
}

// LatentDim is the elements one token takes in a layer's latent cache: kv_c then k_pe.
func (a MLAShape) LatentDim() int { return a.KVRank + a.RopeDim }

// MLABackend is a backend that runs Multi-head Latent Attention over a latent KV cache
// (KVLatent): per token and layer one vector [kv_c, k_pe]. A backend without it refuses such
// a spec with ErrUnsupportedKVCache (--device auto then serves on the cpu).
type MLABackend interface {
	// NewLatentKVCache allocates numBlocks blocks of blockSize tokens of dim elements per layer.
	NewLatentKVCache(layers, numBlocks, blockSize, dim int) (KVCache, error)
	// MLAWriteKV takes kv, kv_a_proj_with_mqa's output [rows, KVRank+RopeDim], RMS-normalises
	// its kv_c part with kvNorm [KVRank] (kv_a_layernorm), rotates its k_pe part and every
	// head's rope part of q [rows, Heads*(NopeDim+RopeDim)] (in place) at meta.Positions, and
	// stores [kv_c, k_pe] into layer's cache at meta.SlotMapping; kv is left unchanged.
	MLAWriteKV(q, kv, kvNorm Tensor, rope *RoPE, cache KVCache, layer int, meta *AttnMetadata, a MLAShape)
	// MLAAttention is causal attention of q over each sequence's cached latents, written to out
	// [rows, Heads*VDim]: with kvB, kv_b_proj's weight [Heads*(NopeDim+VDim), KVRank] (each
	// head's W_UK rows, then its W_UV rows), a head's key at a position is [W_UK·kv_c, k_pe]
	// and its value W_UV·kv_c. A backend may compute it in the absorbed form (W_UK folded
	// into q, one latent head, W_UV after).
	MLAAttention(out, q, kvB Tensor, cache KVCache, layer int, meta *AttnMetadata, a MLAShape)
}

// newLatentKVCacheFor allocates a spec whose layers are all KVLatent of one width.
func newLatentKVCacheFor(be Backend, spec KVCacheSpec, numBlocks, blockSize int) (KVCache, error) {
	first := spec.Layers[0]
	for i, l := range spec.Layers {
		if l.Kind != KVLatent || l.Heads != 1 || l.SlidingWindow != 0 || l.HeadDim != first.HeadDim || l.DType != first.DType {
			return nil, fmt.Errorf("%w on the %s backend: layer %d is %+v, layer 0 %+v", ErrUnsupportedKVCache, be.Name(), i, l, first)
		}
	}
	mb, ok := be.(MLABackend)
	if !ok {
		return nil, fmt.Errorf("%w on the %s backend: a latent (MLA) KV cache", ErrUnsupportedKVCache, be.Name())
	}
	if first.DType == F8E4M3 {
		return nil, fmt.Errorf("%w on the %s backend: an fp8 latent KV cache", ErrUnsupportedKVCache, be.Name())
	}
	return mb.NewLatentKVCache(len(spec.Layers), numBlocks, blockSize, first.HeadDim)
}
