package cpu

import (
	"fmt"
	"math"

	"github.com/atom-go/atom/ops"
	"github.com/atom-go/atom/ops/offheap"
)

// fp8KV is the storage of an fp8 KV cache (--kv-cache-dtype fp8): per layer, K and V as
// float8_e4m3fn codes [numBlocks, blockSize, kvHeads, headDim], a quarter of the float32
// cache's bytes. A key is stored as e4m3(k / kScale[layer]) (rounded to nearest, saturated at
// ±448, as vLLM's cache write) and read back as float(code) · kScale[layer]; values alike with
// vScale. Attention then runs the reference float32 arithmetic on the values read back, so an
// fp8 cache differs from the float32 one only by that rounding.
type fp8KV struct {
	k, v           [][]byte
	kScale, vScale []float32
}

// NewFP8KVCache allocates an fp8 KV cache with per-layer scales (ops.FP8KVBackend).
func (b *Backend) NewFP8KVCache(layers, numBlocks, blockSize, kvHeads, headDim int, kScale, vScale []float32) (ops.KVCache, error) {
	if layers <= 0 || numBlocks <= 0 || blockSize <= 0 || kvHeads <= 0 || headDim <= 0 || len(kScale) != layers || len(vScale) != layers {
		return nil, fmt.Errorf("fp8 kv cache: invalid geometry layers=%d blocks=%d block_size=%d kv_heads=%d head_dim=%d scales=%d,%d",
			layers, numBlocks, blockSize, kvHeads, headDim, len(kScale), len(vScale))
	}
	for l := range layers {
		for _, s := range []float32{kScale[l], vScale[l]} {
			if v := float64(s); math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
				return nil, fmt.Errorf("fp8 kv cache: layer %d has scale %v (want finite, > 0)", l, s)
			}
		}
	}
	n, ok := offheap.Size(numBlocks, blockSize, kvHeads, headDim)
	total, ok2 := offheap.Size(n, 2, layers)
	if !ok || !ok2 {
		return nil, fmt.Errorf("fp8 kv cache: %d layers of %d blocks of %d tokens × %d heads × %d overflow the address space",
			layers, numBlocks, blockSize, kvHeads, headDim)
	}
	mem, err := offheap.Alloc(total)
	if err != nil {
		return nil, fmt.Errorf("fp8 kv cache: %w", err)
	}
	f := &fp8KV{kScale: append([]float32(nil), kScale...), vScale: append([]float32(nil), vScale...)}
	all := mem.Bytes()
	for l := range layers {
		f.k = append(f.k, all[2*l*n:(2*l+1)*n:(2*l+1)*n])
		f.v = append(f.v, all[(2*l+1)*n:(2*l+2)*n:(2*l+2)*n])
	}
	b.track(mem)
	return &KVCache{numBlocks: numBlocks, blockSize: blockSize, kvHeads: kvHeads, headDim: headDim, mem: mem, be: b, f8: f}, nil
}

// put stores one token's k and v rows (kvHeads · headDim each) at slot of layer.
func (f *fp8KV) put(layer, slot int, k, v []float32) {
	w := len(k)
	kd, vd := f.k[layer][slot*w:(slot+1)*w], f.v[layer][slot*w:(slot+1)*w]
	ks, vs := f.kScale[layer], f.vScale[layer]
	for i := range k {
		kd[i] = ops.Float32ToF8E4M3(k[i] / ks)
		vd[i] = ops.Float32ToF8E4M3(v[i] / vs)
	}
}

// readFP8 dequantizes len(dst) codes from off into dst and returns it.
func readFP8(dst []float32, codes []byte, off int, scale float32) []float32 {
	for i := range dst {
		dst[i] = f8Table[codes[off+i]] * scale
	}
	return dst
}

