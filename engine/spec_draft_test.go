package engine

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
	"github.com/atom-go/atom/ops/gpu"
)

// withDraft turns on draft-model speculation with the testdata checkpoint draft and k drafts.
func withDraft(draft string, k int, edit func(*Config)) func(*Config) {
	return withDraftPath(filepath.Join(testModels, draft), k, edit)
}

// withDraftPath turns on draft-model speculation with the checkpoint at dir and k drafts.
func withDraftPath(dir string, k int, edit func(*Config)) func(*Config) {
	return func(c *Config) {
		c.SpeculativeConfig = fmt.Sprintf(`{"method": "draft_model", "model": %q, "num_speculative_tokens": %d}`, dir, k)
		if edit != nil {
			edit(c)
		}
	}
}

// familyNames lists the testdata checkpoints (they share one tokenizer and VOCAB=384).
func familyNames(t *testing.T) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(testModels, "*"))
	require.NoError(t, err)
	require.NotEmpty(t, dirs)
	names := make([]string, len(dirs))
	for i, d := range dirs {
		names[i] = filepath.Base(d)
	}
	return names
}

// TestSpecDraftGreedyIdenticalEveryFamily: greedy outputs (tokens, logprobs, texts) are those
// of the plain engine on every testdata family, with another family's checkpoint as the draft
// model (nearly every draft rejected) and with a perturbed copy of the target (drafts accepted
// and rejected, so the draft's KV is rolled back part way); with the target itself as the
// draft, every draft is accepted and every verify step emits K+1 tokens. No KV block leaks.
func TestSpecDraftGreedyIdenticalEveryFamily(t *testing.T) {
	names := familyNames(t)
	prompts := append(specPrompts(4, 11), mixedPrompts(3, 4)...)
	params := func(i int) SamplingParams {
		p := greedy(10 + 3*i)
		p.Logprobs = 2
		return p
	}
	const k = 3
	// max_tokens 1 + 4(K+1): the prefill's token, then four verify steps of K drafts each.
	selfParams := func(int) SamplingParams { return greedy(1 + 4*(k+1)) }
	var accepted, proposed int64
	for i, name := range names {
		draft := names[(i+1)%len(names)]
		t.Run(name, func(t *testing.T) {
			plain := newTestEngine(t, name, nil)
			want := runAll(t, plain, specRequests(prompts, params))
			e := newTestEngine(t, name, withDraft(draft, k, nil))
			got := runAll(t, e, specRequests(prompts, params))
			requireSameOutputs(t, want, got)
			st := e.Stats()
			require.Zero(t, st.KVBlocksUsed, "%+v", st)
			require.Positive(t, st.SpecNumDraftTokens, "drafts were proposed")
			accepted += st.SpecNumAcceptedTokens
			proposed += st.SpecNumDraftTokens
			t.Logf("%s drafted by %s: %d of %d drafts accepted in %d verify steps", name, draft,
				st.SpecNumAcceptedTokens, st.SpecNumDraftTokens, st.SpecNumDrafts)

			{
				near := perturbedCheckpoint(t, name, "model.norm.weight", 0.3)
				e := newTestEngine(t, name, withDraftPath(near, k, nil))
				got := runAll(t, e, specRequests(prompts, params))
				requireSameOutputs(t, want, got)
				st := e.Stats()
				require.Zero(t, st.KVBlocksUsed, "%+v", st)
				accepted += st.SpecNumAcceptedTokens
				proposed += st.SpecNumDraftTokens
				t.Logf("%s drafted by its perturbed copy: %d of %d drafts accepted in %d verify steps", name,
					st.SpecNumAcceptedTokens, st.SpecNumDraftTokens, st.SpecNumDrafts)
			}

			want = runAll(t, plain, specRequests(prompts, selfParams))
			self := newTestEngine(t, name, withDraft(name, k, nil))
			got = runAll(t, self, specRequests(prompts, selfParams))
			requireSameOutputs(t, want, got)
			st = self.Stats()
			require.Equal(t, int64(len(prompts)*4), st.SpecNumDrafts, "%+v", st)
			require.Equal(t, 1.0, st.SpecAcceptanceRate(), "%+v", st)
			require.Equal(t, float64(k+1), st.SpecMeanAcceptedLength(), "%+v", st)
			require.Zero(t, st.KVBlocksUsed, "%+v", st)
		})
	}
	require.Positive(t, accepted, "some drafts were accepted")
	require.Less(t, accepted, proposed, "some drafts were rejected")
}

