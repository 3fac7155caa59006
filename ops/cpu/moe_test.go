package cpu

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// moeCase is one MoE op test: sizes, and how the router logits are made.
type moeCase struct {
	name                  string
	experts, k, h, inter  int
	tokens                int
	renorm, shared, bf16w bool
	logits                func(r *rand.Rand, t, e int) float32
}

func randLogit(r *rand.Rand, _, _ int) float32 { return float32(r.NormFloat64() * 2) }

// moeRef is the float64 reference: softmax, the k largest (lower id on ties), renormalised,
// then Σ w·down(silu(gate x)·up x) (+ sigmoid(g)·shared).
func moeRef(c moeCase, logits, x, w13, w2, shared, gate []float32) (ids []int32, ws []float64, out []float64) {
	e, k, h, in := c.experts, c.k, c.h, c.inter
	out = make([]float64, c.tokens*h)
	for t := 0; t < c.tokens; t++ {
		row := logits[t*e : (t+1)*e]
		mx := math.Inf(-1)
		for _, v := range row {
			mx = math.Max(mx, float64(v))
		}
		p, s := make([]float64, e), 0.0
		for i, v := range row {
			p[i] = math.Exp(float64(v) - mx)
			s += p[i]
		}
		order := make([]int, e)
		for i := range order {
			order[i] = i
			p[i] /= s
		}
		sort.SliceStable(order, func(a, b int) bool { return row[order[a]] > row[order[b]] })
		var sum float64
		for _, id := range order[:k] {
			sum += p[id]
		}
		for _, id := range order[:k] {
			w := p[id]
			if c.renorm {
				w /= sum
			}
			ids, ws = append(ids, int32(id)), append(ws, w)
			xr := x[t*h : (t+1)*h]
			act := make([]float64, in)
			for i := range act {
				var g, u float64
				for j, v := range xr {
					g += float64(v) * float64(w13[(id*2*in+i)*h+j])
					u += float64(v) * float64(w13[(id*2*in+in+i)*h+j])
				}
				act[i] = g / (1 + math.Exp(-g)) * u
			}
			for j := 0; j < h; j++ {
				var y float64
				for i, a := range act {
					y += a * float64(w2[(id*h+j)*in+i])
				}
				out[t*h+j] += w * y
			}
		}
		if c.shared {
			sg := 1 / (1 + math.Exp(-float64(gate[t])))
			for j := 0; j < h; j++ {
				out[t*h+j] += sg * float64(shared[t*h+j])
			}
		}
	}
	return ids, ws, out
}

// moeWeight uploads values as an f32 weight, or rounds them to bf16 first (returning the
// rounded values for the reference).
func moeWeight(t *testing.T, b *Backend, bf16 bool, vals []float32, shape ...int) (ops.Tensor, []float32) {
	if !bf16 {
		raw := make([]byte, 4*len(vals))
		for i, v := range vals {
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
		}
		w, err := b.Weight("w", ops.Plain(ops.F32), shape, raw)
		require.NoError(t, err)
		return w, vals
	}
	raw, rounded := make([]byte, 2*len(vals)), make([]float32, len(vals))
	for i, v := range vals {
		u := uint16(math.Float32bits(v) >> 16) // truncation is as good a rounding as any here
		binary.LittleEndian.PutUint16(raw[2*i:], u)
		rounded[i] = math.Float32frombits(uint32(u) << 16)
	}
	w, err := b.Weight("w", ops.Plain(ops.BF16), shape, raw)
	require.NoError(t, err)
	return w, rounded
}

func randVals(r *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64() * scale)
	}
	return v
}

