package engine

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const testSpec = `{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3}`

func withSpec(edit func(*Config)) func(*Config) {
	return func(c *Config) {
		c.SpeculativeConfig = testSpec
		if edit != nil {
			edit(c)
		}
	}
}

// specPrompts mixes repetitive prompts, whose continuations the n-gram proposer predicts
// well, with random ones, whose drafts are mostly rejected.
func specPrompts(n int, seed uint64) [][]int32 {
	r := rand.New(rand.NewPCG(seed, 2))
	out := make([][]int32, n)
	for i := range out {
		var p []int32
		if i%2 == 0 {
			unit := []int32{int32(3 + r.IntN(300)), int32(3 + r.IntN(300)), int32(3 + r.IntN(300)), int32(3 + r.IntN(300))}
			for len(p) < 12+4*i {
				p = append(p, unit...)
			}
		} else {
			for len(p) < 5+7*i {
				p = append(p, int32(3+r.IntN(300)))
			}
		}
		out[i] = p
	}
	return out
}

func specRequests(prompts [][]int32, p func(i int) SamplingParams) []Request {
	reqs := make([]Request, len(prompts))
	for i, pr := range prompts {
		reqs[i] = Request{ID: fmt.Sprint(i), PromptIDs: pr, Params: p(i)}
	}
	return reqs
}

// requireSameOutputs compares tokens, logprobs and finish reasons of two runs.
func requireSameOutputs(t *testing.T, want, got [][]Output) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		require.Len(t, got[i], len(want[i]))
		for c := range want[i] {
			w, g := want[i][c], got[i][c]
			require.Equal(t, w.TokenIDs, g.TokenIDs, "request %d choice %d", i, c)
			require.Equal(t, w.FinishReason, g.FinishReason, "request %d", i)
			require.Equal(t, w.Text, g.Text, "request %d", i)
			require.Len(t, g.Logprobs, len(w.Logprobs))
			for k := range w.Logprobs {
				require.InDelta(t, w.Logprobs[k].Logprob, g.Logprobs[k].Logprob, 1e-4, "request %d token %d", i, k)
				require.Equal(t, w.Logprobs[k].TopIDs, g.Logprobs[k].TopIDs, "request %d token %d", i, k)
			}
		}
	}
}

// TestSpecGreedyIdenticalEveryFamily: greedy outputs, with logprobs, are token-identical with
// and without n-gram speculation on every testdata checkpoint, for concurrent repetitive and
// random prompts; drafts are accepted and rejected, and every KV block comes back.
func TestSpecGreedyIdenticalEveryFamily(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join(testModels, "*"))
	require.NoError(t, err)
	require.NotEmpty(t, dirs)
	prompts := specPrompts(6, 11)
	params := func(i int) SamplingParams {
		p := greedy(10 + 3*i)
		p.Logprobs = 2
		return p
	}
	var accepted, proposed int64
	for _, dir := range dirs {
		name := filepath.Base(dir)
		t.Run(name, func(t *testing.T) {
			want := runAll(t, newTestEngine(t, name, nil), specRequests(prompts, params))
			e := newTestEngine(t, name, withSpec(nil))
			got := runAll(t, e, specRequests(prompts, params))
			requireSameOutputs(t, want, got)
			st := e.Stats()
			require.Zero(t, st.KVBlocksUsed, "%+v", st)
			require.Positive(t, st.SpecNumDraftTokens, "drafts were proposed")
			accepted += st.SpecNumAcceptedTokens
			proposed += st.SpecNumDraftTokens
			t.Logf("%s: %d of %d drafts accepted in %d verify steps", name, st.SpecNumAcceptedTokens, st.SpecNumDraftTokens, st.SpecNumDrafts)
		})
	}
	require.Positive(t, accepted, "some drafts were accepted")
	require.Less(t, accepted, proposed, "some drafts were rejected")
}

// TestSpecSchedulingVariants: with speculation, outputs stay those of the plain engine under
// preemption by a tiny KV cache, small token budgets (drafts trimmed to the budget and chunked
// prefill), without prefix caching and with n choices; no KV block leaks.
func TestSpecSchedulingVariants(t *testing.T) {
	const model = "qwen3-bf16"
	prompts := append(specPrompts(8, 5), mixedPrompts(8, 7)...)
	params := func(i int) SamplingParams { return greedy(12 + i%9) }
	want := runAll(t, newTestEngine(t, model, nil), specRequests(prompts, params))
	for _, tc := range []struct {
		name string
		edit func(*Config)
	}{
		{"preemption", func(c *Config) { c.NumKVBlocks = 14; c.MaxModelLen = 200; c.BlockSize = 16 }},
		{"small-chunks", func(c *Config) { c.MaxNumBatchedTokens = 5 }},
		{"no-prefix-caching", func(c *Config) { c.NoPrefixCaching = true }},
		{"block-size-1", func(c *Config) { c.BlockSize = 1; c.NumKVBlocks = 900; c.MaxModelLen = 200 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEngine(t, model, withSpec(tc.edit))
			got := runAll(t, e, specRequests(prompts, params))
			requireSameOutputs(t, want, got)
			st := e.Stats()
			if tc.name == "preemption" {
				require.Positive(t, st.NumPreemptions, "the tiny cache should have forced preemption")
			}
			require.Positive(t, st.SpecNumAcceptedTokens)
			require.Zero(t, st.KVBlocksUsed, "%+v", st)
		})
	}
}

