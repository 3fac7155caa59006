//go:build gpu

package gpu

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// seqSpec is one sequence of a batch: ctx tokens already cached, n new ones.
type seqSpec struct{ ctx, n int }

// fillMeta lays out a varlen batch into m (reusing its slices, as the engine's runner does):
// for each sequence the tokens at positions from..from+count-1, with tables[s] its block table.
func fillMeta(m *ops.AttnMetadata, tables [][]int32, stride, blockSize int, from, count func(s int) int) {
	m.Positions, m.SlotMapping = m.Positions[:0], m.SlotMapping[:0]
	m.QueryStart, m.SeqLens, m.BlockTables = append(m.QueryStart[:0], 0), m.SeqLens[:0], m.BlockTables[:0]
	m.BlockTableStride = stride
	for s, tb := range tables {
		lo, n := from(s), count(s)
		for p := lo; p < lo+n; p++ {
			m.Positions = append(m.Positions, int32(p))
			m.SlotMapping = append(m.SlotMapping, tb[p/blockSize]*int32(blockSize)+int32(p%blockSize))
		}
		m.QueryStart = append(m.QueryStart, int32(len(m.Positions)))
		m.SeqLens = append(m.SeqLens, int32(lo+n))
		m.BlockTables = append(m.BlockTables, tb...)
	}
}

// TestRopeWriteKVAndAttention runs two steps of a paged, mixed batch on both backends: a first
// step writes the cached prefixes, the second mixes a fresh prefill, a prefill chunk after a
// cached prefix, a chunk ending on a block boundary and decodes. q and k after RoPE and the
// attention output are compared at each step.
func TestRopeWriteKVAndAttention(t *testing.T) {
	type shape struct {
		heads, kvHeads, hd, rot int
		scaling                 ops.RoPEScaling
	}
	shapes := []shape{
		{8, 2, 128, 128, ops.RoPEScaling{}},
		{12, 4, 64, 32, ops.RoPEScaling{Type: "yarn", Factor: 4, OriginalMaxPos: 64}},
		{4, 2, 16, 16, ops.RoPEScaling{}},
		{4, 4, 256, 256, ops.RoPEScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPos: 64}},
		{6, 2, 80, 64, ops.RoPEScaling{Type: "linear", Factor: 2}},
	}
	seqs := []seqSpec{{0, 37}, {50, 20}, {130, 1}, {5, 1}, {16, 16}, {0, 1}}
	const blockSize, numBlocks, stride = 16, 80, 10
	for _, dt := range testDTypes {
		for _, sh := range shapes {
			name := fmt.Sprintf("h=%d kv=%d hd=%d rot=%d %s", sh.heads, sh.kvHeads, sh.hd, sh.rot, sh.scaling.Type)
			t.Run(fmt.Sprintf("%v %s", dt, name), func(t *testing.T) {
				b, c := newGPU(t, dt), newCPU(t)
				rope, err := ops.NewRoPE(sh.hd, sh.rot, 10000, sh.scaling, 4096)
				require.NoError(t, err)
				gcache, err := b.NewKVCache(2, numBlocks, blockSize, sh.kvHeads, sh.hd)
				require.NoError(t, err)
				ccache, err := c.NewKVCache(2, numBlocks, blockSize, sh.kvHeads, sh.hd)
				require.NoError(t, err)
				perm := rng.Perm(numBlocks)
				tables := make([][]int32, len(seqs))
				for s := range tables {
					for j := 0; j < stride; j++ {
						tables[s] = append(tables[s], int32(perm[s*stride+j]))
					}
				}
				a := ops.AttnShape{NumHeads: sh.heads, NumKVHeads: sh.kvHeads, HeadDim: sh.hd, Scale: float32(1 / math.Sqrt(float64(sh.hd)))}
				meta := &ops.AttnMetadata{}
				steps := []struct {
					name        string
					from, count func(s int) int
				}{
					{"prefix", func(int) int { return 0 }, func(s int) int { return seqs[s].ctx }},
					{"mixed", func(s int) int { return seqs[s].ctx }, func(s int) int { return seqs[s].n }},
				}
				for _, st := range steps {
					fillMeta(meta, tables, stride, blockSize, st.from, st.count)
					nt := meta.NumTokens()
					q := activation(b, randVals(dt, nt*sh.heads*sh.hd, 1), nt, sh.heads*sh.hd)
					k := activation(b, randVals(dt, nt*sh.kvHeads*sh.hd, 1), nt, sh.kvHeads*sh.hd)
					v := activation(b, randVals(dt, nt*sh.kvHeads*sh.hd, 1), nt, sh.kvHeads*sh.hd)
					for layer := 0; layer < 2; layer++ { // layer 1 reuses the uploaded metadata
						b.RopeWriteKV(q.g, k.g, v.g, rope, gcache, layer, meta)
						c.RopeWriteKV(q.c, k.c, v.c, rope, ccache, layer, meta)
						if layer == 0 {
							compare(t, fmt.Sprintf("RoPE q %s %s", name, st.name), dt, read(b, q.g), q.c.Float32())
							compare(t, fmt.Sprintf("RoPE k %s %s", name, st.name), dt, read(b, k.g), k.c.Float32())
							// Layer 1 rotates q and k again: start both backends from the same values.
							b.WriteRows(q.g, q.c.Float32())
							b.WriteRows(k.g, k.c.Float32())
						}
						out := output(b, c, nt, sh.heads*sh.hd)
						b.Attention(out.g, q.g, gcache, layer, meta, a)
						c.Attention(out.c, q.c, ccache, layer, meta, a)
						compare(t, fmt.Sprintf("Attention %s %s layer %d", name, st.name, layer), dt, read(b, out.g), out.c.Float32())
					}
				}
			})
		}
	}
}

