package gpu

import (
	"github.com/atom-go/atom/hipkernels"
	"github.com/atom-go/atom/ops"
)

// RopeAttention runs RopeWriteKVFused and Attention as one kernel (q and the new k rotated
// inside the decode attention kernel, the new k and v stored and attended to from shared
// memory) where the library has it: a batch of one query token per sequence, 16-bit, rotary
// over whole heads of 64, 128 or 256, and ATOM_GO_ATTN_ROPE=1 while the kernel is measured.
// It reports whether it ran; on false nothing was queued. Bound passes are decode batches by
// construction (LoadDecode checks them).
func (b *Backend) RopeAttention(out, qkv ops.Tensor, rope *ops.RoPE, norm *ops.QKNorm, cache ops.KVCache, layer int,
	meta *ops.AttnMetadata, a ops.AttnShape) bool {
	if b.ropeAttnOff || rope.RotaryDim != rope.HeadDim || (b.dt != ops.BF16 && b.dt != ops.F16) {
		return false
	}
	o, src, c := out.(*Tensor), qkv.(*Tensor), cache.(*KVCache)
	nt, hd, w := meta.NumTokens(), rope.HeadDim, a.NumHeads*a.HeadDim
	var qn, kn *Tensor
	if norm != nil {
		qn, kn = norm.Q.(*Tensor), norm.K.(*Tensor)
	}
	if a.NumKVHeads != c.kvHeads || a.HeadDim != c.headDim || hd != c.headDim || a.NumHeads%a.NumKVHeads != 0 ||
		o.cols() != w || src.cols() != w+2*c.kvHeads*hd || o.rows() < nt || src.rows() < nt || layer < 0 ||
		layer >= len(c.k) || len(rope.InvFreq) != rope.RotaryDim/2 || norm != nil && (qn.elems() != hd || kn.elems() != hd) {
		shapeErr("RopeAttention", "out %v from q|k|v %v, shape %+v, rope head dim %d, cache %d kv heads of %d, layer %d of %d, norm %v",
			o.shape, src.shape, a, hd, c.kvHeads, c.headDim, layer, len(c.k), norm != nil)
	}
	if nt == 0 {
		return false
	}
	dm := b.prepare(meta, c) // checks meta (the two ops' first would upload the same)
	if !dm.decode {
		return false
	}
	work, workBytes := b.attentionWorkspace("RopeAttention", nt, dm.maxCtx, a)
	args := &hipkernels.AttentionArgs{Out: o.ptr, KCache: c.k[layer], VCache: c.v[layer], TokenSeq: dm.tokenSeq,
		Positions: dm.positions, BlockTables: dm.tables, BlockTableStride: dm.stride, Tokens: nt, NumHeads: a.NumHeads,
		NumKVHeads: a.NumKVHeads, HeadDim: a.HeadDim, BlockSize: c.blockSize, Scale: a.Scale, MaxCtx: dm.maxCtx,
		Workspace: work, WorkspaceBytes: workBytes}
	r := &hipkernels.RopeArgs{Q: src.ptr, KCache: c.k[layer], VCache: c.v[layer], Positions: dm.positions,
		Slots: dm.slots, InvFreq: b.ropeFreq(rope), AttnFactor: rope.AttnFactor, Tokens: nt, QHeads: a.NumHeads,
		KVHeads: c.kvHeads, HeadDim: hd, RotaryDim: rope.RotaryDim, NumSlots: int64(c.numBlocks) * int64(c.blockSize)}
	if norm != nil {
		r.QNorm, r.KNorm, r.NormEps = qn.ptr, kn.ptr, norm.Eps
	}
	err := b.lib.PagedAttentionRope(b.kdt, args, r, b.stream)
	if hipkernels.IsStatus(err, hipkernels.StatusUnsupported) {
		b.ropeAttnOff = true
		return false
	}
	b.must("RopeAttention", err)
	return true
}
