package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSpecRejectionSamplingMatchesTarget: over a small vocabulary, the token emitted at a
// draft position (the draft when accepted, the resample otherwise) is distributed as the
// target's p, whatever the draft: a likely one, an unlikely one, one that top-k or top-p
// excludes, and with penalties; chi-square at p = 0.001 with a fixed seed. The acceptance rate
// is p(draft).
func TestSpecRejectionSamplingMatchesTarget(t *testing.T) {
	logits := []float32{2.0, 1.2, 0.3, -0.5, 0.9, -1.5}
	for _, tc := range []struct {
		name  string
		draft int32
		edit  func(*SamplingParams)
	}{
		{"likely draft", 0, nil},
		{"unlikely draft", 5, nil},
		{"mid draft, temperature", 4, func(p *SamplingParams) { p.Temperature = 0.7 }},
		{"draft outside top-k", 5, func(p *SamplingParams) { p.TopK = 3 }},
		{"top-p and min-p", 2, func(p *SamplingParams) { p.TopP = 0.8; p.MinP = 0.05 }},
		{"penalties", 0, func(p *SamplingParams) { p.RepetitionPenalty = 1.5; p.FrequencyPenalty = 0.4 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := DefaultSamplingParams()
			if tc.edit != nil {
				tc.edit(&p)
			}
			out := []int32{0, 0, 4}
			in := sampleInput{params: &p, prompt: []int32{1}, output: out, rng: rand.New(rand.NewPCG(7, 9))}
			target := targetProbs(t, logits, &in)
			const n = 40000
			var s sampler
			counts := make([]float64, len(logits))
			accepted := 0
			for range n {
				got, ok := s.verifyDraft(logits, &in, tc.draft, nil)
				counts[got.Token]++
				if ok {
					accepted++
					require.Equal(t, tc.draft, got.Token)
				} else {
					require.NotEqual(t, tc.draft, got.Token)
				}
			}
			chi2, df := 0.0, -1
			for i, pr := range target {
				if pr == 0 {
					require.Zero(t, counts[i], "token %d outside the target's support", i)
					continue
				}
				exp := pr * n
				chi2 += (counts[i] - exp) * (counts[i] - exp) / exp
				df++
			}
			require.Less(t, chi2, chi2Critical001[df], "chi-square %.2f with %d degrees of freedom; counts %v, target %v", chi2, df, counts, target)
			require.InDelta(t, target[tc.draft], float64(accepted)/n, 0.01, "acceptance rate is p(draft)")
		})
	}
}

// chi2Critical001 holds the chi-square critical values at p = 0.001 by degrees of freedom.
var chi2Critical001 = []float64{0: math.Inf(1), 1: 10.83, 2: 13.82, 3: 16.27, 4: 18.47, 5: 20.52}

// targetProbs is the plain sampler's distribution for in, estimated exactly from dist.
func targetProbs(t *testing.T, logits []float32, in *sampleInput) []float64 {
	t.Helper()
	var s sampler
	processed := s.process(logits, in)
	idx, probs, cut, kept := s.dist(processed, in.params)
	out := make([]float64, len(logits))
	for i := 0; i < cut; i++ {
		out[idx[i]] = float64(probs[i]) / kept
	}
	return out
}

// TestSpecSeededSamplingReproducible: with speculation on, a seeded sampling request gives the
// same tokens alone and among other requests, run after run; drafts of sampling requests are
// accepted and rejected; no KV block leaks.
func TestSpecSeededSamplingReproducible(t *testing.T) {
	const model = "qwen3-bf16"
	prompts := specPrompts(6, 21)
	params := func(i int) SamplingParams {
		p := DefaultSamplingParams()
		p.MaxTokens, p.IgnoreEOS, p.Temperature, p.Logprobs = 16, true, 0.3+0.2*float64(i%3), 1
		seed := int64(100 + i)
		p.Seed = &seed
		if i%2 == 1 {
			p.N = 2
		}
		return p
	}
	e := newTestEngine(t, model, withSpec(nil))
	first := runAll(t, e, specRequests(prompts, params))
	again := runAll(t, newTestEngine(t, model, withSpec(nil)), specRequests(prompts, params))
	requireSameOutputs(t, first, again)
	for i := range prompts {
		alone := runAll(t, e, specRequests(prompts[i:i+1], func(int) SamplingParams { return params(i) }))
		requireSameOutputs(t, first[i:i+1], alone)
	}
	st := e.Stats()
	require.Positive(t, st.SpecNumAcceptedTokens, "%+v", st)
	require.Less(t, st.SpecNumAcceptedTokens, st.SpecNumDraftTokens, "%+v", st)
	require.Zero(t, st.KVBlocksUsed)
	for i, outs := range first {
		for _, o := range outs {
			require.Len(t, o.TokenIDs, 16, "request %d", i)
			require.Len(t, o.Logprobs, 16, fmt.Sprint("request ", i))
		}
	}
}

