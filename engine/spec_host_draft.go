package engine

import "slices"

// A draft model under a host (--speculative-config method draft_model, the host scheduling
// the drafts): the draft's KV cache is addressed through the host's block tables, as under
// the engine's own scheduler (spec_draft.go), which works because the host allocates the
// engine's block geometry (StartHostSession refuses another one with a draft model) and, as
// vLLM does for a draft model, num_speculative_tokens lookahead slots past each request's
// scheduled tokens, where the draft writes its proposals' KV.
//
// After each step the draft computes, for every scheduled request, what the step's target
// pass computed and the draft has not (a prefill chunk; the accepted drafts it has no KV for
// and the target's new token), and proposes the drafts of the requests that sampled. A
// request the host schedules with a computed prefix (new, or resumed after preemption) starts
// its draft there: the host's prefix cache only holds blocks of tokens the target computed in
// an earlier step, whose draft KV that step's pass computed too.

// hostDraftStart sets where r's draft KV ends before a step whose chunk starts at computed:
// at computed for a request (re)starting with a computed prefix, never past r's tokens.
func hostDraftStart(r *hostRequest, computed int, restart bool) {
	if restart || r.draft.done < 0 {
		r.draft.done, r.draft.ahead = computed, 0
	}
	r.draft.done = min(r.draft.done, len(r.tokens))
}

// hostDraftQ is the distribution r's draft j was drawn from when the host scheduled drafts
// the draft model proposed; nil (one-hot) for a greedy request or other drafts.
func (h *HostSession) hostDraftQ(r *hostRequest, drafts []int32, j int) []float32 {
	d := h.e.drafter
	if d == nil || r.draft.q == nil || len(drafts) > len(r.draft.drafts) || !slices.Equal(drafts, r.draft.drafts[:len(drafts)]) {
		return nil
	}
	return r.draft.q[j*d.vocab : (j+1)*d.vocab]
}

// hostDraftAccepted moves r's draft KV over the a accepted drafts it wrote KV for.
func hostDraftAccepted(r *hostRequest, drafts []int32, a int) {
	ahead := r.draft.ahead
	if len(drafts) > len(r.draft.drafts) || !slices.Equal(drafts, r.draft.drafts[:len(drafts)]) {
		ahead = 0 // not the draft's proposals: it wrote no KV for them
	}
	r.draft.done += min(a, ahead)
	r.draft.ahead = 0
}

// hostDraftCount is how many drafts r may propose for its next step.
func (h *HostSession) hostDraftCount(r *hostRequest) int {
	k := min(h.e.drafter.k, h.e.maxModelLen-len(r.tokens)-1)
	if mt := r.params.MaxTokens; mt > 0 {
		k = min(k, mt-(len(r.tokens)-r.numPrompt)-1)
	}
	return max(k, 0)
}

// hostDraftAfterStep brings the draft's KV up to the step just run and fills drafts[i] with
// the proposals of plan[i]'s request. A failed draft pass leaves the requests it concerned
// without (further) drafts; their KV is caught up by a later step.
func (h *HostSession) hostDraftAfterStep(plan []planned, drafts [][]int32) {
	d := h.e.drafter
	bs := h.blockSize
	var works []Work
	var active []int // plan indices of the requests that propose, in sample-row order
	for i := range plan {
		r := plan[i].req
		r.draft.drafts, r.draft.n = r.draft.drafts[:0], 0
		to := plan[i].work.Start + plan[i].work.NumTokens
		if plan[i].work.Sample {
			to = len(r.tokens)
			r.draft.n = h.hostDraftCount(r)
		}
		to = min(to, len(r.tokens))
		if to <= r.draft.done || to > len(r.blocks)*bs {
			continue
		}
		sample := r.draft.n > 0
		works = append(works, Work{Tokens: r.tokens, Start: r.draft.done, NumTokens: to - r.draft.done, BlockTable: r.blocks, Sample: sample})
		if sample {
			active = append(active, i)
		}
	}
	if len(works) == 0 {
		return
	}
	logits, err := d.runner.Run(works)
	if err != nil {
		h.e.log.Error("draft model pass failed; no drafts this step", "err", err)
		return
	}
	for i := range plan {
		r := plan[i].req
		to := plan[i].work.Start + plan[i].work.NumTokens
		if plan[i].work.Sample {
			to = len(r.tokens)
		}
		if to = min(to, len(r.tokens)); to > r.draft.done && to <= len(r.blocks)*bs {
			r.draft.done = to
		}
	}
	for row, i := range active {
		r := plan[i].req
		// Drafts are written past the request's tokens, in spare capacity, so that the
		// one-token passes read them at their positions without copying the tokens.
		r.tokens = slices.Grow(r.tokens, d.k+1)
		h.hostDrawDraft(r, logits[row*d.vocab:(row+1)*d.vocab], 0)
	}
	var rows []*hostRequest
	for j := 1; ; j++ {
		works, rows = works[:0], rows[:0]
		for _, i := range active {
			r := plan[i].req
			l := len(r.tokens)
			if r.draft.n <= j || len(r.draft.drafts) < j || l+j > len(r.blocks)*bs {
				continue
			}
			toks := append(r.tokens, r.draft.drafts...)
			works = append(works, Work{Tokens: toks, Start: l + j - 1, NumTokens: 1, BlockTable: r.blocks, Sample: true})
			rows = append(rows, r)
		}
		if len(works) == 0 {
			break
		}
		logits, err := d.runner.Run(works)
		if err != nil {
			h.e.log.Error("draft model pass failed; fewer drafts this step", "err", err)
			break
		}
		for row, r := range rows {
			h.hostDrawDraft(r, logits[row*d.vocab:(row+1)*d.vocab], j)
		}
	}
	for _, i := range active {
		r := plan[i].req
		r.draft.ahead = max(0, len(r.draft.drafts)-1)
		if len(r.draft.drafts) > 0 {
			drafts[i] = slices.Clone(r.draft.drafts)
		}
	}
}