// TestSpecDraftSchedulingVariants: with a draft model, outputs stay those of the plain engine
// under preemption by a tiny KV cache, small token budgets (chunked prefill of both models,
// drafts trimmed to the budget), without prefix caching, with one-token blocks, and with
// prompts sharing prefixes; no KV block leaks.
func TestSpecDraftSchedulingVariants(t *testing.T) {
	const model = "qwen3-bf16"
	draft := perturbedCheckpoint(t, model, "model.norm.weight", 0.3)
	self := filepath.Join(testModels, model)
	prompts := append(specPrompts(6, 5), mixedPrompts(8, 7)...)
	params := func(i int) SamplingParams { return greedy(12 + i%9) }
	want := runAll(t, newTestEngine(t, model, nil), specRequests(prompts, params))
	for _, tc := range []struct {
		name  string
		draft string
		edit  func(*Config)
	}{
		{"preemption", draft, func(c *Config) { c.NumKVBlocks = 14; c.MaxModelLen = 200; c.BlockSize = 16 }},
		{"preemption-self", self, func(c *Config) { c.NumKVBlocks = 14; c.MaxModelLen = 200; c.BlockSize = 16 }},
		{"small-chunks", draft, func(c *Config) { c.MaxNumBatchedTokens = 5 }},
		{"small-chunks-self", self, func(c *Config) { c.MaxNumBatchedTokens = 5 }},
		{"no-prefix-caching", draft, func(c *Config) { c.NoPrefixCaching = true }},
		{"block-size-1", self, func(c *Config) { c.BlockSize = 1; c.NumKVBlocks = 900; c.MaxModelLen = 200 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEngine(t, model, withDraftPath(tc.draft, 3, tc.edit))
			got := runAll(t, e, specRequests(prompts, params))
			requireSameOutputs(t, want, got)
			st := e.Stats()
			if tc.name == "preemption" || tc.name == "preemption-self" {
				require.Positive(t, st.NumPreemptions, "the tiny cache should have forced preemption")
			}
			if tc.draft == self {
				// The target drafting for itself: a wrong draft KV (a cached prefix without it,
				// a stale slot after a rollback or a preemption) would show as a rejection.
				require.Equal(t, st.SpecNumDraftTokens, st.SpecNumAcceptedTokens, "%+v", st)
			}
			require.Positive(t, st.SpecNumAcceptedTokens)
			require.Zero(t, st.KVBlocksUsed, "%+v", st)
			t.Logf("%s: %d of %d drafts accepted", tc.name, st.SpecNumAcceptedTokens, st.SpecNumDraftTokens)
		})
	}
}

// TestSpecDraftStopsMatchPlain: with the target as its own draft model (every draft accepted),
// a stop token, a stop string, max_tokens and min_tokens end a request exactly where they end
// a plain one, also inside an accepted run.
func TestSpecDraftStopsMatchPlain(t *testing.T) {
	const model = "qwen2-bf16"
	plain := newTestEngine(t, model, nil)
	e := newTestEngine(t, model, withDraft(model, 4, nil))
	prompt := mixedPrompts(1, 9)[0]
	full := collect(t, plain, Request{ID: "f", PromptIDs: prompt, Params: greedy(24)})
	for i := range full.TokenIDs {
		variants := map[string]SamplingParams{}
		p := greedy(24)
		p.StopTokenIDs = []int32{full.TokenIDs[i]}
		variants["stop-token"] = p
		variants["max-tokens"] = greedy(i + 1)
		p = greedy(24)
		p.StopTokenIDs, p.MinTokens = []int32{full.TokenIDs[i]}, i+1
		variants["min-tokens"] = p
		if len(full.Text) > i+2 {
			p = greedy(24)
			p.Stop = []string{full.Text[i : i+2]}
			variants["stop-string"] = p
		}
		for name, p := range variants {
			p.Logprobs = 1
			req := Request{ID: fmt.Sprint(name, i), PromptIDs: prompt, Params: p}
			want := collect(t, plain, req)
			got := collect(t, e, req)
			require.Equal(t, want.TokenIDs, got.TokenIDs, "%s at %d", name, i)
			require.Equal(t, want.Text, got.Text, "%s at %d", name, i)
			require.Equal(t, want.FinishReason, got.FinishReason, "%s at %d", name, i)
			require.Equal(t, want.StopReason, got.StopReason, "%s at %d", name, i)
			require.Len(t, got.Logprobs, len(want.Logprobs), "%s at %d", name, i)
		}
	}
	st := e.Stats()
	require.Equal(t, st.SpecNumDraftTokens, st.SpecNumAcceptedTokens)
	require.Zero(t, st.KVBlocksUsed)
}

