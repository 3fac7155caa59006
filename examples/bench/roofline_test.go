package main

import (
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
