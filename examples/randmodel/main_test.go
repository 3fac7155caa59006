package main

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/models"
	"github.com/atom-go/atom/ops"
	"github.com/atom-go/atom/ops/cpu"
)

// TestRandomBytesMoments checks the generated weights' mean, standard deviation and bound for
// each dtype, that a seed reproduces them and that norms (std 0) are ones.
func TestRandomBytesMoments(t *testing.T) {
	const n, std = 1 << 20, 0.02
	for _, dtype := range []string{"bfloat16", "float16", "float32"} {
		b := randomBytes(n, std, dtype, 7)
		require.Equal(t, b, randomBytes(n, std, dtype, 7), dtype)
		require.NotEqual(t, b, randomBytes(n, std, dtype, 8), dtype)
		vals := decode(b, dtype)
		var sum, sq, peak float64
		for _, v := range vals {
			sum += v
			sq += v * v
			peak = math.Max(peak, math.Abs(v))
		}
		mean := sum / n
		sd := math.Sqrt(sq/n - mean*mean)
		require.InDelta(t, 0, mean, 1e-4, dtype)
		require.InDelta(t, std, sd, std*0.01, dtype)
		require.Greater(t, peak, 3*std, dtype)
		require.Less(t, peak, 3.5*std, dtype)
		for _, v := range decode(randomBytes(1000, 0, dtype, 1), dtype) {
			require.Equal(t, 1.0, v, dtype)
		}
	}
}

func decode(b []byte, dtype string) []float64 {
	var out []float64
	switch dtype {
	case "float32":
		for i := 0; i < len(b); i += 4 {
			out = append(out, float64(math.Float32frombits(binary.LittleEndian.Uint32(b[i:]))))
		}
	case "bfloat16":
		for i := 0; i < len(b); i += 2 {
			out = append(out, float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[i:]))<<16)))
		}
	default:
		for i := 0; i < len(b); i += 2 {
			h := binary.LittleEndian.Uint16(b[i:])
			e, m := int(h>>10&0x1f), float64(h&0x3ff)
			v := math.Ldexp(1+m/1024, e-15)
			if e == 0 {
				v = math.Ldexp(m/1024, -14)
			}
			if h&0x8000 != 0 {
				v = -v
			}
			out = append(out, v)
		}
	}
	return out
}

// TestWritesALoadableCheckpoint writes the smallest shape and opens it as the engine does.
func TestWritesALoadableCheckpoint(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "smollm2")
	require.NoError(t, write(shapes["smollm2-135m"], dir, "bfloat16", 1<<27, 1))
	_, err := os.Stat(filepath.Join(dir, "model.safetensors.index.json"))
	require.NoError(t, err, "128 MiB shards: expect an index")
	ck, err := models.OpenCheckpoint(dir)
	require.NoError(t, err)
	defer ck.Close()
	require.Equal(t, 576, ck.Config.HiddenSize)
	require.Equal(t, 30, ck.Config.NumLayers)
}

// TestMoEShapes: the MoE shapes have the published parameter counts (Qwen3-30B-A3B 30.5B,
// Mixtral 8x7B 46.7B), and a tiny variant of each is written, loaded and run on the cpu.
func TestMoEShapes(t *testing.T) {
	params := func(s shape) float64 {
		var n float64
		for _, t := range s.tensors() {
			p := 1.0
			for _, d := range t.shape {
				p *= float64(d)
			}
			n += p
		}
		return n
	}
	require.InDelta(t, 30.5e9, params(shapes["qwen3-30b-a3b"]), 0.1e9)
	require.InDelta(t, 46.7e9, params(shapes["mixtral-8x7b"]), 0.1e9)
	for _, name := range []string{"qwen3-30b-a3b", "mixtral-8x7b"} {
		t.Run(name, func(t *testing.T) {
			s := shapes[name]
			m := *s.MoE
			s.Hidden, s.Intermediate, s.Layers, s.Heads, s.KVHeads, s.HeadDim, s.Vocab = 64, 96, 2, 4, 2, 16, 128
			m.Experts = min(m.Experts, 16)
			if m.Inter > 0 {
				m.Inter = 32
			}
			s.MoE = &m
			dir := filepath.Join(t.TempDir(), name)
			require.NoError(t, write(s, dir, "bfloat16", 1<<20, 1))
			ck, err := models.OpenCheckpoint(dir)
			require.NoError(t, err)
			defer ck.Close()
			require.Equal(t, s.Arch, ck.Config.Architecture)
			require.Equal(t, m.Experts, ck.Config.MoE.NumExperts)
			require.Equal(t, m.TopK, ck.Config.MoE.TopK)
			requireFiniteLogits(t, ck, s.Vocab)
		})
	}
}

