package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// TestAttentionVecMatchesReference runs the grouped, split-context attention of
// Options.VectorFloat32, over a float32 and over a float16 cache (Options.KVFloat16), against
// the reference loops on a random paged cache whose values are float16-exact: a prefill chunk
// and decodes side by side, one decode alone with a long context (split into parts and
// merged), GQA groups of 1 and 3; and each sequence alone bit for bit as in the batch. With
// the vector kernels and with the portable ones.
func TestAttentionVecMatchesReference(t *testing.T) {
	forEachKernelSet(t, testAttentionVecMatchesReference)
}

func testAttentionVecMatchesReference(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 11))
	cases := []struct {
		name           string
		heads, kvHeads int
		hd             int
		seqs           [][2]int // per sequence: cached tokens, new tokens
	}{
		{"prefill and decodes, gqa 3", 9, 3, 64, [][2]int{{0, 7}, {40, 1}, {3, 2}}},
		{"one long decode, split", 6, 2, 64, [][2]int{{700, 1}}},
		{"mha, head 32", 4, 4, 32, [][2]int{{20, 3}, {150, 1}}},
		{"head 24 (Go kernels)", 4, 2, 24, [][2]int{{33, 2}}},
	}
	for _, c := range cases {
		for _, kv16 := range []bool{false, true} {
			testAttentionVec(t, rng, c.name, c.heads, c.kvHeads, c.hd, c.seqs, kv16)
		}
	}
}

func testAttentionVec(t *testing.T, rng *rand.Rand, name string, heads, kvHeads, hd int, seqs [][2]int, kv16 bool) {
	const bs, blocksPerSeq = 16, 48
	c := struct {
		name           string
		heads, kvHeads int
		hd             int
		seqs           [][2]int
	}{name, heads, kvHeads, hd, seqs}
	if kv16 {
		c.name += ", float16 cache"
	}
	{
		ref, vec := New(4), NewWith(4, Options{VectorFloat32: true, KVFloat16: kv16})
		cache, err := ref.NewKVCache(1, blocksPerSeq*len(c.seqs), bs, c.kvHeads, c.hd)
		require.NoError(t, err)
		vcache, err := vec.NewKVCache(1, blocksPerSeq*len(c.seqs), bs, c.kvHeads, c.hd)
		require.NoError(t, err)
		kc, vc := cache.(*KVCache), vcache.(*KVCache)
		for i := range kc.k[0] {
			k, v := f32ToF16(float32(rng.NormFloat64())), f32ToF16(float32(rng.NormFloat64()))
			kc.k[0][i], kc.v[0][i] = ops.F16ToFloat32(k), ops.F16ToFloat32(v)
			if kv16 {
				vc.k16[0][i], vc.v16[0][i] = k, v
			} else {
				vc.k[0][i], vc.v[0][i] = kc.k[0][i], kc.v[0][i]
			}
		}
		meta := &ops.AttnMetadata{QueryStart: []int32{0}, BlockTableStride: blocksPerSeq}
		for s, sq := range c.seqs {
			for b := range blocksPerSeq {
				meta.BlockTables = append(meta.BlockTables, int32((s*blocksPerSeq+b*7)%(blocksPerSeq*len(c.seqs))))
			}
			for p := sq[0]; p < sq[0]+sq[1]; p++ {
				meta.Positions = append(meta.Positions, int32(p))
			}
			meta.QueryStart = append(meta.QueryStart, int32(len(meta.Positions)))
			meta.SeqLens = append(meta.SeqLens, int32(sq[0]+sq[1]))
		}
		nt := len(meta.Positions)
		q := randRow(rng, nt*c.heads*c.hd)
		a := ops.AttnShape{NumHeads: c.heads, NumKVHeads: c.kvHeads, HeadDim: c.hd, Scale: float32(1 / math.Sqrt(float64(c.hd)))}
		want, got := make([]float32, nt*c.heads*c.hd), make([]float32, nt*c.heads*c.hd)
		qt := FromFloat32(q, nt, c.heads*c.hd)
		ref.Attention(FromFloat32(want, nt, c.heads*c.hd), qt, cache, 0, meta, a)
		vec.Attention(FromFloat32(got, nt, c.heads*c.hd), qt, vcache, 0, meta, a)
		for i := range want {
			require.InDelta(t, want[i], got[i], 1e-4, "%s: element %d", c.name, i)
		}
		// Batch invariance: each sequence alone gives its rows of the batch bit for bit.
		w := c.heads * c.hd
		for s := range c.seqs {
			q0, q1 := int(meta.QueryStart[s]), int(meta.QueryStart[s+1])
			one := &ops.AttnMetadata{Positions: meta.Positions[q0:q1], QueryStart: []int32{0, int32(q1 - q0)},
				SeqLens: meta.SeqLens[s : s+1], BlockTables: meta.BlockTables[s*blocksPerSeq : (s+1)*blocksPerSeq], BlockTableStride: blocksPerSeq}
			alone := make([]float32, (q1-q0)*w)
			vec.Attention(FromFloat32(alone, q1-q0, w), FromFloat32(q[q0*w:q1*w], q1-q0, w), vcache, 0, one, a)
			require.Equal(t, got[q0*w:q1*w], alone, "%s: sequence %d alone", c.name, s)
		}
		ref.Close()
		vec.Close()
	}
}
