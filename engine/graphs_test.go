package engine

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/models"
	"github.com/atom-go/atom/ops/cpu"
)

// On the cpu backend there are no graphs: capture is a no-op and every step is eager.
func TestGraphsAreAGPUFeature(t *testing.T) {
	e := newTestEngine(t, "qwen3-bf16", nil)
	require.Nil(t, e.runner.GraphSizes())
	require.NoError(t, e.runner.CaptureGraphs([]int{1, 2, 4}, 64))
	require.Nil(t, e.runner.GraphSizes())
	out, err := run1(e, Request{ID: "a", PromptIDs: []int32{1, 2, 3}, Params: greedy(4)})
	require.NoError(t, err)
	require.Len(t, out.TokenIDs, 4)
	graph, eager := e.runner.StepCounts()
	require.Zero(t, graph)
	require.Positive(t, eager)
}

func TestCaptureSizes(t *testing.T) {
	defaults := []int{1, 2, 4, 8, 16, 24, 32}
	for _, tc := range []struct {
		name                       string
		sizes                      []int
		maxSeqs, verifyRows, limit int
		want                       []int
	}{
		{"decode only", defaults, 16, 0, 64, []int{1, 2, 4, 8, 16}},
		{"k=3 drafts", defaults, 16, 4, 64, []int{1, 2, 4, 8, 16, 32, 64}},
		{"k=2 drafts, rows bounded", defaults, 32, 3, 48, []int{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48}},
		{"token budget below the sizes", defaults, 16, 4, 10, []int{1, 2, 4, 8}},
		{"duplicates and junk", []int{4, 4, 0, -2, 1}, 8, 2, 64, []int{1, 2, 4, 8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, captureSizes(tc.sizes, tc.maxSeqs, tc.verifyRows, tc.limit))
		})
	}
}

// TestSplitTokensMatchesVerifyChunk checks the metadata a verify batch's graph replays (each
// token a one-token sequence with its sequence's table, splitTokens) against the verify chunk
// itself, eagerly on the cpu: the same logits at every position, for batches of verify chunks
// of different lengths beside plain decode tokens, on a dense and on an MLA family.
func TestSplitTokensMatchesVerifyChunk(t *testing.T) {
	for _, name := range []string{"qwen3-bf16", "deepseek_v2-lite-bf16"} {
		t.Run(name, func(t *testing.T) {
			be := cpu.New(0)
			t.Cleanup(be.Close)
			ck, err := models.OpenCheckpoint(filepath.Join(testModels, name))
			require.NoError(t, err)
			t.Cleanup(func() { ck.Close() })
			limits := models.Options{MaxTokens: 128, MaxSeqs: 32}
			m, err := models.Load(ck, be, limits)
			require.NoError(t, err)
			const bs, blocks = 4, 64
			r, err := NewRunner(m, be, limits, blocks, bs)
			require.NoError(t, err)
			rng := rand.New(rand.NewPCG(3, 4))
			vocab := ck.Config.VocabSize
			drafts := []int{3, 0, 1, 4}
			work := make([]Work, len(drafts))
			for s := range work {
				n := 5 + rng.IntN(9)
				toks := make([]int32, n+drafts[s])
				for i := range toks {
					toks[i] = int32(rng.IntN(vocab))
				}
				table := make([]int32, 6)
				for j := range table {
					table[j] = int32(s*len(table) + j + 1)
				}
				// The prompt but its last token first, then the verify chunk.
				_, err := r.Run([]Work{{Tokens: toks, NumTokens: n - 1, BlockTable: table}})
				require.NoError(t, err)
				work[s] = Work{Tokens: toks, Start: n - 1, NumTokens: 1 + drafts[s], BlockTable: table, Sample: true, Drafts: drafts[s]}
			}
			chunk, err := r.Run(work)
			require.NoError(t, err)
			chunk = append([]float32(nil), chunk...)

			require.NoError(t, r.prepare(work))
			split := r.splitTokens()
			require.Equal(t, len(r.ids), split.NumSeqs(), "a sequence per token")
			logits := make([]float32, len(chunk))
			be.ReadRows(m.Logits(m.Forward(r.ids, split, r.cache), r.sampleRows), logits)
			for row := range len(chunk) / vocab {
				got, want := logits[row*vocab:(row+1)*vocab], chunk[row*vocab:(row+1)*vocab]
				worst := 0.0
				for i := range want {
					worst = math.Max(worst, math.Abs(float64(got[i]-want[i])))
				}
				require.Less(t, worst, 1e-4, "row %d", row)
				require.Equal(t, argmax(want), argmax(got), "row %d", row)
			}
		})
	}
}
