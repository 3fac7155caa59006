//go:build gpu

package gpu

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/hipkernels"
	"github.com/atom-go/atom/ops"
)

// BenchmarkPrefillAttention times causal attention of prefill batches of the Llama-3-8B shape
// (32 query heads, 8 KV heads, head dim 128, bf16, cache blocks of 16) on the tensor-core
// prefill kernel and on the paged kernel: prefills of 1024 and 4096 tokens from an empty
// cache, and a 2048-token chunk beside 255 decodes at context 1024. It reports the TFLOP/s of
// the causal attention (4·head_dim FLOPs per query head and visible position).
func BenchmarkPrefillAttention(b *testing.B) {
	const heads, kvHeads, hd, bs = 32, 8, 128, 16
	g := newGPU(b, ops.BF16)
	cases := []struct {
		name string
		seqs []seqSpec // cached context, new tokens
	}{
		{"prefill 1024", []seqSpec{{0, 1024}}},
		{"prefill 4096", []seqSpec{{0, 4096}}},
		{"chunk 2048 + 255 decodes@1024", append([]seqSpec{{0, 2048}}, decodes(255, 1023)...)},
	}
	for _, cs := range cases {
		meta, blocks := perfMeta(cs.seqs, bs)
		cache, err := g.NewKVCache(1, blocks, bs, kvHeads, hd)
		require.NoError(b, err)
		kv := cache.(*KVCache)
		for _, p := range []hipkernels.Ptr{kv.k[0], kv.v[0]} { // the time does not depend on the values
			require.NoError(b, g.lib.Fill(g.kdt, p, blocks*bs*kvHeads*hd, 0.25, g.stream))
		}
		nt := meta.NumTokens()
		q, o := g.Buffer(nt, heads*hd).(*Tensor), g.Buffer(nt, heads*hd)
		g.WriteRows(q, randVals(ops.BF16, nt*heads*hd, 1))
		a := ops.AttnShape{NumHeads: heads, NumKVHeads: kvHeads, HeadDim: hd, Scale: float32(1 / math.Sqrt(hd))}
		visible := 0.0 // (query token, position) pairs
		for _, s := range cs.seqs {
			for i := 1; i <= s.n; i++ {
				visible += float64(s.ctx + i)
			}
		}
		flops := 4 * hd * heads * visible
		for _, off := range []bool{false, true} {
			kernel := "tensor cores"
			if off {
				kernel = "paged kernel"
			}
			before := prefillLaunches.Load()
			prefillOff = off
			benchDevice(b, g, fmt.Sprintf("%s, %s", cs.name, kernel), func() { g.Attention(o, q, cache, 0, meta, a) },
				func(b *testing.B, ms float64) { b.ReportMetric(flops/ms/1e9, "TFLOP/s") })
			prefillOff = false
			if !off {
				require.Positive(b, prefillLaunches.Load()-before, "the prefill kernel did not run")
			}
		}
	}
}

// decodes returns n sequences of one new token after ctx cached ones.
func decodes(n, ctx int) []seqSpec {
	s := make([]seqSpec, n)
	for i := range s {
		s[i] = seqSpec{ctx, 1}
	}
	return s
}

// perfMeta lays out seqs (each its new tokens after its cached context) with contiguous blocks,
// and returns the metadata and the blocks used.
func perfMeta(seqs []seqSpec, bs int) (*ops.AttnMetadata, int) {
	stride := 0
	for _, s := range seqs {
		stride = max(stride, (s.ctx+s.n+bs-1)/bs)
	}
	tables := make([][]int32, len(seqs))
	for i := range tables {
		for j := 0; j < stride; j++ {
			tables[i] = append(tables[i], int32(i*stride+j))
		}
	}
	meta := &ops.AttnMetadata{}
	fillMeta(meta, tables, stride, bs, func(s int) int { return seqs[s].ctx }, func(s int) int { return seqs[s].n })
	return meta, len(seqs) * stride
}
