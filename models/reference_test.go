package models

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
	"github.com/atom-go/atom/ops/cpu"
)

// reference is testdata/models/*/reference.json, written by testdata/make_reference.py.
type reference struct {
	Architecture string `json:"architecture"`
	Cases        []struct {
		PromptIDs []int32 `json:"prompt_ids"`
		Steps     []struct {
			Token       int32     `json:"token"`
			Margin      float64   `json:"margin"`
			TopIDs      []int32   `json:"top_ids"`
			TopLogprobs []float64 `json:"top_logprobs"`
		} `json:"steps"`
	} `json:"cases"`
}

func testCheckpoints(t *testing.T) []string {
	dirs, err := filepath.Glob("../testdata/models/*")
	require.NoError(t, err)
	require.NotEmpty(t, dirs, "testdata/models is empty: run testdata/make_reference.py")
	return dirs
}

// singleSeq lays one sequence of n new tokens after ctx cached ones into a contiguous block table.
func singleSeq(ctx, n, blockSize, blocks int) *ops.AttnMetadata {
	m := &ops.AttnMetadata{QueryStart: []int32{0, int32(n)}, SeqLens: []int32{int32(ctx + n)}, BlockTableStride: blocks}
	for b := 0; b < blocks; b++ {
		m.BlockTables = append(m.BlockTables, int32(blocks-1-b)) // reversed: exercises the indirection
	}
	for p := ctx; p < ctx+n; p++ {
		m.Positions = append(m.Positions, int32(p))
		m.SlotMapping = append(m.SlotMapping, m.BlockTables[p/blockSize]*int32(blockSize)+int32(p%blockSize))
	}
	return m
}

func logSoftmax(x []float32) []float64 {
	mx := math.Inf(-1)
	for _, v := range x {
		mx = math.Max(mx, float64(v))
	}
	var s float64
	for _, v := range x {
		s += math.Exp(float64(v) - mx)
	}
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v) - mx - math.Log(s)
	}
	return out
}

func TestModelsMatchTransformersReference(t *testing.T) {
	be := cpu.New(0)
	defer be.Close()
	for _, dir := range testCheckpoints(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(dir, "reference.json"))
			require.NoError(t, err)
			var ref reference
			require.NoError(t, json.Unmarshal(b, &ref))
			ck, err := OpenCheckpoint(dir)
			require.NoError(t, err)
			defer ck.Close()
			require.Equal(t, ref.Architecture, ck.Config.Architecture)
			m, err := Load(ck, be, Options{MaxTokens: 64, MaxSeqs: 1})
			require.NoError(t, err)
			c := ck.Config
			const bs, blocks = 4, 32
			cache, err := m.NewKVCache(blocks, bs)
			require.NoError(t, err)
			logits := make([]float32, c.VocabSize)
			for ci, tc := range ref.Cases {
				ids := append([]int32(nil), tc.PromptIDs...)
				ctx, input := 0, ids
				for si, st := range tc.Steps {
					meta := singleSeq(ctx, len(input), bs, blocks)
					h := m.Forward(input, meta, cache)
					be.ReadRows(m.Logits(h, []int32{int32(len(input) - 1)}), logits)
					lp := logSoftmax(logits)
					best := 0
					for i := range lp {
						if lp[i] > lp[best] {
							best = i
						}
					}
					if st.Margin > 1e-3 {
						require.Equal(t, st.Token, int32(best), "case %d step %d: greedy token", ci, si)
					}
					for k, id := range st.TopIDs {
						require.InDelta(t, st.TopLogprobs[k], lp[id], 1e-3, "case %d step %d: logprob of %d", ci, si, id)
					}
					// Teacher-force the reference token so one near-tie cannot derail later steps.
					ctx += len(input)
					input = []int32{st.Token}
				}
			}
		})
	}
}
