package models

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// kquantGGUF writes a 2-layer llama GGUF (hidden 256, 4 heads of 64, 2 KV heads, MLP 512,
// vocabulary 64) whose every linear weight, the output head included, is random blocks of
// typ with scales in a trained model's range; the embedding and norms are float32.
func kquantGGUF(t *testing.T, typ ggmlType, path string) {
	const hidden, heads, kvHeads, hd, inter, vocab, layers = 256, 4, 2, 64, 512, 64, 2
	rng := rand.New(rand.NewPCG(uint64(typ), 3))
	info := ggmlTypes[typ]
	g := &ggufBuilder{align: 32}
	g.kv("general.architecture", "llama")
	for key, v := range map[string]int{"context_length": 128, "embedding_length": hidden, "feed_forward_length": inter,
		"block_count": layers, "attention.head_count": heads, "attention.head_count_kv": kvHeads,
		"rope.dimension_count": hd} {
		g.kv("llama."+key, uint32(v))
	}
	g.kv("llama.attention.layer_norm_rms_epsilon", float32(1e-5))
	g.kv("llama.rope.freq_base", float32(10000))
	g.kv("tokenizer.ggml.model", "gpt2")
	tokens := make([]string, vocab)
	for i := range tokens {
		tokens[i] = fmt.Sprintf("<%d>", i)
	}
	g.kv("tokenizer.ggml.tokens", tokens)
	g.kv("tokenizer.ggml.bos_token_id", uint32(0))
	g.kv("tokenizer.ggml.eos_token_id", uint32(1))
	f32 := func(n int, scale, offset float64) []byte {
		b := make([]byte, 4*n)
		for i := range n {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(offset+scale*rng.NormFloat64())))
		}
		return b
	}
	half := func(v float64) uint16 { return toF16(float32(v)) }
	blocks := func(rows, cols int) []byte {
		n := rows * cols / info.block
		b := make([]byte, n*info.size)
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		for k := range n {
			blk := b[k*info.size : (k+1)*info.size]
			switch typ {
			case ggmlQ5_0:
				binary.LittleEndian.PutUint16(blk, half(0.006))
			case ggmlQ5_1:
				binary.LittleEndian.PutUint16(blk, half(0.006))
				binary.LittleEndian.PutUint16(blk[2:], half(-0.09))
			case ggmlQ4_K: // times 6-bit scales and mins (up to 63)
				binary.LittleEndian.PutUint16(blk, half(0.0006))
				binary.LittleEndian.PutUint16(blk[2:], half(0.002))
			case ggmlQ5_K:
				binary.LittleEndian.PutUint16(blk, half(0.0003))
				binary.LittleEndian.PutUint16(blk[2:], half(0.002))
			case ggmlQ6_K:
				binary.LittleEndian.PutUint16(blk[208:], half(0.00005))
			}
		}
		return b
	}
	g.tensor("token_embd.weight", ggmlF32, []int{vocab, hidden}, f32(vocab*hidden, 1, 0))
	g.tensor("output_norm.weight", ggmlF32, []int{hidden}, f32(hidden, 0.05, 1))
	g.tensor("output.weight", typ, []int{vocab, hidden}, blocks(vocab, hidden))
	for l := range layers {
		p := fmt.Sprintf("blk.%d.", l)
		g.tensor(p+"attn_norm.weight", ggmlF32, []int{hidden}, f32(hidden, 0.05, 1))
		g.tensor(p+"ffn_norm.weight", ggmlF32, []int{hidden}, f32(hidden, 0.05, 1))
		g.tensor(p+"attn_q.weight", typ, []int{heads * hd, hidden}, blocks(heads*hd, hidden))
		g.tensor(p+"attn_k.weight", typ, []int{kvHeads * hd, hidden}, blocks(kvHeads*hd, hidden))
		g.tensor(p+"attn_v.weight", typ, []int{kvHeads * hd, hidden}, blocks(kvHeads*hd, hidden))
		g.tensor(p+"attn_output.weight", typ, []int{hidden, heads * hd}, blocks(hidden, heads*hd))
		g.tensor(p+"ffn_gate.weight", typ, []int{inter, hidden}, blocks(inter, hidden))
		g.tensor(p+"ffn_up.weight", typ, []int{inter, hidden}, blocks(inter, hidden))
		g.tensor(p+"ffn_down.weight", typ, []int{hidden, inter}, blocks(hidden, inter))
	}
	require.NoError(t, os.WriteFile(path, g.bytes(), 0o644))
}

// kquantBlocksLogprobTol bounds |blocks - float32| log-probability on the random K-quant and
// 5-bit models of TestKQuantBlocksAgainstFloat32: 8-bit activations through 2 layers move a
// top-10 logprob there by up to about 0.05 (Q6_K; 0.02-0.03 for the others).
const kquantBlocksLogprobTol = 0.1

// TestKQuantBlocksAgainstFloat32 states the error of the 5-bit and K-quant block kernels
// against the exact float32 path (the same file dequantized at load) on a 2-layer model of each
// type: the top-10 log-probabilities within kquantBlocksLogprobTol at every position of a
// prompt, and the same greedy token wherever the float32 path's top two are not nearly tied.
func TestKQuantBlocksAgainstFloat32(t *testing.T) {
	prompt := []int32{0, 5, 17, 33, 2, 60, 41, 8, 29, 13, 51, 3}
	for _, typ := range []ggmlType{ggmlQ5_0, ggmlQ5_1, ggmlQ4_K, ggmlQ5_K, ggmlQ6_K} {
		t.Run(typ.String(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m.gguf")
			kquantGGUF(t, typ, path)
			exact := ggufLogprobs(t, path, false, prompt)
			quant := ggufLogprobs(t, path, true, prompt)
			worst, agree := requireNearFloat32(t, exact, quant, kquantBlocksLogprobTol)
			t.Logf("%v: largest |blocks - float32| top-10 log-probability difference %.4g; greedy agrees at %d of %d positions", typ, worst, agree, len(prompt))
		})
	}
}
