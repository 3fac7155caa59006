package engine

import "fmt"

// A host request's state: built from the host's first schedule of it (newRequest), then
// changed by each later schedule (update), the block table checked against the session's
// cache either way.

// newRequest checks a new request and builds its state.
func (h *HostSession) newRequest(nr *HostNewRequest) (*hostRequest, error) {
	p := nr.Params
	p.N = 1
	if err := p.Normalize(h.e.model.VocabSize); err != nil {
		return nil, err
	}
	if err := h.e.checkPrompt(nr.PromptIDs); err != nil {
		return nil, err
	}
	if nr.NumComputed < 0 || nr.NumComputed > len(nr.PromptIDs) {
		return nil, fmt.Errorf("%w: num_computed_tokens %d outside [0, %d]", ErrInvalidRequest, nr.NumComputed, len(nr.PromptIDs))
	}
	blocks, err := h.checkBlocks(nil, nr.BlockIDs)
	if err != nil {
		return nil, err
	}
	if nr.OutputOffset < 0 || nr.OutputOffset >= len(nr.PromptIDs) {
		return nil, fmt.Errorf("%w: output_offset %d outside [0, %d)", ErrInvalidRequest, nr.OutputOffset, len(nr.PromptIDs))
	}
	r := &hostRequest{tokens: append(make([]int32, 0, len(nr.PromptIDs)+16), nr.PromptIDs...), numPrompt: len(nr.PromptIDs) - nr.OutputOffset,
		params: p, logprobs: nr.WantLogprobs, blocks: blocks}
	r.stopIDs = append(r.stopIDs, p.StopTokenIDs...)
	if !p.IgnoreEOS {
		r.stopIDs = append(r.stopIDs, h.e.eos...)
	}
	r.rng, r.seed = choiceRNG(h.e.rng, p.Seed, 0)
	skipDraws(r.rng, nr.OutputOffset)
	return r, nil
}

// update returns old's state as a cached request changes it, leaving old untouched.
func (h *HostSession) update(old *hostRequest, cr *HostCachedRequest) (*hostRequest, error) {
	r := *old
	base := old.blocks
	if cr.Resumed {
		base = nil
	}
	blocks, err := h.checkBlocks(base, cr.NewBlockIDs)
	if err != nil {
		return nil, err
	}
	r.blocks = blocks
	if have := len(old.tokens) - old.numPrompt; cr.NumOutput >= 0 {
		if cr.NumOutput > have {
			return nil, fmt.Errorf("%w: the host counts %d output tokens, the engine sampled %d", ErrInvalidRequest, cr.NumOutput, have)
		}
		// Forgetting tokens must not write through to old's array, which a later append reuses.
		r.tokens = old.tokens[: old.numPrompt+cr.NumOutput : old.numPrompt+cr.NumOutput]
	}
	return &r, nil
}

// checkBlocks returns base followed by ids (a new array), checking every id against the
// session's cache.
func (h *HostSession) checkBlocks(base, ids []int32) ([]int32, error) {
	for _, b := range ids {
		if b < 0 || int(b) >= h.numBlocks {
			return nil, fmt.Errorf("%w: block id %d outside the host's KV cache [0, %d)", ErrInvalidRequest, b, h.numBlocks)
		}
	}
	if len(ids) == 0 && base != nil {
		return base, nil
	}
	out := make([]int32, 0, len(base)+len(ids))
	return append(append(out, base...), ids...), nil
}
