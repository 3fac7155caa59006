package cpu

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// gptOssRef is gpt-oss's MoE block in float64, as transformers computes it: the k largest
// logits (lower id on ties), their softmax, and per expert down(act(gate, up) + ...) with the
// biases and the clamped SwiGLU.
func gptOssRef(s ops.MoESpec, tokens int, logits, x, w13, w2, b13, b2 []float32) (ids []int32, ws, out []float64) {
	e, k, h, in := s.Experts, s.TopK, s.Hidden, s.Inter
	lim, alpha := float64(s.Limit), float64(s.Alpha)
	out = make([]float64, tokens*h)
	for t := range tokens {
		row := logits[t*e : (t+1)*e]
		order := make([]int, e)
		for i := range order {
			order[i] = i
		}
		sort.SliceStable(order, func(a, b int) bool { return row[order[a]] > row[order[b]] })
		mx, sum := float64(row[order[0]]), 0.0
		for _, id := range order[:k] {
			sum += math.Exp(float64(row[id]) - mx)
		}
		for _, id := range order[:k] {
			w := math.Exp(float64(row[id])-mx) / sum
			ids, ws = append(ids, int32(id)), append(ws, w)
			xr := x[t*h : (t+1)*h]
			act := make([]float64, in)
			for i := range act {
				g, u := float64(b13[id*2*in+i]), float64(b13[id*2*in+in+i])
				for j, v := range xr {
					g += float64(v) * float64(w13[(id*2*in+i)*h+j])
					u += float64(v) * float64(w13[(id*2*in+in+i)*h+j])
				}
				g, u = math.Min(g, lim), math.Max(math.Min(u, lim), -lim)
				act[i] = (u + 1) * g / (1 + math.Exp(-alpha*g))
			}
			for j := range h {
				y := float64(b2[id*h+j])
				for i, a := range act {
					y += a * float64(w2[(id*h+j)*in+i])
				}
				out[t*h+j] += w * y
			}
		}
	}
	return ids, ws, out
}

// TestGptOssMoE: top-k-then-softmax routing and the clamped SwiGLU experts with biases against
// the float64 reference, over a chunk boundary, with logits that tie exactly, a limit the
// gate and up values cross on both sides, and 16-bit weights and biases; without the down
// bias (a rank past the first) the output drops exactly Σ w·b2.
func TestGptOssMoE(t *testing.T) {
	for _, c := range []struct {
		name                 string
		experts, k, h, inter int
		tokens               int
		limit                float32
		bf16, ties           bool
	}{
		{"small", 8, 4, 16, 12, 5, 7, false, false},
		{"clamp bites", 8, 2, 24, 16, 40, 0.5, true, false},
		{"chunks and ties", 6, 3, 8, 8, moeChunk + 9, 1.5, false, true},
		{"top-1", 4, 1, 8, 4, 3, 7, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := New(3)
			defer b.Close()
			r := rand.New(rand.NewPCG(uint64(c.experts*17+c.tokens), 5))
			e, h, in := c.experts, c.h, c.inter
			spec := ops.MoESpec{Experts: e, TopK: c.k, Hidden: h, Inter: in, MaxTokens: c.tokens, Scoring: ops.ScoreTopKSoftmax,
				Activation: ops.ActSwiGLUClamped, Alpha: 1.702, Limit: c.limit, ExpertBias: true}
			require.False(t, spec.Plain())
			logits := randVals(r, c.tokens*e, 2)
			if c.ties {
				for i := range logits {
					logits[i] = float32(i % 3)
				}
			}
			x := randVals(r, c.tokens*h, 1)
			w13t, w13 := moeWeight(t, b, c.bf16, randVals(r, e*2*in*h, 0.4), e, 2*in, h)
			w2t, w2 := moeWeight(t, b, c.bf16, randVals(r, e*h*in, 0.4), e, h, in)
			b13t, b13 := moeWeight(t, b, c.bf16, randVals(r, e*2*in, 0.5), e, 2*in)
			b2t, b2 := moeWeight(t, b, c.bf16, randVals(r, e*h, 0.5), e, h)
			rt, err := b.NewMoE(spec)
			require.NoError(t, err)
			b.MoERoute(rt, FromFloat32(logits, c.tokens, e))
			out := b.Buffer(c.tokens, h).(*Tensor)
			b.MoEExperts(out, FromFloat32(x, c.tokens, h), rt, ops.ExpertWeights{W13: w13t, W2: w2t, B13: b13t, B2: b2t}, nil, nil)

			wantIDs, wantW, want := gptOssRef(spec, c.tokens, logits, x, w13, w2, b13, b2)
			ids, ws := make([]int32, c.tokens*c.k), make([]float32, c.tokens*c.k)
			rt.Read(c.tokens, ids, ws)
			require.Equal(t, wantIDs, ids)
			for i := range ws {
				require.InDelta(t, wantW[i], ws[i], 1e-6, "weight %d", i)
			}
			for i, v := range out.f32 {
				require.InDelta(t, want[i], v, 1e-4*(1+math.Abs(want[i])), "element %d", i)
			}
			noB2 := b.Buffer(c.tokens, h).(*Tensor)
			b.MoEExperts(noB2, FromFloat32(x, c.tokens, h), rt, ops.ExpertWeights{W13: w13t, W2: w2t, B13: b13t}, nil, nil)
			for tok := range c.tokens {
				for j := range h {
					var bias float64
					for s := range c.k {
						bias += float64(ws[tok*c.k+s]) * float64(b2[int(ids[tok*c.k+s])*h+j])
					}
					require.InDelta(t, want[tok*h+j]-bias, noB2.f32[tok*h+j], 1e-4*(1+math.Abs(want[tok*h+j])))
				}
			}
		})
	}
}

