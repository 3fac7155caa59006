package gpu

import (
	"cmp"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/atom-go/atom/hipkernels"
	"github.com/atom-go/atom/ops"
)

// KVCache is the paged cache on the device: per layer, K and V of
// [numBlocks, blockSize, kvHeads, headDim] in the compute dtype.
type KVCache struct {
	numBlocks, blockSize, kvHeads, headDim int
	k, v                                   []hipkernels.Ptr
}

// Geometry returns numBlocks, blockSize, kvHeads, headDim.
func (c *KVCache) Geometry() (int, int, int, int) {
	return c.numBlocks, c.blockSize, c.kvHeads, c.headDim
}

// NewKVCache allocates the cache, zeroed.
func (b *Backend) NewKVCache(layers, numBlocks, blockSize, kvHeads, headDim int) (ops.KVCache, error) {
	if layers <= 0 || numBlocks <= 0 || blockSize <= 0 || kvHeads <= 0 || headDim <= 0 {
		return nil, fmt.Errorf("kv cache: invalid geometry layers=%d blocks=%d block_size=%d kv_heads=%d head_dim=%d",
			layers, numBlocks, blockSize, kvHeads, headDim)
	}
	c := &KVCache{numBlocks: numBlocks, blockSize: blockSize, kvHeads: kvHeads, headDim: headDim}
	bytes := numBlocks * blockSize * kvHeads * headDim * b.dt.Size()
	for l := 0; l < layers; l++ {
		for _, dst := range []*[]hipkernels.Ptr{&c.k, &c.v} {
			p, err := b.alloc(bytes)
			if err != nil {
				return nil, fmt.Errorf("kv cache layer %d of %d (%d bytes each for K and V): %w", l, layers, bytes, err)
			}
			if err := b.lib.Memset(p, 0, bytes, b.stream); err != nil {
				return nil, fmt.Errorf("kv cache: %w", err)
			}
			*dst = append(*dst, p)
		}
	}
	return c, nil
}

// RopeWriteKV rotates q and k in place (neox layout) and stores k and v at their slots.
func (b *Backend) RopeWriteKV(q, k, v ops.Tensor, rope *ops.RoPE, cache ops.KVCache, layer int, meta *ops.AttnMetadata) {
	qt, kt, vt, c := q.(*Tensor), k.(*Tensor), v.(*Tensor), cache.(*KVCache)
	nt, hd := meta.NumTokens(), rope.HeadDim
	kvw := c.kvHeads * c.headDim
	if hd != c.headDim || qt.cols()%hd != 0 || kt.cols() != kvw || vt.cols() != kvw ||
		qt.rows() < nt || kt.rows() < nt || vt.rows() < nt || layer < 0 || layer >= len(c.k) ||
		len(rope.InvFreq) != rope.RotaryDim/2 {
		shapeErr("RopeWriteKV", "q %v, k %v, v %v, head dim %d, cache %d kv heads of %d, layer %d of %d",
			qt.shape, kt.shape, vt.shape, hd, c.kvHeads, c.headDim, layer, len(c.k))
	}
	if nt == 0 {
		return
	}
	dm := b.prepare(meta, c)
	a := &hipkernels.RopeArgs{Q: qt.ptr, K: kt.ptr, V: vt.ptr, KCache: c.k[layer], VCache: c.v[layer],
		Positions: dm.positions, Slots: dm.slots, InvFreq: b.ropeFreq(rope), AttnFactor: rope.AttnFactor,
		Tokens: nt, QHeads: qt.cols() / hd, KVHeads: c.kvHeads, HeadDim: hd, RotaryDim: rope.RotaryDim,
		NumSlots: int64(c.numBlocks) * int64(c.blockSize)}
	b.must("RopeWriteKV", b.lib.RopeWriteKV(b.kdt, a, b.stream))
}

