package engine

import (
	"math/rand/v2"
	"slices"

	"github.com/atom-go/atom/engine/sched"
)

// Draft-model speculation (--speculative-config {"method": "draft_model", "model": ...}): a
// smaller checkpoint with the target's vocabulary runs in the same process, on the same
// backend, with its own paged KV cache. That cache has as many blocks as the target's and is
// addressed through the target's block tables, as vLLM's draft KV cache groups are: blocks are
// allocated, shared by the prefix cache and freed in lockstep with the target's, and the
// scheduler gives every sampling chunk LookaheadTokens = K slots past it, where the draft
// writes the KV of the tokens it proposes.
//
// After each step (draftAfterStep), the draft computes, for every item of the batch, the
// tokens whose target KV the step produced and that it has not computed yet: a prefill chunk,
// or the accepted tokens and the token the target sampled. For a sequence that sampled, the
// last position's logits give the first draft; K-1 one-token steps over all such sequences
// give the rest. Each sequence's drafts then go to the scheduler (SetDrafts) for the next
// step's verification.
//
// The draft's KV is valid for a sequence's first draftDone tokens; its proposals d1..d(k-1)
// also have KV, at positions that stay valid exactly when the target accepts them, so
// rolling back a rejection is moving draftDone (verify), and the next step overwrites the
// rest. Every block the prefix cache registers has the draft's KV too: registration covers
// tokens before the last sampled one, which the draft computed in the step that produced
// them (also for a sequence that finished in that step, whose freed blocks nobody reuses
// before the next Schedule). A sequence admitted with cached blocks so starts with draftDone
// at its cached prefix; a preempted one starts over.
//
// Greedy requests draft the draft model's argmax (after the request's penalties); sampling
// requests draw from the draft's distribution q with the request's parameters and keep q for
// the rejection sampler (spec_sample.go).

// drafter is a draft model (or an MTP layer) with its runner (and KV cache) and per-step
// scratch.
type drafter struct {
	runner *Runner
	// mtp is the runner's model under method mtp (spec_mtp.go); nil for a draft model.
	mtp    *mtpModel
	k      int
	vocab  int
	smp    sampler
	works  []Work
	active []*choice // choices whose next drafts this step proposes, in sample-row order
	rows   []*choice // choices of the current one-token step, in row order
}

// draftState is a choice's bookkeeping under a draft model or an MTP layer.
type draftState struct {
	// done is how many leading tokens have the draft's KV; -1 until the sequence is first
	// scheduled (or after it was preempted).
	done int
	// ahead is how many of the proposed drafts had their KV written by the draft.
	ahead int
	// n is how many drafts this step proposes.
	n int
	// row is, under method mtp, the row of the layer's last pass that holds this choice's
	// last hidden state.
	row int32
	// drafts are this step's proposals, in order.
	drafts []int32
	// q holds, for a sampling request, the distribution each draft was drawn from: K rows of
	// the vocabulary.
	q []float32
}

// draftQ is the distribution c's draft j was drawn from, or nil when it is one-hot (n-gram
// drafts, and every greedy request's).
func (e *Engine) draftQ(c *choice, j int) []float32 {
	if e.drafter == nil || c.draft.q == nil {
		return nil
	}
	v := e.drafter.vocab
	return c.draft.q[j*v : (j+1)*v]
}

// draftAccepted rolls c's draft KV back to the accepted drafts: a of the proposals were
// accepted, and those the draft wrote KV for stay valid.
func (e *Engine) draftAccepted(c *choice, a int) {
	if e.drafter == nil {
		return
	}
	c.draft.done += min(a, c.draft.ahead)
	c.draft.ahead = 0
}

// draftPreempted forgets the draft KV of sequences that lost their blocks.
func (e *Engine) draftPreempted(b sched.Batch) {
	if e.drafter == nil {
		return
	}
	for _, seq := range b.Preempted {
		if c := e.bySeq[seq]; c != nil {
			c.draft.done, c.draft.ahead = -1, 0
		}
	}
}

// draftCount is how many drafts c may propose for its next step: K, fewer when max_tokens or
// the model length would cut an all-accepted run.
func (e *Engine) draftCount(c *choice) int {
	seq := c.seq
	k := min(e.drafter.k, e.maxModelLen-seq.Len()-1)
	if mt := c.req.params.MaxTokens; mt > 0 {
		k = min(k, mt-seq.NumGenerated()-1)
	}
	return max(k, 0)
}

