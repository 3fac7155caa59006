package models

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
	"github.com/atom-go/atom/ops/cpu"
)

// benchSmolLM2 loads the real model with its weights as blocks on a cpu backend with the
// vector float32 kernels and a float16 KV cache, as the engine serves it, with a KV cache of
// 1024 tokens.
func benchSmolLM2(b *testing.B, maxTokens int) (Model, *cpu.Backend, ops.KVCache) {
	if !fileExists(smolLM2Path) {
		b.Skipf("%s absent: run testdata/gguf/fetch.sh", smolLM2Path)
	}
	ck, err := OpenCheckpointWith(smolLM2Path, OpenOptions{KeepBlocks: true})
	require.NoError(b, err)
	b.Cleanup(ck.Close)
	be := cpu.NewWith(0, cpu.Options{VectorFloat32: true, KVFloat16: true})
	b.Cleanup(be.Close)
	m, err := Load(ck, be, Options{MaxTokens: maxTokens, MaxSeqs: 8})
	require.NoError(b, err)
	c := ck.Config
	cache, err := be.NewKVCache(c.NumLayers, 64, 16, c.NumKVHeads, c.HeadDim)
	require.NoError(b, err)
	return m, be, cache
}

// BenchmarkSmolLM2Prefill512 times a 512-token prefill (with the last token's logits).
func BenchmarkSmolLM2Prefill512(b *testing.B) {
	m, be, cache := benchSmolLM2(b, 512)
	ids := make([]int32, 512)
	for i := range ids {
		ids[i] = int32(100 + i*37%30000)
	}
	meta := singleSeq(0, 512, 16, 64)
	out := make([]float32, 49152)
	b.ResetTimer()
	for range b.N {
		h := m.Forward(ids, meta, cache)
		be.ReadRows(m.Logits(h, []int32{511}), out)
	}
	b.ReportMetric(float64(b.N*512)/b.Elapsed().Seconds(), "tok/s")
}

// BenchmarkSmolLM2Decode times a decode step of one sequence after a 512-token prompt, at
// contexts 512 to 639 in turn.
func BenchmarkSmolLM2Decode(b *testing.B) {
	m, be, cache := benchSmolLM2(b, 512)
	ids := make([]int32, 512)
	for i := range ids {
		ids[i] = int32(100 + i*37%30000)
	}
	m.Forward(ids, singleSeq(0, 512, 16, 64), cache)
	out := make([]float32, 49152)
	metas := make([]*ops.AttnMetadata, 128)
	for i := range metas {
		metas[i] = singleSeq(512+i, 1, 16, 64)
	}
	b.ResetTimer()
	for i := range b.N {
		h := m.Forward([]int32{1234}, metas[i%128], cache)
		be.ReadRows(m.Logits(h, []int32{0}), out)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tok/s")
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// BenchmarkSmolLM2Decode8 times a decode step of 8 sequences (one token each, as a serving
// step of 8 streams), at contexts 64 to 127 in turn; tok/s counts the 8 tokens of a step.
func BenchmarkSmolLM2Decode8(b *testing.B) {
	const seqs, blocks = 8, 8
	m, be, cache := benchSmolLM2(b, 512)
	ids := make([]int32, 64)
	for i := range ids {
		ids[i] = int32(100 + i*37%30000)
	}
	metas := make([]*ops.AttnMetadata, 64)
	for i := range metas {
		meta := &ops.AttnMetadata{BlockTableStride: blocks}
		for s := range seqs {
			ctx := 64 + i
			meta.QueryStart = append(meta.QueryStart, int32(s))
			meta.SeqLens = append(meta.SeqLens, int32(ctx+1))
			for k := range blocks {
				meta.BlockTables = append(meta.BlockTables, int32(s*blocks+k))
			}
			meta.Positions = append(meta.Positions, int32(ctx))
			meta.SlotMapping = append(meta.SlotMapping, int32(s*blocks*16+ctx))
		}
		meta.QueryStart = append(meta.QueryStart, seqs)
		metas[i] = meta
	}
	for s := range seqs {
		pre := singleSeq(0, 64, 16, blocks)
		for k := range pre.BlockTables {
			pre.BlockTables[k] = int32(s*blocks + k)
		}
		for p := range pre.SlotMapping {
			pre.SlotMapping[p] = int32(s*blocks*16 + p)
		}
		m.Forward(ids, pre, cache)
	}
	step := make([]int32, seqs)
	rows := make([]int32, seqs)
	for s := range seqs {
		step[s], rows[s] = int32(1234+s), int32(s)
	}
	out := make([]float32, seqs*49152)
	b.ResetTimer()
	for i := range b.N {
		h := m.Forward(step, metas[i%64], cache)
		be.ReadRows(m.Logits(h, rows), out)
	}
	b.ReportMetric(float64(b.N*seqs)/b.Elapsed().Seconds(), "tok/s")
}