// TestMoEMatchesReference: the cpu router and experts against a float64 reference, at sizes
// that cross the chunk and tile boundaries, with experts that get no tokens, one expert that
// gets every token, exact ties in the router, renormalisation on and off, a shared expert and
// 16-bit weights.
func TestMoEMatchesReference(t *testing.T) {
	for _, c := range []moeCase{
		{name: "small", experts: 8, k: 2, h: 16, inter: 12, tokens: 5, renorm: true, logits: randLogit},
		{name: "chunks", experts: 16, k: 4, h: 20, inter: 9, tokens: 2*moeChunk + 3, logits: randLogit, shared: true},
		{name: "bf16", experts: 8, k: 3, h: 24, inter: 16, tokens: 40, renorm: true, bf16w: true, logits: randLogit},
		{name: "one-expert-takes-all", experts: 8, k: 1, h: 16, inter: 8, tokens: 150, renorm: true,
			logits: func(r *rand.Rand, _, e int) float32 {
				if e == 5 {
					return 20
				}
				return float32(r.NormFloat64())
			}},
		{name: "ties-lower-id-first", experts: 12, k: 4, h: 8, inter: 8, tokens: 9, renorm: true,
			logits: func(_ *rand.Rand, t, e int) float32 { return float32((e + t) % 3) }}, // exact ties everywhere
		{name: "many-experts", experts: ops.MaxExperts, k: ops.MaxTopK, h: 8, inter: 4, tokens: 3, logits: randLogit},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := New(3)
			defer b.Close()
			r := rand.New(rand.NewPCG(uint64(c.experts*31+c.tokens), 9))
			e, k, h, in := c.experts, c.k, c.h, c.inter
			logits := make([]float32, c.tokens*e)
			for tok := 0; tok < c.tokens; tok++ {
				for x := 0; x < e; x++ {
					logits[tok*e+x] = c.logits(r, tok, x)
				}
			}
			x := randVals(r, c.tokens*h, 1)
			w13t, w13 := moeWeight(t, b, c.bf16w, randVals(r, e*2*in*h, 0.3), e, 2*in, h)
			w2t, w2 := moeWeight(t, b, c.bf16w, randVals(r, e*h*in, 0.3), e, h, in)
			var sharedT, gateT ops.Tensor
			shared, gate := randVals(r, c.tokens*h, 1), randVals(r, c.tokens, 2)
			if c.shared {
				sharedT, gateT = FromFloat32(shared, c.tokens, h), FromFloat32(gate, c.tokens, 1)
			}
			rt, err := b.NewMoE(ops.MoESpec{Experts: e, TopK: k, Hidden: h, Inter: in, MaxTokens: c.tokens + 7, Renormalize: c.renorm})
			require.NoError(t, err)
			out := b.Buffer(c.tokens, h).(*Tensor)
			b.MoERoute(rt, FromFloat32(logits, c.tokens, e))
			b.MoEExperts(out, FromFloat32(x, c.tokens, h), rt, ops.ExpertWeights{W13: w13t, W2: w2t}, sharedT, gateT)

			wantIDs, wantW, want := moeRef(c, logits, x, w13, w2, shared, gate)
			ids, ws := make([]int32, c.tokens*k), make([]float32, c.tokens*k)
			rt.Read(c.tokens, ids, ws)
			require.Equal(t, wantIDs, ids)
			for i := range ws {
				require.InDelta(t, wantW[i], ws[i], 1e-6, "weight %d", i)
			}
			for i, v := range out.f32 {
				require.InDelta(t, want[i], v, 1e-4*(1+math.Abs(want[i])), "element %d", i)
			}
		})
	}
}

