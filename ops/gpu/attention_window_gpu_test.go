//go:build gpu

package gpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
	"github.com/atom-go/atom/ops/cpu"
)

// Sliding windows and sinks (gpt-oss): both kernels against a float64 reference over a cache
// image that holds nothing before each sequence's window (so reading there fails), and against
// the cpu backend over prefill chunks, decodes and mixed steps.

// sinkLogits returns one sink logit per head: "random" (normal, sd 1.5), "high" (8 and a
// little: most of each softmax's mass, outputs small but still normal in f16), "low" (-30: no
// visible effect), "mixed" (the heads cycle through the three).
func sinkLogits(kind string, heads int) []float32 {
	v := make([]float32, heads)
	for h := range v {
		k := kind
		if kind == "mixed" {
			k = []string{"random", "high", "low"}[h%3]
		}
		switch k {
		case "random":
			v[h] = float32(rng.NormFloat64() * 1.5)
		case "high":
			v[h] = float32(8 + rng.Float64())
		case "low":
			v[h] = float32(-30 + rng.Float64())
		default:
			panic("sink kind " + kind)
		}
	}
	return v
}

// sinkWeights uploads sink logits as the attention layer loads them: float32 on the gpu
// (ops.WeightDesc.Exact) and on the cpu (c nil: none there).
func sinkWeights(t *testing.T, b *Backend, c *cpu.Backend, vals []float32) (ops.Tensor, ops.Tensor) {
	raw := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	g, err := b.Weight("sinks", ops.WeightDesc{DType: ops.F32, Exact: true}, []int{len(vals)}, raw)
	require.NoError(t, err)
	if c == nil {
		return g, nil
	}
	ct, err := c.Weight("sinks", ops.Plain(ops.F32), []int{len(vals)}, raw)
	require.NoError(t, err)
	return g, ct
}

// dropBeforeWindow leaves the image holding nothing before each sequence's window, as a cache
// that keeps only the window would: the positions before the window of the sequence's first
// query token (at position seqs[s].ctx) get NaN keys and values, and the table entries of the
// blocks wholly before it point at the poison block. A kernel that reads there (or weights such
// a position by 0) returns NaN.
func (pc *pagedCache) dropBeforeWindow(seqs []seqSpec, window int) {
	row := pc.sh.kvHeads * pc.sh.hd
	nan := float32(math.NaN())
	for s, sp := range seqs {
		lo, tb := max(0, sp.ctx-window+1), pc.tables[s]
		for p := 0; p < lo; p++ {
			at := pc.slot(tb, p) * row
			for i := at; i < at+row; i++ {
				pc.k[i], pc.v[i] = nan, nan
			}
		}
		for j := 0; (j+1)*pc.blockSize <= lo; j++ {
			tb[j] = pc.poisonBlock
		}
	}
}

