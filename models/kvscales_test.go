package models

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/models/formats"
	"github.com/atom-go/atom/ops"
	"github.com/atom-go/atom/ops/cpu"
)

// scaleSource is a checkpoint of scalar scale tensors.
type scaleSource map[string]*formats.TensorInfo

func (s scaleSource) Tensor(name string) (*formats.TensorInfo, error) { return s[name], nil }
func (s scaleSource) Has(name string) bool                            { _, ok := s[name]; return ok }

func scalarF32(name string, v float32, shape ...int) *formats.TensorInfo {
	b := make([]byte, 4)
	bits := math.Float32bits(v)
	b[0], b[1], b[2], b[3] = byte(bits), byte(bits>>8), byte(bits>>16), byte(bits>>24)
	return &formats.TensorInfo{Name: name, File: "mem", DType: ops.F32, Shape: shape, Data: b}
}

// TestApplyFP8KV: each layer takes its k_scale / v_scale under any of vLLM's names (the legacy
// kv_scale for both), 1.0 where the checkpoint has none; damaged scales are refused by name.
func TestApplyFP8KV(t *testing.T) {
	src := scaleSource{
		"model.layers.0.self_attn.k_scale":             scalarF32("model.layers.0.self_attn.k_scale", 0.5),
		"model.layers.0.self_attn.v_scale":             scalarF32("model.layers.0.self_attn.v_scale", 0.25, 1),
		"model.layers.1.self_attn.kv_scale":            scalarF32("model.layers.1.self_attn.kv_scale", 2),
		"model.layers.2.self_attn.k_proj.k_scale":      scalarF32("model.layers.2.self_attn.k_proj.k_scale", 3),
		"model.layers.2.self_attn.v_proj.output_scale": scalarF32("model.layers.2.self_attn.v_proj.output_scale", 4),
	}
	spec := ops.KVCacheSpec{Layers: make([]ops.KVLayerSpec, 4)}
	require.NoError(t, applyFP8KV(src, &spec))
	for i, want := range [][2]float32{{0.5, 0.25}, {2, 2}, {3, 4}, {1, 1}} {
		require.Equal(t, ops.F8E4M3, spec.Layers[i].DType)
		require.Equal(t, want, [2]float32{spec.Layers[i].KScale, spec.Layers[i].VScale}, "layer %d", i)
	}
	for _, bad := range []*formats.TensorInfo{
		scalarF32("model.layers.0.self_attn.k_scale", float32(math.NaN())),
		scalarF32("model.layers.0.self_attn.k_scale", 0),
		scalarF32("model.layers.0.self_attn.k_scale", float32(math.Inf(-1))),
		{Name: "model.layers.0.self_attn.k_scale", File: "mem", DType: ops.F32, Shape: []int{2}, Data: make([]byte, 8)},
	} {
		err := applyFP8KV(scaleSource{bad.Name: bad}, &ops.KVCacheSpec{Layers: make([]ops.KVLayerSpec, 1)})
		require.ErrorContains(t, err, "scale tensor model.layers.0.self_attn.k_scale")
	}
}

// TestFP8KVCacheModel: llama-fp8-tensor with --kv-cache-dtype fp8 takes its checkpoint's
// per-layer scales and stays within fp8 rounding of the transformers reference (the
// reference's float32 cache): logprobs within 0.5 and greedy tokens equal where the margin is
// clear (> 0.3). The bounds are measured, not derived: e4m3 keeps 3 mantissa bits (a relative
// error up to 1/16 per cached value), which this random toy model, with large attention
// logits, turns into logprob differences of 0.05 to 0.4 (greedy flips only at margins below
// 0.16). The exactness of the cache itself is ops/cpu's TestFP8KVCache.
func TestFP8KVCacheModel(t *testing.T) {
	dir := filepath.Join("..", "testdata", "models", "llama-fp8-tensor")
	b, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	require.NoError(t, err)
	var ref reference
	require.NoError(t, json.Unmarshal(b, &ref))
	ck, err := OpenCheckpoint(dir)
	require.NoError(t, err)
	defer ck.Close()
	be := cpu.New(1)
	defer be.Close()
	m, err := Load(ck, be, Options{MaxTokens: 64, MaxSeqs: 1, FP8KV: true})
	require.NoError(t, err)
	spec := m.KVCacheSpec()
	for i, l := range spec.Layers {
		k, ok, err := formats.ScalarScale(ck, kvScaleNames(i, "k")[0])
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, ops.F8E4M3, l.DType)
		require.Equal(t, k, l.KScale)
		require.NotEqual(t, float32(1), l.VScale)
	}
	const bs, blocks = 4, 32
	cache, err := m.NewKVCache(blocks, bs)
	require.NoError(t, err)
	logits := make([]float32, ck.Config.VocabSize)
	worst := 0.0
	for ci, tc := range ref.Cases {
		ctx, input := 0, append([]int32(nil), tc.PromptIDs...)
		for si, st := range tc.Steps {
			h := m.Forward(input, singleSeq(ctx, len(input), bs, blocks), cache)
			be.ReadRows(m.Logits(h, []int32{int32(len(input) - 1)}), logits)
			lp := logSoftmax(logits)
			best := 0
			for i := range lp {
				if lp[i] > lp[best] {
					best = i
				}
			}
			if st.Margin > 0.3 {
				require.Equal(t, st.Token, int32(best), "case %d step %d: greedy token", ci, si)
			}
			for k, id := range st.TopIDs {
				worst = math.Max(worst, math.Abs(st.TopLogprobs[k]-lp[id]))
				require.InDelta(t, st.TopLogprobs[k], lp[id], 0.5, "case %d step %d: logprob of %d", ci, si, id)
			}
			ctx += len(input)
			input = []int32{st.Token}
		}
	}
	t.Logf("largest logprob difference from the float32-cache reference: %.4f", worst)
	require.Greater(t, worst, 1e-3, "the cache is fp8: some rounding shows")
}
