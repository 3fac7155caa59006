package engine

import (
	"math"
	"math/rand/v2"
	"sort"

	"github.com/atom-go/atom/ops/cpu"
)

// Sample is one sampled token with its log-probability under the model's raw distribution and,
// when asked for, the top alternatives (as vLLM's default "raw_logprobs" mode reports them).
type Sample struct {
	Token       int32     `msgpack:"token" json:"token"`
	Logprob     float32   `msgpack:"logprob" json:"logprob"`
	TopIDs      []int32   `msgpack:"top_ids,omitempty" json:"top_ids,omitempty"`
	TopLogprobs []float32 `msgpack:"top_logprobs,omitempty" json:"top_logprobs,omitempty"`
}

// sampler turns one row of logits into a token. It reuses its scratch between calls, so the
// per-token path allocates only the returned top-N slices.
type sampler struct {
	idx   []int32
	probs []float32
	work  []float32
	seen  []bool
}

// sampleInput is everything sampling needs about one sequence at one step.
type sampleInput struct {
	params   *SamplingParams
	prompt   []int32
	output   []int32
	rng      *rand.Rand
	stopIDs  []int32 // masked while len(output) < MinTokens
	wantTopN int
	// skip leaves the row to the caller: a sampling request's verify rows are drawn in
	// order, after the pool, since each draws only if the drafts before it were accepted.
	skip bool
}

func (s *sampler) sample(logits []float32, in *sampleInput) Sample {
	raw := logits
	logits = s.process(logits, in)
	var tok int32
	if in.params.Temperature == 0 {
		tok = argmax(logits)
	} else {
		tok = s.draw(logits, in.params, in.rng)
	}
	return s.result(raw, tok, in)
}

// result reports tok with its logprob under the raw logits and the top alternatives asked for.
func (s *sampler) result(raw []float32, tok int32, in *sampleInput) Sample {
	logZ := logSumExp(raw)
	out := Sample{Token: tok, Logprob: raw[tok] - logZ}
	if in.wantTopN > 0 {
		out.TopIDs, out.TopLogprobs = topN(raw, in.wantTopN, logZ)
	}
	return out
}

// process returns the logits sampling draws from: penalties applied and stop tokens masked
// while min_tokens is not reached, in the sampler's scratch (logits itself when nothing
// applies).
func (s *sampler) process(logits []float32, in *sampleInput) []float32 {
	p := in.params
	penalise := p.RepetitionPenalty != 1 || p.PresencePenalty != 0 || p.FrequencyPenalty != 0
	mask := len(in.output) < p.MinTokens && len(in.stopIDs) > 0
	if penalise || mask {
		s.work = append(s.work[:0], logits...)
		logits = s.work
		if penalise {
			s.applyPenalties(logits, in)
		}
		for _, id := range in.stopIDs {
			if mask {
				logits[id] = float32(math.Inf(-1))
			}
		}
	}
	return logits
}

// draw samples from softmax(logits/T) restricted by top-k, top-p and min-p.
func (s *sampler) draw(logits []float32, p *SamplingParams, rng *rand.Rand) int32 {
	idx, probs, cut, kept := s.dist(logits, p)
	r := rng.Float64() * kept
	for i := 0; i < cut; i++ {
		r -= float64(probs[i])
		if r < 0 {
			return idx[i]
		}
	}
	return idx[cut-1]
}

// dist sorts the vocabulary by logit and returns the unnormalised probabilities of
// softmax(logits/T) in that order, the count cut of tokens top-k, top-p and min-p keep, and
// their total mass kept: token idx[i] has probability probs[i]/kept for i < cut, else 0.
func (s *sampler) dist(logits []float32, p *SamplingParams) (idx []int32, probs []float32, cut int, kept float64) {
	n := len(logits)
	if cap(s.idx) < n {
		s.idx, s.probs = make([]int32, n), make([]float32, n)
	}
	idx, probs = s.idx[:n], s.probs[:n]
	for i := range idx {
		idx[i] = int32(i)
	}
	sort.Slice(idx, func(a, b int) bool {
		la, lb := logits[idx[a]], logits[idx[b]]
		return la > lb || (la == lb && idx[a] < idx[b])
	})
	k := n
	if p.TopK > 0 && p.TopK < n {
		k = p.TopK
	}
	mx := float64(logits[idx[0]])
	var sum float64
	for i := 0; i < k; i++ {
		e := math.Exp((float64(logits[idx[i]]) - mx) / p.Temperature)
		probs[i] = float32(e)
		sum += e
	}
	// top-p keeps the smallest prefix whose mass reaches top_p; min-p drops tokens below
	// min_p times the most likely one. Both always keep the first token.
	cut = k
	cum := 0.0
	for i := 0; i < k; i++ {
		pr := float64(probs[i]) / sum
		if p.MinP > 0 && i > 0 && pr < p.MinP*float64(probs[0])/sum {
			cut = i
			break
		}
		cum += pr
		if cum >= p.TopP && i+1 < cut {
			cut = i + 1
			break
		}
	}
	for i := 0; i < cut; i++ {
		kept += float64(probs[i])
	}
	return idx, probs, cut, kept
}

// topN returns the n most likely ids of raw logits and their logprobs.
func topN(logits []float32, n int, logZ float32) ([]int32, []float32) {
	n = min(n, len(logits))
	ids := make([]int32, 0, n)
	for i := range logits {
		id := int32(i)
		pos := sort.Search(len(ids), func(j int) bool { return logits[ids[j]] < logits[id] })
		if pos >= n {
			continue
		}
		if len(ids) < n {
			ids = append(ids, 0)
		}
		copy(ids[pos+1:], ids[pos:len(ids)-1])
		ids[pos] = id
	}
	lps := make([]float32, len(ids))
	for i, id := range ids {
		lps[i] = logits[id] - logZ
	}
	return ids, lps
}

// applyPenalties applies vLLM's penalties: repetition once per distinct prompt or output
// token (divide positive logits, multiply negative ones), presence and frequency over output.
func (s *sampler) applyPenalties(logits []float32, in *sampleInput) {
	p := in.params
	if p.RepetitionPenalty != 1 {
		if len(s.seen) < len(logits) {
			s.seen = make([]bool, len(logits))
		}
		rp := float32(p.RepetitionPenalty)
		for _, ids := range [][]int32{in.prompt, in.output} {
			for _, id := range ids {
				if s.seen[id] {
					continue
				}
				s.seen[id] = true
				if logits[id] > 0 {
					logits[id] /= rp
				} else {
					logits[id] *= rp
				}
			}
		}
		for _, ids := range [][]int32{in.prompt, in.output} {
			for _, id := range ids {
				s.seen[id] = false
			}
		}
	}
	if p.PresencePenalty != 0 || p.FrequencyPenalty != 0 {
		counts := make(map[int32]int, len(in.output))
		for _, id := range in.output {
			counts[id]++
		}
		for id, c := range counts {
			logits[id] -= float32(p.FrequencyPenalty)*float32(c) + float32(p.PresencePenalty)
		}
	}
}

func argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

// logSumExp is the logits' normalizer, with the vector exp where the cpu has it (a step of
// many sequences computes one per sequence over the whole vocabulary).
func logSumExp(x []float32) float32 { return cpu.LogSumExp(x) }
