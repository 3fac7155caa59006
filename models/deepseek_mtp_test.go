package models

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops/cpu"
)

// TestMTPMatchesReference: DeepSeek-V3's MTP layer (testdata's deepseek_v3-bf16 carries a random
// one) reproduces make_reference.py's float32 torch computation: fed the model's final-normed
// hidden states of the first prompt and the tokens one position ahead, every position's
// top-5 logprobs and greedy token; then, token by token with its KV cache, the same rows.
func TestMTPMatchesReference(t *testing.T) {
	const dir = "../testdata/models/deepseek_v3-bf16"
	b, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	require.NoError(t, err)
	var ref struct {
		MTP struct {
			PromptIDs []int32 `json:"prompt_ids"`
			Steps     []struct {
				Token       int32     `json:"token"`
				Margin      float64   `json:"margin"`
				TopIDs      []int32   `json:"top_ids"`
				TopLogprobs []float64 `json:"top_logprobs"`
			} `json:"steps"`
		} `json:"mtp"`
	}
	require.NoError(t, json.Unmarshal(b, &ref))
	ids := ref.MTP.PromptIDs
	require.Len(t, ref.MTP.Steps, len(ids)-1)

	be := cpu.New(0)
	defer be.Close()
	ck, err := OpenCheckpoint(dir)
	require.NoError(t, err)
	defer ck.Close()
	m, err := Load(ck, be, Options{MaxTokens: 64, MaxSeqs: 8})
	require.NoError(t, err)
	mtp, err := LoadMTP(ck, be, Options{MaxTokens: 64, MaxSeqs: 8})
	require.NoError(t, err)
	require.Len(t, mtp.KVCacheSpec().Layers, 1)
	const bs, blocks = 4, 8
	vocab, hidden := ck.Config.VocabSize, ck.Config.HiddenSize
	cache, err := m.NewKVCache(blocks, bs)
	require.NoError(t, err)
	h := m.Forward(ids, singleSeq(0, len(ids), bs, blocks), cache)
	target := make([]float32, len(ids)*hidden)
	be.ReadRows(h, target)

	check := func(row int, logits []float32, how string) {
		st := ref.MTP.Steps[row]
		lp := logSoftmax(logits)
		best := 0
		for i := range lp {
			if lp[i] > lp[best] {
				best = i
			}
		}
		if st.Margin > 1e-3 {
			require.Equal(t, st.Token, int32(best), "%s: position %d greedy token", how, row)
		}
		for k, id := range st.TopIDs {
			require.InDelta(t, st.TopLogprobs[k], lp[id], 1e-3, "%s: position %d logprob of %d", how, row, id)
		}
	}

	// All positions in one pass.
	n := len(ids) - 1
	mcache, err := mtp.NewKVCache(blocks, bs)
	require.NoError(t, err)
	rows := make([]int32, n)
	for i := range rows {
		rows[i] = int32(i)
	}
	out := mtp.Forward(ids[1:], h, rows, singleSeq(0, n, bs, blocks), mcache)
	logits := make([]float32, n*vocab)
	be.ReadRows(mtp.Logits(out, rows), logits)
	for i := range n {
		check(i, logits[i*vocab:(i+1)*vocab], "one pass")
	}

	// One position at a time over its KV cache, the previous hidden state read from a host copy.
	mcache, err = mtp.NewKVCache(blocks, bs)
	require.NoError(t, err)
	prev := be.Buffer(1, hidden)
	for i := range n {
		be.WriteRows(prev, target[i*hidden:(i+1)*hidden])
		out := mtp.Forward(ids[i+1:i+2], prev, []int32{0}, singleSeq(i, 1, bs, blocks), mcache)
		be.ReadRows(mtp.Logits(out, []int32{0}), logits[:vocab])
		check(i, logits[:vocab], "step by step")
	}
	require.Equal(t, []int{1, hidden}, mtp.Hidden().Shape())

	_, err = LoadMTP(mustOpen(t, "../testdata/models/llama-bf16"), be, Options{MaxTokens: 8, MaxSeqs: 1})
	require.ErrorIs(t, err, ErrNoMTP)
	_, err = LoadMTP(mustOpen(t, "../testdata/models/deepseek_v2-bf16"), be, Options{MaxTokens: 8, MaxSeqs: 1})
	require.ErrorIs(t, err, ErrNoMTP)
}

func mustOpen(t *testing.T, dir string) *Checkpoint {
	t.Helper()
	ck, err := OpenCheckpoint(dir)
	require.NoError(t, err)
	t.Cleanup(func() { ck.Close() })
	return ck
}
