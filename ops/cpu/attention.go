package cpu

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/atom-go/atom/ops"
	"github.com/atom-go/atom/ops/offheap"
)

// KVCache is the cpu paged cache: per layer, K and V as float32 [numBlocks, blockSize, kvHeads, headDim]
// (float16 in k16 and v16 instead with Options.KVFloat16).
// The values live in one anonymous mapping outside the Go heap (ops/offheap), so that a cache of
// --kv-cache-memory bytes adds that much to the resident size and nothing to the collector's
// heap goal. The mapping is released by Close or by the backend's Close (as a gpu backend's
// device memory is), never by the collector: a slice of it used after an automatic release
// would fault and end the process.
type KVCache struct {
	numBlocks, blockSize, kvHeads, headDim int
	k, v                                   [][]float32
	k16, v16                               [][]uint16
	mem                                    *offheap.Block
	be                                     *Backend
	f8                                     *fp8KV // an fp8 cache (fp8_kv.go): k and v are nil
}

// Geometry returns the cache dimensions.
func (c *KVCache) Geometry() (int, int, int, int) {
	return c.numBlocks, c.blockSize, c.kvHeads, c.headDim
}

// Close releases the cache's memory; the cache must not be used afterwards.
func (c *KVCache) Close() { c.be.release(c.mem) }

// NewKVCache allocates the cache.
func (b *Backend) NewKVCache(layers, numBlocks, blockSize, kvHeads, headDim int) (ops.KVCache, error) {
	if layers <= 0 || numBlocks <= 0 || blockSize <= 0 || kvHeads <= 0 || headDim <= 0 {
		return nil, fmt.Errorf("kv cache: invalid geometry layers=%d blocks=%d block_size=%d kv_heads=%d head_dim=%d",
			layers, numBlocks, blockSize, kvHeads, headDim)
	}
	n, ok := offheap.Size(numBlocks, blockSize, kvHeads, headDim)
	total, ok2 := offheap.Size(n, 2, layers, b.KVValueBytes())
	if !ok || !ok2 {
		return nil, fmt.Errorf("kv cache: %d layers of %d blocks of %d tokens × %d heads × %d overflow the address space",
			layers, numBlocks, blockSize, kvHeads, headDim)
	}
	mem, err := offheap.Alloc(total)
	if err != nil {
		return nil, fmt.Errorf("kv cache: %w", err)
	}
	c := &KVCache{numBlocks: numBlocks, blockSize: blockSize, kvHeads: kvHeads, headDim: headDim, mem: mem, be: b}
	if b.kv16 {
		all := unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(mem.Bytes()))), 2*layers*n)
		for l := 0; l < layers; l++ {
			c.k16 = append(c.k16, all[2*l*n:(2*l+1)*n:(2*l+1)*n])
			c.v16 = append(c.v16, all[(2*l+1)*n:(2*l+2)*n:(2*l+2)*n])
		}
		b.track(mem)
		return c, nil
	}
	all := mem.Float32s()
	for l := 0; l < layers; l++ {
		c.k = append(c.k, all[2*l*n:(2*l+1)*n:(2*l+1)*n])
		c.v = append(c.v, all[(2*l+1)*n:(2*l+2)*n:(2*l+2)*n])
	}
	b.track(mem)
	return c, nil
}

// RopeWriteKV rotates q and k (neox layout) and stores k and v at their slots.
func (b *Backend) RopeWriteKV(q, k, v ops.Tensor, rope *ops.RoPE, cache ops.KVCache, layer int, meta *ops.AttnMetadata) {
	qt, kt, vt, c := q.(*Tensor), k.(*Tensor), v.(*Tensor), cache.(*KVCache)
	if c.f8 != nil {
		b.ropeWriteKVFP8(qt, kt, vt, rope, c, layer, meta)
		return
	}
	hd := rope.HeadDim
	kvw := c.kvHeads * hd
	b.pool.run(meta.NumTokens(), func(lo, hi, _ int) {
		for t := lo; t < hi; t++ {
			pos := float64(meta.Positions[t])
			rotate(qt.f32[t*qt.cols():(t+1)*qt.cols()], rope, pos)
			kr := kt.f32[t*kvw : (t+1)*kvw]
			rotate(kr, rope, pos)
			slot := int(meta.SlotMapping[t])
			if c.k16 != nil {
				putF16(c.k16[layer][slot*kvw:(slot+1)*kvw], kr)
				putF16(c.v16[layer][slot*kvw:(slot+1)*kvw], vt.f32[t*kvw:(t+1)*kvw])
				continue
			}
			copy(c.k[layer][slot*kvw:(slot+1)*kvw], kr)
			copy(c.v[layer][slot*kvw:(slot+1)*kvw], vt.f32[t*kvw:(t+1)*kvw])
		}
	})
}

