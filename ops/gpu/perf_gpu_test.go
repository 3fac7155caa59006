//go:build gpu

package gpu

import (
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/hipkernels"
	"github.com/atom-go/atom/ops"
)

// BenchmarkOps times the main ops at realistic sizes with device events: the GEMMs of an 8B
// MLP (compute-bound square, memory-bound decode shapes), RMSNorm with the residual add, paged
// attention over long contexts and one prefill (8B-like: 32 heads, 8 kv heads, 128 dims), and
// the host cost of one op call. Run with `go test -tags gpu -run '^$' -bench . ./ops/gpu/`.
func BenchmarkOps(b *testing.B) {
	g := newGPU(b, ops.BF16)
	block := randVals(ops.BF16, 1<<20, 1)
	rand := func(rows, cols int) *Tensor { // random values, a 1 Mi-value block tiled
		x := g.Buffer(rows, cols).(*Tensor)
		vals := make([]float32, rows*cols)
		for i := 0; i < len(vals); i += len(block) {
			copy(vals[i:], block)
		}
		g.WriteRows(x, vals)
		return x
	}

	for _, sh := range [][3]int{{8192, 8192, 8192}, {1, 4096, 14336}, {32, 4096, 14336}, {256, 4096, 14336}} {
		m, k, n := sh[0], sh[1], sh[2]
		x, w, out := rand(m, k), rand(n, k), g.Buffer(m, n)
		flops := 2 * float64(m) * float64(n) * float64(k)
		bytes := 2 * float64(m*k+n*k+m*n)
		benchDevice(b, g, fmt.Sprintf("Linear m=%d k=%d n=%d", m, k, n), func() { g.Linear(out, x, w, nil) },
			func(b *testing.B, ms float64) {
				b.ReportMetric(flops/ms/1e9, "TFLOP/s")
				b.ReportMetric(bytes/ms/1e9, "TB/s")
			})
	}

	// RMSNorm with the residual add: 3 reads + 2 writes of [rows, 4096].
	x, res, w, out := rand(4096, 4096), rand(4096, 4096), rand(1, 4096), g.Buffer(4096, 4096)
	benchDevice(b, g, "RMSNorm+residual 4096x4096", func() { g.RMSNorm(out, x, res, w, 1e-6) },
		func(b *testing.B, ms float64) { b.ReportMetric(5*2*4096*4096/ms/1e9, "TB/s") })

	const heads, kvHeads, hd, bs = 32, 8, 128, 16
	// The decode cases are the KV read of one layer at serving batch sizes (64 x 2048, 256 x 1153:
	// the runner benchmark's context) and split-K over long contexts (8 x 8192, 1 x 32768).
	for _, sh := range [][2]int{{64, 2048}, {256, 1153}, {8, 8192}, {1, 32768}, {1, 2048}} { // {sequences, context}
		seqs, ctxLen := sh[0], sh[1]
		prefill := seqs == 1 && ctxLen == 2048
		blocksPer := (ctxLen + bs - 1) / bs
		cache, err := g.NewKVCache(1, seqs*blocksPer, bs, kvHeads, hd)
		require.NoError(b, err)
		kv := cache.(*KVCache)
		for _, p := range []hipkernels.Ptr{kv.k[0], kv.v[0]} { // the kernel's time does not depend on the values
			require.NoError(b, g.lib.Fill(g.kdt, p, seqs*blocksPer*bs*kvHeads*hd, 0.25, g.stream))
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
		q, o := rand(nt, heads*hd), g.Buffer(nt, heads*hd)
		a := ops.AttnShape{NumHeads: heads, NumKVHeads: kvHeads, HeadDim: hd, Scale: float32(1 / math.Sqrt(hd))}
		kvBytes := float64(seqs) * float64(ctxLen) * kvHeads * hd * 2 * 2
		benchDevice(b, g, fmt.Sprintf("Attention %d seqs x %d context, %d queries", seqs, ctxLen, nt),
			func() { g.Attention(o, q, cache, 0, meta, a) },
			func(b *testing.B, ms float64) {
				if prefill {
					b.ReportMetric(4*float64(ctxLen)*float64(ctxLen)/2*hd*heads/ms/1e9, "TFLOP/s")
				} else {
					b.ReportMetric(kvBytes/ms/1e9, "KV-TB/s")
				}
			})
	}

	// Host cost of one op call (purego call + launch): Go's ns/op, the device never waited for.
	small, sw := rand(1, 4096), rand(1, 4096)
	sout := g.Buffer(1, 4096)
	b.Run("host time per op call (RMSNorm 1x4096, queued)", func(b *testing.B) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		require.NoError(b, g.BindThread())
		require.NoError(b, g.Synchronize())
		b.ResetTimer()
		t0 := time.Now()
		for range b.N {
			g.RMSNorm(sout, small, nil, sw, 1e-6)
		}
		b.ReportMetric(float64(time.Since(t0).Nanoseconds())/float64(b.N)/1000, "µs/call")
		b.StopTimer()
		require.NoError(b, g.Synchronize())
	})
}
