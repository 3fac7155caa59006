package cpu

import (
	"math"

	"github.com/atom-go/atom/ops"
)

// attnChunk is how many positions attentionVec scores before it folds them into the running
// softmax: the scores of a chunk, for every head of a group, stay in cache. attnPart is the
// context length one work item covers: a longer context is split into parts of attnPart
// positions, computed by any worker and merged after. Both are fixed, so that a token's
// result depends on its own context only, not on the batch around it (batch invariance).
const (
	attnChunk = 64
	attnPart  = 256
)

// attentionVec is Attention with the vector kernels (Options.VectorFloat32). The query heads
// that share a KV head are computed together, so each cached K and V row is read once per
// token rather than once per query head (GQA: SmolLM2 has three query heads per KV head),
// with an online softmax over chunks of positions. Each context is split into parts of
// attnPart positions that run on any worker and are merged after (log-sum-exp), so that one
// sequence's long decode uses every core. Under a sliding window only the parts that hold the
// window's positions are computed; a head's sink joins the merge's denominator.
func (b *Backend) attentionVec(o, qt *Tensor, c *KVCache, layer int, meta *ops.AttnMetadata, a ops.AttnShape) {
	hd, group := a.HeadDim, a.NumHeads/a.NumKVHeads
	kvw, qw, ow := c.kvHeads*hd, qt.cols(), o.cols()
	nt := meta.NumTokens()
	// Work items: (token, KV head, part); first[t] is token t's first item.
	if cap(b.attnFirst) < nt+1 {
		b.attnFirst = make([]int32, nt+1)
	}
	first := b.attnFirst[:nt+1]
	items := 0
	for t := range nt {
		first[t] = int32(items)
		pos := int(meta.Positions[t])
		items += c.kvHeads * (pos/attnPart - attnFrom(a, pos)/attnPart + 1)
	}
	first[nt] = int32(items)
	per := group * (2 + hd) // one part's state: per head m, then per head l, then per head acc[hd]
	if need := items * per; cap(b.attnState) < need {
		b.attnState = make([]float32, need)
	}
	state := b.attnState[:items*per]
	b.pool.run(items, func(lo, hi, worker int) {
		sc := b.pool.buf(worker, group*attnChunk)
		s, t := 0, 0
		for it := lo; it < hi; it++ {
			for int(first[t+1]) <= it {
				t++
			}
			for int(meta.QueryStart[s+1]) <= t {
				s++
			}
			parts := (int(first[t+1]) - int(first[t])) / c.kvHeads
			n := int(meta.Positions[t]) + 1
			from := attnFrom(a, n-1)
			kvh, part := (it-int(first[t]))/parts, from/attnPart+(it-int(first[t]))%parts
			table := meta.BlockTables[s*meta.BlockTableStride:]
			p0, p1 := max(from, part*attnPart), min(n, (part+1)*attnPart)
			st := state[it*per : (it+1)*per]
			ms, ls, acc := st[:group], st[group:2*group], st[2*group:]
			for g := range group {
				ms[g], ls[g] = float32(math.Inf(-1)), 0
			}
			clear(acc)
			q := qt.f32[t*qw+kvh*group*hd : t*qw+(kvh+1)*group*hd]
			var kl, vl []float32
			var kl16, vl16 []uint16
			if c.k16 != nil {
				kl16, vl16 = c.k16[layer], c.v16[layer]
			} else {
				kl, vl = c.k[layer], c.v[layer]
			}
			for c0 := p0; c0 < p1; c0 += attnChunk {
				c1 := min(p1, c0+attnChunk)
				// Positions run through the KV blocks: rows of one block are kvw apart.
				for p := c0; p < c1; {
					run := min(c1, (p/c.blockSize+1)*c.blockSize) - p
					base := (int(table[p/c.blockSize])*c.blockSize+p%c.blockSize)*kvw + kvh*hd
					if kl16 != nil {
						attnScores16(q, kl16[base:], kvw, run, hd, group, a.Scale, sc[p-c0:], attnChunk)
					} else {
						attnScores(q, kl[base:], kvw, run, hd, group, a.Scale, sc[p-c0:], attnChunk)
					}
					p += run
				}
				for g := range group {
					row := sc[g*attnChunk : g*attnChunk+c1-c0]
					m := ms[g]
					for _, v := range row {
						m = max(m, v)
					}
					if m > ms[g] && ls[g] != 0 {
						f := float32(math.Exp(float64(ms[g] - m)))
						ls[g] *= f
						for i := range acc[g*hd : (g+1)*hd] {
							acc[g*hd+i] *= f
						}
					}
					ms[g] = m
					ls[g] += expShift(row, m)
				}
				for p := c0; p < c1; {
					run := min(c1, (p/c.blockSize+1)*c.blockSize) - p
					base := (int(table[p/c.blockSize])*c.blockSize+p%c.blockSize)*kvw + kvh*hd
					if vl16 != nil {
						attnAccum16(acc, vl16[base:], kvw, run, hd, group, sc[p-c0:], attnChunk)
					} else {
						attnAccum(acc, vl[base:], kvw, run, hd, group, sc[p-c0:], attnChunk)
					}
					p += run
				}
			}
		}
	})
	b.pool.run(nt*c.kvHeads, func(lo, hi, _ int) {
		for tk := lo; tk < hi; tk++ {
			t, kvh := tk/c.kvHeads, tk%c.kvHeads
			parts := (int(first[t+1]) - int(first[t])) / c.kvHeads
			it0 := int(first[t]) + kvh*parts
			for g := range group {
				h := kvh*group + g
				sink := sinkOf(a, h)
				m := sink
				for part := range parts {
					m = max(m, state[(it0+part)*per+g])
				}
				dst := o.f32[t*ow+h*hd : t*ow+(h+1)*hd]
				clear(dst)
				l := sinkTerm(sink, m)
				for part := range parts {
					st := state[(it0+part)*per : (it0+part+1)*per]
					if st[group+g] == 0 {
						continue // an empty part
					}
					f := float32(math.Exp(float64(st[g] - m)))
					l += st[group+g] * f
					axpyF32(dst, f, st[2*group+g*hd:2*group+(g+1)*hd])
				}
				inv := 1 / l
				for i := range dst {
					dst[i] *= inv
				}
			}
		}
	})
}
