package models

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
	"github.com/atom-go/atom/ops/cpu"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/golden from the current code")

// goldenBatch is one step of the golden script: sequences, each with its tokens so far and how
// many of them are new in this step.
type goldenBatch struct {
	name string
	seqs []goldenSeq
}

type goldenSeq struct {
	slot   int // the sequence's place in the cache (its block table)
	tokens []int32
	fresh  int // the last fresh tokens are this step's queries
}

// goldenScript covers what the model code branches on: prefill and decode, one sequence and
// several, and a mixed batch.
var goldenScript = []goldenBatch{
	{"prefill batch 1", []goldenSeq{{0, []int32{1, 5, 9, 13, 2}, 5}}},
	{"decode batch 1", []goldenSeq{{0, []int32{1, 5, 9, 13, 2, 7}, 1}}},
	{"mixed batch 3", []goldenSeq{{0, []int32{1, 5, 9, 13, 2, 7, 8}, 1}, {1, []int32{3, 4, 5}, 3}, {2, []int32{20, 21, 22, 23}, 4}}},
	{"decode batch 3", []goldenSeq{{0, []int32{1, 5, 9, 13, 2, 7, 8, 9}, 1}, {1, []int32{3, 4, 5, 6}, 1}, {2, []int32{20, 21, 22, 23, 24}, 1}}},
}

const goldenBlocks, goldenBlockSize, goldenStride = 32, 4, 8

func (g goldenBatch) inputs() ([]int32, *ops.AttnMetadata, []int32) {
	meta := &ops.AttnMetadata{QueryStart: []int32{0}, BlockTableStride: goldenStride}
	var ids, rows []int32
	for _, s := range g.seqs {
		for p := len(s.tokens) - s.fresh; p < len(s.tokens); p++ {
			ids = append(ids, s.tokens[p])
			meta.Positions = append(meta.Positions, int32(p))
			meta.SlotMapping = append(meta.SlotMapping, int32((s.slot*goldenStride+p/goldenBlockSize)*goldenBlockSize+p%goldenBlockSize))
		}
		meta.QueryStart = append(meta.QueryStart, int32(len(ids)))
		meta.SeqLens = append(meta.SeqLens, int32(len(s.tokens)))
		for b := 0; b < goldenStride; b++ {
			meta.BlockTables = append(meta.BlockTables, int32(s.slot*goldenStride+b))
		}
		rows = append(rows, int32(len(ids)-1))
	}
	return ids, meta, rows
}

// goldenCase is one model, backend kind and rank count.
type goldenCase struct {
	model string
	fused bool // the gpu backend's fused paths (fusedRecorder)
	tp    int
	// forced: a one-rank LoadParallelForced model (the tensor-parallel wrapper on one device).
	forced bool
	hook   bool // a layer hook is set (the engine's dump switch)
	ranked bool // also drive each rank through RankedModel, as the engine's graphs do
}

func (c goldenCase) name() string {
	kind := "plain"
	if c.fused {
		kind = "fused"
	}
	s := fmt.Sprintf("%s-%s-tp%d", c.model, kind, c.tp)
	if c.forced {
		s += "-forced"
	}
	if c.hook {
		s += "-hook"
	}
	return s
}

var goldenCases = func() []goldenCase {
	var cs []goldenCase
	for _, m := range []string{"llama-bf16", "mistral-f16", "qwen2-bf16", "qwen3-bf16"} {
		for _, fused := range []bool{false, true} {
			cs = append(cs, goldenCase{model: m, fused: fused, tp: 1}, goldenCase{model: m, fused: fused, tp: 2, ranked: true})
		}
	}
	return append(cs,
		goldenCase{model: "qwen3-bf16", fused: true, tp: 1, forced: true, ranked: true},
		goldenCase{model: "llama-bf16", fused: true, tp: 4, ranked: true}, // KV heads replicated
		goldenCase{model: "llama-bf16", fused: true, tp: 1, hook: true},
		goldenCase{model: "qwen3-bf16", fused: false, tp: 2, hook: true},
		// The MoE families: dense and sparse layers, a shared expert, experts split over ranks.
		goldenCase{model: "qwen3_moe-bf16", fused: false, tp: 1},
		goldenCase{model: "qwen3_moe-bf16", fused: true, tp: 2, ranked: true},
		goldenCase{model: "qwen2_moe-bf16", fused: true, tp: 1},
		goldenCase{model: "mixtral-f16", fused: false, tp: 2, ranked: true})
}()

