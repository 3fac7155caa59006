package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/engine/tokenizer"
)

// smolLM2GGUF is where testdata/gguf/fetch.sh puts SmolLM2-135M-Instruct Q4_1 (git-ignored).
const smolLM2GGUF = "../testdata/external/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

const (
	// ggufLogprobTol bounds |engine - reference| for a log-probability. Both sides run the
	// same dequantized float32 weights, so only float32 rounding (summation order) separates
	// them: about 2e-5 was measured, so 1e-3 leaves ample room while still catching a
	// subtly wrong kernel or weight conversion.
	ggufLogprobTol = 1e-3
	// ggufMinMargin is the top-1/top-2 gap below which a greedy step counts as a tie: the
	// comparison of a continuation stops there, as either token is legitimate.
	ggufMinMargin = 0.05
)

// ggufRefCase is one prompt of testdata/gguf/smollm2_reference.json (make_reference.py).
type ggufRefCase struct {
	Name        string    `json:"name"`
	Text        string    `json:"text"`
	IDs         []int32   `json:"ids"`
	TopIDs      []int32   `json:"top_ids"`
	TopLogprobs []float64 `json:"top_logprobs"`
	Greedy      []struct {
		Token   int32   `json:"token"`
		Logprob float64 `json:"logprob"`
		Margin  float64 `json:"margin"`
	} `json:"greedy"`
	GreedyText string              `json:"greedy_text"`
	Messages   []tokenizer.Message `json:"messages"`
}

type ggufRef struct {
	TopK  int           `json:"top_k"`
	Texts []ggufRefCase `json:"texts"`
	Chats []ggufRefCase `json:"chats"`
}

// requireSmolLM2GGUF skips when the model is absent locally; on CI (CI set) it must be there.
func requireSmolLM2GGUF(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(smolLM2GGUF); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is missing in CI: run testdata/gguf/fetch.sh", smolLM2GGUF)
		}
		t.Skipf("%s absent: run testdata/gguf/fetch.sh", smolLM2GGUF)
	}
}