// RopeWriteKVFused rotates q and k read from the fused q|k|v rows (each head RMS-normalised
// first with norm), writes q and stores the rotated k and v at their slots (one kernel: no
// SplitCols, no HeadRMSNorm). Bound passes read the bound positions and slots, as RopeWriteKV
// does.
func (b *Backend) RopeWriteKVFused(q, qkv ops.Tensor, rope *ops.RoPE, norm *ops.QKNorm, cache ops.KVCache, layer int,
	meta *ops.AttnMetadata) {
	qt, src, c := q.(*Tensor), qkv.(*Tensor), cache.(*KVCache)
	nt, hd := meta.NumTokens(), rope.HeadDim
	kvw := c.kvHeads * c.headDim
	var qn, kn *Tensor
	if norm != nil {
		qn, kn = norm.Q.(*Tensor), norm.K.(*Tensor)
	}
	if hd != c.headDim || qt.cols()%hd != 0 || src.cols() != qt.cols()+2*kvw || qt.rows() < nt || src.rows() < nt ||
		layer < 0 || layer >= len(c.k) || len(rope.InvFreq) != rope.RotaryDim/2 ||
		norm != nil && (qn.elems() != hd || kn.elems() != hd) {
		shapeErr("RopeWriteKVFused", "q %v from q|k|v %v, head dim %d, cache %d kv heads of %d, layer %d of %d, norm %v",
			qt.shape, src.shape, hd, c.kvHeads, c.headDim, layer, len(c.k), norm != nil)
	}
	if nt == 0 {
		return
	}
	dm := b.prepare(meta, c)
	a := &hipkernels.RopeArgs{Q: src.ptr, KCache: c.k[layer], VCache: c.v[layer],
		Positions: dm.positions, Slots: dm.slots, InvFreq: b.ropeFreq(rope), AttnFactor: rope.AttnFactor,
		Tokens: nt, QHeads: qt.cols() / hd, KVHeads: c.kvHeads, HeadDim: hd, RotaryDim: rope.RotaryDim,
		NumSlots: int64(c.numBlocks) * int64(c.blockSize)}
	if norm != nil {
		a.QNorm, a.KNorm, a.NormEps = qn.ptr, kn.ptr, norm.Eps
	}
	b.must("RopeWriteKVFused", b.lib.RopeWriteKVFused(b.kdt, qt.ptr, a, b.stream))
}

// AttentionFeatures: both attention kernels apply sliding windows and sinks (float32 sinks:
// layers load them with ops.WeightDesc.Exact).
func (b *Backend) AttentionFeatures() ops.AttnFeatures {
	return ops.AttnFeatures{Window: true, Sinks: true}
}

// Attention computes causal attention of q over each sequence's cached context (its last
// a.Window positions under a sliding window), with a.Sinks in the softmax's denominator.
func (b *Backend) Attention(out, q ops.Tensor, cache ops.KVCache, layer int, meta *ops.AttnMetadata, a ops.AttnShape) {
	o, qt, c := out.(*Tensor), q.(*Tensor), cache.(*KVCache)
	nt, w := meta.NumTokens(), a.NumHeads*a.HeadDim
	if a.NumKVHeads != c.kvHeads || a.HeadDim != c.headDim || a.NumKVHeads <= 0 || a.NumHeads%a.NumKVHeads != 0 ||
		qt.cols() != w || o.cols() != w || qt.rows() < nt || o.rows() < nt || layer < 0 || layer >= len(c.k) ||
		a.Window < 0 {
		shapeErr("Attention", "out %v, q %v, shape %v, cache %d kv heads of %d, layer %d of %d",
			o.shape, qt.shape, a, c.kvHeads, c.headDim, layer, len(c.k))
	}
	sinks := b.attentionSinks(a)
	if nt == 0 {
		return
	}
	dm := b.prepare(meta, c)
	if b.prefillAttention(o, qt, c, layer, dm, a, sinks) {
		return
	}
	work, workBytes := b.attentionWorkspace("Attention", nt, dm.maxCtx, a)
	args := &hipkernels.AttentionArgs{Out: o.ptr, Q: qt.ptr, KCache: c.k[layer], VCache: c.v[layer],
		TokenSeq: dm.tokenSeq, Positions: dm.positions, BlockTables: dm.tables, BlockTableStride: dm.stride,
		Tokens: nt, NumHeads: a.NumHeads, NumKVHeads: a.NumKVHeads, HeadDim: a.HeadDim, BlockSize: c.blockSize,
		Scale: a.Scale, MaxCtx: dm.maxCtx, Window: a.Window, Sinks: sinks, Workspace: work, WorkspaceBytes: workBytes}
	b.must("Attention", b.lib.PagedAttention(b.kdt, args, b.stream))
}

// attentionSinks returns the device address of a's sink logits (0: none). The kernels read
// float32: a sinks weight held in the activation dtype (loaded without ops.WeightDesc.Exact)
// is a caller's error.
func (b *Backend) attentionSinks(a ops.AttnShape) hipkernels.Ptr {
	if a.Sinks == nil {
		return 0
	}
	st, ok := a.Sinks.(*Tensor)
	if !ok || st.dt != ops.F32 || len(st.shape) != 1 || st.shape[0] != a.NumHeads {
		shapeErr("Attention", "sinks %T of %v for %d heads (want a float32 weight of [%d]: load it exact)",
			a.Sinks, a.Sinks.Shape(), a.NumHeads, a.NumHeads)
	}
	return st.ptr
}

// attentionWorkspace returns the paged attention kernel's scratch for a batch of nt tokens of
// at most maxCtx positions (a.Window of them under a window): the bound one in a bound pass,
// else the backend's, grown as needed.
func (b *Backend) attentionWorkspace(op string, nt, maxCtx int, a ops.AttnShape) (hipkernels.Ptr, int) {
	ws, err := b.lib.PagedAttentionWorkspace(nt, a.NumHeads, a.NumKVHeads, a.HeadDim, maxCtx, a.Window)
	b.must(op, err)
	if b.bound != nil {
		return b.boundWorkspace(ws), ws
	}
	b.must(op, b.ensureWorkspace(&b.attnWork, ws))
	return b.attnWork.ptr, b.attnWork.size
}