// draftAfterStep brings the draft's KV up to every item of the step just run (choices holds
// their choices, captured before sampling, and work their schedule-time work) and proposes
// the next drafts of the sequences that sampled.
func (e *Engine) draftAfterStep(items []sched.Item, choices []*choice, work []Work) error {
	d := e.drafter
	if d.mtp != nil {
		return e.mtpAfterStep(items, choices, work)
	}
	d.works, d.active = d.works[:0], d.active[:0]
	for i, it := range items {
		c := choices[i]
		if c == nil {
			continue
		}
		seq := c.seq
		if c.draft.done < 0 {
			c.draft.done = it.Start // a cached prefix has the draft's KV too
		}
		table := seq.BlockTable
		var to int
		sample := false
		switch {
		case c.finished:
			// The target's KV of the step's known tokens is in the prefix cache: give the
			// freed blocks the draft's KV too.
			to, table = min(it.Start+it.NumTokens-work[i].Drafts, seq.Len()), work[i].BlockTable
		case it.Sample:
			to = seq.Len()
			c.draft.n = e.draftCount(c)
			sample = c.draft.n > 0
		default:
			to = it.Start + it.NumTokens
		}
		if to <= c.draft.done || to > len(table)*e.runner.blockSize {
			continue
		}
		d.works = append(d.works, Work{Tokens: seq.TokenIDs, Start: c.draft.done, NumTokens: to - c.draft.done,
			BlockTable: table, Sample: sample})
		c.draft.done = to
		if sample {
			d.active = append(d.active, c)
		}
	}
	if len(d.works) == 0 {
		return nil
	}
	logits, err := d.runner.Run(d.works)
	if err != nil {
		return err
	}
	for r, c := range d.active {
		seq := c.seq
		// The drafts are written past the sequence's tokens, in spare capacity of its array,
		// so that one-token steps read them at their positions without copying the sequence;
		// SetDrafts later appends the same values there.
		seq.TokenIDs = slices.Grow(seq.TokenIDs, d.k+1)
		c.draft.drafts = c.draft.drafts[:0]
		e.drawDraft(c, logits[r*d.vocab:(r+1)*d.vocab], 0)
	}
	for j := 1; ; j++ {
		d.works, d.rows = d.works[:0], d.rows[:0]
		for _, c := range d.active {
			if c.draft.n <= j {
				continue
			}
			seq := c.seq
			l := seq.Len()
			toks := append(seq.TokenIDs, c.draft.drafts...)
			d.works = append(d.works, Work{Tokens: toks, Start: l + j - 1, NumTokens: 1, BlockTable: seq.BlockTable, Sample: true})
			d.rows = append(d.rows, c)
		}
		if len(d.works) == 0 {
			break
		}
		logits, err := d.runner.Run(d.works)
		if err != nil {
			return err
		}
		for r, c := range d.rows {
			e.drawDraft(c, logits[r*d.vocab:(r+1)*d.vocab], j)
		}
	}
	for _, c := range d.active {
		n := e.sched.SetDrafts(c.seq, c.draft.drafts)
		c.draft.ahead = max(0, min(n, len(c.draft.drafts)-1))
	}
	return nil
}

// drawDraft appends c's draft j, drawn from the draft model's logits with c's sampling
// parameters as if drafts 0..j-1 had been emitted: the argmax for a greedy request, else a
// draw from q, which it keeps.
func (e *Engine) drawDraft(c *choice, logits []float32, j int) {
	seq := c.seq
	out := append(seq.TokenIDs[seq.NumPromptTokens:], c.draft.drafts...)
	e.drafter.draw(&c.draft, logits, j, &sampleInput{params: &c.req.params, prompt: seq.TokenIDs[:seq.NumPromptTokens],
		output: out, rng: c.rng, stopIDs: c.req.stopIDs})
}

// draw appends draft j to st, from the draft's logits after the request's penalties (in): the
// argmax for a greedy request, else a draw from q, which st keeps for rejection sampling.
func (d *drafter) draw(st *draftState, logits []float32, j int, in *sampleInput) {
	processed := d.smp.process(logits, in)
	if in.params.Temperature == 0 {
		st.drafts = append(st.drafts, argmax(processed))
		return
	}
	if st.q == nil {
		st.q = make([]float32, d.k*d.vocab)
	}
	q := st.q[j*d.vocab : (j+1)*d.vocab]
	st.drafts = append(st.drafts, d.smp.drawQ(processed, in.params, in.rng, q))
}

// drawQ draws a token from softmax(logits/T) restricted by p's top-k, top-p and min-p, as
// draw does, and writes that distribution into q (one probability per vocabulary entry).
func (s *sampler) drawQ(logits []float32, p *SamplingParams, rng *rand.Rand, q []float32) int32 {
	clear(q)
	idx, probs, cut, kept := s.dist(logits, p)
	for i := 0; i < cut; i++ {
		q[idx[i]] = float32(float64(probs[i]) / kept)
	}
	r := rng.Float64() * kept
	for i := 0; i < cut; i++ {
		r -= float64(probs[i])
		if r < 0 {
			return idx[i]
		}
	}
	return idx[cut-1]
}
