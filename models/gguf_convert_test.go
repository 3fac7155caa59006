package models

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
	"github.com/atom-go/atom/ops/cpu"
)

// ggufBuilder writes GGUF v3 files for tests.
type ggufBuilder struct {
	align   int
	kvs     [][2]any
	tensors []ggufBuilt
	// headerOnly leaves out the data section (the tensor table still records its offsets).
	headerOnly bool
}

type ggufBuilt struct {
	name  string
	typ   ggmlType
	shape []int // PyTorch order; written innermost first
	data  []byte
}

func (g *ggufBuilder) kv(key string, v any) { g.kvs = append(g.kvs, [2]any{key, v}) }

func (g *ggufBuilder) tensor(name string, typ ggmlType, shape []int, data []byte) {
	g.tensors = append(g.tensors, ggufBuilt{name, typ, shape, data})
}

func appendGGUFValue(b []byte, v any, withType bool) []byte {
	le := binary.LittleEndian
	typed := func(t uint32) []byte {
		if withType {
			return le.AppendUint32(b, t)
		}
		return b
	}
	switch x := v.(type) {
	case string:
		return append(le.AppendUint64(typed(ggufString), uint64(len(x))), x...)
	case uint32:
		return le.AppendUint32(typed(ggufUint32), x)
	case int32:
		return le.AppendUint32(typed(ggufInt32), uint32(x))
	case float32:
		return le.AppendUint32(typed(ggufFloat32), math.Float32bits(x))
	case uint64:
		return le.AppendUint64(typed(ggufUint64), x)
	case float64:
		return le.AppendUint64(typed(ggufFloat64), math.Float64bits(x))
	case []int32:
		b = le.AppendUint64(le.AppendUint32(typed(ggufArray), ggufInt32), uint64(len(x)))
		for _, v := range x {
			b = le.AppendUint32(b, uint32(v))
		}
		return b
	case bool:
		if x {
			return append(typed(ggufBool), 1)
		}
		return append(typed(ggufBool), 0)
	case []string:
		b = le.AppendUint64(le.AppendUint32(typed(ggufArray), ggufString), uint64(len(x)))
		for _, s := range x {
			b = appendGGUFValue(b, s, false)
		}
		return b
	}
	panic(fmt.Sprintf("appendGGUFValue: %T", v))
}

func (g *ggufBuilder) bytes() []byte {
	le := binary.LittleEndian
	pad := func(b []byte) []byte {
		for len(b)%g.align != 0 {
			b = append(b, 0)
		}
		return b
	}
	b := le.AppendUint32([]byte(ggufMagic), 3)
	b = le.AppendUint64(le.AppendUint64(b, uint64(len(g.tensors))), uint64(len(g.kvs)))
	for _, kv := range g.kvs {
		b = appendGGUFValue(b, kv[0], false)
		b = appendGGUFValue(b, kv[1], true)
	}
	var data []byte
	for _, t := range g.tensors {
		b = appendGGUFValue(b, t.name, false)
		b = le.AppendUint32(b, uint32(len(t.shape)))
		for i := len(t.shape) - 1; i >= 0; i-- {
			b = le.AppendUint64(b, uint64(t.shape[i]))
		}
		b = le.AppendUint64(le.AppendUint32(b, uint32(t.typ)), uint64(len(data)))
		data = pad(append(data, t.data...))
	}
	if g.headerOnly {
		return b
	}
	return append(pad(b), data...)
}

// permuteRows is convert_hf_to_gguf.py's LlamaModel.permute,
// w.reshape(n_head, 2, rows//n_head//2, cols).swapaxes(1, 2).reshape(rows, cols), on rows of
// rowBytes bytes: output row (h, i, j) is input row (h, j, i).
func permuteRows(w []byte, heads, rowBytes int) []byte {
	rows := len(w) / rowBytes
	half := rows / heads / 2
	out := make([]byte, 0, len(w))
	for h := range heads {
		for i := range half {
			for j := range 2 {
				src := (h*2*half + j*half + i) * rowBytes
				out = append(out, w[src:src+rowBytes]...)
			}
		}
	}
	return out
}

