package gpu

import (
	"fmt"

	"github.com/atom-go/atom/hipkernels"
	"github.com/atom-go/atom/ops"
)

// NewLatentKVCache allocates the latent (MLA) cache: per layer [numBlocks, blockSize, dim] in the
// compute dtype, zeroed. It is a KVCache of one head of width dim without values, so the batch
// metadata, its checks and the graph bindings of the paged cache serve it unchanged.
func (b *Backend) NewLatentKVCache(layers, numBlocks, blockSize, dim int) (ops.KVCache, error) {
	if layers <= 0 || numBlocks <= 0 || blockSize <= 0 || dim <= 0 {
		return nil, fmt.Errorf("latent kv cache: invalid geometry layers=%d blocks=%d block_size=%d dim=%d",
			layers, numBlocks, blockSize, dim)
	}
	c := &KVCache{numBlocks: numBlocks, blockSize: blockSize, kvHeads: 1, headDim: dim}
	bytes := numBlocks * blockSize * dim * b.dt.Size()
	for l := range layers {
		p, err := b.alloc(bytes)
		if err != nil {
			return nil, fmt.Errorf("latent kv cache layer %d of %d (%d bytes): %w", l, layers, bytes, err)
		}
		if err := b.lib.Memset(p, 0, bytes, b.stream); err != nil {
			return nil, fmt.Errorf("latent kv cache: %w", err)
		}
		c.k = append(c.k, p)
	}
	return c, nil
}

// mlaShape is the kernels' view of a.
func mlaShape(a ops.MLAShape) hipkernels.MLAShape {
	return hipkernels.MLAShape{Heads: a.Heads, KVRank: a.KVRank, NopeDim: a.NopeDim, RopeDim: a.RopeDim, VDim: a.VDim}
}

// latentCache checks that cache is a latent cache of a's width holding layer.
func latentCache(op string, cache ops.KVCache, layer int, a ops.MLAShape) *KVCache {
	c, ok := cache.(*KVCache)
	if !ok || c.v != nil || c.kvHeads != 1 || c.headDim != a.LatentDim() || layer < 0 || layer >= len(c.k) {
		shapeErr(op, "cache %T is not a latent cache of width %d holding layer %d", cache, a.LatentDim(), layer)
	}
	return c
}

// MLAWriteKV normalises kv_c, rotates k_pe and q's rope parts, and stores [kv_c, k_pe].
func (b *Backend) MLAWriteKV(q, kv, kvNorm ops.Tensor, rope *ops.RoPE, cache ops.KVCache, layer int,
	meta *ops.AttnMetadata, a ops.MLAShape) {
	qt, kt, wt := q.(*Tensor), kv.(*Tensor), kvNorm.(*Tensor)
	c := latentCache("MLAWriteKV", cache, layer, a)
	nt := meta.NumTokens()
	if qt.cols() != a.Heads*(a.NopeDim+a.RopeDim) || kt.cols() != a.LatentDim() || wt.elems() != a.KVRank ||
		qt.rows() < nt || kt.rows() < nt || rope.RotaryDim != a.RopeDim || len(rope.InvFreq) != a.RopeDim/2 {
		shapeErr("MLAWriteKV", "q %v, kv %v, norm %v, rope %d for %+v", qt.shape, kt.shape, wt.shape, rope.RotaryDim, a)
	}
	if nt == 0 {
		return
	}
	dm := b.prepare(meta, c)
	args := &hipkernels.MLAWriteArgs{Q: qt.ptr, KV: kt.ptr, NormW: wt.ptr, Cache: c.k[layer], Positions: dm.positions,
		Slots: dm.slots, InvFreq: b.ropeFreq(rope), AttnFactor: rope.AttnFactor, Eps: a.Eps, Tokens: nt,
		Interleaved: a.Interleaved, NumSlots: int64(c.numBlocks) * int64(c.blockSize)}
	b.must("MLAWriteKV", b.lib.MLAWriteKV(b.kdt, args, mlaShape(a), b.stream))
}

// MLAAttention runs latent attention in the absorbed form: W_UK folded into q, one latent head
// over the cache, W_UV after (all in the kernels of hipkernels/src/mla.cu).
func (b *Backend) MLAAttention(out, q, kvB ops.Tensor, cache ops.KVCache, layer int, meta *ops.AttnMetadata, a ops.MLAShape) {
	o, qt, wt := out.(*Tensor), q.(*Tensor), kvB.(*Tensor)
	c := latentCache("MLAAttention", cache, layer, a)
	nt := meta.NumTokens()
	if qt.cols() != a.Heads*(a.NopeDim+a.RopeDim) || o.cols() != a.Heads*a.VDim ||
		!shapeIs(wt.shape, a.Heads*(a.NopeDim+a.VDim), a.KVRank) || qt.rows() < nt || o.rows() < nt {
		shapeErr("MLAAttention", "out %v, q %v, kv_b %v for %+v", o.shape, qt.shape, wt.shape, a)
	}
	if nt == 0 {
		return
	}
	kvb := wt.ptr
	if wt.fp8 != nil {
		// A block-scaled FP8 kv_b_proj (DeepSeek-V3's checkpoint) is expanded into the
		// dequantization scratch for the absorbed products, as vLLM dequantizes it at load; a
		// layer's kv_b is small (heads x (nope + v_dim) x kv_rank).
		b.must("MLAAttention", b.lib.DequantFP8(b.kdt, b.fp8Scratch.ptr, wt.fp8, b.stream))
		kvb = b.fp8Scratch.ptr
	}
	dm := b.prepare(meta, c)
	sh := mlaShape(a)
	ws, err := b.lib.MLAWorkspace(b.kdt, nt, dm.maxCtx, sh)
	b.must("MLAAttention", err)
	var work hipkernels.Ptr
	if b.bound != nil {
		work = b.boundWorkspace(ws)
	} else {
		b.must("MLAAttention", b.ensureWorkspace(&b.attnWork, ws))
		work, ws = b.attnWork.ptr, b.attnWork.size
	}
	args := &hipkernels.MLAAttentionArgs{Out: o.ptr, Q: qt.ptr, KVB: kvb, Cache: c.k[layer], TokenSeq: dm.tokenSeq,
		Positions: dm.positions, BlockTables: dm.tables, BlockTableStride: dm.stride, Tokens: nt,
		BlockSize: c.blockSize, MaxCtx: dm.maxCtx, Scale: a.Scale, Workspace: work, WorkspaceBytes: ws}
	b.must("MLAAttention", b.lib.MLAAttention(b.kdt, args, sh, b.stream))
}
