//go:build gpu

package gpu

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// mlaCase is one MLA shape under test.
type mlaCase struct {
	name string
	a    ops.MLAShape
}

// mlaShapes are the widths the MLA tests run: the testdata model's (a latent of 40 columns,
// padded to the tensor-core kernel's 32-column steps, and one n tile per warp), DeepSeek-V2-Lite's
// and a neox one with more heads than a tensor-core block takes (16), so a second block of 4.
var mlaShapes = []mlaCase{
	{"testdata", ops.MLAShape{Heads: 4, KVRank: 32, NopeDim: 16, RopeDim: 8, VDim: 16, Interleaved: true}},
	{"v2-lite", ops.MLAShape{Heads: 16, KVRank: 512, NopeDim: 128, RopeDim: 64, VDim: 128, Interleaved: true}},
	{"20 heads neox", ops.MLAShape{Heads: 20, KVRank: 64, NopeDim: 32, RopeDim: 16, VDim: 48}},
}

// TestMLA runs the latent cache write and the absorbed attention on both backends over three
// steps of a paged batch: cached prefixes, then prefill chunks beside decodes, then decodes
// alone (at contexts long enough for the split-context path). q after RoPE, the cache rows and
// the attention output are compared with the cpu reference at each step.
func TestMLA(t *testing.T) {
	for _, dt := range testDTypes {
		for _, sh := range mlaShapes {
			t.Run(fmt.Sprintf("%v %s", dt, sh.name), func(t *testing.T) {
				checkMLASteps(t, dt, sh.name, sh.a, []seqSpec{{700, 1}, {40, 9}, {300, 33}, {0, 5}}, true)
			})
		}
	}
}

// TestMLABoundaries decodes at contexts on either side of the tensor-core kernel's tiles (32
// positions) and splits (whole tiles dealt out evenly, at least 64 positions of the bound): a
// batch of twelve sequences of different lengths (contexts 1 to 1057 over the two decode steps;
// the short ones leave splits empty), one long sequence alone (batch 1: the most splits), one
// short one alone (one split: o_lat written by the attention kernel), sixteen long ones (few
// splits of more tiles than the kernel's ring of four holds), and V2-Lite's widths with 5 heads
// (rows 5-15 of the MMA zeros). The prefixes are only written: their attention is a prefill,
// which TestMLA covers (and the cpu reference of thousand-token prefills would dominate the
// test's time).
func TestMLABoundaries(t *testing.T) {
	shapes := append(append([]mlaCase(nil), mlaShapes[1:]...),
		mlaCase{"5 heads", ops.MLAShape{Heads: 5, KVRank: 512, NopeDim: 128, RopeDim: 64, VDim: 128, Interleaved: true}})
	batches := []struct {
		name string
		seqs []seqSpec
	}{
		{"mixed", []seqSpec{{0, 1}, {14, 1}, {15, 1}, {16, 1}, {30, 1}, {31, 1}, {32, 1}, {62, 1}, {63, 1}, {64, 1},
			{1000, 1}, {1055, 1}}},
		{"batch 1 long", []seqSpec{{1030, 1}}},
		{"batch 1 short", []seqSpec{{20, 1}}},
		{"16 long", longSeqs(16, 1000, 37)},
	}
	for _, dt := range testDTypes {
		for _, sh := range shapes {
			for _, bt := range batches {
				t.Run(fmt.Sprintf("%v %s %s", dt, sh.name, bt.name), func(t *testing.T) {
					checkMLASteps(t, dt, sh.name, sh.a, bt.seqs, false)
				})
			}
		}
	}
}

// longSeqs is n sequences of contexts from, from+step, ... each decoding one token.
func longSeqs(n, from, step int) []seqSpec {
	seqs := make([]seqSpec, n)
	for i := range seqs {
		seqs[i] = seqSpec{from + step*i, 1}
	}
	return seqs
}