// llama3RopeFreqs is convert_hf_to_gguf.py's rope_freqs.weight for Llama 3 scaling.
func llama3RopeFreqs(c *Config) []byte {
	sc, dim := c.RoPEScaling, c.HeadDim
	lowWave := float64(sc.OriginalMaxPos) / sc.LowFreqFactor
	highWave := float64(sc.OriginalMaxPos) / sc.HighFreqFactor
	var out []byte
	for i := 0; i < dim; i += 2 {
		freq := float32(1 / math.Pow(c.RoPETheta, float64(float32(i)/float32(dim))))
		wave := 2 * math.Pi / float64(freq)
		f := 1.0
		switch {
		case wave < highWave:
		case wave > lowWave:
			f = sc.Factor
		default:
			s := (float64(sc.OriginalMaxPos)/wave - sc.LowFreqFactor) / (sc.HighFreqFactor - sc.LowFreqFactor)
			f = 1 / ((1-s)/sc.Factor + s)
		}
		out = binary.LittleEndian.AppendUint32(out, math.Float32bits(float32(f)))
	}
	return out
}

// hfToGGUF converts a testdata/models checkpoint the way llama.cpp's converter would (llama
// for Llama and Mistral, q/k rows permuted; qwen2 and qwen3 as they are), keeping dtypes.
func hfToGGUF(t *testing.T, ck *Checkpoint, path string) {
	c := ck.Config
	arch := map[string]string{"LlamaForCausalLM": "llama", "MistralForCausalLM": "llama",
		"Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3"}[c.Architecture]
	require.NotEmpty(t, arch, c.Architecture)
	g := &ggufBuilder{align: 32}
	p := arch + "."
	g.kv("general.architecture", arch)
	for key, v := range map[string]int{"context_length": c.MaxPositions, "embedding_length": c.HiddenSize,
		"feed_forward_length": c.Intermediate, "block_count": c.NumLayers, "attention.head_count": c.NumHeads,
		"attention.head_count_kv": c.NumKVHeads, "attention.key_length": c.HeadDim,
		"attention.value_length": c.HeadDim, "rope.dimension_count": c.RotaryDim()} {
		g.kv(p+key, uint32(v))
	}
	g.kv(p+"attention.layer_norm_rms_epsilon", float32(c.RMSNormEps))
	g.kv(p+"rope.freq_base", float32(c.RoPETheta))
	switch sc := c.RoPEScaling; sc.Type {
	case "linear":
		g.kv(p+"rope.scaling.type", "linear")
		g.kv(p+"rope.scaling.factor", float32(sc.Factor))
	case "yarn":
		g.kv(p+"rope.scaling.type", "yarn")
		g.kv(p+"rope.scaling.factor", float32(sc.Factor))
		g.kv(p+"rope.scaling.original_context_length", uint32(sc.OriginalMaxPos))
	case "llama3":
		g.tensor("rope_freqs.weight", ggmlF32, []int{c.HeadDim / 2}, llama3RopeFreqs(c))
	}
	g.kv("tokenizer.ggml.model", "gpt2")
	tokens := make([]string, c.VocabSize)
	for i := range tokens {
		tokens[i] = fmt.Sprintf("<%d>", i)
	}
	g.kv("tokenizer.ggml.tokens", tokens)
	g.kv("tokenizer.ggml.bos_token_id", uint32(c.BOSTokenID))
	g.kv("tokenizer.ggml.eos_token_id", uint32(c.EOSTokenIDs[0]))
	toGGUF := map[string]string{}
	for k, v := range ggufGlobalNames {
		toGGUF[v] = k
	}
	for _, name := range ck.Names() {
		ti, err := ck.Tensor(name)
		require.NoError(t, err)
		gn := toGGUF[name]
		if rest, ok := strings.CutPrefix(name, "model.layers."); ok {
			n, suffix, _ := strings.Cut(rest, ".")
			for k, v := range ggufLayerNames {
				if v == suffix {
					gn = "blk." + n + "." + k
				}
			}
		}
		require.NotEmpty(t, gn, "no GGUF name for %s", name)
		data := ti.Data
		if arch == "llama" && strings.Contains(name, "self_attn.q_proj.") {
			data = permuteRows(data, c.NumHeads, len(data)/ti.Shape[0])
		} else if arch == "llama" && strings.Contains(name, "self_attn.k_proj.") {
			data = permuteRows(data, c.NumKVHeads, len(data)/ti.Shape[0])
		}
		typ := map[ops.DType]ggmlType{ops.F32: ggmlF32, ops.F16: ggmlF16, ops.BF16: ggmlBF16}[ti.DType]
		g.tensor(gn, typ, ti.Shape, data)
	}
	require.NoError(t, os.WriteFile(path, g.bytes(), 0o644))
}