// RopeWriteKVFused rotates q and k read from the fused q|k|v rows (each head normalised first
// with norm), writes q and stores k and v.
func (b *Backend) RopeWriteKVFused(q, qkv ops.Tensor, rope *ops.RoPE, norm *ops.QKNorm, cache ops.KVCache, layer int,
	meta *ops.AttnMetadata) {
	qt, src, c := q.(*Tensor), qkv.(*Tensor), cache.(*KVCache)
	hd := rope.HeadDim
	kvw, qw := c.kvHeads*hd, qt.cols()
	w, nt := src.cols(), meta.NumTokens()
	if hd != c.headDim || w != qw+2*kvw || qw%hd != 0 || qt.rows() < nt || src.rows() < nt ||
		norm != nil && (norm.Q.(*Tensor).cols() != hd || norm.K.(*Tensor).cols() != hd) {
		panic(fmt.Sprintf("cpu RopeWriteKVFused: q %v from q|k|v %v, cache %d kv heads of %d, head dim %d, norm %v",
			qt.shape, src.shape, c.kvHeads, c.headDim, hd, norm != nil))
	}
	if c.f8 != nil {
		b.ropeWriteKVFusedFP8(qt, src, rope, norm, c, layer, meta)
		return
	}
	b.pool.run(nt, func(lo, hi, worker int) {
		var qn, kn []float32
		buf := b.pool.buf(worker, 2*hd+kvw)
		if norm != nil {
			qn, kn = norm.Q.(*Tensor).row(0, buf[:hd]), norm.K.(*Tensor).row(0, buf[hd:2*hd])
		}
		for t := lo; t < hi; t++ {
			pos, row := float64(meta.Positions[t]), src.f32[t*w:(t+1)*w]
			qr := qt.f32[t*qw : (t+1)*qw]
			copy(qr, row[:qw])
			normHeads(qr, qn, hd, norm)
			rotate(qr, rope, pos)
			slot := int(meta.SlotMapping[t])
			if c.k16 != nil { // k rotated in scratch, then rounded into the cache
				kc := buf[2*hd:]
				copy(kc, row[qw:qw+kvw])
				normHeads(kc, kn, hd, norm)
				rotate(kc, rope, pos)
				putF16(c.k16[layer][slot*kvw:(slot+1)*kvw], kc)
				putF16(c.v16[layer][slot*kvw:(slot+1)*kvw], row[qw+kvw:])
				continue
			}
			kc := c.k[layer][slot*kvw : (slot+1)*kvw]
			copy(kc, row[qw:qw+kvw])
			normHeads(kc, kn, hd, norm)
			rotate(kc, rope, pos)
			copy(c.v[layer][slot*kvw:(slot+1)*kvw], row[qw+kvw:])
		}
	})
}

// normHeads RMS-normalises each hd-wide head of row in place with weights w, as HeadRMSNorm
// does; nothing when norm is nil.
func normHeads(row, w []float32, hd int, norm *ops.QKNorm) {
	if norm == nil {
		return
	}
	for h := 0; h < len(row); h += hd {
		seg := row[h : h+hd]
		rmsNormRow(seg, seg, w, norm.Eps)
	}
}

