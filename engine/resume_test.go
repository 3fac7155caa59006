package engine

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOutputOffsetContinuesSeededDraws: a seeded request resumed after k outputs (its prompt
// plus those outputs, with OutputOffset k) continues with the tokens of the uninterrupted run,
// on the host sampler and on the device sampler; without the offset it does not.
func TestOutputOffsetContinuesSeededDraws(t *testing.T) {
	prompt := mixedPrompts(1, 31)[0]
	for _, device := range []bool{false, true} {
		name := map[bool]string{false: "host", true: "device"}[device]
		t.Run(name, func(t *testing.T) {
			e := newTestEngine(t, "qwen3-bf16", nil)
			if device {
				f := withFakeSampler(t, e)
				defer func() { require.Positive(t, f.served(e)) }()
			}
			const n = 12
			full := collect(t, e, Request{ID: "full", PromptIDs: prompt, Params: seededParams(9, n)}).TokenIDs
			require.Len(t, full, n)
			for _, k := range []int{1, 5, n - 1} {
				hist := append(append([]int32{}, prompt...), full[:k]...)
				got := collect(t, e, Request{ID: "resumed", PromptIDs: hist, Params: seededParams(9, n-k), OutputOffset: k})
				require.Equal(t, full[k:], got.TokenIDs, "resumed after %d outputs", k)
			}
			hist := append(append([]int32{}, prompt...), full[:5]...)
			got := collect(t, e, Request{ID: "restarted", PromptIDs: hist, Params: seededParams(9, n-5)})
			require.NotEqual(t, full[5:], got.TokenIDs, "a fresh stream draws other tokens")
		})
	}
}

func TestOutputOffsetRefused(t *testing.T) {
	e := newTestEngine(t, "llama-bf16", nil)
	two := seededParams(1, 4)
	two.N = 2
	for _, req := range []Request{
		{ID: "neg", PromptIDs: []int32{1, 2, 3}, Params: greedy(2), OutputOffset: -1},
		{ID: "all", PromptIDs: []int32{1, 2, 3}, Params: greedy(2), OutputOffset: 3},
		{ID: "n2", PromptIDs: []int32{1, 2, 3}, Params: two, OutputOffset: 1},
	} {
		_, err := e.Generate(req)
		require.ErrorIs(t, err, ErrInvalidRequest, req.ID)
	}
}

// TestHostOutputOffset: in host mode a request recomputed with output_offset k counts its last
// k prompt ids as outputs: its seeded draws continue (the uninterrupted run's tokens), and the
// host's count of output tokens includes them.
func TestHostOutputOffset(t *testing.T) {
	prompt := mixedPrompts(1, 32)[0]
	e := newTestEngine(t, "qwen3-bf16", nil)
	h := newHostSession(t, e)
	const n = 10
	full := hostRun(t, h, "full", prompt, 0, n)
	k := 4
	hist := append(append([]int32{}, prompt...), full[:k]...)
	got := hostRun(t, h, "resumed", hist, k, n-k)
	require.Equal(t, full[k:], got)
	_, err := h.Execute(&HostStep{New: []HostNewRequest{{ID: "bad", PromptIDs: prompt, Params: seededParams(9, 0),
		BlockIDs: []int32{1}, OutputOffset: len(prompt)}}, NumScheduled: map[string]int{"bad": 1}})
	require.ErrorIs(t, err, ErrInvalidRequest)
}

// hostRun drives one seeded request through a host session, a prefill then one decode a step
// (the host counting outputs from offset), and returns the n tokens sampled.
func hostRun(t *testing.T, h *HostSession, id string, prompt []int32, offset, n int) []int32 {
	t.Helper()
	bs := h.BlockSize()
	blocks := make([]int32, (len(prompt)+n+bs-1)/bs)
	for i := range blocks {
		blocks[i] = int32(i + 1)
	}
	step := &HostStep{New: []HostNewRequest{{ID: id, PromptIDs: prompt, Params: seededParams(9, 0), BlockIDs: blocks,
		OutputOffset: offset}}, NumScheduled: map[string]int{id: len(prompt)}}
	var out []int32
	for len(out) < n {
		res, err := h.Execute(step)
		require.NoError(t, err)
		require.Len(t, res.Sampled[0], 1)
		out = append(out, res.Sampled[0][0])
		step = &HostStep{Cached: []HostCachedRequest{{ID: id, NumComputed: len(prompt) + len(out) - 1,
			NumOutput: offset + len(out)}}, NumScheduled: map[string]int{id: 1}}
	}
	_, err := h.Execute(&HostStep{Finished: []string{id}})
	require.NoError(t, err)
	return out
}
