//go:build gpu

package gpu

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// attnShape is the head layout of one test case.
type attnShape struct{ heads, kvHeads, hd int }

// prefillSupported reports whether the tensor-core prefill kernel should take a prefill batch of
// this dtype and shape (CUDA builds; the HIP build answers unsupported for everything).
func prefillSupported(b *Backend, dt ops.DType, sh attnShape) bool {
	return b.lib.WarpSize() == 32 && (dt == ops.BF16 || dt == ops.F16) && (sh.hd == 64 || sh.hd == 128)
}

// pagedTables gives each of n sequences stride distinct, shuffled blocks of a cache of numBlocks.
func pagedTables(n, stride, numBlocks int) [][]int32 {
	perm := rng.Perm(numBlocks)
	tables := make([][]int32, n)
	for s := range tables {
		for j := 0; j < stride; j++ {
			tables[s] = append(tables[s], int32(perm[s*stride+j]))
		}
	}
	return tables
}

// attnStep is one forward step of a test: sequence s adds count(s) tokens after from(s).
type attnStep struct {
	name        string
	from, count func(s int) int
	compare     bool // run the cpu reference (skipped for long prefixes)
}

// runAttnSteps runs the steps on both backends (RoPE and the KV write, then attention) and
// compares the outputs; it checks that the prefill kernel ran exactly on the steps with a query
// of more than one token when it supports the shape, and never otherwise.
func runAttnSteps(t *testing.T, dt ops.DType, sh attnShape, blockSize, stride int, seqs []seqSpec, steps []attnStep) {
	runAttnStepsWith(t, dt, sh, blockSize, stride, seqs, steps, attnOpts{}, false)
}

// runAttnStepsWith is runAttnSteps for a layer with the window and sinks of o, with the prefill
// kernel off (off: every batch on the paged kernel) or on.
func runAttnStepsWith(t *testing.T, dt ops.DType, sh attnShape, blockSize, stride int, seqs []seqSpec,
	steps []attnStep, o attnOpts, off bool) {
	prefillOff = off
	defer func() { prefillOff = false }()
	b, c := newGPU(t, dt), newCPU(t)
	numBlocks := len(seqs) * stride
	rope, err := ops.NewRoPE(sh.hd, sh.hd, 10000, ops.RoPEScaling{}, 8192)
	require.NoError(t, err)
	gcache, err := b.NewKVCache(1, numBlocks, blockSize, sh.kvHeads, sh.hd)
	require.NoError(t, err)
	ccache, err := c.NewKVCache(1, numBlocks, blockSize, sh.kvHeads, sh.hd)
	require.NoError(t, err)
	tables := pagedTables(len(seqs), stride, numBlocks)
	a := ops.AttnShape{NumHeads: sh.heads, NumKVHeads: sh.kvHeads, HeadDim: sh.hd, Scale: float32(1 / math.Sqrt(float64(sh.hd))),
		Window: o.window}
	ca := a
	if o.sinks != nil {
		a.Sinks, ca.Sinks = sinkWeights(t, b, c, o.sinks)
	}
	meta := &ops.AttnMetadata{}
	for _, st := range steps {
		fillMeta(meta, tables, stride, blockSize, st.from, st.count)
		nt := meta.NumTokens()
		q := activation(b, randVals(dt, nt*sh.heads*sh.hd, 1), nt, sh.heads*sh.hd)
		k := activation(b, randVals(dt, nt*sh.kvHeads*sh.hd, 1), nt, sh.kvHeads*sh.hd)
		v := activation(b, randVals(dt, nt*sh.kvHeads*sh.hd, 1), nt, sh.kvHeads*sh.hd)
		b.RopeWriteKV(q.g, k.g, v.g, rope, gcache, 0, meta)
		c.RopeWriteKV(q.c, k.c, v.c, rope, ccache, 0, meta)
		long := false
		for s := range seqs {
			long = long || st.count(s) > 1
		}
		out := output(b, c, nt, sh.heads*sh.hd)
		before := prefillLaunches.Load()
		b.Attention(out.g, q.g, gcache, 0, meta, a)
		want := int64(0)
		if long && !off && prefillSupported(b, dt, sh) {
			want = 1
		}
		require.Equalf(t, want, prefillLaunches.Load()-before, "prefill kernel launches for step %s", st.name)
		if !st.compare {
			continue
		}
		c.Attention(out.c, q.c, ccache, 0, meta, ca)
		compare(t, fmt.Sprintf("PrefillAttn h=%d kv=%d hd=%d bs=%d %s (%d tokens)%s", sh.heads, sh.kvHeads, sh.hd,
			blockSize, st.name, nt, o), dt, read(b, out.g), out.c.Float32())
	}
}