// TestClampedSwiGLU: gpt-oss's activation at the points where the clamps switch on.
func TestClampedSwiGLU(t *testing.T) {
	s := ops.MoESpec{Activation: ops.ActSwiGLUClamped, Alpha: 1.702, Limit: 7}
	sig := func(x float64) float64 { return 1 / (1 + math.Exp(-x)) }
	for _, c := range []struct{ g, u, want float64 }{
		{0, 0, 0},
		{1, 0, 1 * sig(1.702)},
		{1, 2, 3 * sig(1.702)},
		{9, 1, 2 * 7 * sig(1.702*7)},    // gate clamped above
		{-9, 1, 2 * -9 * sig(-1.702*9)}, // gate not clamped below
		{2, 9, 8 * 2 * sig(1.702*2)},    // up clamped above
		{2, -9, -6 * 2 * sig(1.702*2)},  // up clamped below
		{7, -7, -6 * 7 * sig(1.702*7)},  // exactly at the limits
		{-0.5, 0.25, 1.25 * -0.5 * sig(-0.851)},
	} {
		require.InDelta(t, c.want, activate(s, float32(c.g), float32(c.u)), 1e-5, "gate %v up %v", c.g, c.u)
	}
	plain := ops.MoESpec{}
	require.InDelta(t, 2*sig(2)*3, activate(plain, 2, 3), 1e-6)
}

// TestGptOssMoESpecChecked: the spec's new options are checked; the plain router and SwiGLU
// stay Plain.
func TestGptOssMoESpecChecked(t *testing.T) {
	ok := ops.MoESpec{Experts: 8, TopK: 4, Hidden: 8, Inter: 8, MaxTokens: 4, Scoring: ops.ScoreTopKSoftmax,
		Activation: ops.ActSwiGLUClamped, Alpha: 1.702, Limit: 7, ExpertBias: true}
	require.NoError(t, ok.Check())
	for _, bad := range []func(s *ops.MoESpec){
		func(s *ops.MoESpec) { s.Limit = 0 },
		func(s *ops.MoESpec) { s.Limit = float32(math.Inf(1)) },
		func(s *ops.MoESpec) { s.Alpha = float32(math.NaN()) },
		func(s *ops.MoESpec) { s.Activation = 9 },
		func(s *ops.MoESpec) { s.Scoring = 9 },
		func(s *ops.MoESpec) { s.Groups, s.TopKGroups = 2, 1 },
		func(s *ops.MoESpec) { s.Scale = 2 },
	} {
		s := ok
		bad(&s)
		require.ErrorIs(t, s.Check(), ops.ErrUnsupportedMoE, "%v", s)
	}
	plain := ops.MoESpec{Experts: 8, TopK: 2, Hidden: 8, Inter: 8, MaxTokens: 4}
	require.True(t, plain.Plain())
	plain.ExpertBias = true
	require.False(t, plain.Plain())
}