// TestSpecDraftSeededSamplingReproducible: with a draft model whose distribution differs from
// the target's, a seeded sampling request gives the same tokens alone and among other
// requests, run after run; its drafts are drawn from the draft's q and both accepted and
// rejected; no KV block leaks.
func TestSpecDraftSeededSamplingReproducible(t *testing.T) {
	const model = "qwen3-bf16"
	draft := perturbedCheckpoint(t, model, "model.norm.weight", 0.5)
	prompts := specPrompts(6, 21)
	params := func(i int) SamplingParams {
		p := DefaultSamplingParams()
		p.MaxTokens, p.IgnoreEOS, p.Temperature, p.Logprobs = 16, true, 0.5+0.3*float64(i%3), 1
		if i%3 == 2 {
			p.TopK, p.TopP = 20, 0.9
		}
		seed := int64(100 + i)
		p.Seed = &seed
		if i%2 == 1 {
			p.N = 2
		}
		return p
	}
	e := newTestEngine(t, model, withDraftPath(draft, 3, nil))
	first := runAll(t, e, specRequests(prompts, params))
	again := runAll(t, newTestEngine(t, model, withDraftPath(draft, 3, nil)), specRequests(prompts, params))
	requireSameOutputs(t, first, again)
	for i := range prompts {
		alone := runAll(t, e, specRequests(prompts[i:i+1], func(int) SamplingParams { return params(i) }))
		requireSameOutputs(t, first[i:i+1], alone)
	}
	st := e.Stats()
	require.Positive(t, st.SpecNumAcceptedTokens, "%+v", st)
	require.Less(t, st.SpecNumAcceptedTokens, st.SpecNumDraftTokens, "%+v", st)
	require.Zero(t, st.KVBlocksUsed)
	for i, outs := range first {
		for _, o := range outs {
			require.Len(t, o.TokenIDs, 16, "request %d", i)
			require.Len(t, o.Logprobs, 16, "request %d", i)
		}
	}
}

