package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const testModels = "../testdata/models"

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type refFile struct {
	Cases []struct {
		PromptIDs []int32 `json:"prompt_ids"`
		Text      string  `json:"text"`
		Steps     []struct {
			Token       int32     `json:"token"`
			Margin      float64   `json:"margin"`
			TopIDs      []int32   `json:"top_ids"`
			TopLogprobs []float64 `json:"top_logprobs"`
		} `json:"steps"`
	} `json:"cases"`
}

func loadRef(t *testing.T, name string) refFile {
	b, err := os.ReadFile(filepath.Join(testModels, name, "reference.json"))
	require.NoError(t, err)
	var r refFile
	require.NoError(t, json.Unmarshal(b, &r))
	return r
}

// newTestEngine starts an engine on a testdata checkpoint; edit may change the config.
func newTestEngine(t *testing.T, name string, edit func(*Config)) *Engine {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Device = "cpu" // the cpu engine's tests, also on a GPU machine (--device auto would take it); gpu tests edit it
	cfg.Model = filepath.Join(testModels, name)
	cfg.MaxNumBatchedTokens = 256
	cfg.MaxNumSeqs = 64
	cfg.KVCacheMemory = 16 << 20
	if edit != nil {
		edit(&cfg)
	}
	e, err := New(cfg, quiet)
	require.NoError(t, err)
	t.Cleanup(e.Close)
	return e
}

func greedy(maxTokens int) SamplingParams {
	p := DefaultSamplingParams()
	p.Temperature, p.MaxTokens, p.IgnoreEOS = 0, maxTokens, true
	return p
}