// runGolden loads the case's model on recording backends, runs the golden script and returns
// each rank's log.
func runGolden(t *testing.T, c goldenCase) string {
	ck, err := OpenCheckpoint(filepath.Join("../testdata/models", c.model))
	require.NoError(t, err)
	defer ck.Close()
	recs := make([]*recorder, c.tp)
	bes := make([]ops.Backend, c.tp)
	for r := range recs {
		inner := cpu.New(1)
		defer inner.Close()
		recs[r] = newRecorder(inner)
		bes[r] = recs[r]
		if c.fused {
			bes[r] = fusedRecorder{recs[r]}
		}
	}
	opt := Options{MaxTokens: 16, MaxSeqs: 4}
	var m Model
	switch {
	case c.forced:
		m, err = LoadParallelForced(ck, bes, &recGroup{inner: cpu.NewGroup(1), recs: recs}, opt)
	case c.tp == 1:
		m, err = Load(ck, bes[0], opt)
	default:
		m, err = LoadParallel(ck, bes, &recGroup{inner: cpu.NewGroup(c.tp), recs: recs}, opt)
	}
	require.NoError(t, err)
	if cl, ok := m.(interface{ Close() }); ok {
		defer cl.Close()
	}
	if c.hook {
		m.SetLayerHook(func(int, []float32, int) {})
	}
	cache, err := m.NewKVCache(goldenBlocks, goldenBlockSize)
	require.NoError(t, err)
	vocab := ck.Config.VocabSize
	for _, step := range goldenScript {
		ids, meta, rows := step.inputs()
		for _, r := range recs {
			r.mark(step.name)
		}
		logits := make([]float32, len(rows)*vocab)
		bes[0].ReadRows(m.Logits(m.Forward(ids, meta, cache), rows), logits)
		if !c.ranked {
			continue
		}
		for _, r := range recs {
			r.mark(step.name + " by rank")
		}
		rm := m.(RankedModel)
		slices := make([]ops.Tensor, c.tp)
		rm.OnRanks(cache, func(rank int, _ ops.Backend, part Model, shard ops.KVCache) {
			slices[rank] = part.Logits(part.Forward(ids, meta, shard), rows)
		})
		bes[0].ReadRows(rm.GatherLogits(len(rows), func(rank int) ops.Tensor { return slices[rank] }), logits)
	}
	var b strings.Builder
	for r, rec := range recs {
		fmt.Fprintf(&b, "#### rank %d\n%s", r, rec.text())
	}
	return b.String()
}

// TestBackendCallsGolden runs every golden case and requires the exact backend call sequence
// recorded in testdata/golden (written from the model code before the model layer was split
// into layers, with -update-golden). It stands in for an on-device A/B: the gpu backend turns
// the same calls into the same kernels, so the same sequence means the same performance.
func TestBackendCallsGolden(t *testing.T) {
	for _, c := range goldenCases {
		t.Run(c.name(), func(t *testing.T) {
			got := runGolden(t, c)
			path := filepath.Join("testdata", "golden", c.name()+".txt")
			if *updateGolden {
				require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
				require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
				return
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run go test ./models -run TestBackendCallsGolden -update-golden to write it")
			wl, gl := strings.Split(string(want), "\n"), strings.Split(got, "\n")
			for i := range min(len(wl), len(gl)) {
				require.Equal(t, wl[i], gl[i], "%s line %d: the first call that differs", path, i+1)
			}
			require.Equal(t, len(wl), len(gl), "%s: lines", path)
		})
	}
}
