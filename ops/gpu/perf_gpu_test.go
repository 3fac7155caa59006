//go:build gpu

package gpu

import (
	"fmt"
	"math"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/hipkernels"
	"github.com/atom-go/atom/ops"
)

// TestPerfSnapshot times the main ops at realistic sizes (set ATOM_GO_PERF=1). It asserts
// nothing: the figures go to the summary and docs/gpu-notes.md. Each figure is the median of
// reps timed with device events after warm-up runs.
func TestPerfSnapshot(t *testing.T) {
	if os.Getenv("ATOM_GO_PERF") == "" {
		t.Skip("set ATOM_GO_PERF=1 to time the ops")
	}
	b := newGPU(t, ops.BF16)
	median := func(reps int, fn func()) float64 { return medianMs(t, b, reps, fn) }
	perf := func(name string, ms float64, what string) {
		record("%-44s %-8v %8.3f ms  %s", "perf "+name, ops.BF16, ms, what)
	}
	block := randVals(ops.BF16, 1<<20, 1)
	rand := func(rows, cols int) *Tensor { // random values, a 1 Mi-value block tiled
		x := b.Buffer(rows, cols).(*Tensor)
		vals := make([]float32, rows*cols)
		for i := 0; i < len(vals); i += len(block) {
			copy(vals[i:], block)
		}
		b.WriteRows(x, vals)
		return x
	}

	// GEMMs: compute-bound square, then the memory-bound decode shapes of an 8B MLP.
	for _, sh := range [][3]int{{8192, 8192, 8192}, {1, 4096, 14336}, {32, 4096, 14336}, {256, 4096, 14336}} {
		m, k, n := sh[0], sh[1], sh[2]
		x, w, out := rand(m, k), rand(n, k), b.Buffer(m, n)
		ms := median(10, func() { b.Linear(out, x, w, nil) })
		flops := 2 * float64(m) * float64(n) * float64(k)
		bytes := 2 * float64(m*k+n*k+m*n)
		perf(fmt.Sprintf("Linear m=%d k=%d n=%d", m, k, n), ms,
			fmt.Sprintf("%.0f TFLOP/s, %.2f TB/s", flops/ms/1e9, bytes/ms/1e9))
	}

	// RMSNorm with the residual add: 3 reads + 2 writes of [rows, 4096].
	x, res, w, out := rand(4096, 4096), rand(4096, 4096), rand(1, 4096), b.Buffer(4096, 4096)
	ms := median(10, func() { b.RMSNorm(out, x, res, w, 1e-6) })
	perf("RMSNorm+residual 4096x4096", ms, fmt.Sprintf("%.2f TB/s", 5*2*4096*4096/ms/1e9))

	// Attention: decodes over long contexts, then one prefill (8B-like: 32 heads, 8 kv heads, 128 dims).
	const heads, kvHeads, hd, bs = 32, 8, 128, 16
	// The decode cases are the KV read of one layer at serving batch sizes (64 x 2048, 256 x 1153:
	// the runner benchmark's context) and split-K over long contexts (8 x 8192, 1 x 32768).
	for _, sh := range [][2]int{{64, 2048}, {256, 1153}, {8, 8192}, {1, 32768}, {1, 2048}} { // {sequences, context}
		seqs, ctxLen := sh[0], sh[1]
		prefill := seqs == 1 && ctxLen == 2048
		blocksPer := (ctxLen + bs - 1) / bs
		cache, err := b.NewKVCache(1, seqs*blocksPer, bs, kvHeads, hd)
		require.NoError(t, err)
		kv := cache.(*KVCache)
		for _, p := range []hipkernels.Ptr{kv.k[0], kv.v[0]} { // the kernel's time does not depend on the values
			require.NoError(t, b.lib.Fill(b.kdt, p, seqs*blocksPer*bs*kvHeads*hd, 0.25, b.stream))
		}
		meta := &ops.AttnMetadata{BlockTableStride: blocksPer, QueryStart: []int32{0}}
		for s := 0; s < seqs; s++ {
			from := ctxLen - 1
			if prefill {
				from = 0
			}
			for p := from; p < ctxLen; p++ {
				meta.Positions = append(meta.Positions, int32(p))
				meta.SlotMapping = append(meta.SlotMapping, int32(s*blocksPer*bs+p))
			}
			meta.QueryStart = append(meta.QueryStart, int32(len(meta.Positions)))
			meta.SeqLens = append(meta.SeqLens, int32(ctxLen))
			for j := 0; j < blocksPer; j++ {
				meta.BlockTables = append(meta.BlockTables, int32(s*blocksPer+j))
			}
		}
		nt := meta.NumTokens()
		q, o := rand(nt, heads*hd), b.Buffer(nt, heads*hd)
		a := ops.AttnShape{NumHeads: heads, NumKVHeads: kvHeads, HeadDim: hd, Scale: float32(1 / math.Sqrt(hd))}
		ms := median(5, func() { b.Attention(o, q, cache, 0, meta, a) })
		kvBytes := float64(seqs) * float64(ctxLen) * kvHeads * hd * 2 * 2
		what := fmt.Sprintf("KV %.2f TB/s", kvBytes/ms/1e9)
		if prefill {
			flops := 4 * float64(ctxLen) * float64(ctxLen) / 2 * hd * heads
			what = fmt.Sprintf("%.1f TFLOP/s (causal)", flops/ms/1e9)
		}
		perf(fmt.Sprintf("Attention %d seqs x %d tokens of context, %d queries", seqs, ctxLen, nt), ms, what)
	}

	// Host cost of one op call (purego call + launch), measured on the host clock.
	small, sw := rand(1, 4096), rand(1, 4096)
	sout := b.Buffer(1, 4096)
	require.NoError(t, b.Synchronize())
	const calls = 2000
	t0 := time.Now()
	for i := 0; i < calls; i++ {
		b.RMSNorm(sout, small, nil, sw, 1e-6)
	}
	host := time.Since(t0)
	require.NoError(t, b.Synchronize())
	perf("host time per op call (RMSNorm 1x4096, queued)", float64(host.Microseconds())/1000/calls, "")
}