func run1(e *Engine, req Request) (Output, error) {
	st, err := e.Generate(req)
	if err != nil {
		return Output{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	outs, err := st.Collect(ctx)
	if err != nil {
		return Output{}, err
	}
	if len(outs) != 1 {
		return Output{}, fmt.Errorf("%d choices", len(outs))
	}
	return outs[0], nil
}

func collect(t *testing.T, e *Engine, req Request) Output {
	t.Helper()
	out, err := run1(e, req)
	require.NoError(t, err)
	return out
}

// TestEngineMatchesReference runs every testdata checkpoint through the whole engine and
// compares its greedy tokens and logprobs with transformers' float32 reference, up to the first
// step whose top-1 is a near tie (after which both continuations are legitimate).
func TestEngineMatchesReference(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join(testModels, "*"))
	require.NoError(t, err)
	require.NotEmpty(t, dirs)
	for _, dir := range dirs {
		name := filepath.Base(dir)
		t.Run(name, func(t *testing.T) {
			e := newTestEngine(t, name, nil)
			ref := loadRef(t, name)
			for ci, c := range ref.Cases {
				p := greedy(len(c.Steps))
				p.Logprobs = 5
				out := collect(t, e, Request{ID: fmt.Sprint(ci), PromptIDs: c.PromptIDs, Params: p})
				require.Len(t, out.TokenIDs, len(c.Steps))
				for si, st := range c.Steps {
					if st.Margin <= 1e-3 {
						break
					}
					require.Equal(t, st.Token, out.TokenIDs[si], "case %d step %d", ci, si)
					require.InDelta(t, st.TopLogprobs[0], out.Logprobs[si].Logprob, 1e-3)
					require.Equal(t, st.TopIDs, out.Logprobs[si].TopIDs)
					for k := range st.TopIDs {
						require.InDelta(t, st.TopLogprobs[k], out.Logprobs[si].TopLogprobs[k], 1e-3)
					}
				}
			}
		})
	}
}

// mixedPrompts returns n prompts of lengths 1..90, some sharing long prefixes.
func mixedPrompts(n int, seed uint64) [][]int32 {
	r := rand.New(rand.NewPCG(seed, 1))
	shared := make([]int32, 40)
	for i := range shared {
		shared[i] = int32(r.IntN(380) + 3)
	}
	out := make([][]int32, n)
	for i := range out {
		l := 1 + r.IntN(90)
		var p []int32
		if i%3 == 0 {
			p = append(p, shared...)
		}
		for len(p) < l {
			p = append(p, int32(r.IntN(380)+3))
		}
		out[i] = p
	}
	return out
}

// TestBatchInvariance: each request's greedy output is the same alone and among 32 concurrent
// requests, with and without prefix caching, and with preemption forced by a tiny cache: on a
// dense model and on the MoE families (whose router must not make one request's experts, or
// their sum, depend on its batch-mates), and DeepSeek's latent cache and grouped routing.
func TestBatchInvariance(t *testing.T) {
	for _, model := range []string{"qwen3-bf16", "qwen3_moe-bf16", "qwen2_moe-bf16", "deepseek_v3-bf16", "deepseek_v2-lite-bf16"} {
		t.Run(model, func(t *testing.T) { testBatchInvariance(t, model) })
	}
}

func testBatchInvariance(t *testing.T, model string) {
	prompts := mixedPrompts(32, 7)
	alone := newTestEngine(t, model, func(c *Config) { c.NoPrefixCaching = true })
	want := make([][]int32, len(prompts))
	for i, p := range prompts {
		want[i] = collect(t, alone, Request{ID: "a", PromptIDs: p, Params: greedy(10 + i%7)}).TokenIDs
	}
	variants := map[string]func(*Config){
		"prefix-caching":    nil,
		"no-prefix-caching": func(c *Config) { c.NoPrefixCaching = true },
		"preemption":        func(c *Config) { c.NumKVBlocks = 14; c.MaxModelLen = 200; c.BlockSize = 16 },
		"small-chunks":      func(c *Config) { c.MaxNumBatchedTokens = 24 },
	}
	for name, edit := range variants {
		t.Run(name, func(t *testing.T) {
			e := newTestEngine(t, model, edit)
			reqs := make([]Request, len(prompts))
			for i, p := range prompts {
				reqs[i] = Request{ID: fmt.Sprint(i), PromptIDs: p, Params: greedy(10 + i%7)}
			}
			// All 32 are queued before the first step, so they share batches whatever the
			// goroutine scheduling.
			got := runAll(t, e, reqs)
			for i := range prompts {
				require.Len(t, got[i], 1)
				require.Equal(t, want[i], got[i][0].TokenIDs, "request %d", i)
			}
			if name == "preemption" {
				require.Positive(t, e.Stats().NumPreemptions, "the tiny cache should have forced preemption")
			}
			st := e.Stats()
			require.Zero(t, st.KVBlocksUsed, "%+v", st)
		})
	}
}

func TestPrefixCacheComputesOnlyNewTokens(t *testing.T) {
	e := newTestEngine(t, "llama-bf16", nil)
	prefix := mixedPrompts(1, 3)[0][:0]
	for i := 0; i < 96; i++ {
		prefix = append(prefix, int32(5+i%300))
	}
	first := collect(t, e, Request{ID: "1", PromptIDs: prefix, Params: greedy(4)})
	require.Zero(t, first.NumCachedTokens)
	before := e.Stats().PromptTokens
	second := append(append([]int32(nil), prefix...), 7, 8, 9)
	out := collect(t, e, Request{ID: "2", PromptIDs: second, Params: greedy(4)})
	require.Equal(t, 96, out.NumCachedTokens, "all six full blocks of the shared prefix come from the cache")
	require.Equal(t, int64(3), e.Stats().PromptTokens-before, "only the three new prompt tokens are computed")
	cold := newTestEngine(t, "llama-bf16", func(c *Config) { c.NoPrefixCaching = true })
	require.Equal(t, collect(t, cold, Request{ID: "x", PromptIDs: second, Params: greedy(4)}).TokenIDs, out.TokenIDs)
}

// TestSoak pushes 500 random requests with random aborts through the loop; afterwards every
// KV block is free and no goroutine is left behind.
func TestSoak(t *testing.T) {
	goroutines := runtime.NumGoroutine()
	cfg := DefaultConfig()
	cfg.Model = filepath.Join(testModels, "llama-bf16")
	cfg.NumKVBlocks, cfg.MaxModelLen, cfg.MaxNumBatchedTokens, cfg.MaxNumSeqs, cfg.Threads = 24, 128, 64, 16, 2
	e, err := New(cfg, quiet)
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(1, 2))
	var wg sync.WaitGroup
	results := make([]struct {
		outs  []Output
		err   error
		p     SamplingParams
		abort bool
	}, 500)
	for i := 0; i < 500; i++ {
		prompt := make([]int32, 1+r.IntN(60))
		for j := range prompt {
			prompt[j] = int32(r.IntN(384))
		}
		p := DefaultSamplingParams()
		p.MaxTokens, p.Temperature, p.N, p.IgnoreEOS = 1+r.IntN(20), r.Float64(), 1+r.IntN(2), true
		st, err := e.Generate(Request{ID: fmt.Sprint(i), PromptIDs: prompt, Params: p})
		require.NoError(t, err)
		res := &results[i]
		res.p, res.abort = p, r.IntN(4) == 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			if res.abort {
				st.Cancel()
			}
			res.outs, res.err = st.Collect(context.Background())
		}()
	}
	wg.Wait()
	for _, res := range results {
		require.NoError(t, res.err)
		require.Len(t, res.outs, res.p.N)
		for _, o := range res.outs {
			require.True(t, o.Finished)
			if !res.abort {
				require.Equal(t, "length", o.FinishReason)
				require.Len(t, o.TokenIDs, res.p.MaxTokens)
			} else {
				require.Contains(t, []string{"abort", "length"}, o.FinishReason)
			}
		}
	}
	st := e.Stats()
	require.Zero(t, st.KVBlocksUsed)
	require.Zero(t, st.Running+st.Waiting)
	e.Close()
	// Exiting goroutines need a moment to be counted out; poll with a deadline.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > goroutines && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	require.LessOrEqual(t, runtime.NumGoroutine(), goroutines, "goroutines left behind:\n%s", goroutineDump())
}

func goroutineDump() string {
	buf := make([]byte, 1<<16)
	return string(buf[:runtime.Stack(buf, true)])
}

// TestMaxTokensZeroStopsAtTheModelLength: MaxTokens 0 (unset) generates up to max_model_len
// and finishes with "length" there, so no request is endless.
func TestMaxTokensZeroStopsAtTheModelLength(t *testing.T) {
	e := newTestEngine(t, "llama-bf16", func(c *Config) { c.MaxModelLen = 24 })
	prompt := []int32{1, 2, 3, 4}
	out := collect(t, e, Request{ID: "zero", PromptIDs: prompt, Params: greedy(0)})
	require.Equal(t, "length", out.FinishReason)
	require.Len(t, out.TokenIDs, 24-len(prompt))
}