// TestSpecStopsMatchPlain: with n-gram drafts, a stop token, a stop string, max_tokens and
// min_tokens end a speculative request exactly where they end a plain one (stops inside
// accepted runs on purpose: TestSpecStopInsideOracleRuns).
func TestSpecStopsMatchPlain(t *testing.T) {
	const model = "qwen2-bf16"
	plain := newTestEngine(t, model, nil)
	e := newTestEngine(t, model, withSpec(nil))
	prompt := specPrompts(1, 3)[0]
	full := collect(t, plain, Request{ID: "f", PromptIDs: prompt, Params: greedy(24)})
	require.Equal(t, full.TokenIDs, collect(t, e, Request{ID: "f", PromptIDs: prompt, Params: greedy(24)}).TokenIDs)
	require.Positive(t, e.Stats().SpecNumAcceptedTokens, "the repetitive prompt gets drafts accepted")
	for i := range full.TokenIDs {
		variants := map[string]SamplingParams{}
		p := greedy(24)
		p.StopTokenIDs = []int32{full.TokenIDs[i]}
		variants["stop-token"] = p
		p = greedy(i + 1)
		variants["max-tokens"] = p
		p = greedy(24)
		p.StopTokenIDs, p.MinTokens = []int32{full.TokenIDs[i]}, i+1
		variants["min-tokens"] = p
		if s := strings.TrimSpace(full.Text); len(s) > i+2 {
			p = greedy(24)
			p.Stop = []string{full.Text[i : i+2]}
			variants["stop-string"] = p
		}
		for name, p := range variants {
			req := Request{ID: fmt.Sprint(name, i), PromptIDs: prompt, Params: p}
			want := collect(t, plain, req)
			got := collect(t, e, req)
			require.Equal(t, want.TokenIDs, got.TokenIDs, "%s at %d", name, i)
			require.Equal(t, want.Text, got.Text, "%s at %d", name, i)
			require.Equal(t, want.FinishReason, got.FinishReason, "%s at %d", name, i)
			require.Equal(t, want.StopReason, got.StopReason, "%s at %d", name, i)
		}
	}
	require.Zero(t, e.Stats().KVBlocksUsed)
}

// TestSpecStopInsideOracleRuns: with drafts that are the target's own greedy continuation
// (every draft accepted, as with a perfect drafter), a stop token, a stop string or the model
// length falling inside the accepted run ends the request exactly where the plain engine ends
// it, and the rest of the run is dropped with its KV.
func TestSpecStopInsideOracleRuns(t *testing.T) {
	const model = "qwen2-bf16"
	prompt := mixedPrompts(1, 9)[0]
	plain := newTestEngine(t, model, nil)
	full := collect(t, plain, Request{ID: "f", PromptIDs: prompt, Params: greedy(30)})
	cont := append(append([]int32{}, prompt...), full.TokenIDs...)
	e := newTestEngine(t, model, withSpec(nil))
	done := make(chan struct{})
	require.True(t, e.send(func() {
		e.specOracle = func(dst, toks []int32, k int) []int32 {
			if len(toks) < len(cont) && slices.Equal(toks, cont[:len(toks)]) {
				return append(dst, cont[len(toks):min(len(cont), len(toks)+k)]...)
			}
			return dst
		}
		close(done)
	}))
	<-done
	cut := 0
	for i := 1; i < len(full.TokenIDs); i++ {
		variants := map[string]SamplingParams{}
		p := greedy(30)
		p.StopTokenIDs = []int32{full.TokenIDs[i]}
		variants["stop-token"] = p
		if len(full.Text) > i+2 {
			p = greedy(30)
			p.Stop = []string{full.Text[i : i+2]}
			variants["stop-string"] = p
		}
		for name, p := range variants {
			req := Request{ID: fmt.Sprint(name, i), PromptIDs: prompt, Params: p}
			want := collect(t, plain, req)
			before := e.Stats()
			got := collect(t, e, req)
			after := e.Stats()
			require.Equal(t, want.TokenIDs, got.TokenIDs, "%s at %d", name, i)
			require.Equal(t, want.Text, got.Text, "%s at %d", name, i)
			require.Equal(t, want.FinishReason, got.FinishReason, "%s at %d", name, i)
			require.Equal(t, want.StopReason, got.StopReason, "%s at %d", name, i)
			// Alone in the engine, a step emits one token, or a verify step its accepted
			// drafts plus one: fewer means a stop cut an accepted run.
			if after.Steps-before.Steps+after.SpecNumAcceptedTokens-before.SpecNumAcceptedTokens > after.GeneratedTokens-before.GeneratedTokens {
				cut++
			}
		}
	}
	require.Positive(t, cut, "stops fell inside runs of accepted drafts")
	st := e.Stats()
	require.Equal(t, st.SpecNumDraftTokens, st.SpecNumAcceptedTokens, "the oracle's drafts are all accepted")
	require.Zero(t, st.KVBlocksUsed)
}
