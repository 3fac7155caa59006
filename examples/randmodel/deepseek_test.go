package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/models"
)

// TestDeepSeekShapes: deepseek-v2-lite has V2-Lite's published 15.7B parameters, and a tiny
// variant of each DeepSeek shape (V2-Lite's q_proj and softmax routing; V3's low-rank q, biased
// sigmoid routing over groups, in bf16 and block fp8) is written, opened with the routing the
// shape means, loaded and run on the cpu.
func TestDeepSeekShapes(t *testing.T) {
	var n float64
	for _, ts := range shapes["deepseek-v2-lite"].tensors() {
		p := 1.0
		for _, d := range ts.shape {
			p *= float64(d)
		}
		n += p
	}
	require.InDelta(t, 15.7e9, n, 0.1e9)
	for _, tc := range []struct{ name, dtype string }{
		{"deepseek-v2-lite", "bfloat16"}, {"deepseek-v3-l8", "bfloat16"}, {"deepseek-v3-l8", "fp8-block"},
	} {
		t.Run(tc.name+"/"+tc.dtype, func(t *testing.T) {
			s := shapes[tc.name]
			moe, mla := *s.MoE, *s.MLA
			// Whole 128 x 128 blocks wherever fp8 parts are stacked (gate|up).
			s.Hidden, s.Intermediate, s.Layers, s.Heads, s.KVHeads, s.Vocab = 128, 256, 4, 4, 4, 160
			moe.Experts, moe.Inter = 16, 128
			mla.KVRank, mla.Nope, mla.Rope, mla.V = 32, 16, 8, 16
			if mla.QRank > 0 {
				mla.QRank = 48
			}
			mla.DenseLayers = min(mla.DenseLayers, 2)
			s.MoE, s.MLA = &moe, &mla
			dir := filepath.Join(t.TempDir(), tc.name)
			require.NoError(t, write(s, dir, tc.dtype, 1<<20, 1))
			ck, err := models.OpenCheckpoint(dir)
			require.NoError(t, err)
			defer ck.Close()
			c := ck.Config
			require.Equal(t, s.Arch, c.Architecture)
			require.Equal(t, mla.QRank, c.MLA.QLoraRank)
			require.Equal(t, moe.Experts, c.MoE.NumExperts)
			require.Equal(t, mla.V3, c.MoE.DeepSeek.Sigmoid)
			if mla.V3 {
				require.Equal(t, "noaux_tc", c.MoE.DeepSeek.TopKMethod)
				require.Equal(t, 8, c.MoE.DeepSeek.Groups)
				require.InDelta(t, 2.5, c.MoE.DeepSeek.Scale, 1e-9)
			}
			requireFiniteLogits(t, ck, s.Vocab)
		})
	}
}
