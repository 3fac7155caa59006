//go:build gpu

package gpu

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/hipkernels"
	"github.com/atom-go/atom/ops"
	"github.com/atom-go/atom/ops/cpu"
)

// TestGraphDecodeReplay captures RoPE + KV write + attention of a padded decode batch bound to
// StepInputs whose block tables allow 4096 tokens (so the graph's attention splits every
// context as for the longest one) and replays it for two steps with fresh inputs, comparing
// each step with the cpu backend run eagerly on the real rows. Sequence 0 starts in block 0,
// which the padding rows read: a padding row that wrote KV would corrupt its result.
func TestGraphDecodeReplay(t *testing.T) {
	seqs := []seqSpec{{3000, 1}, {1000, 1}, {17, 1}, {0, 1}, {300, 1}}
	const blockSize, numBlocks, stride, graphStride, n = 16, 1000, 190, 256, 8
	for _, dt := range testDTypes {
		for _, sh := range []struct{ heads, kvHeads, hd int }{{8, 2, 128}, {16, 1, 64}} {
			name := fmt.Sprintf("%v h=%d kv=%d hd=%d", dt, sh.heads, sh.kvHeads, sh.hd)
			t.Run(name, func(t *testing.T) {
				b, c := newGPU(t, dt), newCPU(t)
				rope, err := ops.NewRoPE(sh.hd, sh.hd, 500000, ops.RoPEScaling{}, 8192)
				require.NoError(t, err)
				gcache, err := b.NewKVCache(1, numBlocks, blockSize, sh.kvHeads, sh.hd)
				require.NoError(t, err)
				ccache, err := c.NewKVCache(1, numBlocks, blockSize, sh.kvHeads, sh.hd)
				require.NoError(t, err)
				perm := rng.Perm(numBlocks)
				for i, p := range perm {
					if p == 0 {
						perm[0], perm[i] = perm[i], perm[0]
					}
				}
				tables := make([][]int32, len(seqs))
				for s := range tables {
					for j := 0; j < stride; j++ {
						tables[s] = append(tables[s], int32(perm[s*stride+j]))
					}
				}
				a := ops.AttnShape{NumHeads: sh.heads, NumKVHeads: sh.kvHeads, HeadDim: sh.hd, Scale: float32(1 / math.Sqrt(float64(sh.hd)))}
				qw, kvw := sh.heads*sh.hd, sh.kvHeads*sh.hd
				// Cache the prefixes eagerly on both backends.
				meta := &ops.AttnMetadata{}
				fillMeta(meta, tables, stride, blockSize, func(int) int { return 0 }, func(s int) int { return seqs[s].ctx })
				nt := meta.NumTokens()
				q := activation(b, randVals(dt, nt*qw, 1), nt, qw)
				k := activation(b, randVals(dt, nt*kvw, 1), nt, kvw)
				v := activation(b, randVals(dt, nt*kvw, 1), nt, kvw)
				b.RopeWriteKV(q.g, k.g, v.g, rope, gcache, 0, meta)
				c.RopeWriteKV(q.c, k.c, v.c, rope, ccache, 0, meta)

				in, err := b.NewStepInputs(16, graphStride)
				require.NoError(t, err)
				qb, kb, vb, ob := b.Buffer(n, qw), b.Buffer(n, kvw), b.Buffer(n, kvw), b.Buffer(n, qw)
				b.Fill(ob, float32(math.NaN()))
				placeholder := &ops.AttnMetadata{Positions: make([]int32, n), SlotMapping: make([]int32, n),
					QueryStart: make([]int32, n+1), SeqLens: make([]int32, n), BlockTables: make([]int32, n), BlockTableStride: 1}
				pass := func() {
					b.RopeWriteKV(qb, kb, vb, rope, gcache, 0, placeholder)
					b.Attention(ob, qb, gcache, 0, placeholder, a)
				}
				var g *Graph
				for step := 0; step < 2; step++ {
					fillMeta(meta, tables, stride, blockSize, func(s int) int { return seqs[s].ctx + step }, func(int) int { return 1 })
					k0 := meta.NumTokens()
					qv, kv, vv := randVals(dt, n*qw, 1), randVals(dt, n*kvw, 1), randVals(dt, n*kvw, 1)
					put := func() {
						b.WriteRows(qb, qv)
						b.WriteRows(kb, kv)
						b.WriteRows(vb, vv)
					}
					ids := make([]int32, k0)
					require.NoError(t, b.LoadDecode(in, n, ids, meta, gcache, nil))
					put()
					if g == nil {
						require.NoError(t, b.BindStepInputs(in, n, gcache))
						pass() // warm-up (allocates the workspace), then restore the inputs it rotated
						put()
						g, err = b.Capture(pass)
						b.UnbindStepInputs()
						require.NoError(t, err)
					}
					require.NoError(t, g.Launch())
					cq := activation(b, qv[:k0*qw], k0, qw)
					ck := activation(b, kv[:k0*kvw], k0, kvw)
					cv := activation(b, vv[:k0*kvw], k0, kvw)
					cout := c.Buffer(k0, qw)
					c.RopeWriteKV(cq.c, ck.c, cv.c, rope, ccache, 0, meta)
					c.Attention(cout, cq.c, ccache, 0, meta, a)
					got := make([]float32, k0*qw)
					b.ReadRows(ob, got)
					compare(t, fmt.Sprintf("GraphAttention %s step %d", name, step), dt, got, cout.(*cpu.Tensor).Float32())
				}
			})
		}
	}
}