// TestMoEBatchInvariant: a token's routing and output are bit for bit the same whether it is
// run alone or among a batch whose other tokens go to other experts (chunk boundaries included).
func TestMoEBatchInvariant(t *testing.T) {
	b := New(2)
	defer b.Close()
	r := rand.New(rand.NewPCG(3, 4))
	const e, k, h, in, n = 8, 2, 16, 12, moeChunk + 40
	w13, _ := moeWeight(t, b, true, randVals(r, e*2*in*h, 0.3), e, 2*in, h)
	w2, _ := moeWeight(t, b, true, randVals(r, e*h*in, 0.3), e, h, in)
	logits, x := randVals(r, n*e, 2), randVals(r, n*h, 1)
	rt, err := b.NewMoE(ops.MoESpec{Experts: e, TopK: k, Hidden: h, Inter: in, MaxTokens: n, Renormalize: true})
	require.NoError(t, err)
	all := b.Buffer(n, h).(*Tensor)
	b.MoERoute(rt, FromFloat32(logits, n, e))
	b.MoEExperts(all, FromFloat32(x, n, h), rt, ops.ExpertWeights{W13: w13, W2: w2}, nil, nil)
	one := b.Buffer(1, h).(*Tensor)
	for _, tok := range []int{0, 17, moeChunk - 1, moeChunk, n - 1} {
		b.MoERoute(rt, FromFloat32(logits[tok*e:(tok+1)*e], 1, e))
		b.MoEExperts(one, FromFloat32(x[tok*h:(tok+1)*h], 1, h), rt, ops.ExpertWeights{W13: w13, W2: w2}, nil, nil)
		require.Equal(t, all.f32[tok*h:(tok+1)*h], one.f32, "token %d", tok)
	}
}

// TestMoEAllocatesNothingPerToken: after NewMoE, routing and running the experts allocate no
// more for a batch of many tokens than for one (only the worker pool's per-call bookkeeping).
func TestMoEAllocatesNothingPerToken(t *testing.T) {
	b := New(2)
	defer b.Close()
	r := rand.New(rand.NewPCG(5, 6))
	const e, k, h, in, n = 8, 2, 16, 8, 300
	w13, _ := moeWeight(t, b, false, randVals(r, e*2*in*h, 0.3), e, 2*in, h)
	w2, _ := moeWeight(t, b, false, randVals(r, e*h*in, 0.3), e, h, in)
	rt, err := b.NewMoE(ops.MoESpec{Experts: e, TopK: k, Hidden: h, Inter: in, MaxTokens: n})
	require.NoError(t, err)
	logits, x, out := FromFloat32(randVals(r, n*e, 2), n, e), FromFloat32(randVals(r, n*h, 1), n, h), b.Buffer(n, h)
	allocs := func(rows int) float64 {
		l, xv, o := b.View(logits, rows), b.View(x, rows), b.View(out, rows)
		return testing.AllocsPerRun(20, func() {
			b.MoERoute(rt, l)
			b.MoEExperts(o, xv, rt, ops.ExpertWeights{W13: w13, W2: w2}, nil, nil)
		})
	}
	one, many := allocs(1), allocs(n)
	// A parallel section's closure may be allocated: two per chunk.
	require.LessOrEqual(t, many, one+float64(2*(n/moeChunk)), "allocations grow with the batch")
	require.LessOrEqual(t, one, 16.0)
}

// TestMoESpecLimits: NewMoE refuses specs outside the limits with ErrUnsupportedMoE.
func TestMoESpecLimits(t *testing.T) {
	b := New(1)
	defer b.Close()
	for _, s := range []ops.MoESpec{
		{Experts: 0, TopK: 1, Hidden: 8, Inter: 8, MaxTokens: 1},
		{Experts: ops.MaxExperts + 1, TopK: 1, Hidden: 8, Inter: 8, MaxTokens: 1},
		{Experts: 8, TopK: 9, Hidden: 8, Inter: 8, MaxTokens: 1},
		{Experts: 64, TopK: ops.MaxTopK + 1, Hidden: 8, Inter: 8, MaxTokens: 1},
		{Experts: 8, TopK: 2, Hidden: 8, Inter: 0, MaxTokens: 1},
		{Experts: 8, TopK: 2, Hidden: 8, Inter: 8, MaxTokens: 0},
	} {
		_, err := b.NewMoE(s)
		require.True(t, errors.Is(err, ops.ErrUnsupportedMoE), "%+v: %v", s, err)
	}
}