// TestSpecRejectionSamplingWithDraftQ: with drafts drawn from a draft model's distribution q
// that disagrees with the target's p (another ordering, another temperature, a support that
// misses some of p's tokens or covers tokens p excludes), the emitted token is distributed as
// p (chi-square at p = 0.001, fixed seeds), and the acceptance rate is sum_x min(p(x), q(x)).
func TestSpecRejectionSamplingWithDraftQ(t *testing.T) {
	logits := []float32{2.0, 1.2, 0.3, -0.5, 0.9, -1.5}
	for _, tc := range []struct {
		name        string
		draftLogits []float32
		edit        func(*SamplingParams) // the target's and the draft's parameters
		draftEdit   func(*SamplingParams) // the draft's only
	}{
		{"reversed", []float32{-1.5, 0.9, -0.5, 0.3, 1.2, 2.0}, nil, nil},
		{"close", []float32{1.8, 1.3, 0.2, -0.4, 1.0, -1.2}, nil, nil},
		{"flat draft", []float32{0, 0, 0, 0, 0, 0}, nil, nil},
		{"top-k target, full draft", []float32{0.1, 0.2, 1.5, 1.4, -0.3, 1.0}, func(p *SamplingParams) { p.TopK = 3 }, func(p *SamplingParams) { p.TopK = 0 }},
		{"narrow draft", []float32{0.5, 2.5, 0.1, 1.9, -0.3, 0.2}, nil, func(p *SamplingParams) { p.TopK = 2 }},
		{"temperature and top-p", []float32{-0.2, 1.1, 2.2, 0.1, 0.7, -1.0}, func(p *SamplingParams) { p.Temperature = 0.7; p.TopP = 0.85 }, nil},
		{"penalties", []float32{0.9, 1.0, 1.1, 0.2, 0.3, 0.4}, func(p *SamplingParams) { p.RepetitionPenalty = 1.5; p.PresencePenalty = 0.3 }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := DefaultSamplingParams()
			if tc.edit != nil {
				tc.edit(&p)
			}
			dp := p
			if tc.draftEdit != nil {
				tc.draftEdit(&dp)
			}
			out := []int32{0, 0, 4}
			in := sampleInput{params: &p, prompt: []int32{1}, output: out, rng: rand.New(rand.NewPCG(7, 9))}
			din := sampleInput{params: &dp, prompt: []int32{1}, output: out, rng: rand.New(rand.NewPCG(3, 5))}
			target := targetProbs(t, logits, &in)
			const n = 40000
			var s, ds sampler
			q := make([]float32, len(logits))
			counts := make([]float64, len(logits))
			accepted := 0
			for range n {
				draft := ds.drawQ(ds.process(tc.draftLogits, &din), &dp, din.rng, q)
				got, ok := s.verifyDraft(logits, &in, draft, q)
				counts[got.Token]++
				if ok {
					accepted++
					require.Equal(t, draft, got.Token)
				}
			}
			overlap := 0.0
			for i, pr := range targetProbs(t, tc.draftLogits, &din) {
				overlap += math.Min(pr, target[i])
			}
			chi2, df := 0.0, -1
			for i, pr := range target {
				if pr == 0 {
					require.Zero(t, counts[i], "token %d outside the target's support", i)
					continue
				}
				exp := pr * n
				chi2 += (counts[i] - exp) * (counts[i] - exp) / exp
				df++
			}
			require.Less(t, chi2, chi2Critical001[df], "chi-square %.2f with %d degrees of freedom; counts %v, target %v", chi2, df, counts, target)
			require.InDelta(t, overlap, float64(accepted)/n, 0.01, "acceptance rate is sum min(p, q)")
			require.Less(t, overlap, 0.97, "the draft disagrees with the target")
		})
	}
}
