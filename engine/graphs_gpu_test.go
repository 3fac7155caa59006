//go:build gpu

package engine

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/models"
	"github.com/atom-go/atom/ops"
	"github.com/atom-go/atom/ops/gpu"
)

// graphTolerance bounds ‖graph − eager‖/‖eager‖ over a step's logits. The two paths run the
// same kernels except that a padded graph's GEMMs see more rows (the BLAS may pick another
// algorithm) and its attention splits by the model length instead of the batch's context; in
// bf16 a random-weight model's logits have differed by up to 2.2e-2 (a broken graph: ~1).
func graphTolerance(dt ops.DType) float64 {
	switch dt {
	case ops.BF16:
		return 3e-2
	case ops.F16:
		return 3e-3
	}
	return 1e-4
}

// openOnGPU opens testdata model name and a gpu backend computing in dt, both closed when t
// ends.
func openOnGPU(t *testing.T, name string, dt ops.DType) (*models.Checkpoint, *gpu.Backend) {
	t.Helper()
	ck, err := models.OpenCheckpoint(filepath.Join(testModels, name))
	require.NoError(t, err)
	t.Cleanup(func() { ck.Close() })
	be, err := gpu.New(0, gpu.Options{DType: dt})
	require.NoError(t, err)
	t.Cleanup(be.Close)
	return ck, be
}

