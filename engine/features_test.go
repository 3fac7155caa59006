package engine

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestStopStringsAreCutAndNotEmitted(t *testing.T) {
	e := newTestEngine(t, "qwen2-bf16", nil)
	prompt, err := e.Tokenizer().Encode("The quick brown fox", true)
	require.NoError(t, err)
	full := collect(t, e, Request{ID: "full", PromptIDs: prompt, Params: greedy(12)})
	require.Equal(t, e.Tokenizer().Decode(full.TokenIDs, true), full.Text, "streamed deltas add up to the decoded text")
	require.GreaterOrEqual(t, len(full.Text), 6)
	// Stop at a substring that starts inside the output.
	stop := full.Text[3:6]
	p := greedy(12)
	p.Stop = []string{stop}
	out := collect(t, e, Request{ID: "stop", PromptIDs: prompt, Params: p})
	require.Equal(t, "stop", out.FinishReason)
	require.Equal(t, stop, out.StopReason)
	require.Equal(t, full.Text[:strings.Index(full.Text, stop)], out.Text)
	require.Equal(t, full.TokenIDs[:len(out.TokenIDs)], out.TokenIDs)
}

func TestStopTokensMaxTokensAndMinTokens(t *testing.T) {
	e := newTestEngine(t, "llama-bf16", nil)
	prompt := []int32{1, 17, 42, 99, 7}
	full := collect(t, e, Request{ID: "f", PromptIDs: prompt, Params: greedy(8)})
	require.Equal(t, "length", full.FinishReason)
	require.Len(t, full.TokenIDs, 8)

	p := greedy(8)
	p.StopTokenIDs = []int32{full.TokenIDs[2]}
	out := collect(t, e, Request{ID: "s", PromptIDs: prompt, Params: p})
	require.Equal(t, "stop", out.FinishReason)
	require.Equal(t, full.TokenIDs[2], out.StopReason)
	require.Equal(t, full.TokenIDs[:3], out.TokenIDs, "the stop token is the last token returned")

	p.MinTokens = 4
	out = collect(t, e, Request{ID: "m", PromptIDs: prompt, Params: p})
	require.GreaterOrEqual(t, len(out.TokenIDs), 4)
}

func TestNChoicesAndSeeds(t *testing.T) {
	e := newTestEngine(t, "llama-bf16", nil)
	seed := int64(5)
	p := DefaultSamplingParams()
	p.N, p.MaxTokens, p.Seed, p.IgnoreEOS, p.Temperature = 3, 10, &seed, true, 1.5
	run := func(id string) []Output {
		st, err := e.Generate(Request{ID: id, PromptIDs: []int32{3, 4, 5, 6, 7}, Params: p})
		require.NoError(t, err)
		outs, err := st.Collect(context.Background())
		require.NoError(t, err)
		require.Len(t, outs, 3)
		return outs
	}
	a, b := run("a"), run("b")
	for i := range a {
		require.Equal(t, a[i].TokenIDs, b[i].TokenIDs, "same seed, same output")
		require.Len(t, a[i].TokenIDs, 10)
	}
	require.False(t, slices.Equal(a[0].TokenIDs, a[1].TokenIDs) && slices.Equal(a[1].TokenIDs, a[2].TokenIDs),
		"the choices of one request draw different samples")
}

func TestModelLengthEndsGeneration(t *testing.T) {
	e := newTestEngine(t, "llama-bf16", func(c *Config) { c.MaxModelLen = 20 })
	out := collect(t, e, Request{ID: "x", PromptIDs: make([]int32, 15), Params: greedy(0)})
	require.Equal(t, "length", out.FinishReason)
	require.Len(t, out.TokenIDs, 5)
}

func TestBadRequestsAreRefusedAndEngineGoesOn(t *testing.T) {
	e := newTestEngine(t, "llama-bf16", func(c *Config) { c.MaxModelLen = 64 })
	bad := []struct {
		name string
		req  Request
		want error
	}{
		{"empty prompt", Request{ID: "1", Params: greedy(2)}, ErrInvalidRequest},
		{"too long", Request{ID: "2", PromptIDs: make([]int32, 64), Params: greedy(2)}, ErrInvalidRequest},
		{"token out of vocab", Request{ID: "3", PromptIDs: []int32{1, 384}, Params: greedy(2)}, ErrInvalidRequest},
		{"negative token", Request{ID: "4", PromptIDs: []int32{-1}, Params: greedy(2)}, ErrInvalidRequest},
		{"no id", Request{PromptIDs: []int32{1}, Params: greedy(2)}, ErrInvalidRequest},
		{"bad temperature", Request{ID: "5", PromptIDs: []int32{1}, Params: SamplingParams{Temperature: -2}}, ErrInvalidParams},
	}
	for _, tc := range bad {
		_, err := e.Generate(tc.req)
		require.ErrorIs(t, err, tc.want, tc.name)
	}
	long := greedy(1000)
	gate := e.HoldSteps() // "dup" stays live until it is cancelled
	st, err := e.Generate(Request{ID: "dup", PromptIDs: []int32{1, 2}, Params: long})
	require.NoError(t, err)
	_, err = e.Generate(Request{ID: "dup", PromptIDs: []int32{1, 2}, Params: greedy(2)})
	require.ErrorIs(t, err, ErrInvalidRequest, "a live id cannot be reused")
	st.Cancel()
	gate.Open()
	outs, err := st.Collect(context.Background())
	require.NoError(t, err)
	require.True(t, outs[0].Finished)
	require.Contains(t, []string{"abort", "length"}, outs[0].FinishReason)
	require.Len(t, collect(t, e, Request{ID: "ok", PromptIDs: []int32{1, 2}, Params: greedy(3)}).TokenIDs, 3)
}

func TestCloseEndsPendingStreams(t *testing.T) {
	e := newTestEngine(t, "llama-bf16", nil)
	p := greedy(0)
	e.HoldSteps() // the request is still pending when Close comes
	st, err := e.Generate(Request{ID: "x", PromptIDs: []int32{1}, Params: p})
	require.NoError(t, err)
	e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = st.Collect(ctx)
	require.ErrorIs(t, err, ErrClosed)
	_, err = e.Generate(Request{ID: "y", PromptIDs: []int32{1}, Params: p})
	require.ErrorIs(t, err, ErrClosed)
}
