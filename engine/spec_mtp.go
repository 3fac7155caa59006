package engine

import (
	"slices"

	"github.com/atom-go/atom/engine/sched"
	"github.com/atom-go/atom/models"
	"github.com/atom-go/atom/ops"
)

// MTP speculation (--speculative-config {"method": "mtp"}, DeepSeek-V3's
// num_nextn_predict_layers layer, models.MTP) runs like a draft model (spec_draft.go: its own
// one-layer KV cache addressed through the target's block tables, LookaheadTokens slots, the
// same sampling of drafts), with two differences, as in vLLM:
//
//   - The layer at position p reads the token at p+1 and the target's final-normed hidden
//     state at p, so after a step it computes the positions the step's target pass computed
//     whose next token is known (the accepted ones), reading the target's hidden states of
//     that pass (Runner.hidden); a verify step's last accepted position gives the first draft.
//   - Draft j+1 reads draft j as its token and the layer's own output for draft j as its
//     hidden state, so the KV the layer writes for drafts is never valid for the target's
//     tokens: after verification the layer's KV is valid up to the verify chunk's start
//     whatever was accepted, and the next step recomputes from there.
//
// The target's hidden states of a position exist only in the step that computed it: a
// position the layer has not computed by then (none, as long as every step is followed by
// the layer's pass) keeps stale KV, which costs acceptance, never exactness.

// mtpModel adapts models.MTP to the Runner: Forward reads the previous hidden states set
// before each Run.
type mtpModel struct {
	*models.MTP
	prev ops.Tensor
	rows []int32
}

// Forward runs the MTP layer with the previous hidden states rows of prev.
func (m *mtpModel) Forward(ids []int32, meta *ops.AttnMetadata, cache ops.KVCache) ops.Tensor {
	return m.MTP.Forward(ids, m.prev, m.rows, meta, cache)
}

// mtpAfterStep is draftAfterStep for the MTP layer.
func (e *Engine) mtpAfterStep(items []sched.Item, choices []*choice, work []Work) error {
	d, m := e.drafter, e.drafter.mtp
	target := e.runner.hidden
	if target == nil {
		return nil // not an eager step: nothing to read (MTP turns graphs off)
	}
	qs := e.runner.meta.QueryStart
	d.works, d.active, m.rows = d.works[:0], d.active[:0], m.rows[:0]
	for i, it := range items {
		c := choices[i]
		if c == nil {
			continue
		}
		seq := c.seq
		if c.draft.done < 0 {
			c.draft.done = it.Start // a cached prefix has the layer's KV too
		}
		table := seq.BlockTable
		var end int // positions [done, end) are computed: their next token is known
		sample := false
		switch {
		case c.finished:
			end, table = min(it.Start+it.NumTokens-work[i].Drafts, seq.Len()-1), work[i].BlockTable
		case it.Sample:
			end = seq.Len() - 1
			c.draft.n = e.draftCount(c)
			sample = c.draft.n > 0
		default:
			end = it.Start + it.NumTokens
		}
		from := c.draft.done
		if from < it.Start || end <= from || end > it.Start+it.NumTokens || end > len(table)*e.runner.blockSize {
			continue
		}
		// Tokens shifted by one: the layer's input at position p is the token at p+1.
		d.works = append(d.works, Work{Tokens: seq.TokenIDs[1:], Start: from, NumTokens: end - from, BlockTable: table, Sample: sample})
		for p := from; p < end; p++ {
			m.rows = append(m.rows, qs[i]+int32(p-it.Start))
		}
		c.draft.done = end
		if sample {
			d.active = append(d.active, c)
		}
	}
	if len(d.works) == 0 {
		return nil
	}
	m.prev = target
	logits, err := d.runner.Run(d.works)
	if err != nil {
		return err
	}
	// The row of each active choice's last position in the pass just run.
	mq := d.runner.meta.QueryStart
	r := 0
	for w, wk := range d.works {
		if !wk.Sample {
			continue
		}
		c := d.active[r]
		seq := c.seq
		seq.TokenIDs = slices.Grow(seq.TokenIDs, d.k+1) // drafts are read in place, as spec_draft.go does
		c.draft.drafts = c.draft.drafts[:0]
		c.draft.row = mq[w+1] - 1
		e.drawDraft(c, logits[r*d.vocab:(r+1)*d.vocab], 0)
		r++
	}
	for j := 1; ; j++ {
		d.works, d.rows, m.rows = d.works[:0], d.rows[:0], m.rows[:0]
		for _, c := range d.active {
			if c.draft.n <= j {
				continue
			}
			seq := c.seq
			toks := append(seq.TokenIDs, c.draft.drafts...)
			d.works = append(d.works, Work{Tokens: toks[1:], Start: seq.Len() - 2 + j, NumTokens: 1, BlockTable: seq.BlockTable, Sample: true})
			d.rows = append(d.rows, c)
			m.rows = append(m.rows, c.draft.row)
		}
		if len(d.works) == 0 {
			break
		}
		m.prev = m.Hidden()
		logits, err := d.runner.Run(d.works)
		if err != nil {
			return err
		}
		for r, c := range d.rows {
			c.draft.row = int32(r)
			e.drawDraft(c, logits[r*d.vocab:(r+1)*d.vocab], j)
		}
	}
	for _, c := range d.active {
		e.sched.SetDrafts(c.seq, c.draft.drafts)
		c.draft.ahead = 0 // the layer's KV of drafts never stands for the target's tokens
	}
	return nil
}
