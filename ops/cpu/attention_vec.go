package cpu

import (
	"math"

	"github.com/atom-go/atom/ops"
)

// attnChunk is how many positions attentionVec scores before it folds them into the running
// softmax: the scores of a chunk, for every head of a group, stay in cache.
const attnChunk = 64

// attentionVec is Attention with the vector kernels (Options.VectorFloat32). The query heads
// that share a KV head are computed together, so each cached K and V row is read once per
// token rather than once per query head (GQA: SmolLM2 has three query heads per KV head),
// with an online softmax over chunks of positions. When the batch has few tokens (decode),
// each context is also split into parts that run on different workers and are merged after
// (log-sum-exp), so that one sequence's attention uses every core.
func (b *Backend) attentionVec(o, qt *Tensor, c *KVCache, layer int, meta *ops.AttnMetadata, a ops.AttnShape) {
	hd, group := a.HeadDim, a.NumHeads/a.NumKVHeads
	kvw, qw, ow := c.kvHeads*hd, qt.cols(), o.cols()
	nt := meta.NumTokens()
	items := nt * c.kvHeads
	maxLen := 0
	for _, l := range meta.SeqLens {
		maxLen = max(maxLen, int(l))
	}
	parts := 1
	if want := 4 * b.pool.workers; items < want {
		parts = max(1, min((want+items-1)/items, maxLen/(2*attnChunk)))
	}
	per := group * (2 + hd) // one part's state: per head m, then per head l, then per head acc[hd]
	if need := items * parts * per; cap(b.attnState) < need {
		b.attnState = make([]float32, need)
	}
	state := b.attnState[:items*parts*per]
	seqStart := 0
	b.pool.run(items*parts, func(lo, hi, worker int) {
		sc := b.pool.buf(worker, group*attnChunk)
		s := seqStart
		for it := lo; it < hi; it++ {
			part, tk := it%parts, it/parts
			t, kvh := tk/c.kvHeads, tk%c.kvHeads
			for s > 0 && int(meta.QueryStart[s]) > t {
				s--
			}
			for int(meta.QueryStart[s+1]) <= t {
				s++
			}
			table := meta.BlockTables[s*meta.BlockTableStride:]
			n := int(meta.Positions[t]) + 1
			p0, p1 := part*n/parts, (part+1)*n/parts
			st := state[it*per : (it+1)*per]
			ms, ls, acc := st[:group], st[group:2*group], st[2*group:]
			for g := range group {
				ms[g], ls[g] = float32(math.Inf(-1)), 0
			}
			clear(acc)
			q := qt.f32[t*qw+kvh*group*hd : t*qw+(kvh+1)*group*hd]
			kl, vl := c.k[layer], c.v[layer]
			for c0 := p0; c0 < p1; c0 += attnChunk {
				c1 := min(p1, c0+attnChunk)
				// Positions run through the KV blocks: rows of one block are kvw apart.
				for p := c0; p < c1; {
					run := min(c1, (p/c.blockSize+1)*c.blockSize) - p
					base := (int(table[p/c.blockSize])*c.blockSize+p%c.blockSize)*kvw + kvh*hd
					attnScores(q, kl[base:], kvw, run, hd, group, a.Scale, sc[p-c0:], attnChunk)
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
					var l float32
					for i, v := range row {
						e := float32(math.Exp(float64(v - m)))
						row[i] = e
						l += e
					}
					ls[g] += l
				}
				for p := c0; p < c1; {
					run := min(c1, (p/c.blockSize+1)*c.blockSize) - p
					base := (int(table[p/c.blockSize])*c.blockSize+p%c.blockSize)*kvw + kvh*hd
					attnAccum(acc, vl[base:], kvw, run, hd, group, sc[p-c0:], attnChunk)
					p += run
				}
			}
		}
	})
	b.pool.run(items, func(lo, hi, _ int) {
		for tk := lo; tk < hi; tk++ {
			t, kvh := tk/c.kvHeads, tk%c.kvHeads
			for g := range group {
				h := kvh*group + g
				m := float32(math.Inf(-1))
				for part := range parts {
					m = max(m, state[(tk*parts+part)*per+g])
				}
				dst := o.f32[t*ow+h*hd : t*ow+(h+1)*hd]
				clear(dst)
				var l float32
				for part := range parts {
					st := state[(tk*parts+part)*per : (tk*parts+part+1)*per]
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
