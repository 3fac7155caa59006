//go:build gpu

package engine

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/models"
	"github.com/atom-go/atom/ops"
	"github.com/atom-go/atom/ops/gpu"
)

// TestRankedDecodeGraphsMatchEager is TestDecodeGraphsMatchEager for a tensor-parallel model:
// a one-rank model built with models.LoadParallelForced over a real NCCL group, so every
// row-parallel layer all-reduces through NCCL inside the captured graphs, and the logits are
// gathered from the ranks' vocabulary slices after the replay. Batches of 1, 3 (padded to 4)
// and 8 sequences decode 6 steps each, graph replay against eager logits; after the last step
// the same batch is replayed again with device sampling, whose greedy tokens must be maxima of
// the replayed logits.
func TestRankedDecodeGraphsMatchEager(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 9))
	for _, tc := range []struct {
		name string
		dt   ops.DType
	}{{"qwen3-bf16", ops.BF16}, {"llama-bf16", ops.BF16}, {"mistral-f16", ops.F16}} {
		t.Run(tc.name, func(t *testing.T) { rankedGraphsVsEager(t, rng, tc.name, tc.dt) })
	}
}

func rankedGraphsVsEager(t *testing.T, rng *rand.Rand, name string, dt ops.DType) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ck, be := openOnGPU(t, name, dt)
	group, err := gpu.NewGroup([]*gpu.Backend{be})
	require.NoError(t, err)
	defer group.Close()
	limits := models.Options{MaxTokens: 256, MaxSeqs: 16}
	m, err := models.LoadParallelForced(ck, []ops.Backend{be}, group, limits)
	require.NoError(t, err)
	defer m.(interface{ Close() }).Close()
	rm, ok := m.(models.RankedModel)
	require.True(t, ok, "LoadParallelForced gives a RankedModel")
	require.Equal(t, 1, rm.Ranks())
	const bs, blocks, perSeq = 4, 128, 8
	eager, err := NewRunner(m, be, limits, blocks, bs)
	require.NoError(t, err)
	graphs, err := NewRunner(m, be, limits, blocks, bs)
	require.NoError(t, err)
	require.NoError(t, graphs.CaptureGraphs([]int{1, 2, 4, 8}, 64))
	require.Equal(t, []int{1, 2, 4, 8}, graphs.GraphSizes())
	require.NotNil(t, graphs.graphs.ranked, "graphs captured per rank")
	// Rank 0's vocabulary slice (the whole vocabulary at one rank), which the graphs and the
	// eager path both write: poisoned so that a graph which wrote nothing cannot pass.
	poison := graphs.graphs.graphs[8].ranks[0].logits
	be.Fill(poison, float32(math.NaN()))
	vocab := m.Config().VocabSize
	tol := graphTolerance(dt)
	worst := 0.0
	for _, k := range []int{1, 3, 8} {
		work := randomPrefill(rng, k, vocab, blocks, perSeq)
		g0, e0 := graphs.StepCounts()
		want, err := eager.Run(work)
		require.NoError(t, err)
		next := argmaxRows(want, vocab)
		_, err = graphs.Run(work)
		require.NoError(t, err)
		var got []float32
		for step := 0; step < 6; step++ {
			for s := range work {
				toks := append(work[s].Tokens, next[s])
				work[s] = Work{Tokens: toks, Start: len(toks) - 1, NumTokens: 1, BlockTable: work[s].BlockTable, Sample: true}
			}
			got, err = graphs.Run(work)
			require.NoError(t, err)
			got = append([]float32(nil), got...)
			be.Fill(poison, float32(math.NaN()))
			want, err := eager.Run(work)
			require.NoError(t, err)
			be.Fill(poison, float32(math.NaN()))
			for s := 0; s < k; s++ {
				e := relErr(got[s*vocab:(s+1)*vocab], want[s*vocab:(s+1)*vocab])
				worst = math.Max(worst, e)
				require.LessOrEqual(t, e, tol, "batch %d, step %d, sequence %d", k, step, s)
			}
			next = argmaxRows(want, vocab)
		}
		replays := int64(6)
		if graphs.DeviceSampling() {
			// The same decode batch again: it rewrites the same KV entries, so the replay
			// computes the same logits, sampled greedily on rank 0's device.
			params := make([]ops.RowSampling, k)
			for s := range params {
				params[s] = ops.RowSampling{Temperature: 0, TopP: 1}
			}
			toks, err := graphs.RunSampled(work, params)
			require.NoError(t, err)
			be.Fill(poison, float32(math.NaN()))
			for s, tok := range toks {
				row := got[s*vocab : (s+1)*vocab]
				require.Equal(t, row[argmaxRows(row, vocab)[0]], row[tok.Token], "batch %d, sequence %d: greedy token %d", k, s, tok.Token)
			}
			replays++
		}
		g1, e1 := graphs.StepCounts()
		require.Equal(t, replays, g1-g0, "decode steps replayed from graphs (batch %d)", k)
		require.Equal(t, int64(1), e1-e0, "the prefill runs eagerly (batch %d)", k)
	}
	fmt.Printf("ranked graph-vs-eager %-12s %-8v worst logits relerr %.2e (limit %.0e)\n", name, dt, worst, tol)
}

