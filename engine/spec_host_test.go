package engine

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHostSpecGreedyIdentical: requests scheduled by a simulated vLLM that sends back the
// engine's n-gram drafts (trimmed by its token budget) sample the same greedy tokens as
// Generate without speculation, and those that ask for logprobs get Generate's row for every
// token, accepted drafts included; drafts are accepted and rejected, and the host's rollback
// of the rejected ones (computed tokens) is what the engine expects next.
func TestHostSpecGreedyIdentical(t *testing.T) {
	for _, model := range []string{"llama-bf16", "qwen3-bf16"} {
		t.Run(model, func(t *testing.T) {
			prompts := specPrompts(5, 3)
			params := func(i int) SamplingParams {
				p := greedy(12 + i)
				p.Logprobs = 2 * (1 - i%2) // even requests ask for two alternatives, odd ones for none
				return p
			}
			ref := newTestEngine(t, model, nil)
			want := make([]Output, len(prompts))
			for i, p := range prompts {
				want[i] = collect(t, ref, Request{ID: "r", PromptIDs: p, Params: params(i)})
			}
			e := newTestEngine(t, model, withSpec(nil))
			s := newSimHost(t, newHostSession(t, e), 24)
			reqs := make([]*simReq, len(prompts))
			for i, p := range prompts {
				reqs[i] = &simReq{id: fmt.Sprint("req-", i), prompt: p, params: params(i), logprobs: i%2 == 0, want: 12 + i}
				s.running = append(s.running, reqs[i])
			}
			for step := 0; len(s.running) > 0 || len(s.finished) > 0; step++ {
				require.Less(t, step, 200)
				s.step()
			}
			withLogprobs := 0
			for i, r := range reqs {
				require.Equal(t, want[i].TokenIDs, r.out, "request %d", i)
				if !r.logprobs {
					require.Empty(t, r.lps, "request %d asked for no logprobs", i)
					continue
				}
				require.GreaterOrEqual(t, len(r.lps), len(r.out), "request %d: a row for every token", i)
				for j, tok := range r.out {
					lp := r.lps[j]
					require.Equal(t, tok, lp.Token, "request %d token %d", i, j)
					require.Equal(t, want[i].Logprobs[j].TopIDs, lp.TopIDs, "request %d token %d", i, j)
					require.InDelta(t, want[i].Logprobs[j].Logprob, lp.Logprob, 1e-4, "request %d token %d", i, j)
					require.Equal(t, 1, lp.Rank, "greedy tokens are the most likely")
				}
				withLogprobs += r.accepted
			}
			require.Positive(t, withLogprobs, "requests asking for logprobs get drafts accepted")
			require.Positive(t, s.accepted, "repetitive prompts get drafts accepted")
			require.Less(t, s.accepted, s.drafted, "random prompts get drafts rejected")
			st := e.Stats()
			require.Equal(t, int64(s.drafted), st.SpecNumDraftTokens)
			require.Equal(t, int64(s.accepted), st.SpecNumAcceptedTokens)
			require.Zero(t, s.h.NumRequests())
		})
	}
}

// setOracle makes e propose drafts with fn instead of the n-gram proposer.
func setOracle(t *testing.T, e *Engine, fn func(dst, toks []int32, k int) []int32) {
	t.Helper()
	done := make(chan struct{})
	require.True(t, e.send(func() { e.specOracle = fn; close(done) }))
	<-done
}

