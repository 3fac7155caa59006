package models

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops/cpu"
)

// smolLM2Path is where testdata/gguf/fetch.sh puts the real model (git-ignored).
const smolLM2Path = "../testdata/external/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

// requireSmolLM2 skips when the model is absent locally; CI must have run fetch.sh.
func requireSmolLM2(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(smolLM2Path); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is missing in CI: run testdata/gguf/fetch.sh", smolLM2Path)
		}
		t.Skipf("%s absent: run testdata/gguf/fetch.sh", smolLM2Path)
	}
}

func TestSmolLM2GGUFConfig(t *testing.T) {
	requireSmolLM2(t)
	start := time.Now()
	ck, err := OpenCheckpoint(smolLM2Path)
	require.NoError(t, err)
	defer ck.Close()
	t.Logf("opened and dequantized in %v", time.Since(start))
	c := ck.Config
	require.Equal(t, "LlamaForCausalLM", c.Architecture)
	require.Equal(t, 576, c.HiddenSize)
	require.Equal(t, 1536, c.Intermediate)
	require.Equal(t, 30, c.NumLayers)
	require.Equal(t, 9, c.NumHeads)
	require.Equal(t, 3, c.NumKVHeads)
	require.Equal(t, 64, c.HeadDim)
	require.Equal(t, 49152, c.VocabSize)
	require.Equal(t, 8192, c.MaxPositions)
	require.Equal(t, 1e-5, c.RMSNormEps)
	require.Equal(t, 100000.0, c.RoPETheta)
	require.True(t, c.TieEmbeddings)
	require.Equal(t, int32(1), c.BOSTokenID)
	require.Equal(t, []int32{2}, c.EOSTokenIDs)
	meta := ck.GGUFMetadata()
	require.Len(t, meta["tokenizer.ggml.tokens"], 49152)
	require.Len(t, meta["tokenizer.ggml.merges"], 48900)
	require.Equal(t, "gpt2", meta["tokenizer.ggml.model"])
	require.Contains(t, meta["tokenizer.chat_template"], "<|im_start|>")
	q, err := ck.Tensor("model.layers.0.self_attn.q_proj.weight")
	require.NoError(t, err)
	require.Equal(t, []int{576, 576}, q.Shape)
}

// TestSmolLM2GGUFForward runs the real model over a prompt and compares every position's
// top log-probabilities with testdata/gguf/smollm2.reference.json, which
// make_smollm2_reference.py computed llama.cpp's way: the GGUF's q/k rows as stored and
// interleaved-pair RoPE. The engine, on un-permuted rows with rotate-half RoPE, agrees only
// if the un-permutation is right (a wrong one still predicts plausible words at short range).
func TestSmolLM2GGUFForward(t *testing.T) {
	requireSmolLM2(t)
	b, err := os.ReadFile(filepath.Join(ggufTestdata, "smollm2.reference.json"))
	require.NoError(t, err)
	var ref struct {
		Prompt    []string `json:"prompt"`
		PromptIDs []int32  `json:"prompt_ids"`
		Steps     []struct {
			TopIDs      []int32   `json:"top_ids"`
			TopLogprobs []float64 `json:"top_logprobs"`
		} `json:"steps"`
	}
	require.NoError(t, json.Unmarshal(b, &ref))
	ck, err := OpenCheckpoint(smolLM2Path)
	require.NoError(t, err)
	defer ck.Close()
	vocab := ck.GGUFMetadata()["tokenizer.ggml.tokens"].([]string)
	for i, id := range ref.PromptIDs {
		require.Equal(t, ref.Prompt[i], vocab[id])
	}
	be := cpu.New(0)
	defer be.Close()
	n := len(ref.PromptIDs)
	m, err := Load(ck, be, Options{MaxTokens: 64, MaxSeqs: n})
	require.NoError(t, err)
	c := ck.Config
	const bs, blocks = 16, 4
	cache, err := be.NewKVCache(c.NumLayers, blocks, bs, c.NumKVHeads, c.HeadDim)
	require.NoError(t, err)
	h := m.Forward(ref.PromptIDs, singleSeq(0, n, bs, blocks), cache)
	rows := make([]int32, n)
	for i := range rows {
		rows[i] = int32(i)
	}
	logits := make([]float32, n*c.VocabSize)
	be.ReadRows(m.Logits(h, rows), logits)
	for i, v := range logits {
		require.False(t, math.IsNaN(float64(v)) || math.IsInf(float64(v), 0), "logit %d is %v", i, v)
	}
	for p, st := range ref.Steps {
		lp := logSoftmax(logits[p*c.VocabSize : (p+1)*c.VocabSize])
		for k, id := range st.TopIDs {
			require.InDelta(t, st.TopLogprobs[k], lp[id], 1e-3, "position %d: log-probability of %q", p, vocab[id])
		}
	}
	last := ref.Steps[n-1].TopIDs[0]
	require.Equal(t, "ĠRome", vocab[last])
}
