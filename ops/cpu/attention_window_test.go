package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// kvFill writes a random K/V row per slot into one cache kind and returns the values as the
// cache holds them (what Attention reads back), [slot][kvHeads·headDim].
type kvFill func(c *KVCache, rng *rand.Rand, slots, kvw int) (k, v [][]float32)

// The cache kinds of the cpu backend, each with the backend whose Attention reads it.
var windowKinds = []struct {
	name string
	be   func() *Backend
	fill kvFill
}{
	{"float32 reference", func() *Backend { return New(2) }, fillF32},
	{"float32 vector", func() *Backend { return NewWith(2, Options{VectorFloat32: true}) }, fillF32},
	{"float16 cache", func() *Backend { return NewWith(2, Options{KVFloat16: true}) }, fillF16},
	{"fp8 cache", func() *Backend { return New(2) }, fillFP8},
}

func fillF32(c *KVCache, rng *rand.Rand, slots, kvw int) (k, v [][]float32) {
	for s := range slots {
		kr, vr := c.k[0][s*kvw:(s+1)*kvw], c.v[0][s*kvw:(s+1)*kvw]
		for i := range kr {
			kr[i], vr[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
		}
		k, v = append(k, kr), append(v, vr)
	}
	return k, v
}

func fillF16(c *KVCache, rng *rand.Rand, slots, kvw int) (k, v [][]float32) {
	for s := range slots {
		kr, vr := make([]float32, kvw), make([]float32, kvw)
		for i := range kr {
			kc, vc := f32ToF16(float32(rng.NormFloat64())), f32ToF16(float32(rng.NormFloat64()))
			c.k16[0][s*kvw+i], c.v16[0][s*kvw+i] = kc, vc
			kr[i], vr[i] = ops.F16ToFloat32(kc), ops.F16ToFloat32(vc)
		}
		k, v = append(k, kr), append(v, vr)
	}
	return k, v
}

func fillFP8(c *KVCache, rng *rand.Rand, slots, kvw int) (k, v [][]float32) {
	for s := range slots {
		kr, vr := randRow(rng, kvw), randRow(rng, kvw)
		c.f8.put(0, s, kr, vr)
		k = append(k, readFP8(make([]float32, kvw), c.f8.k[0], s*kvw, c.f8.kScale[0]))
		v = append(v, readFP8(make([]float32, kvw), c.f8.v[0], s*kvw, c.f8.vScale[0]))
	}
	return k, v
}

// TestAttentionWindowAndSinks: sliding windows (shorter and longer than the contexts, one
// position, and a window across attnPart boundaries of a long decode) and per-head sinks, on
// every cache kind, against the softmax computed directly in float64 from the values the cache
// holds: p_j = e^{s_j} / (Σ_{k in window} e^{s_k} + e^{S_h}).
func TestAttentionWindowAndSinks(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 33))
	cases := []struct {
		name           string
		heads, kvHeads int
		hd             int
		window         int
		sinks          bool
		seqs           [][2]int // per sequence: cached tokens, new tokens
	}{
		{"full, sinks", 4, 2, 16, 0, true, [][2]int{{0, 6}, {9, 1}}},
		{"window 8, no sinks", 4, 2, 16, 8, false, [][2]int{{0, 12}, {20, 1}, {3, 2}}},
		{"window 8, sinks, gqa 2", 4, 2, 16, 8, true, [][2]int{{0, 12}, {20, 1}, {3, 2}}},
		{"window 1, sinks, mha", 2, 2, 8, 1, true, [][2]int{{5, 3}}},
		{"window longer than the context", 3, 1, 8, 100, true, [][2]int{{10, 4}}},
		{"window across parts of a long decode", 2, 1, 32, 300, true, [][2]int{{700, 1}, {255, 2}}},
	}
	for _, c := range cases {
		for _, kind := range windowKinds {
			t.Run(fmt.Sprintf("%s/%s", c.name, kind.name), func(t *testing.T) {
				testWindow(t, rng, kind.be(), kind.fill, kind.name == "fp8 cache", c.heads, c.kvHeads, c.hd, c.window, c.sinks, c.seqs)
			})
		}
	}
}

