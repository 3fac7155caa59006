package cpu

import (
	"fmt"
	"math"

	"github.com/atom-go/atom/ops"
	"github.com/atom-go/atom/ops/offheap"
)

// LatentKVCache is the cpu's latent (MLA) cache: per layer, float32 [numBlocks, blockSize,
// dim], each token's [kv_c, k_pe]. It is float32 whatever Options.KVFloat16 says: the
// reference keeps MLA exact. Its memory lives outside the Go heap, as KVCache's does.
type LatentKVCache struct {
	numBlocks, blockSize, dim int
	c                         [][]float32
	mem                       *offheap.Block
	be                        *Backend
}

// Geometry returns numBlocks, blockSize, one head and the latent width.
func (c *LatentKVCache) Geometry() (int, int, int, int) { return c.numBlocks, c.blockSize, 1, c.dim }

// Close releases the cache's memory; the cache must not be used afterwards.
func (c *LatentKVCache) Close() { c.be.release(c.mem) }

// NewLatentKVCache allocates the latent cache.
func (b *Backend) NewLatentKVCache(layers, numBlocks, blockSize, dim int) (ops.KVCache, error) {
	if layers <= 0 || numBlocks <= 0 || blockSize <= 0 || dim <= 0 {
		return nil, fmt.Errorf("latent kv cache: invalid geometry layers=%d blocks=%d block_size=%d dim=%d",
			layers, numBlocks, blockSize, dim)
	}
	n, ok := offheap.Size(numBlocks, blockSize, dim)
	total, ok2 := offheap.Size(n, layers, 4)
	if !ok || !ok2 {
		return nil, fmt.Errorf("latent kv cache: %d layers of %d blocks of %d tokens × %d overflow the address space",
			layers, numBlocks, blockSize, dim)
	}
	mem, err := offheap.Alloc(total)
	if err != nil {
		return nil, fmt.Errorf("latent kv cache: %w", err)
	}
	c := &LatentKVCache{numBlocks: numBlocks, blockSize: blockSize, dim: dim, mem: mem, be: b}
	all := mem.Float32s()
	for l := range layers {
		c.c = append(c.c, all[l*n:(l+1)*n:(l+1)*n])
	}
	b.track(mem)
	return c, nil
}

// MLAWriteKV normalises kv_c, rotates k_pe and q's rope parts, and stores [kv_c, k_pe].
func (b *Backend) MLAWriteKV(q, kv, kvNorm ops.Tensor, rope *ops.RoPE, cache ops.KVCache, layer int,
	meta *ops.AttnMetadata, a ops.MLAShape) {
	qt, kt, wt, c := q.(*Tensor), kv.(*Tensor), kvNorm.(*Tensor), cache.(*LatentKVCache)
	qw, dim, nt := a.Heads*(a.NopeDim+a.RopeDim), a.LatentDim(), meta.NumTokens()
	if qt.cols() != qw || kt.cols() != dim || c.dim != dim || wt.cols() != a.KVRank || qt.rows() < nt || kt.rows() < nt ||
		rope.RotaryDim != a.RopeDim {
		panic(fmt.Sprintf("cpu MLAWriteKV: q %v, kv %v, norm %v, cache dim %d, rope %d for %+v",
			qt.shape, kt.shape, wt.shape, c.dim, rope.RotaryDim, a))
	}
	b.pool.run(nt, func(lo, hi, worker int) {
		w := wt.row(0, b.pool.buf(worker, a.KVRank))
		for t := lo; t < hi; t++ {
			pos, slot := float64(meta.Positions[t]), int(meta.SlotMapping[t])
			dst, src := c.c[layer][slot*dim:(slot+1)*dim], kt.f32[t*dim:(t+1)*dim]
			rmsNormRow(dst[:a.KVRank], src[:a.KVRank], w, a.Eps)
			copy(dst[a.KVRank:], src[a.KVRank:])
			rotateMLA(dst[a.KVRank:], rope, pos, a.Interleaved)
			qr := qt.f32[t*qw : (t+1)*qw]
			for h := 0; h < qw; h += a.NopeDim + a.RopeDim {
				rotateMLA(qr[h+a.NopeDim:h+a.NopeDim+a.RopeDim], rope, pos, a.Interleaved)
			}
		}
	})
}

