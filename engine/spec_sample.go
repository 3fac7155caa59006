package engine

// Rejection sampling (vLLM's rejection sampler): at a position whose draft is t, drawn from
// the drafter's distribution q, the target's distribution p is the one the plain path would
// draw from (penalties, min_tokens masking, temperature, top-k, top-p, min-p applied). t is
// accepted with probability min(1, p(t)/q(t)); otherwise the token is drawn from
// norm(max(0, p-q)). The emitted token is then distributed exactly as p: P(x) =
// q(x) min(1, p(x)/q(x)) + (1 - sum_y min(p(y), q(y))) (p(x)-q(x))+ / sum_y (p(y)-q(y))+ =
// min(p(x), q(x)) + (p(x)-q(x))+ = p(x), since both sums equal 1 - sum_y min(p(y), q(y)).
//
// The n-gram proposer's q is one-hot at t: acceptance with probability p(t), resampling from
// p with t's mass removed. A draft model's q is its own distribution, with the request's
// sampling parameters applied (spec_draft.go).
//
// Random stream: each verified draft consumes one uniform of the choice's generator for the
// acceptance test and, when rejected, one more for the resample; the position after the last
// draft (all accepted) is a plain draw (one uniform). Positions after a rejection consume
// nothing. A seeded request is so reproducible with speculation on, though its output differs
// from the one without speculation, as in vLLM.

// verifyDraft samples the position where draft stands with in's parameters and reports
// whether the draft is accepted; the Sample is the draft when accepted, else the resampled
// token (greedy: the argmax, accepted when it equals the draft). q is the distribution the
// draft was drawn from, one probability per vocabulary entry; nil means one-hot at draft.
func (s *sampler) verifyDraft(logits []float32, in *sampleInput, draft int32, q []float32) (Sample, bool) {
	raw := logits
	logits = s.process(logits, in)
	if in.params.Temperature == 0 {
		tok := argmax(logits)
		return s.result(raw, tok, in), tok == draft
	}
	var tok int32
	var ok bool
	if q == nil {
		tok, ok = s.drawDraft(logits, in, draft)
	} else {
		tok, ok = s.drawDraftQ(logits, in, draft, q)
	}
	return s.result(raw, tok, in), ok
}

// drawDraftQ is the rejection step for a draft drawn from q: accept draft with probability
// min(1, p(draft)/q(draft)), else draw from norm(max(0, p-q)).
func (s *sampler) drawDraftQ(logits []float32, in *sampleInput, draft int32, q []float32) (int32, bool) {
	idx, probs, cut, kept := s.dist(logits, in.params)
	pd := 0.0
	for i := 0; i < cut; i++ {
		if idx[i] == draft {
			pd = float64(probs[i]) / kept
			break
		}
	}
	qd := float64(q[draft])
	if qd <= 0 || in.rng.Float64()*qd < pd {
		// (A draft outside q's support was not drawn from q, a caller's bug: it is accepted
		// rather than divided by zero.)
		return draft, true
	}
	var rest float64
	for i := 0; i < cut; i++ {
		rest += max(0, float64(probs[i])/kept-float64(q[idx[i]]))
	}
	if rest <= 0 {
		// p <= q everywhere means p == q, where rejection has probability 0: keep the draft.
		return draft, true
	}
	r := in.rng.Float64() * rest
	last := -1
	for i := 0; i < cut; i++ {
		d := float64(probs[i])/kept - float64(q[idx[i]])
		if d <= 0 {
			continue
		}
		last = i
		r -= d
		if r < 0 {
			return idx[i], false
		}
	}
	return idx[last], false
}

// drawDraft is the rejection step for a one-hot draft: accept draft with probability p(draft),
// else draw from p without draft.
func (s *sampler) drawDraft(logits []float32, in *sampleInput, draft int32) (int32, bool) {
	idx, probs, cut, kept := s.dist(logits, in.params)
	di, pd := -1, 0.0
	for i := 0; i < cut; i++ {
		if idx[i] == draft {
			di, pd = i, float64(probs[i])
			break
		}
	}
	if in.rng.Float64()*kept < pd {
		return draft, true
	}
	rest := kept - pd
	r := in.rng.Float64() * rest
	last := -1
	for i := 0; i < cut; i++ {
		if i == di {
			continue
		}
		last = i
		r -= float64(probs[i])
		if r < 0 {
			return idx[i], false
		}
	}
	if last < 0 {
		// Only the draft had mass, yet it was rejected: unreachable since u < 1; keep it.
		return draft, true
	}
	return idx[last], false
}

// verifySampled runs the rejection sampler over c's verify rows (logits rows row.. of the
// step) in order, filling rows with the emitted samples, and returns how many drafts it
// accepted: rows[:a] are the accepted drafts, rows[a] the token after them.
func (e *Engine) verifySampled(c *choice, rows []Sample, row int) int {
	seq, p := c.seq, &c.req.params
	d := len(rows) - 1
	base := seq.Len() - d
	vocab := e.model.VocabSize
	smp := &e.pool.samplers[0] // the pool is idle between steps' sampling
	for j := 0; j <= d; j++ {
		logits := e.specLogits[(row+j)*vocab : (row+j+1)*vocab]
		in := sampleInput{params: p, prompt: seq.TokenIDs[:seq.NumPromptTokens],
			output: seq.TokenIDs[seq.NumPromptTokens : base+j], rng: c.rng, stopIDs: c.req.stopIDs, wantTopN: p.Logprobs}
		if j == d {
			rows[j] = smp.sample(logits, &in)
			return d
		}
		s, ok := smp.verifyDraft(logits, &in, seq.TokenIDs[base+j], e.draftQ(c, j))
		rows[j] = s
		if !ok {
			return j
		}
	}
	return d
}
