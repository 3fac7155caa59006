package bridge

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

// validPayload is a step of two new requests (one a prefill chunk) and one cached decode.
func validPayload() *ExecuteModelPayload {
	temp, lps := 0.0, int64(2)
	return &ExecuteModelPayload{
		WireVersion: WireVersion,
		NewRequests: []NewRequest{
			{ReqID: "a", PromptTokenIDs: []int64{1, 2, 3}, BlockIDs: [][]int64{{1}},
				SamplingParams: SamplingParams{Temperature: &temp, MaxTokens: 8, Logprobs: &lps}},
			{ReqID: "b", PromptTokenIDs: []int64{4, 5, 6, 7, 8}, BlockIDs: [][]int64{{2, 3}}},
		},
		Cached: CachedRequests{ReqIDs: []string{"c"}, ResumedFromPreemption: []bool{false},
			NewBlockIDs: [][][]int64{nil}, NumComputedTokens: []int64{9}, NumOutputTokens: []int64{2}},
		NumScheduledTokens:      map[string]int64{"a": 3, "b": 2, "c": 1},
		TotalNumScheduledTokens: 6,
		FinishedReqIDs:          []string{"old"},
	}
}

func encode(t testing.TB, v any) []byte {
	b, err := msgpack.Marshal(v)
	require.NoError(t, err)
	return b
}

func TestDecodeExecuteModelRoundTrip(t *testing.T) {
	p := validPayload()
	b, err := EncodeExecuteModel(p)
	require.NoError(t, err)
	got, err := DecodeExecuteModel(b)
	require.NoError(t, err)
	require.Equal(t, p, got)
}

func TestDecodeExecuteModelAcceptsPythonShapes(t *testing.T) {
	// What msgpack-python produces from the shim's dicts: ints where floats are expected,
	// None for optional fields, extra keys the plugin does not know.
	raw := map[string]any{
		"wire_version": 1,
		"scheduled_new_reqs": []any{map[string]any{
			"req_id": "r", "prompt_token_ids": []int{5, 6}, "block_ids": []any{[]int{0}},
			"num_computed_tokens": 0, "lora_request": nil,
			"sampling_params": map[string]any{"temperature": 1, "top_p": 1, "seed": nil, "logprobs": nil,
				"stop": nil, "max_tokens": nil, "skip_special_tokens": true},
		}},
		"scheduled_cached_reqs": map[string]any{"req_ids": []string{}, "new_block_ids": []any{},
			"num_computed_tokens": []int{}, "resumed_from_preemption": []bool{}},
		"num_scheduled_tokens": map[string]int{"r": 2},
		"structured_output":    nil,
	}
	p, err := DecodeExecuteModel(encode(t, raw))
	require.NoError(t, err)
	require.Equal(t, 1.0, *p.NewRequests[0].SamplingParams.Temperature)
	require.Nil(t, p.NewRequests[0].SamplingParams.Seed)
	require.Nil(t, p.NewRequests[0].SamplingParams.Logprobs)
}