// TestHostSpecRollback: drafts that are right up to a point return the accepted ones and the
// target's token; the host counts the rejected drafts out of its computed tokens, the engine
// refuses a host that does not, and the request goes on with Generate's tokens.
func TestHostSpecRollback(t *testing.T) {
	prompt := mixedPrompts(1, 7)[0]
	ref := newTestEngine(t, "llama-bf16", nil)
	want := collect(t, ref, Request{ID: "r", PromptIDs: prompt, Params: greedy(10)}).TokenIDs
	cont := append(slices.Clone(prompt), want...)

	e := newTestEngine(t, "llama-bf16", withSpec(nil))
	// Drafts: the true continuation with its second token wrong, so one draft is accepted.
	setOracle(t, e, func(dst, toks []int32, k int) []int32 {
		n := len(toks)
		if n >= len(cont) {
			return dst
		}
		d := slices.Clone(cont[n:min(len(cont), n+k)])
		if len(d) > 1 {
			d[1] = (d[1] + 1) % 384
		}
		return append(dst, d...)
	})
	h := newHostSession(t, e)
	blocks := []int32{1, 2, 3, 4}
	out, err := h.Execute(&HostStep{New: []HostNewRequest{{ID: "x", PromptIDs: prompt, Params: greedy(0), BlockIDs: blocks}},
		NumScheduled: map[string]int{"x": len(prompt)}})
	require.NoError(t, err)
	require.Equal(t, want[:1], out.Sampled[0])
	drafts := out.Drafts[0]
	require.Len(t, drafts, 3)
	got := slices.Clone(out.Sampled[0])

	verify := func(computed int, drafts []int32) (*HostOutput, error) {
		return h.Execute(&HostStep{Cached: []HostCachedRequest{{ID: "x", NumComputed: computed, NumOutput: len(got)}},
			NumScheduled: map[string]int{"x": 1 + len(drafts)}, Drafts: map[string][]int32{"x": drafts}})
	}
	computed := len(prompt)
	out, err = verify(computed, drafts)
	require.NoError(t, err)
	require.Equal(t, want[1:3], out.Sampled[0], "one draft accepted, then the target's token")
	got = append(got, out.Sampled[0]...)
	// The host computed 1+3 tokens, 2 of them rejected drafts.
	computed += 1 + 3 - 2

	_, err = h.Execute(&HostStep{Cached: []HostCachedRequest{{ID: "x", NumComputed: computed + 2, NumOutput: len(got)}},
		NumScheduled: map[string]int{"x": 1}})
	require.ErrorIs(t, err, ErrInvalidRequest, "a host that keeps the rejected drafts computed is refused")

	for len(got) < len(want) {
		drafts = out.Drafts[0]
		out, err = verify(computed, drafts)
		require.NoError(t, err)
		a := len(out.Sampled[0]) - 1
		require.True(t, slices.Equal(drafts[:a], out.Sampled[0][:a]))
		computed += 1 + a
		got = append(got, out.Sampled[0]...)
	}
	require.Equal(t, want, got[:len(want)])
}

// TestHostSpecRefusesBadDrafts: each bad draft schedule is refused with its error and changes
// nothing.
func TestHostSpecRefusesBadDrafts(t *testing.T) {
	prompt := []int32{5, 6, 7, 8}
	start := func(t *testing.T, edit func(*Config)) *HostSession {
		e := newTestEngine(t, "llama-bf16", edit)
		h := newHostSession(t, e)
		_, err := h.Execute(&HostStep{New: []HostNewRequest{{ID: "a", PromptIDs: prompt, Params: greedy(0), BlockIDs: []int32{1}}},
			NumScheduled: map[string]int{"a": 4}})
		require.NoError(t, err)
		return h
	}
	step := func(k int, drafts map[string][]int32) *HostStep {
		return &HostStep{Cached: []HostCachedRequest{{ID: "a", NumComputed: 4, NumOutput: 1}}, NumScheduled: map[string]int{"a": k}, Drafts: drafts}
	}
	tests := []struct {
		name string
		edit func(*Config)
		step *HostStep
		msg  string
	}{
		{"no speculative config", nil, step(3, map[string][]int32{"a": {1, 2}}), "without --speculative-config"},
		{"too many drafts", withSpec(nil), step(5, map[string][]int32{"a": {1, 2, 3, 4}}), "more than num_speculative_tokens 3"},
		{"draft outside the vocabulary", withSpec(nil), step(2, map[string][]int32{"a": {384}}), "outside the vocabulary"},
		{"chunk short of the drafts", withSpec(nil), step(2, map[string][]int32{"a": {1, 2}}), "do not end with its 2 drafts"},
		{"chunk past the drafts", withSpec(nil), step(4, map[string][]int32{"a": {1, 2}}), "run past its 5 known tokens and 2 drafts"},
		{"drafts of an unscheduled request", withSpec(nil), step(1, map[string][]int32{"b": {1}}), "not scheduled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, tt.edit)
			_, err := h.Execute(tt.step)
			require.ErrorIs(t, err, ErrInvalidRequest)
			require.ErrorContains(t, err, tt.msg)
			out, err := h.Execute(step(1, nil))
			require.NoError(t, err, "a refused step changes nothing")
			require.Len(t, out.Sampled[0], 1)
		})
	}
}

