//go:build gpu

package engine

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDeviceSamplingOnGPU: greedy generation sampled on the device (atomk_sample_rows) gives
// the host sampler's tokens and logprobs, with decode graphs and with --enforce-eager. Requests
// run one at a time so both engines see the same batches (hence the same logits).
func TestDeviceSamplingOnGPU(t *testing.T) {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 12))
	prompts := make([][]int32, 4)
	for i := range prompts {
		for j := 0; j < 4+rng.IntN(30); j++ {
			prompts[i] = append(prompts[i], int32(rng.IntN(384)))
		}
	}
	for _, eager := range []bool{false, true} {
		t.Run(fmt.Sprint("eager=", eager), func(t *testing.T) {
			mk := func(device bool) *Engine {
				e := newTestEngine(t, "qwen3-bf16", func(c *Config) {
					c.Device, c.EnforceEager, c.NumKVBlocks, c.MaxModelLen = "gpu", eager, 256, 256
				})
				var had bool
				require.True(t, e.call(func() {
					had = e.runner.DeviceSampling()
					if !device {
						e.runner.sampler = nil
					}
				}))
				require.True(t, had, "the gpu backend samples on the device")
				return e
			}
			dev, host := mk(true), mk(false)
			for i, p := range prompts {
				params := greedy(16)
				want := collect(t, host, Request{ID: "h", PromptIDs: p, Params: params})
				got := collect(t, dev, Request{ID: "d", PromptIDs: p, Params: params})
				require.Equal(t, want.TokenIDs, got.TokenIDs, "prompt %d", i)
				for j := range want.Logprobs {
					require.InDelta(t, want.Logprobs[j].Logprob, got.Logprobs[j].Logprob, 1e-3, "prompt %d token %d", i, j)
				}
			}
			graphSteps, _ := dev.runner.StepCounts()
			if !eager {
				require.Positive(t, graphSteps, "decode steps replayed graphs before sampling")
			}
			// A seeded sampled request reproduces on the device.
			s1 := collect(t, dev, Request{ID: "s1", PromptIDs: prompts[0], Params: seededParams(9, 16)})
			s2 := collect(t, dev, Request{ID: "s2", PromptIDs: prompts[0], Params: seededParams(9, 16)})
			require.Equal(t, s1.TokenIDs, s2.TokenIDs)
			fmt.Printf("device sampling eager=%v: %d prompts equal to the host sampler, %d graph steps\n", eager, len(prompts), graphSteps)
		})
	}
}