// randomPrefill makes k random prompts of 3 to 20 tokens, each with perSeq blocks of a random
// permutation; sequence 0 owns block 0, the block padding rows read.
func randomPrefill(rng *rand.Rand, k, vocab, blocks, perSeq int) []Work {
	perm := rng.Perm(blocks)
	for i, b := range perm {
		if b == 0 {
			perm[0], perm[i] = perm[i], perm[0]
		}
	}
	work := make([]Work, k)
	for s := range work {
		var toks []int32
		for i := 0; i < 3+rng.IntN(18); i++ {
			toks = append(toks, int32(rng.IntN(vocab)))
		}
		table := make([]int32, perSeq)
		for j := range table {
			table[j] = int32(perm[s*perSeq+j])
		}
		work[s] = Work{Tokens: toks, NumTokens: len(toks), BlockTable: table, Sample: true}
	}
	return work
}

// TestEngineGraphsTensorParallel runs concurrent greedy requests through the engine at
// --tensor-parallel-size 2 with graphs and with --enforce-eager: decode steps must replay the
// per-rank graphs (NCCL all-reduces between two GPUs inside them) and the tokens must agree.
// It needs two GPUs and is skipped on one.
func TestEngineGraphsTensorParallel(t *testing.T) {
	probe, err := gpu.New(1, gpu.Options{DType: ops.BF16})
	if err != nil {
		t.Skipf("needs a second GPU: %v", err)
	}
	probe.Close()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 13))
	prompts := make([][]int32, 5)
	for i := range prompts {
		for j := 0; j < 4+rng.IntN(30); j++ {
			prompts[i] = append(prompts[i], int32(rng.IntN(384)))
		}
	}
	gen := func(eager bool) ([][]int32, *Engine) {
		e := newTestEngine(t, "qwen3-bf16", func(c *Config) {
			c.Device, c.EnforceEager, c.NumKVBlocks, c.MaxModelLen, c.TensorParallelSize = "gpu", eager, 256, 256, 2
		})
		return greedyOutputs(t, e, prompts, 24), e
	}
	withGraphs, e := gen(false)
	require.NotEmpty(t, e.runner.GraphSizes(), "graphs captured under tensor parallelism")
	replayed, _ := e.runner.StepCounts()
	require.Positive(t, replayed, "decode steps replayed graphs")
	eager, _ := gen(true)
	same, total := 0, 0
	for i := range prompts {
		for j := range eager[i] {
			total++
			if eager[i][j] == withGraphs[i][j] {
				same++
			}
		}
	}
	fmt.Printf("engine tp=2 graphs vs eager: %d/%d greedy tokens equal, %d graph steps\n", same, total, replayed)
	require.GreaterOrEqual(t, float64(same), 0.8*float64(total))
}

// greedyOutputs submits every prompt before the first step for n greedy tokens and collects
// the tokens.
func greedyOutputs(t *testing.T, e *Engine, prompts [][]int32, n int) [][]int32 {
	reqs := make([]Request, len(prompts))
	for i, p := range prompts {
		reqs[i] = Request{ID: fmt.Sprint(i), PromptIDs: p, Params: greedy(n)}
	}
	streams := submitAll(t, e, reqs)
	out := make([][]int32, len(prompts))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, st := range streams {
		outs, err := st.Collect(ctx)
		require.NoError(t, err)
		for _, o := range outs {
			out[i] = append(out[i], o.TokenIDs...)
		}
		require.Len(t, out[i], n)
	}
	return out
}
