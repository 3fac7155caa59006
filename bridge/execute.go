package bridge

import (
	"fmt"
	"slices"

	"github.com/vmihailenco/msgpack/v5"
)

// Bounds on an ExecuteModelPayload, checked by Validate before the engine sees it. The engine
// checks what depends on the model (vocabulary, block count, model length) on top of these.
const (
	MaxBatchRequests   = 1 << 16 // scheduled plus finished request ids in one payload
	MaxRequestIDBytes  = 1024
	MaxTokensPerReq    = 1 << 24 // prompt tokens, block ids, scheduled or computed tokens of one request
	MaxTokenID         = 1<<31 - 1
	MaxBlockID         = 1<<31 - 1
	MaxStopTokenIDs    = 1 << 12
	MaxStopStrings     = 64
	MaxStopStringBytes = 1 << 12
	MaxDraftsPerReq    = 64 // scheduled_spec_decode_tokens of one request
)

// SamplingParams are a request's sampling controls on the msgpack wire, with vLLM's names and
// meanings (the Python shim copies vLLM's SamplingParams field by field). Integers are decoded
// as int64 so that an out-of-range value is refused instead of wrapped. nil Temperature means
// 1, nil SkipSpecialTokens means true, nil Logprobs asks for none (as vLLM's None); other zero
// values mean what they mean to the engine.
type SamplingParams struct {
	N                 int64    `msgpack:"n"`
	Temperature       *float64 `msgpack:"temperature"`
	TopP              float64  `msgpack:"top_p"`
	TopK              int64    `msgpack:"top_k"`
	MinP              float64  `msgpack:"min_p"`
	Seed              *int64   `msgpack:"seed"`
	RepetitionPenalty float64  `msgpack:"repetition_penalty"`
	PresencePenalty   float64  `msgpack:"presence_penalty"`
	FrequencyPenalty  float64  `msgpack:"frequency_penalty"`
	MaxTokens         int64    `msgpack:"max_tokens"`
	MinTokens         int64    `msgpack:"min_tokens"`
	IgnoreEOS         bool     `msgpack:"ignore_eos"`
	StopTokenIDs      []int64  `msgpack:"stop_token_ids"`
	Stop              []string `msgpack:"stop"`
	Logprobs          *int64   `msgpack:"logprobs"` // nil: no logprobs; 0: the sampled token's only
	SkipSpecialTokens *bool    `msgpack:"skip_special_tokens"`
}

// ExecuteModelPayload is one step scheduled by the host (vLLM v1's SchedulerOutput), the msgpack
// payload of the ExecuteModel RPC. Unknown keys are ignored.
type ExecuteModelPayload struct {
	// WireVersion must equal WireVersion.
	WireVersion int64 `msgpack:"wire_version"`
	// NewRequests are scheduled for the first time (or again after the host dropped them).
	NewRequests []NewRequest `msgpack:"scheduled_new_reqs"`
	// Cached are requests the engine has state for, scheduled again.
	Cached CachedRequests `msgpack:"scheduled_cached_reqs"`
	// NumScheduledTokens maps every scheduled request (new and cached) to the number of tokens
	// computed this step, from its num_computed_tokens on.
	NumScheduledTokens map[string]int64 `msgpack:"num_scheduled_tokens"`
	// TotalNumScheduledTokens, when not 0, must be the sum of NumScheduledTokens.
	TotalNumScheduledTokens int64 `msgpack:"total_num_scheduled_tokens"`
	// FinishedReqIDs are requests the host finished since the previous step: their state is
	// freed before this step runs. Ids the engine does not know are ignored (the host also
	// finishes requests it never scheduled).
	FinishedReqIDs []string `msgpack:"finished_req_ids"`
	// ScheduledSpecDecodeTokens (vLLM's scheduled_spec_decode_tokens; absent: none) maps a
	// scheduled request to the drafts it verifies this step: its scheduled tokens end with
	// them, right after its known tokens. They are drafts the plugin proposed
	// (ExecuteModelResult.DraftTokenIDs), as many as the host scheduled.
	ScheduledSpecDecodeTokens map[string][]int64 `msgpack:"scheduled_spec_decode_tokens"`
}

// NewRequest is vLLM's NewRequestData.
type NewRequest struct {
	ReqID          string         `msgpack:"req_id"`
	PromptTokenIDs []int64        `msgpack:"prompt_token_ids"`
	SamplingParams SamplingParams `msgpack:"sampling_params"`
	// BlockIDs has one list of KV block ids per KV-cache group; atom-go has exactly one group.
	BlockIDs [][]int64 `msgpack:"block_ids"`
	// NumComputedTokens of the prompt are already in the KV cache (prefix cache hit).
	NumComputedTokens int64 `msgpack:"num_computed_tokens"`
	// OutputOffset (atom-go's own key, absent: 0) marks a request recomputed after its
	// engine died: the last OutputOffset prompt ids are outputs an earlier engine sampled,
	// and count as outputs (num_output_tokens, penalties, min_tokens, seeded draws).
	OutputOffset int64 `msgpack:"output_offset"`
}

// CachedRequests is vLLM's CachedRequestData: parallel lists indexed like ReqIDs.
type CachedRequests struct {
	ReqIDs []string `msgpack:"req_ids"`
	// ResumedFromPreemption (empty: none) marks requests whose NewBlockIDs replace their block
	// table; the others' NewBlockIDs are appended.
	ResumedFromPreemption []bool `msgpack:"resumed_from_preemption"`
	// NewBlockIDs (empty: none) has, per request, nil or one list per KV-cache group.
	NewBlockIDs [][][]int64 `msgpack:"new_block_ids"`
	// NumComputedTokens is required for every request.
	NumComputedTokens []int64 `msgpack:"num_computed_tokens"`
	// NumOutputTokens (empty: unchecked) is the host's count of the request's sampled tokens;
	// the engine forgets any it sampled beyond that count.
	NumOutputTokens []int64 `msgpack:"num_output_tokens"`
}