func TestDecodeExecuteModelRefusesBadPayloads(t *testing.T) {
	good, err := EncodeExecuteModel(validPayload())
	require.NoError(t, err)
	tests := []struct {
		name string
		b    []byte
		edit func(*ExecuteModelPayload)
		want string
	}{
		{name: "empty", b: []byte{}, want: "truncated"},
		{name: "truncated", b: good[:len(good)/2], want: "msgpack:"},
		{name: "trailing bytes", b: append(append([]byte{}, good...), 0x01), want: "trailing"},
		{name: "huge array header", b: []byte{0xdd, 0xff, 0xff, 0xff, 0xff}, want: "declares"},
		{name: "huge str header", b: []byte{0xdb, 0x7f, 0xff, 0xff, 0xff, 'a'}, want: "needs"},
		{name: "extension", b: []byte{0xd4, 0x01, 0x00}, want: "extension"},
		{name: "reserved byte", b: []byte{0xc1}, want: "reserved"},
		{name: "deep nesting", b: append(bytesOf(0x91, 40), 0x00), want: "nested deeper"},
		{name: "not a map", b: []byte{0x93, 1, 2, 3}, want: "decode"},
		{name: "wrong type", b: encode(t, map[string]any{"wire_version": "one"}), want: "decode"},
		{name: "nil payload", b: []byte{0xc0}, want: "wire_version 0"},
		{name: "wrong wire version", edit: func(p *ExecuteModelPayload) { p.WireVersion = 2 }, want: "wire_version 2"},
		{name: "empty id", edit: func(p *ExecuteModelPayload) { p.NewRequests[0].ReqID = "" }, want: "empty request id"},
		{name: "long id", edit: func(p *ExecuteModelPayload) { p.FinishedReqIDs[0] = strings.Repeat("x", MaxRequestIDBytes+1) }, want: "request id of"},
		{name: "duplicate new", edit: func(p *ExecuteModelPayload) { p.NewRequests[1].ReqID = "a" }, want: "scheduled twice"},
		{name: "duplicate new and cached", edit: func(p *ExecuteModelPayload) { p.Cached.ReqIDs[0] = "a" }, want: "scheduled twice"},
		{name: "missing num_scheduled", edit: func(p *ExecuteModelPayload) { delete(p.NumScheduledTokens, "b") }, want: "no num_scheduled_tokens"},
		{name: "extra num_scheduled", edit: func(p *ExecuteModelPayload) { p.NumScheduledTokens["zz"] = 1 }, want: "neither a new nor a cached"},
		{name: "zero scheduled", edit: func(p *ExecuteModelPayload) { p.NumScheduledTokens["a"] = 0 }, want: "want 1.."},
		{name: "negative scheduled", edit: func(p *ExecuteModelPayload) { p.NumScheduledTokens["c"] = -1 }, want: "want 1.."},
		{name: "wrong total", edit: func(p *ExecuteModelPayload) { p.TotalNumScheduledTokens = 7 }, want: "adds up to 6"},
		{name: "empty prompt", edit: func(p *ExecuteModelPayload) { p.NewRequests[0].PromptTokenIDs = nil }, want: "prompt_token_ids has 0"},
		{name: "negative token", edit: func(p *ExecuteModelPayload) { p.NewRequests[0].PromptTokenIDs[1] = -5 }, want: "prompt token id -5"},
		{name: "token over int32", edit: func(p *ExecuteModelPayload) { p.NewRequests[0].PromptTokenIDs[1] = 1 << 40 }, want: "too large"},
		{name: "computed past prompt", edit: func(p *ExecuteModelPayload) { p.NewRequests[0].NumComputedTokens = 4 }, want: "num_computed_tokens is 4"},
		{name: "negative computed new", edit: func(p *ExecuteModelPayload) { p.NewRequests[0].NumComputedTokens = -1 }, want: "num_computed_tokens is -1"},
		{name: "negative block", edit: func(p *ExecuteModelPayload) { p.NewRequests[1].BlockIDs[0][1] = -3 }, want: "block id -3"},
		{name: "two kv groups", edit: func(p *ExecuteModelPayload) { p.NewRequests[1].BlockIDs = [][]int64{{1}, {2}} }, want: "2 KV-cache groups"},
		{name: "no kv group", edit: func(p *ExecuteModelPayload) { p.NewRequests[1].BlockIDs = nil }, want: "0 KV-cache groups"},
		{name: "short resumed list", edit: func(p *ExecuteModelPayload) { p.Cached.ResumedFromPreemption = []bool{true, false} }, want: "resumed_from_preemption has 2"},
		{name: "missing computed list", edit: func(p *ExecuteModelPayload) { p.Cached.NumComputedTokens = nil }, want: "num_computed_tokens has 0"},
		{name: "negative computed cached", edit: func(p *ExecuteModelPayload) { p.Cached.NumComputedTokens[0] = -2 }, want: "is -2"},
		{name: "negative outputs", edit: func(p *ExecuteModelPayload) { p.Cached.NumOutputTokens[0] = -1 }, want: "num_output_tokens[0]"},
		{name: "bad new blocks", edit: func(p *ExecuteModelPayload) { p.Cached.NewBlockIDs[0] = [][]int64{{-1}} }, want: "block id -1"},
		{name: "n over int32", edit: func(p *ExecuteModelPayload) { p.NewRequests[0].SamplingParams.N = 1 << 33 }, want: "sampling_params.n"},
		{name: "negative stop token", edit: func(p *ExecuteModelPayload) { p.NewRequests[0].SamplingParams.StopTokenIDs = []int64{-1} }, want: "stop_token_ids"},
		{name: "drafts of an unscheduled request", edit: func(p *ExecuteModelPayload) { p.ScheduledSpecDecodeTokens = map[string][]int64{"zz": {1}} }, want: "names \"zz\", which is not scheduled"},
		{name: "drafts fill the chunk", edit: func(p *ExecuteModelPayload) { p.ScheduledSpecDecodeTokens = map[string][]int64{"c": {1}} }, want: "1 drafts in a chunk of 1"},
		{name: "negative draft", edit: func(p *ExecuteModelPayload) {
			p.NumScheduledTokens["c"], p.TotalNumScheduledTokens = 3, 8
			p.ScheduledSpecDecodeTokens = map[string][]int64{"c": {4, -1}}
		}, want: "holds token id -1"},
		{name: "too many drafts", edit: func(p *ExecuteModelPayload) {
			p.NumScheduledTokens["c"], p.TotalNumScheduledTokens = MaxDraftsPerReq+2, MaxDraftsPerReq+7
			p.ScheduledSpecDecodeTokens = map[string][]int64{"c": make([]int64, MaxDraftsPerReq+1)}
		}, want: "more than 64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.b
			if tt.edit != nil {
				p := validPayload()
				tt.edit(p)
				b = encode(t, p)
			}
			_, err := DecodeExecuteModel(b)
			require.ErrorIs(t, err, ErrInvalidPayload)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// TestDecodeExecuteModelDrafts: scheduled drafts, one per scheduled position after the known
// tokens, decode as sent.
func TestDecodeExecuteModelDrafts(t *testing.T) {
	p := validPayload()
	p.NumScheduledTokens["c"], p.TotalNumScheduledTokens = 4, 9
	p.ScheduledSpecDecodeTokens = map[string][]int64{"c": {11, 12, 13}}
	got, err := DecodeExecuteModel(encode(t, p))
	require.NoError(t, err)
	require.Equal(t, p.ScheduledSpecDecodeTokens, got.ScheduledSpecDecodeTokens)
}

// TestResultDrafts: variable-length sampled tokens (accepted drafts and the target's token)
// and the next drafts round-trip; a drafts list that is not parallel to the ids is refused.
func TestResultDrafts(t *testing.T) {
	r := &ExecuteModelResult{WireVersion: WireVersion, ReqIDs: []string{"a", "b", "c"},
		SampledTokenIDs: [][]int32{{7, 8, 9}, {}, {4}}, Logprobs: make([]*Logprobs, 3),
		DraftTokenIDs: [][]int32{{1, 2}, nil, {3}}}
	b, err := EncodeResult(r)
	require.NoError(t, err)
	got, err := DecodeResult(b)
	require.NoError(t, err)
	require.Equal(t, r.SampledTokenIDs[0], got.SampledTokenIDs[0])
	require.Equal(t, r.DraftTokenIDs[0], got.DraftTokenIDs[0])
	require.Empty(t, got.DraftTokenIDs[1])
	r.DraftTokenIDs = r.DraftTokenIDs[:2]
	b, err = EncodeResult(r)
	require.NoError(t, err)
	_, err = DecodeResult(b)
	require.ErrorIs(t, err, ErrInvalidPayload)
	require.ErrorContains(t, err, "2 drafts")
}

// TestResultMoreLogprobs: a verify chunk's tokens after the first carry their logprobs rows
// in more_logprobs (TokenLogprobs finds each token's row); rows that do not match the
// sampled tokens are refused.
func TestResultMoreLogprobs(t *testing.T) {
	row := func(tok int32) *Logprobs {
		return &Logprobs{TokenIDs: []int32{tok, 5}, Logprobs: []float32{-0.25, -1}, Rank: 1}
	}
	valid := func() *ExecuteModelResult {
		return &ExecuteModelResult{WireVersion: WireVersion, ReqIDs: []string{"a", "b", "c"},
			SampledTokenIDs: [][]int32{{7, 8, 9}, {4}, {6, 2}},
			Logprobs:        []*Logprobs{row(7), row(4), nil},
			MoreLogprobs:    [][]*Logprobs{{row(8), row(9)}, nil, nil}}
	}
	b, err := EncodeResult(valid())
	require.NoError(t, err)
	got, err := DecodeResult(b)
	require.NoError(t, err)
	for j, tok := range []int32{7, 8, 9} {
		require.Equal(t, row(tok), got.TokenLogprobs(0, j), "token %d", j)
	}
	require.Equal(t, row(4), got.TokenLogprobs(1, 0))
	require.Nil(t, got.TokenLogprobs(2, 1), "a request without logprobs has no rows")

	tests := []struct {
		name string
		edit func(r *ExecuteModelResult)
		msg  string
	}{
		{"not parallel to the ids", func(r *ExecuteModelResult) { r.MoreLogprobs = r.MoreLogprobs[:2] }, "2 more logprobs"},
		{"a row short", func(r *ExecuteModelResult) { r.MoreLogprobs[0] = r.MoreLogprobs[0][:1] }, "1 more logprobs rows for 3 sampled tokens"},
		{"rows without a first", func(r *ExecuteModelResult) { r.MoreLogprobs[2] = []*Logprobs{row(2)} }, "1 more logprobs rows for 2 sampled tokens"},
		{"a nil row", func(r *ExecuteModelResult) { r.MoreLogprobs[0][1] = nil }, "nil logprobs row"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := valid()
			tt.edit(r)
			b, err := EncodeResult(r)
			require.NoError(t, err)
			_, err = DecodeResult(b)
			require.ErrorIs(t, err, ErrInvalidPayload)
			require.ErrorContains(t, err, tt.msg)
		})
	}
}

func TestResultRoundTrip(t *testing.T) {
	r := &ExecuteModelResult{WireVersion: WireVersion, ReqIDs: []string{"a", "b"},
		SampledTokenIDs: [][]int32{{7}, {}},
		Logprobs:        []*Logprobs{{TokenIDs: []int32{7, 7, 3}, Logprobs: []float32{-0.5, -0.5, -1.5}, Rank: 1}, nil}}
	b, err := EncodeResult(r)
	require.NoError(t, err)
	got, err := DecodeResult(b)
	require.NoError(t, err)
	require.Equal(t, r.ReqIDs, got.ReqIDs)
	require.Equal(t, r.Logprobs, got.Logprobs)
	require.Equal(t, []int32{7}, got.SampledTokenIDs[0])
	require.Empty(t, got.SampledTokenIDs[1])
}

func bytesOf(c byte, n int) []byte {
	return []byte(strings.Repeat(string([]byte{c}), n))
}