// TestHostSpecSampledSeeded: a seeded sampling request verified under a host draws the same
// tokens in two sessions (the rejection sampler consumes the request's own generator).
func TestHostSpecSampledSeeded(t *testing.T) {
	prompts := specPrompts(2, 9)
	run := func() [][]int32 {
		e := newTestEngine(t, "llama-bf16", withSpec(nil))
		s := newSimHost(t, newHostSession(t, e), 32)
		var reqs []*simReq
		for i, p := range prompts {
			params := DefaultSamplingParams()
			params.Temperature, params.IgnoreEOS = 0.8, true
			seed := int64(40 + i)
			params.Seed = &seed
			reqs = append(reqs, &simReq{id: fmt.Sprint("s-", i), prompt: p, params: params, want: 16})
		}
		s.running = reqs
		for step := 0; len(s.running) > 0 || len(s.finished) > 0; step++ {
			require.Less(t, step, 200)
			s.step()
		}
		require.Positive(t, s.drafted)
		out := make([][]int32, len(reqs))
		for i, r := range reqs {
			out[i] = r.out
		}
		return out
	}
	require.Equal(t, run(), run())
}

// runSpecSim runs prompts through a simulated vLLM on e (lookahead slots as vLLM gives a
// draft model) and returns each request's tokens, its logprobs rows (nil where its params ask
// for none; a row for each token otherwise) and the host.
func runSpecSim(t *testing.T, e *Engine, prompts [][]int32, lookahead int, params func(i int) SamplingParams, want int) ([][]int32, [][]HostLogprob, *simHost) {
	t.Helper()
	s := newSimHost(t, newHostSession(t, e), 24)
	s.lookahead = lookahead
	reqs := make([]*simReq, len(prompts))
	for i, p := range prompts {
		reqs[i] = &simReq{id: fmt.Sprint("req-", i), prompt: p, params: params(i), logprobs: params(i).Logprobs > 0, want: want}
		s.running = append(s.running, reqs[i])
	}
	for step := 0; len(s.running) > 0 || len(s.finished) > 0; step++ {
		require.Less(t, step, 300)
		s.step()
	}
	out := make([][]int32, len(reqs))
	lps := make([][]HostLogprob, len(reqs))
	for i, r := range reqs {
		out[i] = r.out
		if r.logprobs {
			require.GreaterOrEqual(t, len(r.lps), len(r.out), "request %d: a logprobs row for every token", i)
			lps[i] = r.lps[:len(r.out)]
			for j, lp := range lps[i] {
				require.Equal(t, r.out[j], lp.Token, "request %d token %d", i, j)
			}
		} else {
			require.Empty(t, r.lps, "request %d asked for no logprobs", i)
		}
	}
	require.Zero(t, s.h.NumRequests())
	return out, lps, s
}