// ExecuteModelResult is the msgpack result of the ExecuteModel RPC (vLLM's ModelRunnerOutput).
// Lists are parallel to ReqIDs: scheduled new requests first, then cached ones, in payload order.
type ExecuteModelResult struct {
	WireVersion int64    `msgpack:"wire_version"`
	ReqIDs      []string `msgpack:"req_ids"`
	// SampledTokenIDs has one token for a request whose scheduled tokens reached the end of its
	// known tokens, none for a prefill chunk that did not, and for a request that verified
	// drafts the accepted ones followed by the target's own token (1 to drafts+1 tokens; the
	// host rolls the rejected drafts back out of its computed tokens).
	SampledTokenIDs [][]int32 `msgpack:"sampled_token_ids"`
	// Logprobs is nil where no token was sampled or the request asked for none, else the row
	// of the request's first sampled token.
	Logprobs []*Logprobs `msgpack:"logprobs"`
	// MoreLogprobs (absent or empty when no request sampled more than one token with
	// logprobs) has, per request, the rows of its sampled tokens after the first (a verify
	// chunk's accepted drafts and the target's token): nil, or one row for each of
	// SampledTokenIDs[i][1:].
	MoreLogprobs [][]*Logprobs `msgpack:"more_logprobs"`
	// DraftTokenIDs (absent or empty when the plugin runs without --speculative-config) has,
	// per request, the drafts proposed for its next step (nil: none), which the host may
	// schedule as ScheduledSpecDecodeTokens.
	DraftTokenIDs [][]int32 `msgpack:"draft_token_ids"`
}

// Logprobs is one sampled token's row of vLLM's LogprobsLists.
type Logprobs struct {
	// TokenIDs and Logprobs list the sampled token first, then the request's top-N
	// alternatives, most likely first (raw logprobs of the model's distribution).
	TokenIDs []int32   `msgpack:"token_ids"`
	Logprobs []float32 `msgpack:"logprobs"`
	// Rank of the sampled token in the distribution, 1 for the most likely.
	Rank int32 `msgpack:"rank"`
}

// DecodeExecuteModel decodes and validates an ExecuteModel payload. Every error wraps
// ErrInvalidPayload and says what is wrong; it never panics, whatever b holds.
func DecodeExecuteModel(b []byte) (*ExecuteModelPayload, error) {
	if len(b) > MaxMessageBytes {
		return nil, fmt.Errorf("%w: %d bytes, more than %d", ErrInvalidPayload, len(b), MaxMessageBytes)
	}
	if err := CheckMsgpack(b); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidPayload, err)
	}
	var p ExecuteModelPayload
	if err := msgpack.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("%w: decode ExecuteModel payload: %v", ErrInvalidPayload, err)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// EncodeExecuteModel encodes a payload (hosts written in Go and tests use it).
func EncodeExecuteModel(p *ExecuteModelPayload) ([]byte, error) {
	b, err := msgpack.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encode ExecuteModel payload: %w", err)
	}
	return b, nil
}

// EncodeResult encodes an ExecuteModel result.
func EncodeResult(r *ExecuteModelResult) ([]byte, error) {
	b, err := msgpack.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode ExecuteModel result: %w", err)
	}
	return b, nil
}

// DecodeResult decodes an ExecuteModel result (hosts written in Go and tests use it).
func DecodeResult(b []byte) (*ExecuteModelResult, error) {
	if err := CheckMsgpack(b); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidPayload, err)
	}
	var r ExecuteModelResult
	if err := msgpack.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%w: decode ExecuteModel result: %v", ErrInvalidPayload, err)
	}
	if r.WireVersion != WireVersion {
		return nil, fmt.Errorf("%w: result has wire_version %d, want %d", ErrInvalidPayload, r.WireVersion, WireVersion)
	}
	if len(r.SampledTokenIDs) != len(r.ReqIDs) || len(r.Logprobs) != len(r.ReqIDs) || (len(r.DraftTokenIDs) != 0 && len(r.DraftTokenIDs) != len(r.ReqIDs)) ||
		(len(r.MoreLogprobs) != 0 && len(r.MoreLogprobs) != len(r.ReqIDs)) {
		return nil, fmt.Errorf("%w: result lists of %d ids, %d samples, %d logprobs, %d more logprobs, %d drafts", ErrInvalidPayload,
			len(r.ReqIDs), len(r.SampledTokenIDs), len(r.Logprobs), len(r.MoreLogprobs), len(r.DraftTokenIDs))
	}
	for i, more := range r.MoreLogprobs {
		if len(more) == 0 {
			continue
		}
		if r.Logprobs[i] == nil || len(more) != len(r.SampledTokenIDs[i])-1 {
			return nil, fmt.Errorf("%w: request %d has %d more logprobs rows for %d sampled tokens", ErrInvalidPayload,
				i, len(more), len(r.SampledTokenIDs[i]))
		}
		if slices.Contains(more, nil) {
			return nil, fmt.Errorf("%w: request %d has a nil logprobs row", ErrInvalidPayload, i)
		}
	}
	return &r, nil
}

// TokenLogprobs returns the logprobs row of request i's j-th sampled token, nil when it has
// none.
func (r *ExecuteModelResult) TokenLogprobs(i, j int) *Logprobs {
	if j == 0 {
		return r.Logprobs[i]
	}
	if i < len(r.MoreLogprobs) && j-1 < len(r.MoreLogprobs[i]) {
		return r.MoreLogprobs[i][j-1]
	}
	return nil
}