func BenchmarkRandomBytes(b *testing.B) {
	b.SetBytes(2 << 20)
	for range b.N {
		randomBytes(1<<20, 0.02, "bfloat16", 1)
	}
}

// TestGptOssShapes: the gpt-oss shapes have the published parameter counts (20.9B and 116.8B),
// and a tiny variant of each is written in bfloat16 and in mxfp4, loaded and run on the cpu.
func TestGptOssShapes(t *testing.T) {
	params := func(s shape) float64 {
		var n float64
		for _, t := range s.tensors() {
			p := 1.0
			for _, d := range t.shape {
				p *= float64(d)
			}
			n += p
		}
		return n
	}
	require.InDelta(t, 20.9e9, params(shapes["gpt-oss-20b"]), 0.1e9)
	require.InDelta(t, 116.8e9, params(shapes["gpt-oss-120b"]), 0.1e9)
	for _, dtype := range []string{"bfloat16", "mxfp4"} {
		t.Run(dtype, func(t *testing.T) {
			s := shapes["gpt-oss-20b"]
			m := *s.MoE
			s.Hidden, s.Intermediate, s.Layers, s.Heads, s.KVHeads, s.HeadDim, s.Vocab = 64, 64, 3, 4, 2, 16, 128
			m.Experts = 8
			s.MoE = &m
			dir := filepath.Join(t.TempDir(), "gpt-oss")
			require.NoError(t, write(s, dir, dtype, 1<<20, 1))
			ck, err := models.OpenCheckpoint(dir)
			require.NoError(t, err)
			defer ck.Close()
			require.Equal(t, s.Arch, ck.Config.Architecture)
			require.Equal(t, []int{128, 0, 128}, ck.Config.GptOss.LayerWindows)
			if dtype == "mxfp4" {
				require.Equal(t, "mxfp4", ck.Config.Quantization)
			}
			requireFiniteLogits(t, ck, s.Vocab)
		})
	}
	require.ErrorContains(t, write(shapes["llama3-1b"], t.TempDir(), "mxfp4", 1<<20, 1), "gpt-oss's expert format")
	require.ErrorContains(t, write(shapes["gpt-oss-20b"], t.TempDir(), "fp8-block", 1<<20, 1), "not fp8-block")
}

// requireFiniteLogits loads ck on the cpu, runs a 3-token prompt and requires every one of the
// vocab logits of its last token to be finite.
func requireFiniteLogits(t *testing.T, ck *models.Checkpoint, vocab int) {
	t.Helper()
	be := cpu.New(1)
	defer be.Close()
	model, err := models.Load(ck, be, models.Options{MaxTokens: 8, MaxSeqs: 1})
	require.NoError(t, err)
	cache, err := model.NewKVCache(4, 4)
	require.NoError(t, err)
	meta := &ops.AttnMetadata{Positions: []int32{0, 1, 2}, SlotMapping: []int32{0, 1, 2}, QueryStart: []int32{0, 3},
		SeqLens: []int32{3}, BlockTables: []int32{0}, BlockTableStride: 1}
	logits := make([]float32, vocab)
	be.ReadRows(model.Logits(model.Forward([]int32{1, 2, 3}, meta, cache), []int32{2}), logits)
	for i, v := range logits {
		require.False(t, math.IsNaN(float64(v)) || math.IsInf(float64(v), 0), "logit %d = %v", i, v)
	}
}
