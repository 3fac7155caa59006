//go:build gpu

package engine

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSpecOnGPU: n-gram speculation on the gpu backend (verify steps replay the decode graphs,
// their tokens as one-token sequences, sampled on the host): greedy and seeded requests
// complete with drafts accepted and no KV block left behind, and greedy outputs agree with the
// plain gpu engine's. A verify step that falls back to the eager path runs the prefill kernels
// where the plain path runs decode kernels, so bf16 rounding may flip a near tie: agreement is
// logged per request and most requests must agree in full.
func TestSpecOnGPU(t *testing.T) {
	for _, model := range []string{"qwen3-bf16", "llama-bf16"} {
		t.Run(model, func(t *testing.T) {
			gpuCfg := func(c *Config) { c.Device, c.NumKVBlocks, c.MaxModelLen = "gpu", 256, 256 }
			prompts := append(specPrompts(8, 5), mixedPrompts(8, 7)...)
			params := func(i int) SamplingParams { return greedy(12 + i%9) }
			want := runAll(t, newTestEngine(t, model, gpuCfg), specRequests(prompts, params))
			e := newTestEngine(t, model, withSpec(gpuCfg))
			got := runAll(t, e, specRequests(prompts, params))
			requireMostlySame(t, want, got)
			seeded := func(i int) SamplingParams {
				p := DefaultSamplingParams()
				p.MaxTokens, p.IgnoreEOS, p.Temperature = 16, true, 0.5
				seed := int64(i)
				p.Seed = &seed
				return p
			}
			a := runAll(t, e, specRequests(prompts, seeded))
			for i := range a {
				require.Len(t, a[i][0].TokenIDs, 16)
			}
			st := e.Stats()
			t.Logf("%s: %d of %d drafts accepted, %d verify steps, %d of them graph replays", model, st.SpecNumAcceptedTokens,
				st.SpecNumDraftTokens, st.SpecNumDrafts, e.runner.VerifyGraphSteps())
			require.Positive(t, st.SpecNumAcceptedTokens)
			require.Positive(t, e.runner.VerifyGraphSteps(), "verify steps replayed graphs")
			require.Zero(t, st.KVBlocksUsed)
		})
	}
}

// requireMostlySame requires at least three quarters of the plain and the speculative greedy
// outputs to be token-identical (bf16 near ties may flip between the prefill kernels of a verify
// chunk and the decode kernels), logging the others.
func requireMostlySame(t *testing.T, want, got [][]Output) {
	t.Helper()
	same := 0
	for i := range want {
		if equalIDs(want[i][0].TokenIDs, got[i][0].TokenIDs) {
			same++
		} else {
			t.Logf("request %d: plain %v, speculative %v", i, want[i][0].TokenIDs, got[i][0].TokenIDs)
		}
	}
	t.Logf("%d of %d greedy outputs identical", same, len(want))
	require.GreaterOrEqual(t, same, len(want)*3/4)
}

func equalIDs(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestSpecDraftModelOnGPU: draft-model speculation on the gpu backend, the draft on the same
// device with its own KV cache: with another checkpoint as the draft (qwen3 drafting for llama,
// mostly rejected) and with the target drafting for itself, greedy outputs agree with the
// plain gpu engine's (up to bf16 near ties between prefill and decode kernels, as above),
// seeded sampling completes, and no KV block is left behind.
func TestSpecDraftModelOnGPU(t *testing.T) {
	const model = "llama-bf16"
	gpuCfg := func(c *Config) { c.Device, c.NumKVBlocks, c.MaxModelLen = "gpu", 256, 256 }
	prompts := append(specPrompts(8, 5), mixedPrompts(8, 7)...)
	params := func(i int) SamplingParams { return greedy(12 + i%9) }
	want := runAll(t, newTestEngine(t, model, gpuCfg), specRequests(prompts, params))
	for _, draft := range []string{"qwen3-bf16", model} {
		t.Run(draft, func(t *testing.T) {
			e := newTestEngine(t, model, withDraft(draft, 3, gpuCfg))
			got := runAll(t, e, specRequests(prompts, params))
			requireMostlySame(t, want, got)
			seeded := func(i int) SamplingParams {
				p := DefaultSamplingParams()
				p.MaxTokens, p.IgnoreEOS, p.Temperature = 16, true, 0.7
				seed := int64(i)
				p.Seed = &seed
				return p
			}
			for _, outs := range runAll(t, e, specRequests(prompts, seeded)) {
				require.Len(t, outs[0].TokenIDs, 16)
			}
			st := e.Stats()
			dg, de := e.drafter.runner.StepCounts()
			t.Logf("drafted by %s: %d of %d drafts accepted, %d verify steps (%d of them graph replays); draft steps: %d graph, %d eager",
				draft, st.SpecNumAcceptedTokens, st.SpecNumDraftTokens, st.SpecNumDrafts, e.runner.VerifyGraphSteps(), dg, de)
			require.Positive(t, st.SpecNumDraftTokens)
			require.Positive(t, dg, "the draft's one-token steps replayed graphs")
			require.Positive(t, e.runner.VerifyGraphSteps(), "verify steps replayed graphs")
			if draft == model {
				require.Greater(t, st.SpecAcceptanceRate(), 0.9, "the target drafting for itself")
			}
			require.Zero(t, st.KVBlocksUsed)
		})
	}
}

// TestSpecMTPOnGPU: DeepSeek-V3's multi-token-prediction layer drafting on the gpu backend
// (MLA over its own latent cache, eager): greedy outputs agree with the plain gpu engine's (up
// to bf16 near ties, as above), drafts are made and verified, and no KV block is left behind.
func TestSpecMTPOnGPU(t *testing.T) {
	const model = "deepseek_v3-bf16"
	gpuCfg := func(c *Config) { c.Device, c.NumKVBlocks, c.MaxModelLen = "gpu", 256, 256 }
	prompts := append(specPrompts(6, 5), mixedPrompts(6, 7)...)
	params := func(i int) SamplingParams { return greedy(10 + i%7) }
	want := runAll(t, newTestEngine(t, model, gpuCfg), specRequests(prompts, params))
	e := newTestEngine(t, model, func(c *Config) {
		gpuCfg(c)
		c.SpeculativeConfig = `{"method": "deepseek_mtp", "num_speculative_tokens": 2}`
	})
	got := runAll(t, e, specRequests(prompts, params))
	requireMostlySame(t, want, got)
	st := e.Stats()
	t.Logf("mtp: %d of %d drafts accepted, %d verify steps", st.SpecNumAcceptedTokens, st.SpecNumDraftTokens, st.SpecNumDrafts)
	require.Positive(t, st.SpecNumDraftTokens)
	require.Zero(t, st.KVBlocksUsed)
}

// TestHostSpecOnGPU: host-scheduled speculation on the gpu backend (a simulated vLLM schedules
// the engine's drafts; plain decodes replay graphs and sample on the device, verify chunks run
// eagerly and sample on the host): with n-gram drafts and with the target drafting for itself,
// greedy outputs agree with the plain gpu engine's (up to bf16 near ties, as above) and drafts
// are accepted.
func TestHostSpecOnGPU(t *testing.T) {
	const model = "llama-bf16"
	gpuCfg := func(c *Config) { c.Device, c.NumKVBlocks, c.MaxModelLen = "gpu", 256, 256 }
	prompts := append(specPrompts(6, 5), mixedPrompts(6, 7)...)
	params := func(int) SamplingParams { return greedy(14) }
	plain := runAll(t, newTestEngine(t, model, gpuCfg), specRequests(prompts, params))
	for _, tc := range []struct {
		name      string
		edit      func(*Config)
		lookahead int
	}{
		{"ngram", withSpec(gpuCfg), 0},
		{"draft-model", withDraft(model, 3, gpuCfg), 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEngine(t, model, tc.edit)
			got, _, s := runSpecSim(t, e, prompts, tc.lookahead, params, 14)
			outs := make([][]Output, len(got))
			for i, g := range got {
				outs[i] = []Output{{TokenIDs: g}}
			}
			requireMostlySame(t, plain, outs)
			t.Logf("%s: %d of %d drafts accepted", tc.name, s.accepted, s.drafted)
			require.Positive(t, s.accepted)
		})
	}
}
