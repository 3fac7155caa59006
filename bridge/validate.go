package bridge

import (
	"fmt"
	"math"
)

// Validate checks everything about a payload that does not depend on the model or on the
// engine's state: the wire version, bounds, ids (non-empty, unique among the scheduled ones),
// non-negative counts, the shape of the parallel lists, and that num_scheduled_tokens names
// exactly the scheduled requests. Errors wrap ErrInvalidPayload.
func (p *ExecuteModelPayload) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidPayload, fmt.Sprintf(format, args...))
	}
	if p.WireVersion != WireVersion {
		return bad("wire_version %d, this plugin speaks %d", p.WireVersion, WireVersion)
	}
	c := &p.Cached
	n := len(p.NewRequests) + len(c.ReqIDs)
	if n+len(p.FinishedReqIDs) > MaxBatchRequests {
		return bad("%d scheduled and %d finished requests, more than %d", n, len(p.FinishedReqIDs), MaxBatchRequests)
	}
	for _, list := range []struct {
		name string
		n    int
	}{
		{"resumed_from_preemption", len(c.ResumedFromPreemption)},
		{"new_block_ids", len(c.NewBlockIDs)},
		{"num_output_tokens", len(c.NumOutputTokens)},
	} {
		if list.n != 0 && list.n != len(c.ReqIDs) {
			return bad("scheduled_cached_reqs.%s has %d entries for %d req_ids", list.name, list.n, len(c.ReqIDs))
		}
	}
	if len(c.NumComputedTokens) != len(c.ReqIDs) {
		return bad("scheduled_cached_reqs.num_computed_tokens has %d entries for %d req_ids", len(c.NumComputedTokens), len(c.ReqIDs))
	}
	seen := make(map[string]bool, n)
	var total int64
	scheduled := func(id, where string) error {
		if err := checkID(id); err != nil {
			return bad("%s: %v", where, err)
		}
		if seen[id] {
			return bad("request %q is scheduled twice", id)
		}
		seen[id] = true
		k, ok := p.NumScheduledTokens[id]
		switch {
		case !ok:
			return bad("request %q has no num_scheduled_tokens entry", id)
		case k <= 0 || k > MaxTokensPerReq:
			return bad("num_scheduled_tokens[%q] is %d, want 1..%d", id, k, MaxTokensPerReq)
		}
		total += k
		return nil
	}
	for i := range p.NewRequests {
		r := &p.NewRequests[i]
		if err := scheduled(r.ReqID, fmt.Sprintf("scheduled_new_reqs[%d].req_id", i)); err != nil {
			return err
		}
		if err := r.validate(); err != nil {
			return bad("scheduled_new_reqs[%d] (%q): %v", i, r.ReqID, err)
		}
	}
	for i, id := range c.ReqIDs {
		if err := scheduled(id, fmt.Sprintf("scheduled_cached_reqs.req_ids[%d]", i)); err != nil {
			return err
		}
		if v := c.NumComputedTokens[i]; v < 0 || v > MaxTokensPerReq {
			return bad("scheduled_cached_reqs.num_computed_tokens[%d] (%q) is %d, want 0..%d", i, id, v, MaxTokensPerReq)
		}
		if len(c.NumOutputTokens) > 0 {
			if v := c.NumOutputTokens[i]; v < 0 || v > MaxTokensPerReq {
				return bad("scheduled_cached_reqs.num_output_tokens[%d] (%q) is %d, want 0..%d", i, id, v, MaxTokensPerReq)
			}
		}
		if len(c.NewBlockIDs) > 0 {
			if err := checkBlockGroups(c.NewBlockIDs[i], true); err != nil {
				return bad("scheduled_cached_reqs.new_block_ids[%d] (%q): %v", i, id, err)
			}
		}
	}
	if len(p.NumScheduledTokens) != len(seen) {
		for id := range p.NumScheduledTokens {
			if !seen[id] {
				return bad("num_scheduled_tokens names %q, which is neither a new nor a cached scheduled request", id)
			}
		}
	}
	if p.TotalNumScheduledTokens != 0 && p.TotalNumScheduledTokens != total {
		return bad("total_num_scheduled_tokens is %d but num_scheduled_tokens adds up to %d", p.TotalNumScheduledTokens, total)
	}
	for id, drafts := range p.ScheduledSpecDecodeTokens {
		if !seen[id] {
			return bad("scheduled_spec_decode_tokens names %q, which is not scheduled", id)
		}
		if len(drafts) > MaxDraftsPerReq {
			return bad("scheduled_spec_decode_tokens[%q] has %d drafts, more than %d", id, len(drafts), MaxDraftsPerReq)
		}
		if k := p.NumScheduledTokens[id]; int64(len(drafts)) >= k {
			return bad("scheduled_spec_decode_tokens[%q] has %d drafts in a chunk of %d scheduled tokens (the drafts follow at least one known token)", id, len(drafts), k)
		}
		for _, t := range drafts {
			if t < 0 || t > MaxTokenID {
				return bad("scheduled_spec_decode_tokens[%q] holds token id %d", id, t)
			}
		}
	}
	for i, id := range p.FinishedReqIDs {
		if err := checkID(id); err != nil {
			return bad("finished_req_ids[%d]: %v", i, err)
		}
	}
	return nil
}