// ensureWorkspace grows d to at least n bytes of attention workspace (every launch writes the
// partition results it merges, so the contents never matter).
func (b *Backend) ensureWorkspace(d *devBuf, n int) error {
	if d.size >= n {
		return nil
	}
	return b.ensure(d, n)
}

// Test hooks: prefillOff sends every batch to the paged kernel; prefillLaunches counts the
// batches the tensor-core prefill kernel ran.
var (
	prefillOff      bool
	prefillLaunches atomic.Int64
)

// prefillTiles is the device tile list of the prefill kernel for the current metadata (reset
// by prepare when the metadata changes).
type prefillTiles struct {
	valid       bool
	group, rows int
	n           int
	buf         devBuf
	work        []tileWork
	host        []int32
}

// tileWork is one tile of packed rows (query token x head of a GQA group) of a sequence, and
// the context positions its last row attends to (its cost).
type tileWork struct{ seq, row0, end int32 }

// prefillAttention runs the tensor-core kernel on a batch that holds a prefill chunk (eager
// passes, 16-bit dtypes, shapes the library supports) and reports whether it did; otherwise
// the caller runs the paged kernel. sinks is attentionSinks' address.
func (b *Backend) prefillAttention(o, q *Tensor, c *KVCache, layer int, dm *devMeta, a ops.AttnShape,
	sinks hipkernels.Ptr) bool {
	if prefillOff || b.bound != nil || !dm.prefill || (b.dt != ops.BF16 && b.dt != ops.F16) {
		return false
	}
	rows, err := b.lib.PrefillAttentionTileRows(b.kdt, a.NumHeads, a.NumKVHeads, a.HeadDim)
	if hipkernels.IsStatus(err, hipkernels.StatusUnsupported) {
		return false
	}
	b.must("Attention", err)
	tiles, n := b.prefillTileList(a.NumHeads/a.NumKVHeads, rows)
	args := &hipkernels.PrefillArgs{Out: o.ptr, Q: q.ptr, KCache: c.k[layer], VCache: c.v[layer],
		QueryStart: dm.queryStart, SeqLens: dm.seqLens, BlockTables: dm.tables, BlockTableStride: dm.stride,
		Tiles: tiles, NumTiles: n, NumHeads: a.NumHeads, NumKVHeads: a.NumKVHeads, HeadDim: a.HeadDim,
		BlockSize: c.blockSize, Scale: a.Scale, Window: a.Window, Sinks: sinks}
	err = b.lib.PrefillAttention(b.kdt, args, b.stream)
	if hipkernels.IsStatus(err, hipkernels.StatusUnsupported) {
		return false
	}
	b.must("Attention", err)
	prefillLaunches.Add(1)
	return true
}

// prefillTileList returns the device tile list of the current metadata for GQA groups of group
// heads and tiles of rows packed rows, and its length, uploading it when it changed. The tiles
// with the longest contexts come first, so the longest blocks start first. The list does not
// depend on a layer's sliding window (layers of a model alternating windowed and full attention
// share one upload per step; under a window every tile costs about the window anyway).
func (b *Backend) prefillTileList(group, rows int) (hipkernels.Ptr, int) {
	t, m := &b.meta.tiles, &b.meta
	if t.valid && t.group == group && t.rows == rows {
		return t.buf.ptr, t.n
	}
	t.work = buildTiles(t.work[:0], m.qstart, m.lens, group, rows)
	t.host = t.host[:0]
	for _, w := range t.work {
		t.host = append(t.host, w.seq, w.row0)
	}
	b.uploadInt32(&t.buf, t.host)
	t.valid, t.group, t.rows, t.n = true, group, rows, len(t.work)
	return t.buf.ptr, t.n
}

// buildTiles appends to work the tiles of rows packed rows covering each sequence's query
// tokens times group heads (sequence s has queryStart[s+1]-queryStart[s] tokens, the last of
// its lens[s] positions), longest context first.
func buildTiles(work []tileWork, queryStart, lens []int32, group, rows int) []tileWork {
	for s, n := range lens {
		qlen := int(queryStart[s+1] - queryStart[s])
		packed, first := qlen*group, int(n)-qlen
		for r := 0; r < packed; r += rows {
			end := first + (min(r+rows, packed)-1)/group + 1
			work = append(work, tileWork{seq: int32(s), row0: int32(r), end: int32(end)})
		}
	}
	slices.SortStableFunc(work, func(x, y tileWork) int { return cmp.Compare(y.end, x.end) })
	return work
}
