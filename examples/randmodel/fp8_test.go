package main

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/models"
	"github.com/atom-go/atom/ops"
)

// tinyShape is shape name at widths a test runs in moments: hidden 256 and intermediate 384
// (whole 128x128 FP8 blocks), 2 layers, 4 experts of which 2 are active.
func tinyShape(name string) shape {
	s := shapes[name]
	s.Hidden, s.Intermediate, s.Layers, s.Heads, s.KVHeads, s.HeadDim, s.Vocab = 256, 384, 2, 4, 2, 64, 128
	if s.MoE != nil {
		m := *s.MoE
		m.Experts, m.TopK = 4, 2
		if m.Inter > 0 { // Mixtral's experts are intermediate_size wide
			m.Inter = 256
		}
		s.MoE = &m
	}
	return s
}

// TestFP8Checkpoints: --dtype fp8-block and fp8-tensor write tiny dense and MoE checkpoints
// that load (through their quantization_config) and run on the cpu.
func TestFP8Checkpoints(t *testing.T) {
	for _, tc := range []struct {
		shape, dtype, quant string
	}{
		{"llama3-8b", "fp8-block", "fp8"},
		{"qwen3-30b-a3b", "fp8-block", "fp8"},
		{"llama3-8b", "fp8-tensor", "compressed-tensors"},
		{"qwen3-30b-a3b", "fp8-tensor", "compressed-tensors"},
		{"mixtral-8x7b", "fp8-tensor", "compressed-tensors"},
	} {
		t.Run(tc.shape+" "+tc.dtype, func(t *testing.T) {
			s := tinyShape(tc.shape)
			dir := filepath.Join(t.TempDir(), "m")
			require.NoError(t, write(s, dir, tc.dtype, 1<<20, 1))
			ck, err := models.OpenCheckpoint(dir)
			require.NoError(t, err)
			defer ck.Close()
			require.Equal(t, tc.quant, ck.Config.Quantization)
			w, err := ck.Tensor("model.layers.1.self_attn.q_proj.weight")
			require.NoError(t, err)
			require.Equal(t, ops.F8E4M3, w.DType)
			lm, err := ck.Tensor("model.embed_tokens.weight")
			require.NoError(t, err)
			require.Equal(t, ops.BF16, lm.DType)
			requireFiniteLogits(t, ck, s.Vocab)
		})
	}
	require.ErrorContains(t, write(tinyShape("llama3-8b"), t.TempDir(), "fp8-channel", 1<<20, 1), "unsupported dtype fp8-channel")
}

// TestQuantizeFP8: each block's scale is its amax / 448 and its codes dequantize to within
// e4m3's half step (1/16 relative, or half the smallest subnormal step) of the float32 draw.
func TestQuantizeFP8(t *testing.T) {
	tn := tensor{name: "w", shape: []int{200, 300}, std: 0.05}
	vals := randomBytes(200*300, tn.std, "float32", 3)
	for _, r := range []fp8Role{fp8Weight, fp8TensorWeight} {
		codes, scales := quantizeFP8(tn, r, 3)
		want := 6 // [2, 3] blocks
		if r == fp8TensorWeight {
			want = 1
		}
		require.Len(t, scales, want)
		f := decode(vals, "float32")
		const sk = 3
		for i, c := range codes {
			row, col := i/300, i%300
			s := scales[0]
			if r == fp8Weight {
				s = scales[(row/128)*sk+col/128]
			}
			got := float64(ops.F8E4M3ToFloat32(c) * s)
			require.InDelta(t, f[i], got, math.Max(math.Abs(f[i])/16, float64(s)/1024)+1e-9, "element %d", i)
		}
	}
}
