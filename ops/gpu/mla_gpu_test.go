//go:build gpu

package gpu

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// TestMLA runs the latent cache write and the absorbed attention on both backends over three
// steps of a paged batch: cached prefixes, then prefill chunks beside decodes, then decodes
// alone (at contexts long enough for the split-context path). q after RoPE, the cache rows and
// the attention output are compared with the cpu reference at each step.
func TestMLA(t *testing.T) {
	shapes := []struct {
		name string
		a    ops.MLAShape
	}{
		{"testdata", ops.MLAShape{Heads: 4, KVRank: 32, NopeDim: 16, RopeDim: 8, VDim: 16, Interleaved: true}},
		{"v2-lite", ops.MLAShape{Heads: 16, KVRank: 512, NopeDim: 128, RopeDim: 64, VDim: 128, Interleaved: true}},
		{"20 heads neox", ops.MLAShape{Heads: 20, KVRank: 64, NopeDim: 32, RopeDim: 16, VDim: 48}},
	}
	seqs := []seqSpec{{700, 1}, {40, 9}, {300, 33}, {0, 5}}
	const blockSize, numBlocks, stride = 16, 200, 48
	for _, dt := range testDTypes {
		for _, sh := range shapes {
			t.Run(fmt.Sprintf("%v %s", dt, sh.name), func(t *testing.T) {
				a := sh.a
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
					q := activation(b, randVals(dt, nt*qw, 1), nt, qw)
					kv := activation(b, randVals(dt, nt*a.LatentDim(), 1), nt, a.LatentDim())
					b.MLAWriteKV(q.g, kv.g, norm.g, rope, gcache, 0, meta, a)
					c.MLAWriteKV(q.c, kv.c, norm.c, rope, ccache, 0, meta, a)
					compare(t, fmt.Sprintf("MLAWriteKV q %s %s", sh.name, st.name), dt, read(b, q.g), q.c.Float32())
					out := output(b, c, nt, a.Heads*a.VDim)
					b.MLAAttention(out.g, q.g, kvB.g, gcache, 0, meta, a)
					c.MLAAttention(out.c, q.c, kvB.c, ccache, 0, meta, a)
					compare(t, fmt.Sprintf("MLAAttention %s %s", sh.name, st.name), dt, read(b, out.g), out.c.Float32())
				}
			})
		}
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
