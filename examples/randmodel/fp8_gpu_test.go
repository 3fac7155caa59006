//go:build gpu

package main

import (
	"math"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/models"
	"github.com/atom-go/atom/ops"
	"github.com/atom-go/atom/ops/cpu"
	"github.com/atom-go/atom/ops/gpu"
)

// fp8ModelTolerance bounds the relative error (‖gpu − cpu‖ / ‖cpu‖ over every position's logits)
// of the tiny FP8 model's prefill. The gpu's Linear layers above 16 rows quantize their inputs to
// e4m3 per token and 128 channels (about 2.5% RMS each, compounding over the layers); the cpu
// runs the exact dequantized-weight model. A wrong scale layout or operand is off by far more.
const fp8ModelTolerance = 0.1

// TestFP8BlockModelGPU: a tiny llama3-8b-shaped checkpoint in 128x128 block-scaled FP8
// (`randmodel --dtype fp8-block`) prefills a 64-token prompt on the gpu in bf16, where every FP8
// Linear takes the tensor-core FP8 GEMM, and on the cpu; the logits of all positions agree.
func TestFP8BlockModelGPU(t *testing.T) {
	runtime.LockOSThread()
	s := tinyShape("llama3-8b")
	dir := filepath.Join(t.TempDir(), "m")
	require.NoError(t, write(s, dir, "fp8-block", 1<<20, 1))
	ck, err := models.OpenCheckpoint(dir)
	require.NoError(t, err)
	defer ck.Close()
	const n, bs = 64, 4
	ids, rows := make([]int32, n), make([]int32, n)
	meta := &ops.AttnMetadata{QueryStart: []int32{0, n}, SeqLens: []int32{n}, BlockTableStride: n / bs}
	for i := range ids {
		ids[i] = int32((i*37 + 11) % s.Vocab)
		meta.Positions = append(meta.Positions, int32(i))
		meta.SlotMapping = append(meta.SlotMapping, int32(i))
		rows[i] = int32(i)
	}
	for b := range n / bs {
		meta.BlockTables = append(meta.BlockTables, int32(b))
	}
	logits := func(be ops.Backend) []float32 {
		m, err := models.Load(ck, be, models.Options{MaxTokens: n, MaxSeqs: n})
		require.NoError(t, err)
		cache, err := m.NewKVCache(n/bs, bs)
		require.NoError(t, err)
		out := make([]float32, n*s.Vocab)
		be.ReadRows(m.Logits(m.Forward(ids, meta, cache), rows), out)
		return out
	}
	g, err := gpu.New(0, gpu.Options{DType: ops.BF16})
	require.NoError(t, err)
	defer g.Close()
	c := cpu.New(1)
	defer c.Close()
	got, want := logits(g), logits(c)
	var num, den float64
	for i := range want {
		require.False(t, math.IsNaN(float64(got[i])) || math.IsInf(float64(got[i]), 0), "logit %d = %v", i, got[i])
		d := float64(got[i] - want[i])
		num, den = num+d*d, den+float64(want[i])*float64(want[i])
	}
	e := math.Sqrt(num / den)
	t.Logf("fp8-block tiny llama, %d-token prefill: logits relative error %.4f (limit %.2f)", n, e, fp8ModelTolerance)
	require.LessOrEqual(t, e, fp8ModelTolerance)
}