// checkWindowBatch lays out seqs (ctx cached positions, then n query tokens each) in a fresh
// cache image, drops what lies before the window, and compares with the float64 reference:
// eager with the prefill kernel on (it must run when the batch holds a chunk and it supports the
// shape) and off, and a graph-bound launch.
func checkWindowBatch(t *testing.T, b *Backend, dt ops.DType, sh decodeShape, blockSize int, seqs []seqSpec, name string, o attnOpts) {
	lens := make([]int, len(seqs))
	chunk := false
	for i, s := range seqs {
		lens[i] = s.ctx + s.n
		chunk = chunk || s.n > 1
	}
	pc := newPagedCache(dt, sh, blockSize, lens)
	if o.window > 0 {
		pc.dropBeforeWindow(seqs, o.window)
	}
	kv := pc.upload(t, b)
	meta := &ops.AttnMetadata{}
	fillMeta(meta, pc.tables, pc.stride, blockSize, func(s int) int { return seqs[s].ctx }, func(s int) int { return seqs[s].n })
	nt, w := meta.NumTokens(), sh.heads*sh.hd
	qv := randVals(dt, nt*w, 1)
	q := activation(b, qv, nt, w).g
	a := ops.AttnShape{NumHeads: sh.heads, NumKVHeads: sh.kvHeads, HeadDim: sh.hd,
		Scale: float32(1 / math.Sqrt(float64(sh.hd))), Window: o.window}
	if o.sinks != nil {
		a.Sinks, _ = sinkWeights(t, b, nil, o.sinks)
	}
	require.NoError(t, ops.CheckAttention(b, a))
	want := pc.reference(meta, qv, float64(a.Scale), o)
	modes := []string{"eager", "bound"}
	if chunk {
		modes = append(modes, "eager-paged")
	}
	for _, mode := range modes {
		buf := b.Buffer(nt+2, w)
		b.Fill(buf, float32(math.NaN()))
		out := b.View(buf, nt).(*Tensor)
		switch mode {
		case "bound":
			attendBound(t, b, out, q, kv, meta, a)
		case "eager-paged":
			prefillOff = true
			b.Attention(out, q, kv, 0, meta, a)
			prefillOff = false
		default:
			before := prefillLaunches.Load()
			b.Attention(out, q, kv, 0, meta, a)
			ran := int64(0)
			if chunk && prefillSupported(b, dt, attnShape(sh)) {
				ran = 1
			}
			require.Equal(t, ran, prefillLaunches.Load()-before, "prefill kernel launches")
		}
		compare(t, fmt.Sprintf("AttentionWindow %s %s (%d tokens)%s", name, mode, nt, o), dt, read(b, out), want)
	}
}

// TestAttentionWindowSinks covers windows of 1, smaller than a tile or a partition, equal to
// one, crossing one, and larger than every context, with and without sinks (random, high, low,
// mixed per head), over three batches: decodes at contexts crossing tile, block and partition
// boundaries up to 3000 (a window of 128 there reads 128 positions: the image holds nothing
// before), prefill chunks after cached prefixes beside decodes (both kernels), and a short batch
// (few splits eager, many under the graph bound).
func TestAttentionWindowSinks(t *testing.T) {
	shapes := []decodeShape{
		{4, 4, 64},  // GQA 1
		{8, 2, 128}, // GQA 4
		{8, 1, 256}, // GQA 8, head dim 256 (no prefill kernel)
		{12, 4, 96}, // GQA 3, the portable decode kernel
		{32, 2, 64}, // GQA 16: two blocks per kv head
	}
	var decodes []seqSpec
	for _, n := range []int{1, 2, 8, 9, 63, 64, 65, 127, 128, 129, 130, 200, 257, 1153, 3000} {
		decodes = append(decodes, seqSpec{n - 1, 1})
	}
	mixed := []seqSpec{{300, 7}, {130, 70}, {0, 150}, {1000, 65}, {4, 1}, {2999, 1}, {63, 66}}
	short := []seqSpec{{0, 1}, {40, 1}, {200, 1}, {700, 1}, {2999, 1}}
	cases := []attnOpts{
		{window: 1},
		{window: 7, kind: "random"},
		{window: 64, kind: "high"},
		{window: 128},
		{window: 128, kind: "mixed"},
		{window: 129, kind: "low"},
		{window: 1000, kind: "random"},
		{window: 100000}, // past every context: full attention
		{kind: "random"},
		{kind: "high"},
		{kind: "low"},
	}
	for _, dt := range testDTypes {
		for _, bs := range []int{16, 5} {
			if bs != 16 && dt != ops.BF16 {
				continue // blocks of 5 (positions crossing blocks anywhere): one dtype is enough
			}
			for _, sh := range shapes {
				name := fmt.Sprintf("h=%d kv=%d hd=%d bs=%d", sh.heads, sh.kvHeads, sh.hd, bs)
				t.Run(fmt.Sprintf("%v %s", dt, name), func(t *testing.T) {
					b := newGPU(t, dt)
					for _, o := range cases {
						if o.kind != "" {
							o.sinks = sinkLogits(o.kind, sh.heads)
						}
						checkWindowBatch(t, b, dt, sh, bs, decodes, name+" decodes", o)
						checkWindowBatch(t, b, dt, sh, bs, mixed, name+" mixed", o)
						checkWindowBatch(t, b, dt, sh, bs, short, name+" short", o)
					}
				})
			}
		}
	}
}

