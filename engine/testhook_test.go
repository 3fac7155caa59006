package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// submitAll admits every request before the engine's next step, whatever the goroutine
// scheduling, so that they share batches from the first step on.
func submitAll(t *testing.T, e *Engine, reqs []Request) []*Stream {
	t.Helper()
	gate := e.HoldSteps()
	require.NotNil(t, gate)
	defer gate.Open()
	streams := make([]*Stream, len(reqs))
	for i, r := range reqs {
		st, err := e.Generate(r)
		require.NoError(t, err)
		streams[i] = st
	}
	return streams
}

// unread counts the outputs st holds that were not read yet.
func unread(st *Stream) int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.pending)
}

func steps(e *Engine) int64 { return e.Stats().Steps }

// TestStepGate: a held loop runs no step yet applies commands; Step runs exactly one step and
// returns with its outputs delivered; Wait sees a state reached by a step; Open lets the loop go.
func TestStepGate(t *testing.T) {
	e := newTestEngine(t, "llama-bf16", nil)
	gate := e.HoldSteps()
	st, err := e.Generate(Request{ID: "a", PromptIDs: []int32{1, 2, 3}, Params: greedy(4)})
	require.NoError(t, err)
	s := e.Stats()
	require.Equal(t, 1, s.Waiting+s.Running, "admitted while the loop is held")
	require.Zero(t, s.Steps, "no step while held")

	for i := 1; i <= 3; i++ {
		require.True(t, gate.Step())
		require.Equal(t, int64(i), steps(e), "one step per Step")
		require.Equal(t, 1, unread(st), "the step's token is delivered when Step returns")
		outs, err := st.Next(context.Background())
		require.NoError(t, err)
		require.Len(t, outs, 1)
		require.False(t, outs[0].Finished)
	}

	// Wait is notified by the step that ends the request, run after Open.
	done := make(chan bool)
	go func() { done <- gate.Wait(func(s Stats) bool { return s.NumRequests == 0 }) }()
	require.True(t, gate.Wait(func(s Stats) bool { return s.Steps == 3 }), "a condition that holds returns at once")
	gate.Open()
	require.True(t, <-done)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	outs, err := st.Collect(ctx)
	require.NoError(t, err)
	require.Equal(t, "length", outs[0].FinishReason)
	require.False(t, gate.Step(), "nothing to run")

	// A held request can be aborted at the gate; Close does not wait for the gate.
	gate = e.HoldSteps()
	st, err = e.Generate(Request{ID: "b", PromptIDs: []int32{1, 2, 3}, Params: greedy(4)})
	require.NoError(t, err)
	st.Cancel()
	require.True(t, gate.Wait(func(s Stats) bool { return s.Running+s.Waiting == 0 && s.KVBlocksUsed == 0 }))
	require.Equal(t, int64(4), steps(e), "the aborted request never stepped")
	require.False(t, gate.Step())
	_, err = e.Generate(Request{ID: "c", PromptIDs: []int32{1, 2, 3}, Params: greedy(4)})
	require.NoError(t, err)
	e.Close()
	require.False(t, gate.Wait(func(Stats) bool { return false }))
	require.False(t, gate.Step())
}
