package engine

// Speculative decoding in the engine (vLLM v1's design): after a decode sequence samples a
// token, propose drafts from its own tokens (spec.Config.Propose; a draft model proposes for
// the whole batch after the step instead, spec_draft.go) and hand them to the scheduler
// (sched.SetDrafts), which schedules the sequence's next step as a chunk
// of 1+k tokens with KV slots for all. The runner returns the logits of each of those
// positions; row j is sampled with the output as it would be had drafts 0..j-1 been emitted,
// so penalties, min_tokens and logprobs are those of the plain path. verify then emits the
// accepted drafts and the target's own next token, one at a time through the same stop checks
// as a plain step, and rolls the rejected drafts back (sched.AcceptDrafts).
//
// Greedy: a draft is accepted when it equals the target's argmax, so outputs are
// token-identical with and without speculation. Sampling: rejection sampling (spec_sample.go),
// so the output distribution is the target's.
//
// Verify steps replay the decode graphs where one fits (graphs.go), draw greedy rows on the
// device (a sampled request's rows are read on the host: rejection sampling needs their
// distributions) and are never scheduled ahead: speculation turns async scheduling off
// (load.go).

// propose gives c's sequence drafts for its next step when speculation is on; the drafts are capped so that, all accepted, they and the verify step's own token
// stay within max_tokens.
func (e *Engine) propose(c *choice) {
	if e.spec == nil || e.drafter != nil || c.finished {
		return
	}
	seq := c.seq
	k := e.spec.NumSpeculativeTokens
	if mt := c.req.params.MaxTokens; mt > 0 {
		k = min(k, mt-seq.NumGenerated()-1)
	}
	if k <= 0 {
		return
	}
	if e.specOracle != nil {
		e.draftBuf = e.specOracle(e.draftBuf[:0], seq.TokenIDs, k)
	} else {
		e.draftBuf = e.spec.Propose(e.draftBuf[:0], seq.TokenIDs, k)
	}
	if len(e.draftBuf) > 0 {
		e.sched.SetDrafts(seq, e.draftBuf)
	}
}

// verify accepts c's drafts against rows, the samples of its verify chunk (one per draft, then
// the one after the last draft; for a sampling request rows are drawn here, from the step's
// logits rows row..), emits the accepted drafts and the token that follows them, and returns
// how many tokens it emitted.
func (e *Engine) verify(c *choice, rows []Sample, row int) int {
	seq := c.seq
	d := len(rows) - 1
	a := 0
	if c.req.params.Temperature != 0 {
		a = e.verifySampled(c, rows, row)
	} else {
		drafts := seq.TokenIDs[seq.Len()-d:]
		for a < d && rows[a].Token == drafts[a] {
			a++
		}
	}
	e.statsMu.Lock()
	e.stats.SpecNumDrafts++
	e.stats.SpecNumDraftTokens += int64(d)
	e.stats.SpecNumAcceptedTokens += int64(a)
	e.statsMu.Unlock()

	e.sched.AcceptDrafts(seq, a)
	e.draftAccepted(c, a)
	base := seq.Len() - a // tokens before the first draft
	for j := 0; j < a; j++ {
		reason, stop := e.finishReasonAt(c, rows[j].Token, base+j+1-seq.NumPromptTokens, base+j+1)
		e.emit(c, rows[j], reason, stop)
		if c.finished {
			return j + 1
		}
	}
	e.sched.AppendToken(seq, rows[a].Token)
	reason, stop := e.finishReason(c, rows[a].Token)
	e.emit(c, rows[a], reason, stop)
	e.propose(c)
	return a + 1
}
