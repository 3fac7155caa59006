package main

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/models"
	"github.com/atom-go/atom/ops"
)

// The Llama-3-8B shape: 8.03 B parameters, 16.06 GB in bf16, of which the embedding table
// (1.05 GB) is read by rows only; 128 KiB of KV per token.
func TestCostOfLlama3_8B(t *testing.T) {
	c := &models.Config{HiddenSize: 4096, Intermediate: 14336, NumLayers: 32, NumHeads: 32, NumKVHeads: 8, HeadDim: 128,
		VocabSize: 128256, DType: ops.BF16}
	x := newCost(c)
	require.InDelta(t, 16.06e9, x.ckptBytes, 0.01e9)
	require.InDelta(t, 15.01e9, x.weightBytes, 0.01e9)
	require.Equal(t, 131072.0, x.kvPerToken)
	ceil := Ceilings{CopyBytesPerS: 4.3e12, GemmFlopsPerS: 790e12}
	s := x.decodeStep(ceil, 1, 1024)
	require.Equal(t, "memory", s.Bound)
	require.InDelta(t, 3.52e-3, s.Seconds, 0.01e-3) // (15.01 GB + 134 MB) / 4.3 TB/s
	p := x.prefill(ceil, 1024)
	require.Equal(t, "compute", p.Bound)
	require.InDelta(t, 18.44e-3, p.Seconds, 0.05e-3) // 2 × 6.98 G × 1024 + causal attention + one LM-head row
	big := x.decodeStep(ceil, 256, 1152)
	require.Equal(t, "memory", big.Bound)
	w := x.workload(ceil, 256, 1024, 256)
	require.Greater(t, w.Seconds, 255*x.decodeStep(ceil, 256, 1025).Seconds)
}

// The Qwen3-30B-A3B shape: 30.5 B parameters (61.1 GB bf16) of which a token reads 6.08 GB:
// attention, routers, norms and the LM head (2.46 GB) plus 8 of 128 experts in each of 48
// layers (8 × 48 × 9.4 MB); at 4.26 TB/s that is 700 tok/s, the 420 tok/s being 60%.
func TestActiveWeightRooflineOfQwen3_30B_A3B(t *testing.T) {
	c := &models.Config{HiddenSize: 2048, Intermediate: 6144, NumLayers: 48, NumHeads: 32, NumKVHeads: 4, HeadDim: 128,
		VocabSize: 151936, DType: ops.BF16,
		MoE: models.MoEConfig{NumExperts: 128, TopK: 8, Intermediate: 768, NormTopKProb: true}}
	x := newCost(c)
	require.InDelta(t, 61.06e9, x.ckptBytes, 0.01e9)
	require.InDelta(t, 6.0837e9, x.activeWeightBytes(), 0.0001e9)
	require.InDelta(t, 3.0417e9, x.matmulParams, 0.0001e9) // active matmul weights a token
	require.InDelta(t, 9.437e6, x.moe.expertBytes, 0.001e6)
	ceil := Ceilings{CopyBytesPerS: 4.26e12, GemmFlopsPerS: 790e12}
	one := x.decodeStep(ceil, 1, 1)
	require.Equal(t, "memory", one.Bound)
	require.InDelta(t, 700, 1/one.Seconds, 1)
	// Batch 1 touches k experts a layer: the measured count gives the same floor.
	require.Equal(t, one, x.moeDecodeStep(ceil, 1, 1, 48*8))
	// Batch 256 touches practically every expert: the step reads nearly the whole checkpoint
	// but the embedding table.
	big := x.decodeStep(ceil, 256, 1024)
	require.InDelta(t, x.ckptBytes-151936*2048*2+256*1024*x.kvPerToken, big.Bytes, 0.001e9)
	// A skewed batch that touched only 1000 of the 6144 (layer, expert) pairs reads less.
	skew := x.moeDecodeStep(ceil, 256, 1024, 1000)
	all := x.moeDecodeStep(ceil, 256, 1024, 48*128)
	require.InDelta(t, all.Bytes, big.Bytes, 1e4) // the expectation: all but 4e-4 of a pair
	require.InDelta(t, all.Bytes-5144*x.moe.expertBytes, skew.Bytes, 1)
	require.InDelta(t, 2.46e9, x.stepWeightBytes(0), 0.01e9)
}

// Mixtral 8x7B: 46.7 B parameters (93.4 GB bf16), 12.9 B active a token (top-2 of 8, every layer).
func TestActiveWeightRooflineOfMixtral(t *testing.T) {
	c := &models.Config{HiddenSize: 4096, Intermediate: 14336, NumLayers: 32, NumHeads: 32, NumKVHeads: 8, HeadDim: 128,
		VocabSize: 32000, DType: ops.BF16, MoE: models.MoEConfig{NumExperts: 8, TopK: 2}}
	x := newCost(c)
	require.InDelta(t, 93.4e9, x.ckptBytes, 0.1e9)
	require.InDelta(t, 12.75e9, x.matmulParams, 0.01e9) // + the 0.13 B embedding: the published 12.9 B
	require.InDelta(t, 2*12.75e9, x.activeWeightBytes(), 0.02e9)
	require.InDelta(t, 32*(1-math.Pow(0.75, 4))*8, x.moe.expectedTouched(4), 1e-9)
}