// TestAttentionWindowSinksSteps compares the gpu with the cpu backend over three steps of a
// paged batch written by RopeWriteKV (prefixes from an empty cache, then prefill chunks after
// them beside decodes, then decodes alone), for windows and sinks, with the prefill kernel on
// and off.
func TestAttentionWindowSinksSteps(t *testing.T) {
	seqs := []seqSpec{{0, 150}, {70, 45}, {128, 64}, {33, 1}, {200, 1}, {5, 3}, {0, 1}, {63, 66}, {16, 17}}
	steps := []attnStep{
		{"prefix", func(int) int { return 0 }, func(s int) int { return seqs[s].ctx }, true},
		{"chunks+decodes", func(s int) int { return seqs[s].ctx }, func(s int) int { return seqs[s].n }, true},
		{"decodes", func(s int) int { return seqs[s].ctx + seqs[s].n }, func(int) int { return 1 }, true},
	}
	cases := []attnOpts{{window: 1}, {window: 16, kind: "random"}, {window: 64}, {window: 100, kind: "mixed"},
		{kind: "random"}, {window: 1000, kind: "high"}}
	for _, dt := range testDTypes {
		for _, sh := range []attnShape{{8, 2, 128}, {16, 4, 64}, {6, 2, 80}} {
			for _, o := range cases {
				for _, off := range []bool{false, true} {
					if o.kind != "" {
						o.sinks = sinkLogits(o.kind, sh.heads)
					}
					t.Run(fmt.Sprintf("%v h=%d kv=%d hd=%d%s prefill-off=%v", dt, sh.heads, sh.kvHeads, sh.hd, o, off), func(t *testing.T) {
						runAttnStepsWith(t, dt, sh, 16, 256/16, seqs, steps, o, off)
					})
				}
			}
		}
	}
}

// TestAttentionFeatures: the gpu reports windows and sinks, so ops.CheckAttention passes such a
// layer; sinks it cannot read (not float32, or not one per head) are refused at the call.
func TestAttentionFeatures(t *testing.T) {
	b := newGPU(t, ops.BF16)
	sinks, _ := sinkWeights(t, b, nil, sinkLogits("random", 4))
	a := ops.AttnShape{NumHeads: 4, NumKVHeads: 2, HeadDim: 64, Scale: 0.125, Window: 128, Sinks: sinks}
	require.NoError(t, ops.CheckAttention(b, a))
	cache, err := b.NewKVCache(1, 4, 16, 2, 64)
	require.NoError(t, err)
	q, out := b.Buffer(1, 4*64), b.Buffer(1, 4*64)
	meta := &ops.AttnMetadata{Positions: []int32{20}, SlotMapping: []int32{20}, QueryStart: []int32{0, 1},
		SeqLens: []int32{21}, BlockTables: []int32{0, 1}, BlockTableStride: 2}
	b.Attention(out, q, cache, 0, meta, a)
	require.NoError(t, b.Synchronize())
	raw := make([]byte, 4*2)
	bf, err := b.Weight("sinks", ops.Plain(ops.BF16), []int{4}, raw)
	require.NoError(t, err)
	few, _ := sinkWeights(t, b, nil, sinkLogits("random", 3))
	for name, bad := range map[string]ops.Tensor{"bf16 sinks": bf, "3 sinks for 4 heads": few} {
		a.Sinks = bad
		require.Panics(t, func() { b.Attention(out, q, cache, 0, meta, a) }, name)
	}
	record("%-44s %-8v ok", "Attention window/sinks features", ops.BF16)
}