// TestPrefillAttention checks the tensor-core prefill kernel against the cpu backend over three
// steps of a paged batch: prefixes written from an empty cache (pure prefills of various lengths),
// then prefill chunks after cached prefixes mixed with decodes (chunks starting on and off tile
// and block boundaries, lengths not multiples of a tile), then decodes alone, which must take the
// paged kernel. GQA ratios 1, 4, 8 and 16, head dims 64 and 128, block sizes 16, 32 and 5; f32 and
// head dim 80 must fall back to the paged kernel and still be right.
func TestPrefillAttention(t *testing.T) {
	seqs := []seqSpec{{0, 150}, {70, 45}, {128, 64}, {33, 1}, {200, 1}, {5, 3}, {0, 1}, {63, 66}, {16, 17}}
	steps := []attnStep{
		{"prefix", func(int) int { return 0 }, func(s int) int { return seqs[s].ctx }, true},
		{"chunks+decodes", func(s int) int { return seqs[s].ctx }, func(s int) int { return seqs[s].n }, true},
		{"decodes", func(s int) int { return seqs[s].ctx + seqs[s].n }, func(int) int { return 1 }, true},
	}
	shapes := []attnShape{{8, 8, 128}, {32, 8, 128}, {8, 1, 64}, {16, 4, 64}, {16, 1, 128}, {6, 2, 80}}
	for _, dt := range testDTypes {
		for _, sh := range shapes {
			for _, bs := range []int{16, 32, 5} {
				if (dt == ops.F32 || sh.hd == 80) && bs != 16 {
					continue // fallback cases: one block size is enough
				}
				t.Run(fmt.Sprintf("%v h=%d kv=%d hd=%d bs=%d", dt, sh.heads, sh.kvHeads, sh.hd, bs), func(t *testing.T) {
					runAttnSteps(t, dt, sh, bs, (256+bs-1)/bs, seqs, steps)
				})
			}
		}
	}
}

// TestPrefillAttentionLong covers many K/V tiles per query tile: a 700-token chunk after a
// 1300-token cached prefix, a fresh 1000-token prefill and decodes over long contexts (the
// prefix step is not compared: its cpu reference would be slow, the cache is what counts).
func TestPrefillAttentionLong(t *testing.T) {
	seqs := []seqSpec{{1300, 700}, {0, 1000}, {1999, 1}, {1500, 1}, {0, 2}}
	steps := []attnStep{
		{"prefix", func(int) int { return 0 }, func(s int) int { return seqs[s].ctx }, false},
		{"chunk+prefill+decodes", func(s int) int { return seqs[s].ctx }, func(s int) int { return seqs[s].n }, true},
	}
	for _, dt := range []ops.DType{ops.BF16, ops.F16} {
		for _, sh := range []attnShape{{8, 2, 128}, {8, 1, 64}} {
			t.Run(fmt.Sprintf("%v h=%d kv=%d hd=%d", dt, sh.heads, sh.kvHeads, sh.hd), func(t *testing.T) {
				runAttnSteps(t, dt, sh, 16, 2048/16, seqs, steps)
			})
		}
	}
}

// TestPrefillAttentionOffMatches checks the test hook: with the prefill kernel off, the same
// batch (chunks over cached prefixes and a decode) goes to the paged kernel, and both agree.
func TestPrefillAttentionOffMatches(t *testing.T) {
	const dt, blockSize, stride = ops.BF16, 16, 16
	sh := attnShape{32, 8, 128}
	seqs := []seqSpec{{0, 200}, {40, 30}, {90, 1}}
	b := newGPU(t, dt)
	if !prefillSupported(b, dt, sh) {
		t.Skip("no tensor-core prefill kernel in this build")
	}
	rope, err := ops.NewRoPE(sh.hd, sh.hd, 10000, ops.RoPEScaling{}, 4096)
	require.NoError(t, err)
	cache, err := b.NewKVCache(1, len(seqs)*stride, blockSize, sh.kvHeads, sh.hd)
	require.NoError(t, err)
	tables := pagedTables(len(seqs), stride, len(seqs)*stride)
	a := ops.AttnShape{NumHeads: sh.heads, NumKVHeads: sh.kvHeads, HeadDim: sh.hd, Scale: 0.088}
	meta := &ops.AttnMetadata{}
	var q pair
	for step := 0; step < 2; step++ { // the prefixes, then the batch compared
		from, count := func(int) int { return 0 }, func(s int) int { return seqs[s].ctx }
		if step == 1 {
			from, count = count, func(s int) int { return seqs[s].n }
		}
		fillMeta(meta, tables, stride, blockSize, from, count)
		nt := meta.NumTokens()
		q = activation(b, randVals(dt, nt*sh.heads*sh.hd, 1), nt, sh.heads*sh.hd)
		k := activation(b, randVals(dt, nt*sh.kvHeads*sh.hd, 1), nt, sh.kvHeads*sh.hd)
		v := activation(b, randVals(dt, nt*sh.kvHeads*sh.hd, 1), nt, sh.kvHeads*sh.hd)
		b.RopeWriteKV(q.g, k.g, v.g, rope, cache, 0, meta)
	}
	nt := meta.NumTokens()
	run := func(off bool) []float32 {
		prefillOff = off
		defer func() { prefillOff = false }()
		out := output(b, newCPU(t), nt, sh.heads*sh.hd)
		before := prefillLaunches.Load()
		b.Attention(out.g, q.g, cache, 0, meta, a)
		want := int64(1)
		if off {
			want = 0
		}
		require.Equal(t, want, prefillLaunches.Load()-before, "prefill kernel launches with the kernel off=%v", off)
		return read(b, out.g)
	}
	paged, tc := run(true), run(false)
	compare(t, "PrefillAttn tensor cores vs paged kernel", dt, tc, paged)
}
