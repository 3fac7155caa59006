package engine

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func input(p SamplingParams, seed uint64) *sampleInput {
	return &sampleInput{params: &p, rng: rand.New(rand.NewPCG(seed, 0))}
}

func TestSamplerFilters(t *testing.T) {
	logits := []float32{0, 3, 1, 2.5, -1, 2.9}
	cases := []struct {
		name    string
		edit    func(*SamplingParams)
		allowed []int32
	}{
		{"greedy", func(p *SamplingParams) { p.Temperature = 0 }, []int32{1}},
		{"top-k 2", func(p *SamplingParams) { p.TopK = 2 }, []int32{1, 5}},
		{"top-p small keeps the first", func(p *SamplingParams) { p.TopP = 0.01 }, []int32{1}},
		{"top-p 0.6", func(p *SamplingParams) { p.TopP = 0.6 }, []int32{1, 5}},
		{"min-p 0.5", func(p *SamplingParams) { p.MinP = 0.5 }, []int32{1, 5, 3}},
		{"no filter", func(p *SamplingParams) {}, []int32{0, 1, 2, 3, 4, 5}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := DefaultSamplingParams()
			tc.edit(&p)
			require.NoError(t, p.Normalize(len(logits)))
			var s sampler
			seen := map[int32]bool{}
			for i := 0; i < 2000; i++ {
				row := append([]float32(nil), logits...)
				seen[s.sample(row, input(p, uint64(i))).Token] = true
			}
			for tok := range seen {
				require.Contains(t, tc.allowed, tok)
			}
			require.Len(t, seen, len(tc.allowed), "every allowed token is drawn at some point")
		})
	}
}

func TestSamplerDistributionFollowsSoftmax(t *testing.T) {
	logits := []float32{1, 2, 0.5}
	p := DefaultSamplingParams()
	p.Temperature = 0.7
	var s sampler
	counts := make([]int, 3)
	in := input(p, 42)
	const n = 60000
	for i := 0; i < n; i++ {
		counts[s.sample(append([]float32(nil), logits...), in).Token]++
	}
	var z float64
	for _, l := range logits {
		z += math.Exp(float64(l) / 0.7)
	}
	for i, l := range logits {
		require.InDelta(t, math.Exp(float64(l)/0.7)/z, float64(counts[i])/n, 0.01)
	}
}

func TestSamplerSeedRepeats(t *testing.T) {
	logits := make([]float32, 100)
	r := rand.New(rand.NewPCG(1, 1))
	for i := range logits {
		logits[i] = float32(r.NormFloat64())
	}
	draw := func(seed uint64) []int32 {
		var s sampler
		in := input(DefaultSamplingParams(), seed)
		var out []int32
		for i := 0; i < 50; i++ {
			out = append(out, s.sample(append([]float32(nil), logits...), in).Token)
		}
		return out
	}
	require.Equal(t, draw(9), draw(9))
	require.NotEqual(t, draw(9), draw(10))
}

func TestSamplerPenaltiesAndLogprobs(t *testing.T) {
	logits := []float32{2, 1.9, -1, 0.5}
	p := DefaultSamplingParams()
	p.Temperature = 0
	p.RepetitionPenalty = 2
	in := input(p, 0)
	in.prompt = []int32{0, 0, 0} // a repeated id is penalised once: 2/2 = 1 < 1.9
	in.wantTopN = 2
	var s sampler
	raw := append([]float32(nil), logits...)
	out := s.sample(raw, in)
	require.Equal(t, int32(1), out.Token)
	require.Equal(t, logits, raw, "the caller's logits are not modified")
	lz := float64(logSumExp(logits))
	require.InDelta(t, 1.9-lz, out.Logprob, 1e-6, "logprobs are of the raw distribution")
	require.Equal(t, []int32{0, 1}, out.TopIDs)

	p2 := DefaultSamplingParams()
	p2.Temperature, p2.PresencePenalty, p2.FrequencyPenalty = 0, 0.05, 0.1
	in2 := input(p2, 0)
	in2.output = []int32{0}
	require.Equal(t, int32(1), s.sample(append([]float32(nil), logits...), in2).Token, "2-0.15 < 1.9")

	p3 := DefaultSamplingParams()
	p3.Temperature, p3.MinTokens = 0, 2
	in3 := input(p3, 0)
	in3.stopIDs = []int32{0}
	require.Equal(t, int32(1), s.sample(append([]float32(nil), logits...), in3).Token, "EOS masked before min_tokens")
}

func TestNormalizeNamesTheField(t *testing.T) {
	cases := []struct {
		field string
		edit  func(*SamplingParams)
	}{
		{"temperature", func(p *SamplingParams) { p.Temperature = -1 }},
		{"temperature", func(p *SamplingParams) { p.Temperature = math.NaN() }},
		{"top_p", func(p *SamplingParams) { p.TopP = 1.5 }},
		{"top_p", func(p *SamplingParams) { p.TopP = -0.1 }},
		{"top_k", func(p *SamplingParams) { p.TopK = 100000 }},
		{"min_p", func(p *SamplingParams) { p.MinP = 2 }},
		{"n", func(p *SamplingParams) { p.N = -3 }},
		{"max_tokens", func(p *SamplingParams) { p.MaxTokens = -1 }},
		{"min_tokens", func(p *SamplingParams) { p.MaxTokens, p.MinTokens = 2, 5 }},
		{"logprobs", func(p *SamplingParams) { p.Logprobs = 99 }},
		{"repetition_penalty", func(p *SamplingParams) { p.RepetitionPenalty = -1 }},
		{"presence_penalty", func(p *SamplingParams) { p.PresencePenalty = 3 }},
		{"frequency_penalty", func(p *SamplingParams) { p.FrequencyPenalty = -3 }},
		{"stop_token_ids", func(p *SamplingParams) { p.StopTokenIDs = []int32{500} }},
		{"stop", func(p *SamplingParams) { p.Stop = []string{""} }},
	}
	for _, tc := range cases {
		p := DefaultSamplingParams()
		tc.edit(&p)
		err := p.Normalize(384)
		require.ErrorIs(t, err, ErrInvalidParams)
		require.Contains(t, err.Error(), tc.field)
	}
	ok := SamplingParams{}
	require.NoError(t, ok.Normalize(384))
	require.Equal(t, 1, ok.N)
	require.Equal(t, 1.0, ok.TopP)
}
