package engine

import (
	"math/rand/v2"

	"github.com/atom-go/atom/engine/sched"
	"github.com/atom-go/atom/ops"
)

// Sampling on the device: when the backend implements ops.DeviceSampler and every sampled row
// of a step needs nothing but its own logits and controls (no penalties, no min_tokens mask in
// force, no top-N logprobs), the runner samples on the device and only tokens and logprobs come
// back. Otherwise the whole step copies its logits to the host and samples there (sampler.go).
// The device draw is keyed by a per-choice seed (from the request's seed, else from the
// engine's generator) and the number of tokens generated so far, so a seeded request
// reproduces whatever batch it runs in.

// choiceRNG makes choice i's host generator and device seed: both from the request's seed when
// given, else from the engine's generator.
func choiceRNG(engineRNG *rand.Rand, seed *int64, i int) (*rand.Rand, uint64) {
	if seed != nil {
		return rand.New(rand.NewPCG(uint64(*seed), uint64(i))), ops.RowKey(uint64(*seed), uint64(i))
	}
	return rand.New(rand.NewPCG(engineRNG.Uint64(), engineRNG.Uint64())), engineRNG.Uint64()
}

// skipDraws advances a choice's host generator past the draws of n earlier outputs: the host
// sampler takes one number per sampled token (speculative verify steps take one or two per
// position), so a request resumed after n outputs (Request.OutputOffset) draws as the
// uninterrupted run did when that run drew every token on the host; the device sampler's
// draws are keyed by the output count instead (rowSampling), which the offset shifts.
func skipDraws(rng *rand.Rand, n int) {
	for range n {
		rng.Uint64()
	}
}

// deviceEligible reports whether a row with these controls can be sampled on the device.
func deviceEligible(p *SamplingParams, generated int, stopIDs []int32, wantTopN int) bool {
	penalise := p.RepetitionPenalty != 1 || p.PresencePenalty != 0 || p.FrequencyPenalty != 0
	mask := generated < p.MinTokens && len(stopIDs) > 0
	return !penalise && !mask && wantTopN == 0
}

// rowSampling converts a row's controls for the device sampler.
func rowSampling(p *SamplingParams, seed uint64, generated int) ops.RowSampling {
	return ops.RowSampling{Temperature: float32(p.Temperature), TopK: int32(p.TopK), TopP: float32(p.TopP),
		MinP: float32(p.MinP), Seed: seed, Offset: uint64(generated)}
}

// deviceSample converts the device's result; a row without a finite logit yields token -1,
// which becomes token 0 (what the host's argmax returns for such a row).
func deviceSample(t ops.SampledToken) Sample {
	if t.Token < 0 {
		t.Token = 0
	}
	return Sample{Token: t.Token, Logprob: t.Logprob}
}

// runAndSample runs the scheduled batch, commits it and returns the sampled sequences with
// their samples, in batch order, sampled on the device when every row allows it.
func (e *Engine) runAndSample(batch sched.Batch) ([]*sched.Sequence, []Sample, error) {
	var sampled []*sched.Sequence
	device := e.runner.DeviceSampling()
	e.pool.params = e.pool.params[:0]
	for _, it := range batch.Items {
		if !it.Sample {
			continue
		}
		c := e.bySeq[it.Seq]
		p, n, d := &c.req.params, it.Seq.NumGenerated(), it.Seq.NumDrafts()
		// A greedy verify chunk's rows are argmaxes the device draws like any other; a sampled
		// one's acceptance reads every position's distribution (spec_sample.go) on the host.
		device = device && (d == 0 || p.Temperature == 0) && deviceEligible(p, n, c.req.stopIDs, p.Logprobs)
		for j := range d + 1 {
			e.pool.params = append(e.pool.params, rowSampling(p, c.seed, c.drawBase+n+j))
			sampled = append(sampled, it.Seq)
		}
	}
	if device && len(sampled) > 0 {
		toks, err := e.runner.RunSampled(e.work, e.pool.params)
		if err != nil {
			return nil, nil, err
		}
		e.sched.Commit(batch)
		e.pool.devOut = e.pool.devOut[:0]
		for _, t := range toks {
			e.pool.devOut = append(e.pool.devOut, deviceSample(t))
		}
		return sampled, e.pool.devOut, nil
	}
	logits, err := e.runner.Run(e.work)
	if err != nil {
		return nil, nil, err
	}
	e.sched.Commit(batch)
	for i := 0; i < len(sampled); {
		seq := sampled[i]
		c := e.bySeq[seq]
		p := &c.req.params
		// Row j of a verify chunk samples the token after draft j-1: its output so far ends
		// there, so penalties and min_tokens see what the plain path would.
		d := seq.NumDrafts()
		for j := 0; j <= d; j++ {
			e.pool.add(sampleInput{params: p, prompt: seq.TokenIDs[:seq.NumPromptTokens],
				output: seq.TokenIDs[seq.NumPromptTokens : seq.Len()-d+j], rng: c.rng, stopIDs: c.req.stopIDs, wantTopN: p.Logprobs,
				skip: d > 0 && p.Temperature != 0})
		}
		i += d + 1
	}
	e.specLogits = logits
	return sampled, e.pool.run(logits, e.model.VocabSize), nil
}
