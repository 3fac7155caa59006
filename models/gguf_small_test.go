package models

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// The small llama GGUF: hidden 4, 2 heads of 2 (1 KV head), MLP 32, 1 layer, vocabulary 8.
// Every tensor the decoder reads is there, in F32 except gate/up (F16) and down (Q4_0), so a
// load walks the parser, the config derivation, the shape checks, the q/k un-permutation and a
// dequantization, in under 3 KB: a seed the fuzzer can mutate and minimise quickly.
const (
	smallHidden, smallHeads, smallKV, smallHeadDim, smallInter, smallVocab = 4, 2, 1, 2, 32, 8
)

// smallGGUFMeta is the small model's metadata in file order; smallGGUF overrides entries.
func smallGGUFMeta() [][2]any {
	return [][2]any{
		{"general.architecture", "llama"},
		{"llama.context_length", uint32(64)},
		{"llama.embedding_length", uint32(smallHidden)},
		{"llama.feed_forward_length", uint32(smallInter)},
		{"llama.block_count", uint32(1)},
		{"llama.attention.head_count", uint32(smallHeads)},
		{"llama.attention.head_count_kv", uint32(smallKV)},
		{"llama.attention.layer_norm_rms_epsilon", float32(1e-5)},
		{"llama.rope.freq_base", float32(10000)},
		{"llama.rope.dimension_count", uint32(smallHeadDim)},
		{"tokenizer.ggml.model", "gpt2"},
		{"tokenizer.ggml.tokens", []string{"<s>", "</s>", "a", "b", "c", "d", "e", "f"}},
		{"tokenizer.ggml.token_type", []int32{3, 3, 1, 1, 1, 1, 1, 1}},
		{"tokenizer.ggml.bos_token_id", uint32(0)},
		{"tokenizer.ggml.eos_token_id", uint32(1)},
	}
}

// smallGGUF builds the small model with the given metadata values replaced (or added); a nil
// value removes the key.
func smallGGUF(override map[string]any) []byte {
	g := &ggufBuilder{align: 32}
	meta := smallGGUFMeta()
	seen := map[string]bool{}
	for _, kv := range meta {
		k := kv[0].(string)
		v, ok := override[k]
		seen[k] = true
		switch {
		case !ok:
			g.kv(k, kv[1])
		case v != nil:
			g.kv(k, v)
		}
	}
	for k, v := range override {
		if !seen[k] && v != nil {
			g.kv(k, v)
		}
	}
	f32 := func(n int) []byte {
		b := make([]byte, 4*n)
		for i := range n {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(i%7)/8-0.25))
		}
		return b
	}
	f16 := func(n int) []byte {
		b := make([]byte, 2*n)
		for i := range n {
			binary.LittleEndian.PutUint16(b[2*i:], 0x3800+uint16(i%5)) // about 0.5
		}
		return b
	}
	h, q, kv, in := smallHidden, smallHeads*smallHeadDim, smallKV*smallHeadDim, smallInter
	g.tensor("token_embd.weight", ggmlF32, []int{smallVocab, h}, f32(smallVocab*h))
	g.tensor("output_norm.weight", ggmlF32, []int{h}, f32(h))
	g.tensor("output.weight", ggmlF32, []int{smallVocab, h}, f32(smallVocab*h))
	g.tensor("blk.0.attn_norm.weight", ggmlF32, []int{h}, f32(h))
	g.tensor("blk.0.ffn_norm.weight", ggmlF32, []int{h}, f32(h))
	g.tensor("blk.0.attn_q.weight", ggmlF32, []int{q, h}, f32(q*h))
	g.tensor("blk.0.attn_k.weight", ggmlF32, []int{kv, h}, f32(kv*h))
	g.tensor("blk.0.attn_v.weight", ggmlF32, []int{kv, h}, f32(kv*h))
	g.tensor("blk.0.attn_output.weight", ggmlF32, []int{h, q}, f32(h*q))
	g.tensor("blk.0.ffn_gate.weight", ggmlF16, []int{in, h}, f16(in*h))
	g.tensor("blk.0.ffn_up.weight", ggmlF16, []int{in, h}, f16(in*h))
	down := make([]byte, h*18) // one Q4_0 block per row: an f16 scale and 16 bytes of nibbles
	for r := range h {
		binary.LittleEndian.PutUint16(down[18*r:], 0x2c00) // 1/16
		for j := 2; j < 18; j++ {
			down[18*r+j] = byte(r*31 + j*17)
		}
	}
	g.tensor("blk.0.ffn_down.weight", ggmlQ4_0, []int{h, in}, down)
	return g.bytes()
}

