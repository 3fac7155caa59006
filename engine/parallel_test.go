package engine

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTensorParallelEngine: the engine at --tensor-parallel-size 2 and 4 on the cpu backend
// gives TP=1's greedy tokens and logprobs.
func TestTensorParallelEngine(t *testing.T) {
	for _, model := range []string{"qwen3-bf16", "llama3-rope-f32"} {
		prompts := mixedPrompts(6, 11)
		run := func(tp int) []Output {
			e := newTestEngine(t, model, func(c *Config) { c.TensorParallelSize = tp })
			outs := make([]Output, len(prompts))
			for i, p := range prompts {
				params := greedy(6)
				params.Logprobs = 3
				outs[i] = collect(t, e, Request{ID: fmt.Sprint(i), PromptIDs: p, Params: params})
			}
			return outs
		}
		want := run(1)
		for _, tp := range []int{2, 4} {
			got := run(tp)
			for i := range want {
				require.Equal(t, want[i].TokenIDs, got[i].TokenIDs, "%s tp=%d request %d", model, tp, i)
				for j := range want[i].Logprobs {
					require.InDelta(t, want[i].Logprobs[j].Logprob, got[i].Logprobs[j].Logprob, 2e-4)
				}
			}
		}
	}
}
