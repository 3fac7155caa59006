package engine

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// TestInjectedDeviceFault: after InjectDeviceFault (simulated on the cpu backend) the next step
// fails with ops.ErrDeviceLost, OnDeviceLost is told once per failed step, and the device stays
// lost; the steps before the fault are untouched. Both ways of driving the engine: Generate and
// a host session.
func TestInjectedDeviceFault(t *testing.T) {
	prompt := mixedPrompts(1, 5)[0]
	for _, mode := range []string{"generate", "host"} {
		t.Run(mode, func(t *testing.T) {
			e := newTestEngine(t, "llama-bf16", nil)
			var told []error // appended on the loop before the step's error reaches the test
			require.True(t, e.OnDeviceLost(func(err error) { told = append(told, err) }))
			var h *HostSession
			if mode == "host" {
				h = newHostSession(t, e)
			}
			next := int32(1)
			step := func(id string) error {
				if h == nil {
					_, err := run1(e, Request{ID: id, PromptIDs: prompt, Params: greedy(3)})
					return err
				}
				blocks := make([]int32, len(prompt)/h.BlockSize()+1)
				for i := range blocks {
					blocks[i], next = next, next+1
				}
				_, err := h.Execute(&HostStep{New: []HostNewRequest{{ID: id, PromptIDs: prompt, Params: greedy(3),
					BlockIDs: blocks}}, NumScheduled: map[string]int{id: len(prompt)}})
				return err
			}
			require.NoError(t, step("before"))
			require.Empty(t, told)
			require.NoError(t, e.InjectDeviceFault())
			for i, id := range []string{"after", "again"} {
				err := step(id)
				require.ErrorIs(t, err, ops.ErrDeviceLost, id)
				require.Len(t, told, i+1, id)
				require.ErrorIs(t, told[i], ops.ErrDeviceLost)
				require.ErrorContains(t, told[i], "injected fault, simulated on the cpu backend")
			}
		})
	}
}