// TestGGUFConvertedCheckpointsMatchTransformers converts every testdata/models checkpoint to
// GGUF as llama.cpp would, then requires the loader to give back the Hugging Face tensors
// byte for byte, the same config (RoPE scaling included, Llama 3's recovered from
// rope_freqs.weight), and the transformers reference log-probabilities.
func TestGGUFConvertedCheckpointsMatchTransformers(t *testing.T) {
	be := cpu.New(0)
	defer be.Close()
	for _, dir := range testCheckpoints(t) {
		cfg, err := LoadConfig(dir)
		require.NoError(t, err)
		if cfg.Quantization != "" {
			continue // a quantized checkpoint is not converted to GGUF
		}
		if cfg.MoE.NumExperts > 0 {
			continue // GGUF's stacked expert tensors (ffn_*_exps) are not read yet
		}
		t.Run(filepath.Base(dir), func(t *testing.T) {
			hf, err := OpenCheckpoint(dir)
			require.NoError(t, err)
			defer hf.Close()
			path := filepath.Join(t.TempDir(), filepath.Base(dir)+".gguf")
			hfToGGUF(t, hf, path)
			ck, err := OpenCheckpoint(path)
			require.NoError(t, err)
			defer ck.Close()

			want, got := *hf.Config, *ck.Config
			require.Equal(t, hf.Has("model.layers.0.self_attn.q_proj.bias"), got.AttentionBias)
			want.Architecture = strings.Replace(want.Architecture, "Mistral", "Llama", 1)
			want.ModelType = strings.Replace(want.ModelType, "mistral", "llama", 1)
			want.GenerationConfig, want.AttentionBias, got.AttentionBias = GenerationConfig{}, false, false
			if want.RoPEScaling.Type == "default" {
				want.RoPEScaling.Type = ""
			}
			require.Equal(t, want, got)

			names := ck.Names()
			if hf.Config.RoPEScaling.Type == "llama3" {
				require.Contains(t, names, "rope_freqs.weight")
				names = slicesDelete(names, "rope_freqs.weight")
			}
			require.Equal(t, hf.Names(), names)
			for _, name := range hf.Names() {
				a, _ := hf.Tensor(name)
				b, err := ck.Tensor(name)
				require.NoError(t, err)
				require.Equal(t, a.Shape, b.Shape, name)
				require.Equal(t, a.DType, b.DType, name)
				require.True(t, bytes.Equal(a.Data, b.Data), "%s differs from the Hugging Face tensor", name)
			}
			runReference(t, ck, be, filepath.Join(dir, "reference.json"))
		})
	}
}

func TestLlama3RoPEFromRopeFreqs(t *testing.T) {
	llama3 := func(factor float64, low, high float64, orig int) ops.RoPEScaling {
		return ops.RoPEScaling{Type: "llama3", Factor: factor, LowFreqFactor: low, HighFreqFactor: high, OriginalMaxPos: orig}
	}
	cases := []struct {
		name      string
		headDim   int
		scaling   ops.RoPEScaling
		recovered ops.RoPEScaling
	}{
		{"llama 3.1 8B", 128, llama3(8, 1, 4, 8192), llama3(8, 1, 4, 8192)},
		{"llama 3.2 1B", 64, llama3(32, 1, 4, 8192), llama3(32, 1, 4, 8192)},
		{"tiny", 16, llama3(8, 1, 4, 64), llama3(8, 1, 4, 64)},
		// Only L/(high-low) and low/(high-low) shape the divisors: (2, 8, 8192) is (1, 4, 4096).
		{"equivalent parameters", 128, llama3(8, 2, 8, 8192), llama3(8, 1, 4, 4096)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := &Config{RoPETheta: 500000, HeadDim: tc.headDim, RoPEScaling: tc.scaling}
			rf := &TensorInfo{Name: "rope_freqs.weight", DType: ops.F32, Shape: []int{tc.headDim / 2}, Data: llama3RopeFreqs(src)}
			got := &Config{RoPETheta: 500000, HeadDim: tc.headDim}
			require.NoError(t, llama3FromRopeFreqs(rf, got))
			require.Equal(t, tc.recovered, got.RoPEScaling)
		})
	}
	f32s := func(v ...float32) []byte {
		var b []byte
		for _, x := range v {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
		}
		return b
	}
	c := &Config{RoPETheta: 10000, HeadDim: 8}
	require.NoError(t, llama3FromRopeFreqs(&TensorInfo{DType: ops.F32, Shape: []int{4}, Data: f32s(1, 1, 1, 1)}, c))
	require.Empty(t, c.RoPEScaling.Type, "all-ones rope_freqs is no scaling")
	require.ErrorContains(t, llama3FromRopeFreqs(&TensorInfo{DType: ops.F32, Shape: []int{4}, Data: f32s(1, 8, 1, 8)}, c),
		"does not match Llama 3 RoPE scaling")
	require.ErrorContains(t, llama3FromRopeFreqs(&TensorInfo{DType: ops.F32, Shape: []int{4}, Data: f32s(1, 1, 0, 1)}, c), "entry 2 is 0")
	require.ErrorContains(t, llama3FromRopeFreqs(&TensorInfo{DType: ops.F16, Shape: []int{4}, Data: f32s(1, 1)}, c), "want 4 float32 values")
}

