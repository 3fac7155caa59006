package engine

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/models"
	"github.com/atom-go/atom/ops"
	"github.com/atom-go/atom/ops/cpu"
)

// TestSpecMTPDraftsAreTheLayers: the drafts the engine proposes with the MTP layer are the
// layer's greedy chain computed directly over the whole sequence (the target's hidden states
// of every position, then each draft fed back with the layer's own hidden state): after a
// prefill served in part by the prefix cache (blocks of a request that finished in its own
// prefill step) and after each verify step, whatever was accepted.
func TestSpecMTPDraftsAreTheLayers(t *testing.T) {
	const model, k = "deepseek_v3-bf16", 3
	e := newTestEngine(t, model, func(c *Config) {
		c.SpeculativeConfig = `{"method": "mtp", "num_speculative_tokens": 3}`
	})
	// A request with the same prompt that finishes in its prefill step leaves the prompt's
	// blocks in the prefix cache: the layer's KV must be in them too.
	prompt := mixedPrompts(1, 3)[0]
	for len(prompt) < 37 {
		prompt = append(prompt, prompt...)
	}
	prompt = prompt[:37]
	first := collect(t, e, Request{ID: "a", PromptIDs: prompt, Params: greedy(1)})
	require.Len(t, first.TokenIDs, 1)
	gate := e.HoldSteps()
	require.NotNil(t, gate)
	_, err := e.Generate(Request{ID: "m", PromptIDs: prompt, Params: greedy(40)})
	require.NoError(t, err)

	chain := mtpChain(t, model, k)

	checked := 0
	for range 6 {
		require.True(t, gate.Step())
		var toks []int32
		var drafts int
		require.True(t, e.call(func() {
			for seq := range e.bySeq {
				toks, drafts = slices.Clone(seq.TokenIDs), seq.NumDrafts()
			}
		}))
		if drafts == 0 {
			break // finished, or too close to max_tokens
		}
		require.Equal(t, k, drafts)
		known := toks[:len(toks)-drafts]
		require.Equal(t, chain(known), toks[len(known):], "drafts after %d tokens", len(known))
		checked++
	}
	require.GreaterOrEqual(t, checked, 4)
	gate.Open()
	require.Positive(t, e.Stats().PrefixCacheHits, "the second request read the first one's blocks")
}

// mtpChain returns a function computing the MTP layer's k greedy drafts after toks from
// scratch: the target's hidden states of every position, then each draft fed back with the
// layer's own hidden state.
func mtpChain(t *testing.T, model string, k int) func(toks []int32) []int32 {
	t.Helper()
	be := cpu.New(0)
	t.Cleanup(be.Close)
	ck, err := models.OpenCheckpoint(filepath.Join(testModels, model))
	require.NoError(t, err)
	t.Cleanup(func() { ck.Close() })
	target, err := models.Load(ck, be, models.Options{MaxTokens: 128, MaxSeqs: 8})
	require.NoError(t, err)
	mtp, err := models.LoadMTP(ck, be, models.Options{MaxTokens: 128, MaxSeqs: 8})
	require.NoError(t, err)
	vocab := ck.Config.VocabSize
	return func(toks []int32) []int32 {
		const bs, blocks = 4, 64
		cache, err := target.NewKVCache(blocks, bs)
		require.NoError(t, err)
		mcache, err := mtp.NewKVCache(blocks, bs)
		require.NoError(t, err)
		n := len(toks)
		h := target.Forward(toks, seqMeta(0, n, bs, blocks), cache)
		rows := make([]int32, n-1)
		for i := range rows {
			rows[i] = int32(i)
		}
		out := mtp.Forward(toks[1:], h, rows, seqMeta(0, n-1, bs, blocks), mcache)
		logits := make([]float32, vocab)
		be.ReadRows(mtp.Logits(out, []int32{int32(n - 2)}), logits)
		drafts := []int32{argmax(logits)}
		prev, row := mtp.Hidden(), int32(n-2)
		for j := 1; j < k; j++ {
			out := mtp.Forward(drafts[j-1:j], prev, []int32{row}, seqMeta(n-2+j, 1, bs, blocks), mcache)
			be.ReadRows(mtp.Logits(out, []int32{0}), logits)
			drafts = append(drafts, argmax(logits))
			prev, row = mtp.Hidden(), 0
		}
		return drafts
	}
}