func relErr(got, want []float32) float64 {
	var num, den float64
	for i := range want {
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	if math.IsNaN(num) {
		return math.Inf(1)
	}
	return math.Sqrt(num / den)
}

// TestDecodeGraphsMatchEager runs random decode batches of several sizes (padded ones among
// them) through a runner replaying captured graphs and through an eager runner of the same
// model, each with its own KV cache laid out identically, and compares the logits step by
// step. Sequence 0 owns block 0, the block padding rows read: a padding row writing KV would
// show up in the later steps.
func TestDecodeGraphsMatchEager(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	for _, tc := range []struct {
		name string
		dt   ops.DType
	}{{"qwen3-bf16", ops.BF16}, {"llama-bf16", ops.BF16}, {"qwen2-bf16", ops.BF16}, {"mistral-f16", ops.F16},
		{"llama3-rope-f32", ops.F32}, {"llama-yarn-bf16", ops.BF16},
		{"qwen3_moe-bf16", ops.BF16}, {"qwen2_moe-bf16", ops.BF16}, {"mixtral-f16", ops.F16}, {"llama-fp8", ops.BF16},
		{"deepseek_v2-lite-bf16", ops.BF16}, {"deepseek_v3-bf16", ops.BF16}, {"gpt_oss-bf16", ops.BF16}} {
		t.Run(tc.name, func(t *testing.T) { graphsVsEager(t, rng, tc.name, tc.dt) })
	}
}

func graphsVsEager(t *testing.T, rng *rand.Rand, name string, dt ops.DType) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ck, be := openOnGPU(t, name, dt)
	limits := models.Options{MaxTokens: 256, MaxSeqs: 16}
	m, err := models.Load(ck, be, limits)
	if gpuCannotServe(err) { // a model whose kernels are still to come (the sentinels --device auto reads)
		t.Skipf("no gpu kernels for this model yet: %v", err)
	}
	require.NoError(t, err)
	const bs, blocks, perSeq = 4, 128, 8
	eager, err := NewRunner(m, be, limits, blocks, bs)
	require.NoError(t, err)
	graphs, err := NewRunner(m, be, limits, blocks, bs)
	require.NoError(t, err)
	require.NoError(t, graphs.CaptureGraphs([]int{1, 2, 4, 8, 16, 32}, 64))
	require.Equal(t, []int{1, 2, 4, 8, 16}, graphs.GraphSizes(), "sizes above --max-num-seqs are skipped")
	poison := graphs.graphs.graphs[16].logits // the first 16 rows of the model's logits buffer
	be.Fill(poison, float32(math.NaN()))
	vocab := m.Config().VocabSize
	tol := graphTolerance(dt)
	worst := 0.0
	for _, k := range []int{1, 3, 5, 8, 13, 16} {
		perm := rng.Perm(blocks)
		for i, b := range perm {
			if b == 0 { // sequence 0 starts in block 0
				perm[0], perm[i] = perm[i], perm[0]
			}
		}
		seqs := make([][]int32, k)
		tables := make([][]int32, k)
		for s := range seqs {
			for i := 0; i < 3+rng.IntN(18); i++ {
				seqs[s] = append(seqs[s], int32(rng.IntN(vocab)))
			}
			for j := 0; j < perSeq; j++ {
				tables[s] = append(tables[s], int32(perm[s*perSeq+j]))
			}
		}
		// Prefill every prompt (eager on both runners), then decode.
		work := make([]Work, k)
		for s := range seqs {
			work[s] = Work{Tokens: seqs[s], Start: 0, NumTokens: len(seqs[s]), BlockTable: tables[s], Sample: true}
		}
		g0, e0 := graphs.StepCounts()
		want, err := eager.Run(work)
		require.NoError(t, err)
		next := argmaxRows(want, vocab)
		_, err = graphs.Run(work)
		require.NoError(t, err)
		for step := 0; step < 6; step++ {
			for s := range seqs {
				seqs[s] = append(seqs[s], next[s])
				work[s] = Work{Tokens: seqs[s], Start: len(seqs[s]) - 1, NumTokens: 1, BlockTable: tables[s], Sample: true}
			}
			// The runners share the model's logits buffer: poison it so that a graph which
			// wrote nothing cannot pass with the eager values.
			got, err := graphs.Run(work)
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
		g1, e1 := graphs.StepCounts()
		require.Equal(t, int64(6), g1-g0, "decode steps replayed from graphs (batch %d)", k)
		require.Equal(t, int64(1), e1-e0, "the prefill runs eagerly (batch %d)", k)
	}
	// A mixed batch (a prefill chunk beside decodes) takes the eager path.
	_, e0 := graphs.StepCounts()
	_, err = graphs.Run([]Work{{Tokens: []int32{1, 2, 3}, NumTokens: 3, BlockTable: []int32{5}, Sample: true},
		{Tokens: []int32{4}, NumTokens: 1, BlockTable: []int32{6}, Sample: true}})
	require.NoError(t, err)
	_, e1 := graphs.StepCounts()
	require.Equal(t, int64(1), e1-e0)
	fmt.Printf("graph-vs-eager %-18s %-8v worst logits relerr %.2e (limit %.0e)\n", name, dt, worst, tol)
}

func argmaxRows(logits []float32, vocab int) []int32 {
	out := make([]int32, len(logits)/vocab)
	for r := range out {
		row := logits[r*vocab : (r+1)*vocab]
		best := 0
		for i, v := range row {
			if v > row[best] {
				best = i
			}
		}
		out[r] = int32(best)
	}
	return out
}

// TestEngineGraphsOnGPU runs concurrent greedy requests through the engine with graphs and
// with --enforce-eager and checks that decode steps replayed graphs and that the two agree.
func TestEngineGraphsOnGPU(t *testing.T) {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11))
	prompts := make([][]int32, 5)
	for i := range prompts {
		for j := 0; j < 4+rng.IntN(30); j++ {
			prompts[i] = append(prompts[i], int32(rng.IntN(384)))
		}
	}
	gen := func(eager bool) ([][]int32, *Engine) {
		e := newTestEngine(t, "qwen3-bf16", func(c *Config) {
			c.Device, c.EnforceEager, c.NumKVBlocks, c.MaxModelLen = "gpu", eager, 256, 256
		})
		reqs := make([]Request, len(prompts))
		for i, p := range prompts {
			reqs[i] = Request{ID: fmt.Sprint(i), PromptIDs: p, Params: greedy(24)}
		}
		streams := submitAll(t, e, reqs) // the same batches with and without graphs
		out := make([][]int32, len(prompts))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for i, st := range streams {
			outs, err := st.Collect(ctx)
			require.NoError(t, err)
			for _, o := range outs {
				out[i] = append(out[i], o.TokenIDs...)
			}
			require.Len(t, out[i], 24)
		}
		return out, e
	}
	withGraphs, e := gen(false)
	replayed, _ := e.runner.StepCounts()
	require.Positive(t, replayed, "decode steps replayed graphs")
	eager, e2 := gen(true)
	none, _ := e2.runner.StepCounts()
	require.Zero(t, none, "--enforce-eager captures nothing")
	same, total := 0, 0
	for i := range prompts {
		for j := range eager[i] {
			total++
			if eager[i][j] == withGraphs[i][j] {
				same++
			}
		}
	}
	fmt.Printf("engine graphs vs eager: %d/%d greedy tokens equal, %d graph steps\n", same, total, replayed)
	require.GreaterOrEqual(t, float64(same), 0.8*float64(total))
}

// TestHostSessionGraphsOnGPU: a host session whose block size differs from the engine's gets
// its own runner and KV cache; its decode steps replay graphs captured over that cache, and
// its greedy tokens equal those of the same session under --enforce-eager.
func TestHostSessionGraphsOnGPU(t *testing.T) {
	prompts := mixedPrompts(3, 24)
	run := func(eager bool) ([][]int32, *Runner) {
		e := newTestEngine(t, "llama-bf16", func(c *Config) {
			c.Device, c.EnforceEager, c.NumKVBlocks, c.MaxModelLen = "gpu", eager, 256, 256
		})
		h, err := e.StartHostSession(e.NumKVBlocks()/2, 2*e.Config().BlockSize)
		require.NoError(t, err)
		require.NotSame(t, e.runner, h.runner, "another block size gets its own runner")
		reqs := runGreedySim(t, h, prompts)
		out := make([][]int32, len(reqs))
		for i, r := range reqs {
			require.Len(t, r.out, 5+i)
			out[i] = r.out
		}
		return out, h.runner
	}
	eager, er := run(true)
	require.Empty(t, er.GraphSizes(), "--enforce-eager captures nothing")
	graphs, gr := run(false)
	require.NotEmpty(t, gr.GraphSizes())
	replayed, _ := gr.StepCounts()
	require.Positive(t, replayed, "the host's decode steps replayed graphs")
	require.Equal(t, eager, graphs)
	fmt.Printf("host session with its own KV cache: %d graph steps, tokens equal to eager\n", replayed)
}