// TestAttentionLongContext covers the split-context path: long cached contexts with few query
// tokens (a prefill chunk after 2000 cached tokens beside decodes, then decodes alone), so the
// kernel splits each context into partitions and merges them; one shape has 16 query heads per
// KV head (more than one block's group).
func TestAttentionLongContext(t *testing.T) {
	type shape struct{ heads, kvHeads, hd int }
	seqs := []seqSpec{{3000, 1}, {1000, 1}, {2000, 64}, {0, 3}}
	const blockSize, numBlocks, stride = 16, 800, 190
	for _, dt := range testDTypes {
		for _, sh := range []shape{{8, 2, 128}, {16, 1, 64}, {6, 2, 80}} {
			name := fmt.Sprintf("h=%d kv=%d hd=%d", sh.heads, sh.kvHeads, sh.hd)
			t.Run(fmt.Sprintf("%v %s", dt, name), func(t *testing.T) {
				b, c := newGPU(t, dt), newCPU(t)
				rope, err := ops.NewRoPE(sh.hd, sh.hd, 500000, ops.RoPEScaling{}, 8192)
				require.NoError(t, err)
				gcache, err := b.NewKVCache(1, numBlocks, blockSize, sh.kvHeads, sh.hd)
				require.NoError(t, err)
				ccache, err := c.NewKVCache(1, numBlocks, blockSize, sh.kvHeads, sh.hd)
				require.NoError(t, err)
				perm := rng.Perm(numBlocks)
				tables := make([][]int32, len(seqs))
				for s := range tables {
					for j := 0; j < stride; j++ {
						tables[s] = append(tables[s], int32(perm[s*stride+j]))
					}
				}
				a := ops.AttnShape{NumHeads: sh.heads, NumKVHeads: sh.kvHeads, HeadDim: sh.hd, Scale: float32(1 / math.Sqrt(float64(sh.hd)))}
				meta := &ops.AttnMetadata{}
				steps := []struct {
					name        string
					from, count func(s int) int
				}{
					{"prefix", func(int) int { return 0 }, func(s int) int { return seqs[s].ctx }},
					{"chunk+decodes", func(s int) int { return seqs[s].ctx }, func(s int) int { return seqs[s].n }},
					{"decodes", func(s int) int { return seqs[s].ctx + seqs[s].n }, func(int) int { return 1 }},
				}
				for si, st := range steps {
					fillMeta(meta, tables, stride, blockSize, st.from, st.count)
					nt := meta.NumTokens()
					q := activation(b, randVals(dt, nt*sh.heads*sh.hd, 1), nt, sh.heads*sh.hd)
					k := activation(b, randVals(dt, nt*sh.kvHeads*sh.hd, 1), nt, sh.kvHeads*sh.hd)
					v := activation(b, randVals(dt, nt*sh.kvHeads*sh.hd, 1), nt, sh.kvHeads*sh.hd)
					b.RopeWriteKV(q.g, k.g, v.g, rope, gcache, 0, meta)
					c.RopeWriteKV(q.c, k.c, v.c, rope, ccache, 0, meta)
					if si == 0 {
						continue // the cpu reference of 6000 prefill tokens would be slow; the cache is what counts
					}
					maxCtx := 0
					for _, p := range meta.Positions {
						maxCtx = max(maxCtx, int(p)+1)
					}
					ws, err := b.lib.PagedAttentionWorkspace(nt, sh.heads, sh.kvHeads, sh.hd, maxCtx, 0)
					require.NoError(t, err)
					require.Positive(t, ws, "this batch should split its contexts")
					out := output(b, c, nt, sh.heads*sh.hd)
					b.Attention(out.g, q.g, gcache, 0, meta, a)
					c.Attention(out.c, q.c, ccache, 0, meta, a)
					compare(t, fmt.Sprintf("AttentionSplit %s %s (%d tokens)", name, st.name, nt), dt, read(b, out.g), out.c.Float32())
				}
			})
		}
	}
}

func TestAttentionMetadataChecked(t *testing.T) {
	b := newGPU(t, ops.BF16)
	cache, err := b.NewKVCache(1, 4, 16, 2, 64)
	require.NoError(t, err)
	q, out := b.Buffer(1, 4*64), b.Buffer(1, 4*64)
	a := ops.AttnShape{NumHeads: 4, NumKVHeads: 2, HeadDim: 64, Scale: 0.125}
	good := func() *ops.AttnMetadata {
		return &ops.AttnMetadata{Positions: []int32{20}, SlotMapping: []int32{20}, QueryStart: []int32{0, 1},
			SeqLens: []int32{21}, BlockTables: []int32{0, 1}, BlockTableStride: 2}
	}
	b.Attention(out, q, cache, 0, good(), a)
	require.NoError(t, b.Synchronize())
	for name, bad := range map[string]func(m *ops.AttnMetadata){
		"block past the cache":   func(m *ops.AttnMetadata) { m.BlockTables[1] = 4 },
		"position past its seq":  func(m *ops.AttnMetadata) { m.Positions[0] = 21 },
		"slot past the cache":    func(m *ops.AttnMetadata) { m.SlotMapping[0] = 64 },
		"length past its blocks": func(m *ops.AttnMetadata) { m.SeqLens[0] = 33; m.Positions[0] = 32 },
		"query starts":           func(m *ops.AttnMetadata) { m.QueryStart[1] = 2 },
	} {
		m := good()
		bad(m)
		require.Panics(t, func() { b.Attention(out, q, cache, 0, m, a) }, name)
	}
	record("%-44s %-8v ok", "Attention metadata validation", ops.BF16)
}