// checkMLASteps runs the write and the attention of shape a on both backends over three steps
// of the batch seqs (each its cached context, then its new tokens): the cached prefixes, the
// new tokens, then one decode each, comparing q after RoPE and the output at each step (the
// prefixes' output only with attendPrefix).
func checkMLASteps(t *testing.T, dt ops.DType, name string, a ops.MLAShape, seqs []seqSpec, attendPrefix bool) {
	const blockSize = 16
	stride := 0
	for _, s := range seqs {
		stride = max(stride, (s.ctx+s.n+1+blockSize-1)/blockSize)
	}
	numBlocks := len(seqs) * stride
	a.Scale, a.Eps = float32(1/math.Sqrt(float64(a.NopeDim+a.RopeDim))), 1e-6
	b, c := newGPU(t, dt), newCPU(t)
	rope, err := ops.NewRoPE(a.RopeDim, a.RopeDim, 10000, ops.RoPEScaling{}, 4096)
	require.NoError(t, err)
	gcache, err := b.NewLatentKVCache(1, numBlocks, blockSize, a.LatentDim())
	require.NoError(t, err)
	ccache, err := c.NewLatentKVCache(1, numBlocks, blockSize, a.LatentDim())
	require.NoError(t, err)
	perm := rng.Perm(numBlocks)
	tables := make([][]int32, len(seqs))
	for s := range tables {
		for j := range stride {
			tables[s] = append(tables[s], int32(perm[(s*stride+j)%numBlocks]))
		}
	}
	norm := weight(t, b, c, randVals(dt, a.KVRank, 1), a.KVRank)
	kvB := weight(t, b, c, randVals(dt, a.Heads*(a.NopeDim+a.VDim)*a.KVRank, 1/math.Sqrt(float64(a.KVRank))),
		a.Heads*(a.NopeDim+a.VDim), a.KVRank)
	meta := &ops.AttnMetadata{}
	steps := []struct {
		name        string
		from, count func(s int) int
	}{
		{"prefix", func(int) int { return 0 }, func(s int) int { return seqs[s].ctx }},
		{"chunks+decodes", func(s int) int { return seqs[s].ctx }, func(s int) int { return seqs[s].n }},
		{"decodes", func(s int) int { return seqs[s].ctx + seqs[s].n }, func(int) int { return 1 }},
	}
	qw := a.Heads * (a.NopeDim + a.RopeDim)
	for _, st := range steps {
		fillMeta(meta, tables, stride, blockSize, st.from, st.count)
		nt := meta.NumTokens()
		if nt == 0 {
			continue
		}
		q := activation(b, randVals(dt, nt*qw, 1), nt, qw)
		kv := activation(b, randVals(dt, nt*a.LatentDim(), 1), nt, a.LatentDim())
		b.MLAWriteKV(q.g, kv.g, norm.g, rope, gcache, 0, meta, a)
		c.MLAWriteKV(q.c, kv.c, norm.c, rope, ccache, 0, meta, a)
		compare(t, fmt.Sprintf("MLAWriteKV q %s %s", name, st.name), dt, read(b, q.g), q.c.Float32())
		if st.name == "prefix" && !attendPrefix {
			continue
		}
		out := output(b, c, nt, a.Heads*a.VDim)
		b.MLAAttention(out.g, q.g, kvB.g, gcache, 0, meta, a)
		c.MLAAttention(out.c, q.c, kvB.c, ccache, 0, meta, a)
		compare(t, fmt.Sprintf("MLAAttention %s %s", name, st.name), dt, read(b, out.g), out.c.Float32())
	}
}

// TestMLAShapesRefused: the kernels refuse widths they have no instance for, with an error.
func TestMLAShapesRefused(t *testing.T) {
	b := newGPU(t, ops.BF16)
	for _, sh := range []struct {
		name string
		a    ops.MLAShape
	}{
		{"kv_rank not a multiple of 32", ops.MLAShape{Heads: 4, KVRank: 48, NopeDim: 16, RopeDim: 8, VDim: 16}},
		{"kv_rank over 512", ops.MLAShape{Heads: 4, KVRank: 1024, NopeDim: 16, RopeDim: 8, VDim: 16}},
		{"odd rope", ops.MLAShape{Heads: 4, KVRank: 32, NopeDim: 16, RopeDim: 7, VDim: 16}},
	} {
		_, err := b.lib.MLAWorkspace(b.kdt, 4, 100, mlaShape(sh.a))
		require.Error(t, err, sh.name)
	}
}

// BenchmarkMLA times the absorbed MLA attention (absorb, attention, split merge, up) of decode
// batches of DeepSeek-V2-Lite's shape (16 heads, kv_rank 512, rope 64, bf16, cache blocks of
// 16): one sequence at context 1024 and 64 at context 4096. It reports the latent cache's read
// rate (latent-GB/s: the contexts' latent rows over the op's time) and that of every byte the
// op must read (GB/s: the latent rows and kv_b_proj's W_UK and W_UV).
func BenchmarkMLA(bb *testing.B) {
	const bs = 16
	a := ops.MLAShape{Heads: 16, KVRank: 512, NopeDim: 128, RopeDim: 64, VDim: 128, Interleaved: true}
	a.Scale = float32(1 / math.Sqrt(float64(a.NopeDim+a.RopeDim)))
	g := newGPU(bb, ops.BF16)
	for _, cs := range []struct {
		name       string
		batch, ctx int
	}{{"batch 1 x 1k", 1, 1024}, {"batch 64 x 4k", 64, 4096}} {
		meta, blocks := perfMeta(decodes(cs.batch, cs.ctx-1), bs)
		cache, err := g.NewLatentKVCache(1, blocks, bs, a.LatentDim())
		require.NoError(bb, err)
		// The time does not depend on the values.
		require.NoError(bb, g.lib.Fill(g.kdt, cache.(*KVCache).k[0], blocks*bs*a.LatentDim(), 0.25, g.stream))
		nt, qw, kvRows := meta.NumTokens(), a.Heads*(a.NopeDim+a.RopeDim), a.Heads*(a.NopeDim+a.VDim)
		q := g.Buffer(nt, qw).(*Tensor)
		g.WriteRows(q, randVals(ops.BF16, nt*qw, 1))
		kvB := g.Buffer(kvRows, a.KVRank).(*Tensor)
		g.WriteRows(kvB, randVals(ops.BF16, kvRows*a.KVRank, 1/math.Sqrt(float64(a.KVRank))))
		out := g.Buffer(nt, a.Heads*a.VDim)
		latent := float64(cs.batch * cs.ctx * a.LatentDim() * 2)
		weights := float64(kvRows * a.KVRank * 2)
		benchDevice(bb, g, cs.name, func() { g.MLAAttention(out, q, kvB, cache, 0, meta, a) },
			func(b *testing.B, ms float64) {
				b.ReportMetric(latent/ms/1e6, "latent-GB/s")
				b.ReportMetric((latent+weights)/ms/1e6, "GB/s")
			})
	}
}