// TestSpecDraftConfigErrors: a draft model that cannot serve is refused at start with a
// clear error: missing, another vocabulary, no model, MTP on a model without the layer, an
// unimplemented method.
func TestSpecDraftConfigErrors(t *testing.T) {
	// The qwen2 checkpoint with its embedding and head cut to 383 rows: another vocabulary.
	small := t.TempDir()
	src := filepath.Join(testModels, "qwen2-bf16")
	b, err := os.ReadFile(filepath.Join(src, "config.json"))
	require.NoError(t, err)
	var cfg map[string]any
	require.NoError(t, json.Unmarshal(b, &cfg))
	cfg["vocab_size"] = 383
	b, err = json.Marshal(cfg)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(small, "config.json"), b, 0o644))
	b, err = os.ReadFile(filepath.Join(src, "model.safetensors"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(small, "model.safetensors"), cutVocab(t, b, 383), 0o644))
	for _, tc := range []struct {
		name, spec, wantErr string
	}{
		{"vocabulary", `{"method": "draft_model", "model": "` + small + `", "num_speculative_tokens": 2}`,
			"has a vocabulary of 383 tokens, the target 384"},
		{"missing", `{"method": "draft_model", "model": "/nonexistent/draft", "num_speculative_tokens": 2}`, "draft model"},
		{"no model", `{"method": "draft_model", "num_speculative_tokens": 2}`, `needs "model"`},
		{"mtp without the layer", `{"method": "mtp", "num_speculative_tokens": 2}`, "no multi-token-prediction layer: LlamaForCausalLM has none"},
		{"eagle", `{"method": "eagle", "model": "x", "num_speculative_tokens": 2}`, "not supported yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Device, cfg.Model, cfg.KVCacheMemory = "cpu", filepath.Join(testModels, "llama-bf16"), 16<<20
			cfg.SpeculativeConfig = tc.spec
			_, err := New(cfg, quiet)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

// perturbedCheckpoint copies the testdata checkpoint name to a temporary directory with every
// element x of its tensor (BF16, F16 or F32) multiplied by 1 + noise*N(0, 1): a draft model
// that agrees with the target often but not always.
func perturbedCheckpoint(t *testing.T, name, tensor string, noise float64) string {
	t.Helper()
	src := filepath.Join(testModels, name)
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	require.NoError(t, err)
	for _, en := range entries {
		b, err := os.ReadFile(filepath.Join(src, en.Name()))
		require.NoError(t, err)
		if en.Name() == "model.safetensors" {
			n := binary.LittleEndian.Uint64(b[:8])
			var header map[string]struct {
				DType   string `json:"dtype"`
				Offsets [2]int `json:"data_offsets"`
			}
			require.NoError(t, json.Unmarshal(b[8:8+n], &header))
			info, ok := header[tensor]
			require.True(t, ok, "tensor %s", tensor)
			r := rand.New(rand.NewPCG(1, 2))
			data := b[8+int(n)+info.Offsets[0] : 8+int(n)+info.Offsets[1]]
			scale := func() float32 { return float32(1 + noise*r.NormFloat64()) }
			switch info.DType {
			case "BF16":
				for i := 0; i < len(data); i += 2 {
					x := ops.BF16ToFloat32(binary.LittleEndian.Uint16(data[i:])) * scale()
					binary.LittleEndian.PutUint16(data[i:], gpu.BF16FromFloat32(x))
				}
			case "F16":
				for i := 0; i < len(data); i += 2 {
					x := ops.F16ToFloat32(binary.LittleEndian.Uint16(data[i:])) * scale()
					binary.LittleEndian.PutUint16(data[i:], gpu.F16FromFloat32(x))
				}
			case "F32":
				for i := 0; i < len(data); i += 4 {
					x := math.Float32frombits(binary.LittleEndian.Uint32(data[i:])) * scale()
					binary.LittleEndian.PutUint32(data[i:], math.Float32bits(x))
				}
			default:
				t.Fatalf("%s: tensor %s is %s", name, tensor, info.DType)
			}
		}
		require.NoError(t, os.WriteFile(filepath.Join(dst, en.Name()), b, 0o644))
	}
	return dst
}

// cutVocab rewrites a safetensors file with every tensor whose first dimension is the
// vocabulary (384) cut to its first n rows.
func cutVocab(t *testing.T, b []byte, n int) []byte {
	t.Helper()
	hl := binary.LittleEndian.Uint64(b[:8])
	type entry struct {
		DType   string `json:"dtype"`
		Shape   []int  `json:"shape"`
		Offsets [2]int `json:"data_offsets"`
	}
	var header map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b[8:8+hl], &header))
	names := make([]string, 0, len(header))
	entries := map[string]*entry{}
	for name, raw := range header {
		if name == "__metadata__" {
			continue
		}
		var e entry
		require.NoError(t, json.Unmarshal(raw, &e))
		entries[name] = &e
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { return entries[names[i]].Offsets[0] < entries[names[j]].Offsets[0] })
	data := b[8+hl:]
	var out []byte
	for _, name := range names {
		e := entries[name]
		chunk := data[e.Offsets[0]:e.Offsets[1]]
		if len(e.Shape) == 2 && e.Shape[0] == 384 {
			chunk = chunk[:len(chunk)/384*n]
			e.Shape[0] = n
		}
		e.Offsets = [2]int{len(out), len(out) + len(chunk)}
		out = append(out, chunk...)
	}
	hdr, err := json.Marshal(entries)
	require.NoError(t, err)
	res := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	return append(append(res, hdr...), out...)
}

// TestSpecDraftCachedPrefixHasDraftKV: blocks a request registers in the prefix cache carry
// the draft model's KV too, also when the request finished in the step that computed them: a
// later request with the same prompt, drafted by the target itself, has every draft accepted.
func TestSpecDraftCachedPrefixHasDraftKV(t *testing.T) {
	const model = "qwen2-bf16"
	e := newTestEngine(t, model, withDraft(model, 3, nil))
	prompt := mixedPrompts(1, 5)[0]
	for len(prompt) < 45 {
		prompt = append(prompt, prompt...)
	}
	prompt = prompt[:45]
	collect(t, e, Request{ID: "a", PromptIDs: prompt, Params: greedy(1)})
	require.Zero(t, e.Stats().SpecNumDraftTokens)
	got := collect(t, e, Request{ID: "b", PromptIDs: prompt, Params: greedy(13)})
	require.Len(t, got.TokenIDs, 13)
	st := e.Stats()
	require.Positive(t, st.PrefixCacheHits)
	require.Equal(t, int64(3*3), st.SpecNumDraftTokens, "three verify steps of three drafts: %+v", st)
	require.Equal(t, st.SpecNumDraftTokens, st.SpecNumAcceptedTokens, "%+v", st)
}