func (r *NewRequest) validate() error {
	if len(r.PromptTokenIDs) == 0 || len(r.PromptTokenIDs) > MaxTokensPerReq {
		return fmt.Errorf("prompt_token_ids has %d tokens, want 1..%d", len(r.PromptTokenIDs), MaxTokensPerReq)
	}
	for _, t := range r.PromptTokenIDs {
		if t < 0 || t > MaxTokenID {
			return fmt.Errorf("prompt token id %d is negative or too large", t)
		}
	}
	if r.NumComputedTokens < 0 || r.NumComputedTokens > int64(len(r.PromptTokenIDs)) {
		return fmt.Errorf("num_computed_tokens is %d, want 0..%d (the prompt's length)", r.NumComputedTokens, len(r.PromptTokenIDs))
	}
	if r.OutputOffset < 0 || r.OutputOffset >= int64(len(r.PromptTokenIDs)) {
		return fmt.Errorf("output_offset is %d, want 0..%d (the prompt's length - 1)", r.OutputOffset, len(r.PromptTokenIDs)-1)
	}
	if err := checkBlockGroups(r.BlockIDs, false); err != nil {
		return fmt.Errorf("block_ids: %v", err)
	}
	return r.SamplingParams.validate()
}

// validate checks what bounds the sampling parameters on the wire; the engine checks their
// meaning (ranges of probabilities, penalties, top-k against the vocabulary).
func (s *SamplingParams) validate() error {
	ints := []struct {
		name string
		v    int64
	}{{"n", s.N}, {"top_k", s.TopK}, {"max_tokens", s.MaxTokens}, {"min_tokens", s.MinTokens}}
	if s.Logprobs != nil {
		ints = append(ints, struct {
			name string
			v    int64
		}{"logprobs", *s.Logprobs})
	}
	for _, f := range ints {
		if f.v < math.MinInt32 || f.v > math.MaxInt32 {
			return fmt.Errorf("sampling_params.%s is %d, out of the int32 range", f.name, f.v)
		}
	}
	if len(s.StopTokenIDs) > MaxStopTokenIDs {
		return fmt.Errorf("sampling_params.stop_token_ids has %d ids, more than %d", len(s.StopTokenIDs), MaxStopTokenIDs)
	}
	for _, t := range s.StopTokenIDs {
		if t < 0 || t > MaxTokenID {
			return fmt.Errorf("sampling_params.stop_token_ids has %d, negative or too large", t)
		}
	}
	if len(s.Stop) > MaxStopStrings {
		return fmt.Errorf("sampling_params.stop has %d strings, more than %d", len(s.Stop), MaxStopStrings)
	}
	for _, st := range s.Stop {
		if len(st) > MaxStopStringBytes {
			return fmt.Errorf("sampling_params.stop has a string of %d bytes, more than %d", len(st), MaxStopStringBytes)
		}
	}
	return nil
}

// checkBlockGroups checks a per-KV-group list of block ids: one group (none allowed when
// optional), each id in [0, MaxBlockID], at most MaxTokensPerReq of them.
func checkBlockGroups(groups [][]int64, optional bool) error {
	switch {
	case len(groups) == 0 && optional:
		return nil
	case len(groups) != 1:
		return fmt.Errorf("%d KV-cache groups, atom-go has exactly 1", len(groups))
	case len(groups[0]) > MaxTokensPerReq:
		return fmt.Errorf("%d block ids, more than %d", len(groups[0]), MaxTokensPerReq)
	}
	for _, b := range groups[0] {
		if b < 0 || b > MaxBlockID {
			return fmt.Errorf("block id %d is negative or too large", b)
		}
	}
	return nil
}

func checkID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("empty request id")
	case len(id) > MaxRequestIDBytes:
		return fmt.Errorf("request id of %d bytes, more than %d", len(id), MaxRequestIDBytes)
	}
	return nil
}
