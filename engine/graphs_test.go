package engine

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// On the cpu backend there are no graphs: capture is a no-op and every step is eager.
func TestGraphsAreAGPUFeature(t *testing.T) {
	e := newTestEngine(t, "qwen3-bf16", nil)
	require.Nil(t, e.runner.GraphSizes())
	require.NoError(t, e.runner.CaptureGraphs([]int{1, 2, 4}, 64))
	require.Nil(t, e.runner.GraphSizes())
	out, err := run1(e, Request{ID: "a", PromptIDs: []int32{1, 2, 3}, Params: greedy(4)})
	require.NoError(t, err)
	require.Len(t, out.TokenIDs, 4)
	graph, eager := e.runner.StepCounts()
	require.Zero(t, graph)
	require.Positive(t, eager)
}