func slicesDelete(s []string, v string) []string {
	out := s[:0]
	for _, x := range s {
		if x != v {
			out = append(out, x)
		}
	}
	return out
}

// runReference replays reference.json (see TestModelsMatchTransformersReference) on ck.
func runReference(t *testing.T, ck *Checkpoint, be *cpu.Backend, refPath string) {
	b, err := os.ReadFile(refPath)
	require.NoError(t, err)
	var ref reference
	require.NoError(t, json.Unmarshal(b, &ref))
	m, err := Load(ck, be, Options{MaxTokens: 64, MaxSeqs: 1})
	require.NoError(t, err)
	c := ck.Config
	const bs, blocks = 4, 32
	cache, err := be.NewKVCache(c.NumLayers, blocks, bs, c.NumKVHeads, c.HeadDim)
	require.NoError(t, err)
	logits := make([]float32, c.VocabSize)
	for ci, tc := range ref.Cases {
		ctx, input := 0, append([]int32(nil), tc.PromptIDs...)
		for si, st := range tc.Steps {
			h := m.Forward(input, singleSeq(ctx, len(input), bs, blocks), cache)
			be.ReadRows(m.Logits(h, []int32{int32(len(input) - 1)}), logits)
			lp := logSoftmax(logits)
			for k, id := range st.TopIDs {
				require.InDelta(t, st.TopLogprobs[k], lp[id], 1e-3, "case %d step %d: logprob of %d", ci, si, id)
			}
			ctx += len(input)
			input = []int32{st.Token}
		}
	}
}

// TestGGUFUnpermutesLlamaBiases covers what the converted checkpoints lack: q/k biases of a
// LLaMA-family file (permuted like the weights), and a bias type that cannot be un-permuted.
func TestGGUFUnpermutesLlamaBiases(t *testing.T) {
	f32s := func(n int, scale float32) []byte {
		var b []byte
		for i := range n {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(scale*float32(i)))
		}
		return b
	}
	build := func(qBiasType ggmlType, qBias []byte) string {
		g := &ggufBuilder{align: 32}
		g.kv("general.architecture", "llama")
		for key, v := range map[string]uint32{"embedding_length": 32, "feed_forward_length": 64, "block_count": 1,
			"attention.head_count": 2, "attention.head_count_kv": 1} {
			g.kv("llama."+key, v)
		}
		g.kv("llama.attention.layer_norm_rms_epsilon", float32(1e-6))
		g.tensor("token_embd.weight", ggmlF32, []int{8, 32}, f32s(256, 1))
		g.tensor("blk.0.attn_q.bias", qBiasType, []int{32}, qBias)
		g.tensor("blk.0.attn_k.bias", ggmlF32, []int{16}, permuteRows(f32s(16, -1), 1, 4))
		path := filepath.Join(t.TempDir(), "bias.gguf")
		require.NoError(t, os.WriteFile(path, g.bytes(), 0o644))
		return path
	}
	ck, err := OpenGGUF(build(ggmlF32, permuteRows(f32s(32, 0.5), 2, 4)))
	require.NoError(t, err)
	defer ck.Close()
	require.True(t, ck.Config.AttentionBias)
	require.True(t, ck.Config.TieEmbeddings)
	q, err := ck.Tensor("model.layers.0.self_attn.q_proj.bias")
	require.NoError(t, err)
	require.Equal(t, f32s(32, 0.5), q.Data)
	k, err := ck.Tensor("model.layers.0.self_attn.k_proj.bias")
	require.NoError(t, err)
	require.Equal(t, f32s(16, -1), k.Data)

	_, err = OpenGGUF(build(ggmlQ8_0, make([]byte, 34)))
	require.ErrorContains(t, err, "tensor blk.0.attn_q.bias: a Q8_0 bias cannot be un-permuted")
}