func TestSmallGGUFLoads(t *testing.T) {
	b := smallGGUF(nil)
	require.Less(t, len(b), 3<<10)
	ck := &Checkpoint{Dir: "small.gguf"}
	require.NoError(t, ck.loadGGUF("small.gguf", b, false))
	defer ck.Close()
	c := ck.Config
	require.Equal(t, []int{smallHidden, smallHeadDim, smallVocab, 1}, []int{c.HiddenSize, c.HeadDim, c.VocabSize, c.NumLayers})
	require.Equal(t, []int32{1}, c.EOSTokenIDs)
	down, err := ck.Tensor("model.layers.0.mlp.down_proj.weight")
	require.NoError(t, err)
	require.Equal(t, []int{smallHidden, smallInter}, down.Shape)
	require.NotZero(t, down.Data[4:8], "the Q4_0 tensor was dequantized")
}

// TestGGUFRefusesAbsurdMetadata: each hostile value is refused with an error naming its key,
// before anything is allocated for it.
func TestGGUFRefusesAbsurdMetadata(t *testing.T) {
	nan := float32(math.NaN())
	cases := []struct {
		name     string
		override map[string]any
		want     string
	}{
		{"block count", map[string]any{"llama.block_count": uint32(1e9)}, "metadata llama.block_count = 1000000000: exceeds 1024"},
		{"block count negative", map[string]any{"llama.block_count": int32(-1)}, "metadata llama.block_count = -1: must be positive"},
		{"block count uint64", map[string]any{"llama.block_count": uint64(1 << 40)}, "llama.block_count: want a (32-bit range) integer"},
		{"block count float", map[string]any{"llama.block_count": float32(2)}, "llama.block_count: want a (32-bit range) integer"},
		{"embedding length", map[string]any{"llama.embedding_length": uint32(1e9)}, "metadata llama.embedding_length = 1000000000: exceeds 65536"},
		{"embedding disagrees", map[string]any{"llama.embedding_length": uint32(8), "llama.attention.key_length": uint32(2)},
			"tensor token_embd.weight: shape [8 4] (rows, cols) does not fit metadata llama.embedding_length = 8"},
		{"feed forward", map[string]any{"llama.feed_forward_length": uint32(1 << 30)}, "metadata llama.feed_forward_length = 1073741824: exceeds 1048576"},
		{"feed forward disagrees", map[string]any{"llama.feed_forward_length": uint32(64)},
			"tensor model.layers.0.mlp.gate_proj.weight has shape [32 4], the config implies [64 4] (blk.0.ffn_gate.weight in the file)"},
		{"heads", map[string]any{"llama.attention.head_count": uint32(1e9)}, "metadata llama.attention.head_count = 1000000000: exceeds 1024"},
		{"kv heads", map[string]any{"llama.attention.head_count_kv": uint32(1e9)}, "metadata llama.attention.head_count_kv = 1000000000: exceeds 1024"},
		{"kv heads zero", map[string]any{"llama.attention.head_count_kv": uint32(0)}, "metadata llama.attention.head_count_kv = 0: must be positive"},
		{"kv above heads", map[string]any{"llama.attention.head_count_kv": uint32(4)},
			"metadata llama.attention.head_count 2 is not a multiple of metadata llama.attention.head_count_kv 4"},
		{"key length", map[string]any{"llama.attention.key_length": uint32(1e9)}, "metadata llama.attention.key_length = 1000000000: exceeds 1024"},
		{"rotary dims", map[string]any{"llama.rope.dimension_count": uint32(1e9)}, "metadata llama.rope.dimension_count = 1000000000: want 1 to the head dim 2"},
		{"context", map[string]any{"llama.context_length": uint32(1e9)}, "metadata llama.context_length = 1000000000: exceeds 16777216"},
		{"sliding window", map[string]any{"llama.attention.sliding_window": int32(-8)}, "metadata llama.attention.sliding_window = -8: must be at least 0"},
		{"eps NaN", map[string]any{"llama.attention.layer_norm_rms_epsilon": nan}, "metadata llama.attention.layer_norm_rms_epsilon = NaN"},
		{"eps zero", map[string]any{"llama.attention.layer_norm_rms_epsilon": float32(0)}, "metadata llama.attention.layer_norm_rms_epsilon = 0: want a finite value in (0, 0.1]"},
		{"eps missing", map[string]any{"llama.attention.layer_norm_rms_epsilon": nil}, "metadata llama.attention.layer_norm_rms_epsilon is missing"},
		{"theta Inf", map[string]any{"llama.rope.freq_base": float32(math.Inf(1))}, "metadata llama.rope.freq_base = +Inf"},
		{"theta negative", map[string]any{"llama.rope.freq_base": float64(-1)}, "metadata llama.rope.freq_base = -1"},
		{"linear factor NaN", map[string]any{"llama.rope.scale_linear": nan}, "metadata llama.rope.scale_linear = NaN"},
		{"linear factor negative", map[string]any{"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": float32(-2)},
			"metadata llama.rope.scaling.factor = -2"},
		{"yarn beta", map[string]any{"llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": float32(4),
			"llama.rope.scaling.yarn_beta_fast": float32(math.Inf(-1))}, "metadata llama.rope.scaling.yarn_beta_fast = -Inf"},
		{"yarn original context", map[string]any{"llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": float32(4),
			"llama.rope.scaling.original_context_length": float64(1e300)}, "metadata llama.rope.scaling.original_context_length = 1e+300"},
		{"scaling type", map[string]any{"llama.rope.scaling.type": "longrope"}, `scaling.type "longrope" is not supported`},
		{"eos outside vocab", map[string]any{"tokenizer.ggml.eos_token_id": uint32(8)}, "eos_token_id = 8: outside the vocabulary [0, 8)"},
		{"eot beyond int32", map[string]any{"tokenizer.ggml.eot_token_id": uint32(0xfffffff0)}, "metadata tokenizer.ggml.eot_token_id = 4294967280: outside the vocabulary"},
		{"bos outside vocab", map[string]any{"tokenizer.ggml.bos_token_id": uint32(1e9)}, "bos_token_id = 1000000000: outside the vocabulary"},
		{"more tokens than rows", map[string]any{"tokenizer.ggml.tokens": []string{"a", "b", "c", "d", "e", "f", "g", "h", "i"}},
			"metadata tokenizer.ggml.tokens has 9 entries but token_embd.weight has 8 rows"},
		{"vocab disagrees", map[string]any{"llama.vocab_size": uint32(1e9)}, "metadata llama.vocab_size = 1000000000 but token_embd.weight has 8 rows"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := smallGGUF(tc.override)
			var err error
			ck := &Checkpoint{Dir: "bad.gguf"}
			n := allocated(func() { err = ck.loadGGUF("bad.gguf", b, false) })
			require.Empty(t, ck.owned, "nothing may be converted for a refused file")
			ck.Close()
			require.ErrorContains(t, err, "bad.gguf: ")
			require.ErrorContains(t, err, tc.want)
			require.Less(t, n, uint64(smallAlloc), "refusing the file allocated %d bytes", n)
		})
	}
}
