package engine

import "fmt"

// Speculative decoding under a host (vLLM's scheduled_spec_decode_tokens): the engine proposes
// each request's drafts after the step that sampled its last token (HostOutput.Drafts), the
// host decides which of them to schedule (all, fewer when its token budget or the model
// length cuts them, none) and sends them back with the step (HostStep.Drafts), whose chunk
// for that request then ends with the drafts. Every position of the chunk is sampled as in an
// engine-scheduled verify step (spec_step.go): greedy requests accept the drafts equal to the
// argmax, sampling requests run the rejection sampler (q one-hot for n-gram drafts, the
// draft model's distribution for its own), and the request's result is the accepted drafts
// followed by the target's own token.
//
// Rolling a rejection back is the host's: it counts the rejected drafts out of its computed
// tokens (vLLM lowers num_computed_tokens by them), so its next step recomputes from the
// first rejected position, overwriting the KV written there; the engine keeps only the
// emitted tokens. The n-gram proposer runs here (propose), a draft model or an MTP layer after
// the step (spec_host_draft.go). A request that asks for logprobs gets a row for each token
// it emits, as without speculation.

// withDrafts checks the drafts a host scheduled for r and returns r's known tokens followed
// by them (written past r's tokens, which stay as they are until the step commits).
func (h *HostSession) withDrafts(r *hostRequest, drafts []int32) ([]int32, error) {
	if len(drafts) == 0 {
		return r.tokens, nil
	}
	sc := h.e.spec
	switch {
	case sc == nil:
		return nil, fmt.Errorf("%w: %d drafts scheduled, but the engine was loaded without --speculative-config", ErrInvalidRequest, len(drafts))
	case len(drafts) > sc.NumSpeculativeTokens:
		return nil, fmt.Errorf("%w: %d drafts scheduled, more than num_speculative_tokens %d", ErrInvalidRequest, len(drafts), sc.NumSpeculativeTokens)
	}
	for _, t := range drafts {
		if t < 0 || int(t) >= h.e.model.VocabSize {
			return nil, fmt.Errorf("%w: draft token id %d outside the vocabulary [0, %d)", ErrInvalidRequest, t, h.e.model.VocabSize)
		}
	}
	return append(r.tokens, drafts...), nil
}

// verify samples the rows of r's verify chunk (logits holds d+1 rows: one per draft, then the
// one after the last draft; toks is r's tokens followed by the d drafts), appends the accepted
// drafts and the token after them to r's tokens and returns those, with a logprobs row for
// each when r asks for them (nil otherwise).
func (h *HostSession) verify(r *hostRequest, toks []int32, d int, logits []float32) ([]int32, []HostLogprob) {
	vocab := h.e.model.VocabSize
	base := len(toks) - d
	emitted := make([]int32, 0, d+1)
	var lps []HostLogprob
	want := 0
	if r.logprobs {
		want, lps = r.params.Logprobs, make([]HostLogprob, 0, d+1)
	}
	a := 0
	for j := 0; j <= d; j++ {
		in := sampleInput{params: &r.params, prompt: toks[:r.numPrompt], output: toks[r.numPrompt : base+j], rng: r.rng, stopIDs: r.stopIDs, wantTopN: want}
		row := logits[j*vocab : (j+1)*vocab]
		var s Sample
		ok := false
		if j == d {
			s = h.e.sampler.sample(row, &in)
		} else {
			s, ok = h.e.sampler.verifyDraft(row, &in, toks[base+j], h.hostDraftQ(r, toks[base:], j))
		}
		emitted = append(emitted, s.Token)
		if r.logprobs {
			lps = append(lps, HostLogprob{Sample: s, Rank: rank(row, s.Token)})
		}
		if !ok {
			break
		}
		a++
	}
	h.e.statsMu.Lock()
	h.e.stats.SpecNumDrafts++
	h.e.stats.SpecNumDraftTokens += int64(d)
	h.e.stats.SpecNumAcceptedTokens += int64(a)
	h.e.statsMu.Unlock()
	hostDraftAccepted(r, toks[base:], a)
	r.tokens = append(toks[:base+a], emitted[a])
	return emitted, lps
}

// propose returns r's drafts for its next step, nil when it gets none: at most
// num_speculative_tokens, capped so that all of them accepted plus the verify step's own
// token stay within max_tokens and the model length.
func (h *HostSession) propose(r *hostRequest) []int32 {
	sc := h.e.spec
	if sc == nil || h.e.drafter != nil {
		return nil
	}
	k := min(sc.NumSpeculativeTokens, h.e.maxModelLen-len(r.tokens)-1)
	if mt := r.params.MaxTokens; mt > 0 {
		k = min(k, mt-(len(r.tokens)-r.numPrompt)-1)
	}
	if k <= 0 {
		return nil
	}
	var d []int32
	if h.e.specOracle != nil {
		d = h.e.specOracle(nil, r.tokens, k)
	} else {
		d = sc.Propose(nil, r.tokens, k)
	}
	if len(d) == 0 {
		return nil
	}
	return d
}