// TestSmolLM2GGUFEngine serves SmolLM2-135M-Instruct straight from its Q4_1 GGUF file (model
// and tokenizer both from the file) and compares it with transformers' float32 run of the same
// file: token ids, top-20 next-token log-probabilities, greedy continuations, and a chat answer.
func TestSmolLM2GGUFEngine(t *testing.T) {
	requireSmolLM2GGUF(t)
	data, err := os.ReadFile(filepath.Join("..", "testdata", "gguf", "smollm2_reference.json"))
	require.NoError(t, err)
	var ref ggufRef
	require.NoError(t, json.Unmarshal(data, &ref))
	require.Equal(t, MaxLogprobs, ref.TopK)
	require.NotEmpty(t, ref.Texts)
	require.NotEmpty(t, ref.Chats)

	cfg := DefaultConfig()
	cfg.Model = smolLM2GGUF
	// The exact path: the reference is transformers' float32 run, which the quantized kernels
	// (the default, --cpu-weights blocks) only approximate (models' TestSmolLM2BlocksAgainstFloat32).
	cfg.CPUWeights = "float32"
	cfg.MaxNumBatchedTokens = 256
	cfg.MaxNumSeqs = 16
	cfg.KVCacheMemory = 32 << 20
	start := time.Now()
	e, err := New(cfg, quiet)
	require.NoError(t, err)
	t.Cleanup(e.Close)
	t.Logf("engine ready in %v (open, dequantize, tokenizer from GGUF metadata)", time.Since(start))
	tok := e.Tokenizer()
	require.NotNil(t, tok, "the GGUF's tokenizer was not loaded")
	eos, ok := tok.EOSTokenID()
	require.True(t, ok)
	require.Equal(t, int32(2), eos) // <|im_end|>

	t.Run("token_ids", func(t *testing.T) {
		for _, c := range ref.Texts {
			got, err := tok.Encode(c.Text, true)
			require.NoError(t, err)
			require.Equal(t, c.IDs, got, "%s: %q", c.Name, c.Text)
			require.Equal(t, c.Text, tok.Decode(got, false), c.Name)
		}
		for _, c := range ref.Chats {
			text, err := tok.ApplyChatTemplate(c.Messages, true)
			require.NoError(t, err)
			require.Equal(t, c.Text, text, c.Name)
			got, err := tok.Encode(text, false)
			require.NoError(t, err)
			require.Equal(t, c.IDs, got, c.Name)
		}
	})

	t.Run("logprobs", func(t *testing.T) {
		cases := append(append([]ggufRefCase{}, ref.Texts...), ref.Chats...)
		// Submit every case before the first step, so the engine batches them.
		reqs := make([]Request, len(cases))
		for i, c := range cases {
			p := greedy(len(c.Greedy))
			p.Logprobs = MaxLogprobs
			reqs[i] = Request{ID: fmt.Sprintf("gguf-%d", i), PromptIDs: c.IDs, Params: p}
		}
		streams := submitAll(t, e, reqs)
		worst := 0.0
		for i, c := range cases {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			outs, err := streams[i].Collect(ctx)
			cancel()
			require.NoError(t, err)
			require.Len(t, outs, 1)
			out := outs[0]
			require.Len(t, out.Logprobs, len(c.Greedy), c.Name)
			first := out.Logprobs[0]
			worst = math.Max(worst, compareTopLogprobs(t, c.Name, c.TopIDs, c.TopLogprobs, first.TopIDs, first.TopLogprobs))
			for si, st := range c.Greedy {
				if st.Margin <= ggufMinMargin {
					break // a near tie: from here both continuations are legitimate
				}
				require.Equal(t, st.Token, out.TokenIDs[si], "%s step %d", c.Name, si)
				d := math.Abs(st.Logprob - float64(out.Logprobs[si].Logprob))
				require.LessOrEqual(t, d, ggufLogprobTol, "%s step %d logprob", c.Name, si)
				worst = math.Max(worst, d)
			}
		}
		t.Logf("largest |engine - transformers| log-probability difference: %.2g", worst)
	})

	t.Run("chat_answer", func(t *testing.T) {
		text, err := tok.ApplyChatTemplate([]tokenizer.Message{{Role: "user", Content: "What is the capital of France?"}}, true)
		require.NoError(t, err)
		ids, err := tok.Encode(text, false)
		require.NoError(t, err)
		p := greedy(32)
		p.IgnoreEOS = false
		out := collect(t, e, Request{ID: "paris", PromptIDs: ids, Params: p})
		t.Logf("answer: %q (%s)", out.Text, out.FinishReason)
		require.Contains(t, out.Text, "Paris")
		require.Equal(t, "stop", out.FinishReason)
	})

	t.Run("throughput", func(t *testing.T) {
		const n = 32
		ids, err := tok.Encode("Once upon a time, in a small village by the sea,", true)
		require.NoError(t, err)
		start := time.Now()
		out := collect(t, e, Request{ID: "speed", PromptIDs: ids, Params: greedy(n)})
		elapsed := time.Since(start)
		require.Len(t, out.TokenIDs, n)
		t.Logf("%d prompt + %d generated tokens in %v: %.1f tokens/s", len(ids), n, elapsed, n/elapsed.Seconds())
	})
}

// compareTopLogprobs checks the engine's top-k against the reference's and returns the
// largest difference. Ranks may swap between near-equal entries, so values are compared
// rank by rank and ids through their values: an id in both lists must agree within the
// tolerance, and an id in only one must sit at the cut-off of the other.
func compareTopLogprobs(t *testing.T, name string, refIDs []int32, refLP []float64, ids []int32, lp []float32) float64 {
	t.Helper()
	require.Len(t, ids, len(refIDs), name)
	require.Len(t, lp, len(refLP), name)
	worst := 0.0
	refByID := map[int32]float64{}
	for k, id := range refIDs {
		refByID[id] = refLP[k]
		d := math.Abs(refLP[k] - float64(lp[k]))
		require.LessOrEqual(t, d, ggufLogprobTol, "%s rank %d: reference %.5f, engine %.5f", name, k, refLP[k], lp[k])
		worst = math.Max(worst, d)
	}
	last := refLP[len(refLP)-1]
	for k, id := range ids {
		want, ok := refByID[id]
		if !ok {
			require.LessOrEqual(t, float64(lp[k]), last+ggufLogprobTol, "%s: engine's rank %d (id %d) is not in the reference's top-%d", name, k, id, len(refIDs))
			continue
		}
		require.InDelta(t, want, float64(lp[k]), ggufLogprobTol, "%s: id %d", name, id)
	}
	return worst
}