// TestVerifyGraphsMatchEager runs speculative verify batches (each sequence's last token plus 0
// to 3 drafts, every position's logits) through a runner replaying the graphs of its tokens as
// one-token sequences and through an eager runner of the same model, and compares the logits.
func TestVerifyGraphsMatchEager(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 9))
	for _, tc := range []struct {
		name string
		dt   ops.DType
	}{{"qwen3-bf16", ops.BF16}, {"llama3-rope-f32", ops.F32}, {"mistral-f16", ops.F16},
		{"qwen3_moe-bf16", ops.BF16}, {"deepseek_v2-lite-bf16", ops.BF16}, {"gpt_oss-bf16", ops.BF16}} {
		t.Run(tc.name, func(t *testing.T) { verifyGraphsVsEager(t, rng, tc.name, tc.dt) })
	}
}

func verifyGraphsVsEager(t *testing.T, rng *rand.Rand, name string, dt ops.DType) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ck, be := openOnGPU(t, name, dt)
	const k = 3 // drafts a sequence at most
	limits := models.Options{MaxTokens: 256, MaxSeqs: 8 * (1 + k)}
	m, err := models.Load(ck, be, limits)
	if gpuCannotServe(err) {
		t.Skipf("no gpu kernels for this model yet: %v", err)
	}
	require.NoError(t, err)
	const bs, blocks, perSeq = 4, 128, 10
	eager, err := NewRunner(m, be, limits, blocks, bs)
	require.NoError(t, err)
	graphs, err := NewRunner(m, be, limits, blocks, bs)
	require.NoError(t, err)
	graphs.decodeSeqs, graphs.verifyRows = 8, 1+k
	require.NoError(t, graphs.CaptureGraphs([]int{1, 2, 4, 8}, 64))
	require.Equal(t, []int{1, 2, 4, 8, 16, 32}, graphs.GraphSizes(), "each decode size and it times 1+k")
	poison := graphs.graphs.graphs[32].logits
	vocab := m.Config().VocabSize
	tol := graphTolerance(dt)
	worst := 0.0
	for _, n := range []int{1, 3, 8} {
		perm := rng.Perm(blocks)
		seqs := make([][]int32, n)
		work := make([]Work, n)
		for s := range seqs {
			for i := 0; i < 3+rng.IntN(14); i++ {
				seqs[s] = append(seqs[s], int32(rng.IntN(vocab)))
			}
			work[s] = Work{Tokens: seqs[s], NumTokens: len(seqs[s]), BlockTable: make([]int32, perSeq), Sample: true}
			for j := range perSeq {
				work[s].BlockTable[j] = int32(perm[s*perSeq+j])
			}
		}
		_, err := eager.Run(work)
		require.NoError(t, err)
		_, err = graphs.Run(work)
		require.NoError(t, err)
		for step := 0; step < 4; step++ {
			for s := range seqs {
				d := rng.IntN(k + 1)
				for range d + 1 {
					seqs[s] = append(seqs[s], int32(rng.IntN(vocab)))
				}
				work[s] = Work{Tokens: seqs[s], Start: len(seqs[s]) - 1 - d, NumTokens: 1 + d, BlockTable: work[s].BlockTable, Sample: true, Drafts: d}
			}
			g0, _ := graphs.StepCounts()
			be.Fill(poison, float32(math.NaN()))
			got, err := graphs.Run(work)
			require.NoError(t, err)
			got = append([]float32(nil), got...)
			g1, _ := graphs.StepCounts()
			require.Equal(t, g0+1, g1, "the verify step replayed a graph (batch %d, step %d)", n, step)
			be.Fill(poison, float32(math.NaN()))
			want, err := eager.Run(work)
			require.NoError(t, err)
			require.Len(t, got, len(want))
			for row := range len(want) / vocab {
				e := relErr(got[row*vocab:(row+1)*vocab], want[row*vocab:(row+1)*vocab])
				worst = math.Max(worst, e)
				require.LessOrEqual(t, e, tol, "batch %d, step %d, row %d", n, step, row)
			}
		}
	}
	fmt.Printf("verify graph-vs-eager %-22s %-8v worst logits relerr %.2e (limit %.0e)\n", name, dt, worst, tol)
}
