//go:build gpu

package gpu

import (
	"fmt"
	"math"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/hipkernels"
	"github.com/atom-go/atom/ops"
)

// TestPerfPrefillAttention times causal attention of prefill batches of the Llama-3-8B shape
// (32 query heads, 8 KV heads, head dim 128, bf16, cache blocks of 16) on the tensor-core
// prefill kernel and on the paged kernel (set ATOM_GO_PERF=1): prefills of 1024 and 4096
// tokens from an empty cache, and a 2048-token chunk beside 255 decodes at context 1024. It
// reports ms and TFLOP/s of the causal attention (4·head_dim FLOPs per query head and visible
// position); it asserts nothing.
func TestPerfPrefillAttention(t *testing.T) {
	if os.Getenv("ATOM_GO_PERF") == "" {
		t.Skip("set ATOM_GO_PERF=1 to time the ops")
	}
	const heads, kvHeads, hd, bs = 32, 8, 128, 16
	b := newGPU(t, ops.BF16)
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
		cache, err := b.NewKVCache(1, blocks, bs, kvHeads, hd)
		require.NoError(t, err)
		kv := cache.(*KVCache)
		for _, p := range []hipkernels.Ptr{kv.k[0], kv.v[0]} { // the time does not depend on the values
			require.NoError(t, b.lib.Fill(b.kdt, p, blocks*bs*kvHeads*hd, 0.25, b.stream))
		}
		nt := meta.NumTokens()
		q, o := b.Buffer(nt, heads*hd).(*Tensor), b.Buffer(nt, heads*hd)
		b.WriteRows(q, randVals(ops.BF16, nt*heads*hd, 1))
		a := ops.AttnShape{NumHeads: heads, NumKVHeads: kvHeads, HeadDim: hd, Scale: float32(1 / math.Sqrt(hd))}
		visible := 0.0 // (query token, position) pairs
		for _, s := range cs.seqs {
			for i := 1; i <= s.n; i++ {
				visible += float64(s.ctx + i)
			}
		}
		flops := 4 * hd * heads * visible
		for _, off := range []bool{false, true} {
			prefillOff = off
			before := prefillLaunches.Load()
			ms := medianMs(t, b, 5, func() { b.Attention(o, q, cache, 0, meta, a) })
			prefillOff = false
			kernel := "tensor cores"
			if off {
				kernel = "paged kernel"
			} else {
				require.Positive(t, prefillLaunches.Load()-before, "the prefill kernel did not run")
			}
			record("%-44s %-8v %8.3f ms  %.1f TFLOP/s (causal), %d tokens", fmt.Sprintf("perf PrefillAttn %s, %s", cs.name, kernel),
				ops.BF16, ms, flops/ms/1e9, nt)
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
