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

// TestAsyncSchedulingOnGPU: decode steps scheduled ahead (each graph replay fed on the device
// with the previous step's draw) produce the tokens and logprobs of steps read one at a time
// (--no-async-scheduling). All requests run together for the same number of tokens, so both
// engines replay the same batches; greedy and seeded requests (two choices each) mix.
func TestAsyncSchedulingOnGPU(t *testing.T) {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 13))
	var reqs []Request
	for i := range 5 {
		var p []int32
		for j := 0; j < 4+rng.IntN(40); j++ {
			p = append(p, int32(rng.IntN(384)))
		}
		params := greedy(24)
		if i%2 == 1 {
			params = seededParams(int64(i), 24)
			params.N = 2
		}
		reqs = append(reqs, Request{ID: fmt.Sprint(i), PromptIDs: p, Params: params})
	}
	mk := func(noAsync bool) *Engine {
		return newTestEngine(t, "qwen3-bf16", func(c *Config) {
			c.Device, c.NumKVBlocks, c.MaxModelLen, c.NoAsyncScheduling = "gpu", 256, 256, noAsync
		})
	}
	sync, async := mk(true), mk(false)
	want, got := runAll(t, sync, reqs), runAll(t, async, reqs)
	for i := range want {
		require.Equal(t, len(want[i]), len(got[i]))
		for c := range want[i] {
			require.Equal(t, want[i][c].TokenIDs, got[i][c].TokenIDs, "request %d choice %d", i, c)
			for j := range want[i][c].Logprobs {
				require.InDelta(t, want[i][c].Logprobs[j].Logprob, got[i][c].Logprobs[j].Logprob, 1e-4, "request %d choice %d token %d", i, c, j)
			}
		}
	}
	require.Zero(t, fedSteps(sync))
	require.Greater(t, fedSteps(async), int64(15), "decode steps were fed on the device")
	fmt.Printf("async scheduling: %d requests equal to step-by-step reads, %d fed steps\n", len(reqs), fedSteps(async))
}