// TestHostSpecDraftModel: a draft model under a host, its KV cache addressed through the
// host's block tables and lookahead slots, gives Generate's greedy tokens without
// speculation, and Generate's logprobs to the requests that ask for them; drafting for itself
// every draft is accepted (so its KV followed the host's tables), another random checkpoint's
// drafts are rejected. Seeded sampling requests are repeatable.
func TestHostSpecDraftModel(t *testing.T) {
	prompts := specPrompts(4, 5)
	greedyLP := func(i int) SamplingParams {
		p := greedy(14)
		p.Logprobs = i % 2 * 3 // odd requests ask for three alternatives
		return p
	}
	ref := newTestEngine(t, "qwen3-bf16", nil)
	want := make([][]int32, len(prompts))
	wantLP := make([][]Sample, len(prompts))
	for i, p := range prompts {
		o := collect(t, ref, Request{ID: "r", PromptIDs: p, Params: greedyLP(i)})
		want[i], wantLP[i] = o.TokenIDs, o.Logprobs
	}
	tests := []struct {
		draft   string
		allGood bool
	}{
		{"qwen3-bf16", true},
		{"llama-bf16", false},
	}
	for _, tt := range tests {
		t.Run(tt.draft, func(t *testing.T) {
			e := newTestEngine(t, "qwen3-bf16", withDraft(tt.draft, 3, nil))
			got, lps, s := runSpecSim(t, e, prompts, 3, greedyLP, 14)
			require.Equal(t, want, got)
			for i := 1; i < len(lps); i += 2 {
				require.Len(t, lps[i], len(wantLP[i]), "request %d", i)
				for j, lp := range lps[i] {
					require.Equal(t, wantLP[i][j].TopIDs, lp.TopIDs, "request %d token %d", i, j)
					require.InDelta(t, wantLP[i][j].Logprob, lp.Logprob, 1e-4, "request %d token %d", i, j)
				}
			}
			require.Positive(t, s.drafted)
			if tt.allGood {
				require.Equal(t, s.drafted, s.accepted, "a model drafting for itself has every greedy draft accepted")
			} else {
				require.Less(t, s.accepted, s.drafted, "another random checkpoint's drafts are rejected")
			}
		})
	}
	seeded := func(i int) SamplingParams {
		p := DefaultSamplingParams()
		p.Temperature, p.IgnoreEOS, p.MaxTokens = 0.7, true, 12
		seed := int64(7 + i)
		p.Seed = &seed
		return p
	}
	run := func() [][]int32 {
		e := newTestEngine(t, "qwen3-bf16", withDraft("llama-bf16", 3, nil))
		got, _, s := runSpecSim(t, e, prompts[:2], 3, seeded, 12)
		require.Positive(t, s.drafted)
		return got
	}
	require.Equal(t, run(), run())
}

// TestHostSpecDraftModelGeometry: with a draft model the host must use the engine's blocks.
func TestHostSpecDraftModelGeometry(t *testing.T) {
	e := newTestEngine(t, "llama-bf16", withDraft("llama-bf16", 2, nil))
	_, err := e.StartHostSession(e.NumKVBlocks()/4, e.Config().BlockSize*2)
	require.ErrorIs(t, err, ErrInvalidRequest)
	require.ErrorContains(t, err, "draft")
	_, err = e.StartHostSession(e.NumKVBlocks(), e.Config().BlockSize)
	require.NoError(t, err)
}

// TestHostSpecMTP: DeepSeek-V3's MTP layer under a host proposes, after the prefill and after
// every verify step whatever was accepted, the layer's greedy chain computed from scratch, and
// the request gets Generate's greedy tokens without speculation.
func TestHostSpecMTP(t *testing.T) {
	const model, k = "deepseek_v3-bf16", 3
	prompt := specPrompts(1, 11)[0]
	want := collect(t, newTestEngine(t, model, nil), Request{ID: "r", PromptIDs: prompt, Params: greedy(16)}).TokenIDs
	chain := mtpChain(t, model, k)
	e := newTestEngine(t, model, func(c *Config) { c.SpeculativeConfig = `{"method": "mtp", "num_speculative_tokens": 3}` })
	h := newHostSession(t, e)
	blocks := []int32{1, 2, 3, 4, 5, 6}
	out, err := h.Execute(&HostStep{New: []HostNewRequest{{ID: "x", PromptIDs: prompt, Params: greedy(16), BlockIDs: blocks}},
		NumScheduled: map[string]int{"x": len(prompt)}})
	require.NoError(t, err)
	got := slices.Clone(out.Sampled[0])
	computed := len(prompt)
	checked := 0
	for len(got) < len(want) {
		drafts := out.Drafts[0]
		if len(drafts) == k {
			require.Equal(t, chain(append(slices.Clone(prompt), got...)), drafts, "drafts after %d outputs", len(got))
			checked++
		}
		out, err = h.Execute(&HostStep{Cached: []HostCachedRequest{{ID: "x", NumComputed: computed, NumOutput: len(got)}},
			NumScheduled: map[string]int{"x": 1 + len(drafts)}, Drafts: map[string][]int32{"x": drafts}})
		require.NoError(t, err)
		computed += len(out.Sampled[0])
		got = append(got, out.Sampled[0]...)
	}
	require.Equal(t, want, got[:len(want)])
	require.GreaterOrEqual(t, checked, 4)
}