// seqMeta lays one sequence's n tokens from position ctx into a block table 0, 1, 2, ...
func seqMeta(ctx, n, blockSize, blocks int) *ops.AttnMetadata {
	m := &ops.AttnMetadata{QueryStart: []int32{0, int32(n)}, SeqLens: []int32{int32(ctx + n)}, BlockTableStride: blocks}
	for b := 0; b < blocks; b++ {
		m.BlockTables = append(m.BlockTables, int32(b))
	}
	for p := ctx; p < ctx+n; p++ {
		m.Positions = append(m.Positions, int32(p))
		m.SlotMapping = append(m.SlotMapping, int32(p))
	}
	return m
}

// TestSpecMTPSeededSamplingReproducible: with MTP drafts drawn from the layer's distribution, a
// seeded sampling request gives the same tokens alone and among others, run after run, and
// every request gets its max_tokens with logprobs; no KV block leaks.
func TestSpecMTPSeededSamplingReproducible(t *testing.T) {
	const model = "deepseek_v3-bf16"
	spec := func(c *Config) { c.SpeculativeConfig = `{"method": "mtp", "num_speculative_tokens": 2}` }
	prompts := specPrompts(4, 21)
	params := func(i int) SamplingParams {
		p := DefaultSamplingParams()
		p.MaxTokens, p.IgnoreEOS, p.Temperature, p.Logprobs = 12, true, 0.8+0.4*float64(i%2), 1
		seed := int64(300 + i)
		p.Seed = &seed
		if i%2 == 1 {
			p.N, p.TopK = 2, 50
		}
		return p
	}
	e := newTestEngine(t, model, spec)
	first := runAll(t, e, specRequests(prompts, params))
	requireSameOutputs(t, first, runAll(t, newTestEngine(t, model, spec), specRequests(prompts, params)))
	for i := range prompts {
		alone := runAll(t, e, specRequests(prompts[i:i+1], func(int) SamplingParams { return params(i) }))
		requireSameOutputs(t, first[i:i+1], alone)
	}
	st := e.Stats()
	require.Positive(t, st.SpecNumDraftTokens)
	require.Zero(t, st.KVBlocksUsed)
	for i, outs := range first {
		for _, o := range outs {
			require.Len(t, o.TokenIDs, 12, "request %d", i)
			require.Len(t, o.Logprobs, 12, "request %d", i)
		}
	}
}

// TestSpecMTPGreedyIdentical: with DeepSeek-V3's MTP layer drafting (testdata's random one, so
// its drafts are mostly rejected), greedy outputs with logprobs are those of the plain engine,
// for one and several drafts, under preemption, small token budgets and without prefix
// caching; no KV block leaks.
func TestSpecMTPGreedyIdentical(t *testing.T) {
	const model = "deepseek_v3-bf16"
	prompts := append(specPrompts(4, 11), mixedPrompts(6, 4)...)
	params := func(i int) SamplingParams {
		p := greedy(8 + 3*i)
		p.Logprobs = 2
		return p
	}
	want := runAll(t, newTestEngine(t, model, nil), specRequests(prompts, params))
	for _, tc := range []struct {
		name string
		spec string
		edit func(*Config)
	}{
		{"k1", `{"method": "mtp", "num_speculative_tokens": 1}`, nil},
		{"k3", `{"method": "deepseek_mtp", "num_speculative_tokens": 3}`, nil},
		{"preemption", `{"method": "mtp", "num_speculative_tokens": 3}`, func(c *Config) { c.NumKVBlocks = 14; c.MaxModelLen = 200; c.BlockSize = 16 }},
		{"small-chunks", `{"method": "mtp", "num_speculative_tokens": 2}`, func(c *Config) { c.MaxNumBatchedTokens = 5 }},
		{"no-prefix-caching", `{"method": "mtp", "num_speculative_tokens": 2}`, func(c *Config) { c.NoPrefixCaching = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEngine(t, model, func(c *Config) {
				c.SpeculativeConfig = tc.spec
				if tc.edit != nil {
					tc.edit(c)
				}
			})
			got := runAll(t, e, specRequests(prompts, params))
			requireSameOutputs(t, want, got)
			st := e.Stats()
			require.Positive(t, st.SpecNumDraftTokens)
			require.Zero(t, st.KVBlocksUsed, "%+v", st)
			if tc.name == "preemption" {
				require.Positive(t, st.NumPreemptions)
			}
			t.Logf("%s: %d of %d drafts accepted", tc.name, st.SpecNumAcceptedTokens, st.SpecNumDraftTokens)
		})
	}
}