// rotateMLA rotates one rope part x in place: pairs (2i, 2i+1) when interleaved (as
// transformers' DeepSeek V2 complex product and V3 apply_rotary_pos_emb_interleave, whose
// de-interleaved output differs only in order, the same for q and k, so q·k is unchanged),
// else the neox halves.
func rotateMLA(x []float32, rope *ops.RoPE, pos float64, interleaved bool) {
	if !interleaved {
		rotate(x, rope, pos)
		return
	}
	for i, f := range rope.InvFreq {
		sin, cos := math.Sincos(float64(float32(pos * f)))
		s, co := float32(sin)*rope.AttnFactor, float32(cos)*rope.AttnFactor
		x1, x2 := x[2*i], x[2*i+1]
		x[2*i] = x1*co - x2*s
		x[2*i+1] = x2*co + x1*s
	}
}

// mlaChunk is how many tokens of one head an MLAAttention work item takes.
const mlaChunk = 16

// MLAAttention runs the absorbed form per (token, head): q_lat = W_UKᵀ·q_nope, scores
// q_lat·kv_c + q_pe·k_pe over the context, o_lat = Σ p·kv_c, out = W_UV·o_lat. It equals the
// decompressed form (keys [W_UK·kv_c, k_pe], values W_UV·kv_c) up to float32 rounding.
func (b *Backend) MLAAttention(out, q, kvB ops.Tensor, cache ops.KVCache, layer int, meta *ops.AttnMetadata, a ops.MLAShape) {
	o, qt, wt, c := out.(*Tensor), q.(*Tensor), kvB.(*Tensor), cache.(*LatentKVCache)
	r, nd, rd, vd := a.KVRank, a.NopeDim, a.RopeDim, a.VDim
	qw, dim, nt := a.Heads*(nd+rd), a.LatentDim(), meta.NumTokens()
	if qt.cols() != qw || o.cols() != a.Heads*vd || c.dim != dim || !shapeIs(wt.shape, a.Heads*(nd+vd), r) ||
		qt.rows() < nt || o.rows() < nt {
		panic(fmt.Sprintf("cpu MLAAttention: out %v, q %v, kv_b %v, cache dim %d for %+v", o.shape, qt.shape, wt.shape, c.dim, a))
	}
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
	kc := c.c[layer]
	// Work items are (head, chunk of tokens), head-major, so that a worker widens a head's
	// W_UK and W_UV rows once for the tokens of its items rather than once per token.
	chunks := (nt + mlaChunk - 1) / mlaChunk
	b.pool.run(a.Heads*chunks, func(lo, hi, worker int) {
		buf := b.pool.buf(worker, maxLen+2*r+(nd+vd)*r)
		scores, qlat, olat, w := buf[:maxLen], buf[maxLen:maxLen+r], buf[maxLen+r:maxLen+2*r], buf[maxLen+2*r:]
		head := -1
		for i := lo; i < hi; i++ {
			h, ch := i/chunks, i%chunks
			if h != head { // this head's W_UK rows, then its W_UV rows, as float32
				for j := range nd + vd {
					dst := w[j*r : (j+1)*r]
					copy(dst, wt.row(h*(nd+vd)+j, dst))
				}
				head = h
			}
			for t := ch * mlaChunk; t < min(nt, (ch+1)*mlaChunk); t++ {
				table := meta.BlockTables[seqOf(t)*meta.BlockTableStride:]
				n := int(meta.Positions[t]) + 1
				qh := qt.f32[t*qw+h*(nd+rd) : t*qw+(h+1)*(nd+rd)]
				// W_UK folded into q: q_lat[c] = Σ_i q_nope[i]·W_UK[i][c].
				clear(qlat)
				for j := range nd {
					for k, wv := range w[j*r : (j+1)*r] {
						qlat[k] += qh[j] * wv
					}
				}
				mx := float32(math.Inf(-1))
				for p := range n {
					slot := int(table[p/c.blockSize])*c.blockSize + p%c.blockSize
					lat := kc[slot*dim : (slot+1)*dim]
					sc := (dot(qlat, lat[:r]) + dot(qh[nd:], lat[r:])) * a.Scale
					scores[p] = sc
					mx = max(mx, sc)
				}
				var sum float32
				for p := range n {
					e := float32(math.Exp(float64(scores[p] - mx)))
					scores[p] = e
					sum += e
				}
				clear(olat)
				for p := range n {
					slot := int(table[p/c.blockSize])*c.blockSize + p%c.blockSize
					pw := scores[p] / sum
					for k, v := range kc[slot*dim : slot*dim+r] {
						olat[k] += pw * v
					}
				}
				// W_UV after: out[j] = W_UV[j]·o_lat.
				oh := o.f32[t*o.cols()+h*vd : t*o.cols()+(h+1)*vd]
				for j := range vd {
					oh[j] = dot(w[(nd+j)*r:(nd+j+1)*r], olat)
				}
			}
		}
	})
}