// ropeWriteKVFP8 is RopeWriteKV into an fp8 cache: k rotated in place in its tensor.
func (b *Backend) ropeWriteKVFP8(qt, kt, vt *Tensor, rope *ops.RoPE, c *KVCache, layer int, meta *ops.AttnMetadata) {
	kvw := c.kvHeads * rope.HeadDim
	b.pool.run(meta.NumTokens(), func(lo, hi, _ int) {
		for t := lo; t < hi; t++ {
			pos := float64(meta.Positions[t])
			rotate(qt.f32[t*qt.cols():(t+1)*qt.cols()], rope, pos)
			kr := kt.f32[t*kvw : (t+1)*kvw]
			rotate(kr, rope, pos)
			c.f8.put(layer, int(meta.SlotMapping[t]), kr, vt.f32[t*kvw:(t+1)*kvw])
		}
	})
}

// ropeWriteKVFusedFP8 is RopeWriteKVFused into an fp8 cache: k normalised and rotated in a
// worker's scratch row, then stored.
func (b *Backend) ropeWriteKVFusedFP8(qt, src *Tensor, rope *ops.RoPE, norm *ops.QKNorm, c *KVCache, layer int, meta *ops.AttnMetadata) {
	hd := rope.HeadDim
	kvw, qw := c.kvHeads*hd, qt.cols()
	w := src.cols()
	b.pool.run(meta.NumTokens(), func(lo, hi, worker int) {
		buf := b.pool.buf(worker, 2*hd+kvw)
		var qn, kn []float32
		if norm != nil {
			qn, kn = norm.Q.(*Tensor).row(0, buf[:hd]), norm.K.(*Tensor).row(0, buf[hd:2*hd])
		}
		kc := buf[2*hd : 2*hd+kvw]
		for t := lo; t < hi; t++ {
			pos, row := float64(meta.Positions[t]), src.f32[t*w:(t+1)*w]
			qr := qt.f32[t*qw : (t+1)*qw]
			copy(qr, row[:qw])
			normHeads(qr, qn, hd, norm)
			rotate(qr, rope, pos)
			copy(kc, row[qw:qw+kvw])
			normHeads(kc, kn, hd, norm)
			rotate(kc, rope, pos)
			c.f8.put(layer, int(meta.SlotMapping[t]), kc, row[qw+kvw:])
		}
	})
}

// attentionFP8 is the reference Attention over an fp8 cache: each cached key and value row is
// dequantized into scratch and used as the float32 path uses the cache's rows.
func (b *Backend) attentionFP8(o, qt *Tensor, c *KVCache, layer int, meta *ops.AttnMetadata, a ops.AttnShape) {
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
	ks, vs := c.f8.kScale[layer], c.f8.vScale[layer]
	b.pool.run(meta.NumTokens()*a.NumHeads, func(lo, hi, worker int) {
		scores := b.pool.buf(worker, maxLen+2*hd)
		acc, row := scores[maxLen:maxLen+hd], scores[maxLen+hd:maxLen+2*hd]
		for i := lo; i < hi; i++ {
			t, h := i/a.NumHeads, i%a.NumHeads
			table := meta.BlockTables[seqOf(t)*meta.BlockTableStride:]
			n := int(meta.Positions[t]) + 1
			from := attnFrom(a, n-1)
			qh := qt.f32[t*qt.cols()+h*hd : t*qt.cols()+(h+1)*hd]
			kvOff := (h / group) * hd
			sink := sinkOf(a, h)
			mx := sink
			for p := from; p < n; p++ {
				slot := int(table[p/c.blockSize])*c.blockSize + p%c.blockSize
				sc := dot(qh, readFP8(row, c.f8.k[layer], slot*kvw+kvOff, ks)) * a.Scale
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
				for d, vv := range readFP8(row, c.f8.v[layer], slot*kvw+kvOff, vs) {
					acc[d] += w * vv
				}
			}
			copy(o.f32[t*o.cols()+h*hd:t*o.cols()+(h+1)*hd], acc)
		}
	})
}
