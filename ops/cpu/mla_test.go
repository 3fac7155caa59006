package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// rotate64 is the rotation of one rope part in float64: pairs (2i, 2i+1) when interleaved,
// (i, i+d/2) otherwise, at the float32 angle transformers computes.
func rotate64(x []float64, inv []float64, pos float64, factor float64, interleaved bool) {
	half := len(x) / 2
	for i, f := range inv {
		a := float64(float32(pos * f))
		c, s := math.Cos(a)*factor, math.Sin(a)*factor
		j, k := i, i+half
		if interleaved {
			j, k = 2*i, 2*i+1
		}
		x1, x2 := x[j], x[k]
		x[j], x[k] = x1*c-x2*s, x2*c+x1*s
	}
}

// TestMLAMatchesDecompressedAttention: MLAWriteKV stores the normed kv_c and the rotated k_pe,
// and the absorbed MLAAttention equals ordinary attention with the keys [W_UK·kv_c, k_pe] and
// values W_UV·kv_c decompressed per head (in float64), over a varlen batch of two sequences
// (a prefill, then a decode step), with interleaved and neox RoPE, float32 and bf16 kv_b_proj.
func TestMLAMatchesDecompressedAttention(t *testing.T) {
	for _, tc := range []struct {
		name              string
		interleaved, bf16 bool
		heads             int
	}{
		{"interleaved", true, false, 3},
		{"neox", false, false, 2},
		{"bf16 kv_b_proj", true, true, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := New(2)
			defer b.Close()
			r := rand.New(rand.NewPCG(7, uint64(tc.heads)))
			a := ops.MLAShape{Heads: tc.heads, KVRank: 12, NopeDim: 6, RopeDim: 4, VDim: 5, Scale: 0.37, Eps: 1e-6,
				Interleaved: tc.interleaved}
			rope, err := ops.NewRoPE(a.RopeDim, a.RopeDim, 10000, ops.RoPEScaling{Type: "yarn", Factor: 4, OriginalMaxPos: 8,
				Mscale: 0.7, MscaleAllDim: 1}, 64)
			require.NoError(t, err)
			kvB, wkv := moeWeight(t, b, tc.bf16, randVals(r, a.Heads*(a.NopeDim+a.VDim)*a.KVRank, 0.5),
				a.Heads*(a.NopeDim+a.VDim), a.KVRank)
			normW := randVals(r, a.KVRank, 0.3)
			for i := range normW {
				normW[i]++
			}
			const bs = 4
			c, err := b.NewLatentKVCache(1, 16, bs, a.LatentDim())
			require.NoError(t, err)
			cache := c.(*LatentKVCache)
			seqLen := []int{0, 0}
			qw, dim := a.Heads*(a.NopeDim+a.RopeDim), a.LatentDim()
			// Pass 1: 21 tokens of sequence 0 (more than one work item's chunk) and 2 of sequence 1;
			// pass 2: one more of each. Sequence 0 holds blocks 15 down to 8, sequence 1 0 to 7.
			const stride = 8
			table := func(s, p int) int32 {
				if s == 0 {
					return int32(15 - p/bs)
				}
				return int32(p / bs)
			}
			for _, news := range [][2]int{{21, 2}, {1, 1}} {
				meta := &ops.AttnMetadata{QueryStart: []int32{0}, BlockTableStride: stride}
				for s, n := range news {
					for p := seqLen[s]; p < seqLen[s]+n; p++ {
						meta.Positions = append(meta.Positions, int32(p))
						meta.SlotMapping = append(meta.SlotMapping, table(s, p)*bs+int32(p%bs))
					}
					seqLen[s] += n
					meta.QueryStart = append(meta.QueryStart, int32(len(meta.Positions)))
					meta.SeqLens = append(meta.SeqLens, int32(seqLen[s]))
					for blk := range stride {
						meta.BlockTables = append(meta.BlockTables, table(s, blk*bs))
					}
				}
				nt := meta.NumTokens()
				qv, kvv := randVals(r, nt*qw, 1), randVals(r, nt*dim, 1)
				q, kv := FromFloat32(append([]float32(nil), qv...), nt, qw), FromFloat32(kvv, nt, dim)
				out := FromFloat32(make([]float32, nt*a.Heads*a.VDim), nt, a.Heads*a.VDim)
				b.MLAWriteKV(q, kv, FromFloat32(normW, a.KVRank), rope, cache, 0, meta, a)
				b.MLAAttention(out, q, kvB, cache, 0, meta, a)
				for tk := range nt {
					pos := float64(meta.Positions[tk])
					// The cache holds the normed kv_c and the rotated k_pe.
					src, got := kvv[tk*dim:(tk+1)*dim], cache.c[0][int(meta.SlotMapping[tk])*dim:][:dim]
					var ss float64
					for _, v := range src[:a.KVRank] {
						ss += float64(v) * float64(v)
					}
					inv := 1 / math.Sqrt(ss/float64(a.KVRank)+float64(a.Eps))
					for i, v := range src[:a.KVRank] {
						require.InDelta(t, float64(v)*inv*float64(normW[i]), got[i], 1e-5, "kv_c[%d] of token %d", i, tk)
					}
					pe := make([]float64, a.RopeDim)
					for i, v := range src[a.KVRank:] {
						pe[i] = float64(v)
					}
					rotate64(pe, rope.InvFreq, pos, float64(rope.AttnFactor), tc.interleaved)
					for i := range pe {
						require.InDelta(t, pe[i], got[a.KVRank+i], 1e-5, "k_pe[%d] of token %d", i, tk)
					}
				}
				// Decompressed attention from the cache, per token and head.
				s := 0
				for tk := range nt {
					for int(meta.QueryStart[s+1]) <= tk {
						s++
					}
					n := int(meta.Positions[tk]) + 1
					for h := range a.Heads {
						qh := qv[tk*qw+h*(a.NopeDim+a.RopeDim):][:a.NopeDim+a.RopeDim]
						qpe := make([]float64, a.RopeDim)
						for i, v := range qh[a.NopeDim:] {
							qpe[i] = float64(v)
						}
						rotate64(qpe, rope.InvFreq, float64(meta.Positions[tk]), float64(rope.AttnFactor), tc.interleaved)
						scores, vals := make([]float64, n), make([][]float64, n)
						mx := math.Inf(-1)
						for p := range n {
							slot := int(meta.BlockTables[s*stride+p/bs])*bs + p%bs
							lat := cache.c[0][slot*dim:][:dim]
							var sc float64
							for j := range a.NopeDim { // k_nope[j] = W_UK[j]·kv_c
								var k float64
								for cix := range a.KVRank {
									k += float64(wkv[(h*(a.NopeDim+a.VDim)+j)*a.KVRank+cix]) * float64(lat[cix])
								}
								sc += float64(qh[j]) * k
							}
							for j := range a.RopeDim {
								sc += qpe[j] * float64(lat[a.KVRank+j])
							}
							scores[p] = sc * float64(a.Scale)
							mx = math.Max(mx, scores[p])
							vals[p] = make([]float64, a.VDim)
							for j := range a.VDim {
								for cix := range a.KVRank {
									vals[p][j] += float64(wkv[(h*(a.NopeDim+a.VDim)+a.NopeDim+j)*a.KVRank+cix]) * float64(lat[cix])
								}
							}
						}
						var sum float64
						for p := range n {
							scores[p] = math.Exp(scores[p] - mx)
							sum += scores[p]
						}
						for j := range a.VDim {
							var want float64
							for p := range n {
								want += scores[p] / sum * vals[p][j]
							}
							require.InDelta(t, want, out.f32[tk*a.Heads*a.VDim+h*a.VDim+j], 1e-4, "token %d head %d v[%d]", tk, h, j)
						}
					}
				}
			}
		})
	}
}