func rotate(row []float32, rope *ops.RoPE, pos float64) {
	half := rope.RotaryDim / 2
	for i, f := range rope.InvFreq {
		sin, cos := math.Sincos(float64(float32(pos * f)))
		s, co := float32(sin)*rope.AttnFactor, float32(cos)*rope.AttnFactor
		for h := 0; h < len(row); h += rope.HeadDim {
			x1, x2 := row[h+i], row[h+i+half]
			row[h+i] = x1*co - x2*s
			row[h+i+half] = x2*co + x1*s
		}
	}
}

// Attention is causal attention over the paged cache: query token t of sequence s at position
// p attends to positions 0..p of s (p-Window+1..p under a sliding window), with the head's
// sink logit in the softmax's denominator when the layer has sinks. Parallel over (token, head).
func (b *Backend) Attention(out, q ops.Tensor, cache ops.KVCache, layer int, meta *ops.AttnMetadata, a ops.AttnShape) {
	o, qt, c := out.(*Tensor), q.(*Tensor), cache.(*KVCache)
	if c.f8 != nil {
		b.attentionFP8(o, qt, c, layer, meta, a)
		return
	}
	if b.vec || c.k16 != nil {
		b.attentionVec(o, qt, c, layer, meta, a)
		return
	}
	hd, group := a.HeadDim, a.NumHeads/a.NumKVHeads
	kvw := c.kvHeads * hd
	maxLen := 0
	for _, l := range meta.SeqLens {
		maxLen = max(maxLen, int(l))
	}
	seqOf := func(t int) int {
		s := 0
		for int(meta.QueryStart[s+1]) <= t {
			s++
		}
		return s
	}
	b.pool.run(meta.NumTokens()*a.NumHeads, func(lo, hi, worker int) {
		scores := b.pool.buf(worker, maxLen+hd)
		acc := scores[maxLen:]
		for i := lo; i < hi; i++ {
			t, h := i/a.NumHeads, i%a.NumHeads
			s := seqOf(t)
			table := meta.BlockTables[s*meta.BlockTableStride:]
			n := int(meta.Positions[t]) + 1
			from := attnFrom(a, n-1)
			qh := qt.f32[t*qt.cols()+h*hd : t*qt.cols()+(h+1)*hd]
			kvOff := (h / group) * hd
			sink := sinkOf(a, h)
			mx := sink
			for p := from; p < n; p++ {
				slot := int(table[p/c.blockSize])*c.blockSize + p%c.blockSize
				sc := dot(qh, c.k[layer][slot*kvw+kvOff:slot*kvw+kvOff+hd]) * a.Scale
				scores[p] = sc
				mx = max(mx, sc)
			}
			sum := sinkTerm(sink, mx)
			for p := from; p < n; p++ {
				e := float32(math.Exp(float64(scores[p] - mx)))
				scores[p] = e
				sum += e
			}
			clear(acc)
			for p := from; p < n; p++ {
				slot := int(table[p/c.blockSize])*c.blockSize + p%c.blockSize
				w := scores[p] / sum
				vr := c.v[layer][slot*kvw+kvOff : slot*kvw+kvOff+hd]
				for d, vv := range vr {
					acc[d] += w * vv
				}
			}
			copy(o.f32[t*o.cols()+h*hd:t*o.cols()+(h+1)*hd], acc)
		}
	})
}

// attnFrom is the first position the query at position pos attends to: pos-Window+1 under a
// sliding window (transformers' mask keeps kv > q - window), else 0.
func attnFrom(a ops.AttnShape, pos int) int {
	if a.Window > 0 {
		return max(0, pos-a.Window+1)
	}
	return 0
}

// sinkOf is head h's sink logit, or -Inf for a layer without sinks (a term worth nothing).
func sinkOf(a ops.AttnShape, h int) float32 {
	if a.Sinks == nil {
		return float32(math.Inf(-1))
	}
	return a.Sinks.(*Tensor).at(h)
}

// sinkTerm is the sink's share of the softmax's denominator, e^{sink - mx} (0 without one).
func sinkTerm(sink, mx float32) float32 {
	if math.IsInf(float64(sink), -1) {
		return 0
	}
	return float32(math.Exp(float64(sink - mx)))
}
