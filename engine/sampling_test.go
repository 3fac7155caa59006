package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// fakeSampler samples on the "device" of a cpu backend with the Go reference, counting the
// rows it served, so the engine's device path runs without a GPU.
type fakeSampler struct {
	be    ops.Backend
	vocab int
	rows  int
	buf   []float32
}

func (f *fakeSampler) SampleRows(logits ops.Tensor, params []ops.RowSampling, out []ops.SampledToken) {
	n := len(params) * f.vocab
	if cap(f.buf) < n {
		f.buf = make([]float32, n)
	}
	f.be.ReadRows(logits, f.buf[:n])
	for i, p := range params {
		out[i] = ops.SampleRow(f.buf[i*f.vocab:(i+1)*f.vocab], p)
	}
	f.rows += len(params)
}

// withFakeSampler installs a fakeSampler in e's runner (on the loop goroutine).
func withFakeSampler(t *testing.T, e *Engine) *fakeSampler {
	f := &fakeSampler{vocab: e.model.VocabSize}
	require.True(t, e.call(func() { f.be = e.runner.be; e.runner.sampler = f }))
	return f
}

// served returns the rows the fake sampled so far (read on the loop goroutine).
func (f *fakeSampler) served(e *Engine) int {
	var n int
	e.call(func() { n = f.rows })
	return n
}

func seededParams(seed int64, maxTokens int) SamplingParams {
	p := DefaultSamplingParams()
	p.Temperature, p.TopK, p.TopP, p.MinP, p.MaxTokens, p.IgnoreEOS = 0.9, 40, 0.95, 0.02, maxTokens, true
	p.Seed = &seed
	return p
}

func TestDeviceSamplingGreedyMatchesHost(t *testing.T) {
	prompts := mixedPrompts(6, 21)
	host := newTestEngine(t, "qwen3-bf16", nil)
	dev := newTestEngine(t, "qwen3-bf16", nil)
	f := withFakeSampler(t, dev)
	for i, p := range prompts {
		want := collect(t, host, Request{ID: "h", PromptIDs: p, Params: greedy(8)})
		got := collect(t, dev, Request{ID: "d", PromptIDs: p, Params: greedy(8)})
		require.Equal(t, want.TokenIDs, got.TokenIDs, "prompt %d", i)
		for j := range want.Logprobs {
			require.InDelta(t, want.Logprobs[j].Logprob, got.Logprobs[j].Logprob, 1e-4, "prompt %d token %d", i, j)
		}
	}
	require.Equal(t, 8*len(prompts), f.served(dev), "every token sampled on the device")
}

func TestDeviceSamplingSeedsReproduce(t *testing.T) {
	prompts := mixedPrompts(8, 22)
	e := newTestEngine(t, "qwen3-bf16", nil)
	withFakeSampler(t, e)
	a := collect(t, e, Request{ID: "a", PromptIDs: prompts[0], Params: seededParams(5, 12)})
	b := collect(t, e, Request{ID: "b", PromptIDs: prompts[0], Params: seededParams(5, 12)})
	c := collect(t, e, Request{ID: "c", PromptIDs: prompts[0], Params: seededParams(6, 12)})
	require.Equal(t, a.TokenIDs, b.TokenIDs, "same seed, same tokens")
	require.NotEqual(t, a.TokenIDs, c.TokenIDs, "another seed, other tokens")
	// The same request among others (another batch composition every step), all of them queued
	// before the first step.
	reqs := make([]Request, len(prompts))
	for i, p := range prompts {
		reqs[i] = Request{ID: fmt.Sprint("m", i), PromptIDs: p, Params: seededParams(5+int64(i%2), 12)}
	}
	streams := submitAll(t, e, reqs)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, err := streams[0].Collect(ctx)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, a.TokenIDs, got[0].TokenIDs, "seeded request in a batch")
}

func TestDeviceSamplingFallsBackToHost(t *testing.T) {
	e := newTestEngine(t, "qwen3-bf16", nil)
	f := withFakeSampler(t, e)
	prompt := mixedPrompts(1, 23)[0]
	pen := seededParams(1, 5)
	pen.RepetitionPenalty = 1.3
	collect(t, e, Request{ID: "pen", PromptIDs: prompt, Params: pen})
	lp := greedy(5)
	lp.Logprobs = 2
	out := collect(t, e, Request{ID: "lp", PromptIDs: prompt, Params: lp})
	require.Len(t, out.Logprobs[0].TopIDs, 2)
	minTok := greedy(5)
	minTok.MinTokens, minTok.StopTokenIDs = 3, []int32{int32(e.model.VocabSize - 1)}
	collect(t, e, Request{ID: "min", PromptIDs: prompt, Params: minTok})
	require.Equal(t, 5-3, f.served(e), "only min_tokens' last steps may sample on the device")
}

func TestHostSessionDeviceSampling(t *testing.T) {
	prompts := mixedPrompts(3, 24)
	ref := newTestEngine(t, "llama-bf16", nil)
	want := make([][]int32, len(prompts))
	for i, p := range prompts {
		want[i] = collect(t, ref, Request{ID: "r", PromptIDs: p, Params: greedy(5 + i)}).TokenIDs
	}
	e := newTestEngine(t, "llama-bf16", nil)
	f := withFakeSampler(t, e)
	reqs := runGreedySim(t, newHostSession(t, e), prompts)
	for i, r := range reqs {
		require.Equal(t, want[i], r.out, "request %d", i)
	}
	require.Positive(t, f.served(e))
}