// TestGraphCaptureRefusesUploads checks that host work inside a capture fails cleanly and
// leaves the stream usable.
func TestGraphCaptureRefusesUploads(t *testing.T) {
	b := newGPU(t, ops.BF16)
	x := b.Buffer(4, 8)
	_, err := b.Capture(func() { b.WriteRows(x, make([]float32, 32)) })
	require.Error(t, err)
	b.WriteRows(x, make([]float32, 32))
	require.NoError(t, b.Synchronize())
	in, err := b.NewStepInputs(4, 2)
	require.NoError(t, err)
	cache, err := b.NewKVCache(1, 4, 16, 1, 32)
	require.NoError(t, err)
	meta := &ops.AttnMetadata{Positions: []int32{40}, SlotMapping: []int32{40}, QueryStart: []int32{0, 1},
		SeqLens: []int32{41}, BlockTables: []int32{0, 1, 2}, BlockTableStride: 3}
	require.Error(t, b.LoadDecode(in, 4, []int32{1}, meta, cache, nil), "41 tokens need 3 blocks, the inputs hold 2")
	record("%-44s %-8v ok", "graph capture guards", ops.BF16)
}

// BenchmarkGraphBoundary times a graph of 230 small kernels (a decode graph's count) replayed
// back to back, and with work queued between the replays: what one kernel between two graphs
// costs, with and without a read of pinned host memory (Go's ns/op: one replay).
func BenchmarkGraphBoundary(t *testing.B) {
	b := newGPU(t, ops.BF16)
	x := b.Buffer(1, 4096)
	g, err := b.Capture(func() {
		for range 230 {
			b.Fill(x, 1)
		}
	})
	require.NoError(t, err)
	dev, err := b.alloc(4096)
	require.NoError(t, err)
	host, err := b.lib.HostAlloc(4096)
	require.NoError(t, err)
	defer b.lib.HostFree(host)
	ev, err := b.lib.EventCreate()
	require.NoError(t, err)
	defer b.lib.EventDestroy(ev)
	fill := func() error { return b.lib.Fill(hipkernels.DType(ops.BF16), dev, 1, 0, b.stream) }
	// The same graph with the copy from pinned memory as its first node and a kernel writing
	// pinned memory as its last: a step's upload and readback inside the graph.
	inside, err := b.Capture(func() {
		b.must("copy", b.lib.CopySmall(dev, host, 532, b.stream))
		for range 230 {
			b.Fill(x, 1)
		}
		b.must("copy", b.lib.CopySmall(host+2048, dev, 8, b.stream))
	})
	require.NoError(t, err)
	for _, c := range []struct {
		name    string
		between func() error
	}{
		{"graph alone", func() error { return nil }},
		{"graph with copies inside", func() error { return inside.Launch() }},
		{"+ event record", func() error { return b.lib.EventRecord(ev, b.stream) }},
		{"+ 1 kernel (device)", fill},
		{"+ 2 kernels (device)", func() error {
			if err := fill(); err != nil {
				return err
			}
			return fill()
		}},
		{"+ copy 4 B from pinned", func() error { return b.lib.CopySmall(dev, host, 4, b.stream) }},
		{"+ copy 532 B from pinned", func() error { return b.lib.CopySmall(dev, host, 532, b.stream) }},
		{"+ copy 4 B to pinned", func() error { return b.lib.CopySmall(host, dev, 4, b.stream) }},
	} {
		benchWall(t, b, c.name, func() error {
			if err := c.between(); err != nil || c.name == "graph with copies inside" {
				return err
			}
			return g.Launch()
		})
	}
}