func testWindow(t *testing.T, rng *rand.Rand, be *Backend, fill kvFill, fp8 bool, heads, kvHeads, hd, window int, sinks bool,
	seqs [][2]int) {
	defer be.Close()
	const bs, blocksPerSeq = 16, 48
	nb := blocksPerSeq * len(seqs)
	var cache ops.KVCache
	var err error
	if fp8 {
		cache, err = be.NewFP8KVCache(1, nb, bs, kvHeads, hd, []float32{0.02}, []float32{0.03})
	} else {
		cache, err = be.NewKVCache(1, nb, bs, kvHeads, hd)
	}
	require.NoError(t, err)
	kvw := kvHeads * hd
	kc, vc := fill(cache.(*KVCache), rng, nb*bs, kvw)
	meta := &ops.AttnMetadata{QueryStart: []int32{0}, BlockTableStride: blocksPerSeq}
	var seqOf []int
	for s, sq := range seqs {
		for b := range blocksPerSeq {
			meta.BlockTables = append(meta.BlockTables, int32((s*blocksPerSeq+b*7)%nb))
		}
		for p := sq[0]; p < sq[0]+sq[1]; p++ {
			meta.Positions = append(meta.Positions, int32(p))
			seqOf = append(seqOf, s)
		}
		meta.QueryStart = append(meta.QueryStart, int32(len(meta.Positions)))
		meta.SeqLens = append(meta.SeqLens, int32(sq[0]+sq[1]))
	}
	nt, w := len(meta.Positions), heads*hd
	a := ops.AttnShape{NumHeads: heads, NumKVHeads: kvHeads, HeadDim: hd, Scale: float32(1 / math.Sqrt(float64(hd))), Window: window}
	var sink []float32
	if sinks {
		sink = randRow(rng, heads)
		sink[0] = 4 // one sink that dominates its head
		a.Sinks = FromFloat32(sink, heads)
	}
	require.NoError(t, ops.CheckAttention(be, a))
	q := randRow(rng, nt*w)
	got := make([]float32, nt*w)
	be.Attention(FromFloat32(got, nt, w), FromFloat32(q, nt, w), cache, 0, meta, a)
	for tok := range nt {
		pos := int(meta.Positions[tok])
		table := meta.BlockTables[seqOf[tok]*blocksPerSeq:]
		from := 0
		if window > 0 {
			from = max(0, pos-window+1)
		}
		for h := range heads {
			qh, off := q[tok*w+h*hd:tok*w+(h+1)*hd], (h/(heads/kvHeads))*hd
			slot := func(p int) int { return int(table[p/bs])*bs + p%bs }
			scores := make([]float64, 0, pos+1)
			mx := math.Inf(-1)
			if sinks {
				mx = float64(sink[h])
			}
			for p := from; p <= pos; p++ {
				var s float64
				for d, kv := range kc[slot(p)][off : off+hd] {
					s += float64(qh[d]) * float64(kv)
				}
				s *= float64(a.Scale)
				scores, mx = append(scores, s), math.Max(mx, s)
			}
			var sum float64
			if sinks {
				sum = math.Exp(float64(sink[h]) - mx)
			}
			for _, s := range scores {
				sum += math.Exp(s - mx)
			}
			for d := range hd {
				var want float64
				for i, s := range scores {
					want += math.Exp(s-mx) / sum * float64(vc[slot(from+i)][off+d])
				}
				require.InDelta(t, want, got[tok*w+h*hd+d], 2e-5, "token %d (position %d) head %d dim %d", tok, pos, h, d)
			}
		}
	}
}

// TestCheckAttention: the cpu backend applies windows and sinks; a negative window and sinks
// of the wrong size are refused; a backend without AttentionFeatures gets neither.
func TestCheckAttention(t *testing.T) {
	be := New(1)
	defer be.Close()
	base := ops.AttnShape{NumHeads: 4, NumKVHeads: 2, HeadDim: 8, Scale: 0.3}
	ok, neg, bad := base, base, base
	ok.Window, ok.Sinks = 8, FromFloat32(make([]float32, 4), 4)
	neg.Window = -1
	bad.Sinks = FromFloat32(make([]float32, 3), 3)
	require.NoError(t, ops.CheckAttention(be, base))
	require.NoError(t, ops.CheckAttention(be, ok))
	require.ErrorIs(t, ops.CheckAttention(be, neg), ops.ErrUnsupportedAttention)
	require.ErrorIs(t, ops.CheckAttention(be, bad), ops.ErrUnsupportedAttention)
	plain := struct{ ops.Backend }{be} // hides AttentionFeatures
	require.NoError(t, ops.CheckAttention(plain, base))
	require.ErrorIs(t, ops.CheckAttention(plain, ok), ops.ErrUnsupportedAttention)
	ok.Sinks = nil
	require.ErrorContains(t, ops.CheckAttention(plain, ok), "sliding-window attention (window 8)")
	ok.Window, ok.Sinks = 0, FromFloat32(make([]float32, 4), 4)
	require.ErrorContains(t, ops.CheckAttention(plain, ok), "attention sinks")
}