// hostDrawDraft appends r's draft j, drawn from the draft model's logits as drawDraft does
// for an engine-scheduled sequence.
func (h *HostSession) hostDrawDraft(r *hostRequest, logits []float32, j int) {
	out := append(r.tokens[r.numPrompt:], r.draft.drafts...)
	h.e.drafter.draw(&r.draft, logits, j, &sampleInput{params: &r.params, prompt: r.tokens[:r.numPrompt], output: out,
		rng: r.rng, stopIDs: r.stopIDs})
}

// hostMTPAfterStep is hostDraftAfterStep for an MTP layer (spec_mtp.go): the layer computes
// the positions of the step's target pass whose next token is known, reading that pass's
// hidden states, and drafts from the last of them; its KV of drafts never stands for the
// target's tokens (ahead stays 0).
func (h *HostSession) hostMTPAfterStep(plan []planned, drafts [][]int32) {
	d, m := h.e.drafter, h.e.drafter.mtp
	target := h.runner.hidden
	if target == nil {
		return // not an eager step (MTP turns graphs off)
	}
	qs := h.runner.meta.QueryStart
	bs := h.blockSize
	var works []Work
	var active []int
	m.rows = m.rows[:0]
	for i := range plan {
		r, w := plan[i].req, &plan[i].work
		r.draft.drafts, r.draft.n, r.draft.ahead = r.draft.drafts[:0], 0, 0
		end := w.Start + w.NumTokens // positions [done, end) are computed: their next token is known
		if w.Sample {
			end = len(r.tokens) - 1
			r.draft.n = h.hostDraftCount(r)
		}
		from := r.draft.done
		if from < w.Start || end <= from || end > w.Start+w.NumTokens || end > len(r.blocks)*bs {
			continue
		}
		sample := r.draft.n > 0
		// Tokens shifted by one: the layer's input at position p is the token at p+1.
		works = append(works, Work{Tokens: r.tokens[1:], Start: from, NumTokens: end - from, BlockTable: r.blocks, Sample: sample})
		for p := from; p < end; p++ {
			m.rows = append(m.rows, qs[i]+int32(p-w.Start))
		}
		r.draft.done = end
		if sample {
			active = append(active, i)
		}
	}
	if len(works) == 0 {
		return
	}
	m.prev = target
	logits, err := d.runner.Run(works)
	if err != nil {
		h.e.log.Error("MTP pass failed; no drafts this step", "err", err)
		return
	}
	mq := d.runner.meta.QueryStart
	row := 0
	for w, wk := range works {
		if !wk.Sample {
			continue
		}
		r := plan[active[row]].req
		r.tokens = slices.Grow(r.tokens, d.k+1)
		r.draft.row = mq[w+1] - 1
		h.hostDrawDraft(r, logits[row*d.vocab:(row+1)*d.vocab], 0)
		row++
	}
	var rows []*hostRequest
	for j := 1; ; j++ {
		works, rows, m.rows = works[:0], rows[:0], m.rows[:0]
		for _, i := range active {
			r := plan[i].req
			l := len(r.tokens)
			if r.draft.n <= j || len(r.draft.drafts) < j || l-1+j > len(r.blocks)*bs {
				continue
			}
			toks := append(r.tokens, r.draft.drafts...)
			works = append(works, Work{Tokens: toks[1:], Start: l - 2 + j, NumTokens: 1, BlockTable: r.blocks, Sample: true})
			rows = append(rows, r)
			m.rows = append(m.rows, r.draft.row)
		}
		if len(works) == 0 {
			break
		}
		m.prev = m.Hidden()
		logits, err := d.runner.Run(works)
		if err != nil {
			h.e.log.Error("MTP pass failed; fewer drafts this step", "err", err)
			break
		}
		for k, r := range rows {
			r.draft.row = int32(k)
			h.hostDrawDraft(r, logits[k*d.vocab:(k+1)*d.vocab], j)
		}
	}
	for _, i := range active {
		if r := plan[i].req; len(r.draft.drafts) > 0 {
			drafts[i] = slices.Clone(r.draft.drafts)
		}
	}
}
