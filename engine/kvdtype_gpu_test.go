//go:build gpu

package engine

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFP8KVCacheOnTheGPUMachine: until the gpu backend holds an fp8 KV cache, --device auto
// with --kv-cache-dtype fp8 serves on the cpu (the gpu refuses with ErrUnsupportedKVCache), as
// do the fp8-expert checkpoints the gpu has no kernels for; the same checkpoints with the
// default cache still take the gpu where it serves them (llama-fp8's block-scaled and
// llama-fp8-tensor's per-tensor weights do; llama-bf16 and DeepSeek's bf16 checkpoints do).
func TestFP8KVCacheOnTheGPUMachine(t *testing.T) {
	for _, tc := range []struct {
		model, kv string
		cpu       bool
	}{
		{"llama-bf16", "fp8", true},
		{"llama-bf16", "auto", false},
		{"llama-fp8-tensor", "auto", false},
		{"qwen3_moe-fp8", "auto", true},
		{"llama-fp8", "fp8_e4m3", true},
		{"llama-fp8", "auto", false},
		// DeepSeek's latent cache and routing run on the gpu; its fp8 experts do not yet.
		{"deepseek_v3-bf16", "auto", false},
		{"deepseek_v2-lite-bf16", "auto", false},
		{"deepseek_v3-fp8", "auto", true},
	} {
		// A subtest each, so that each engine (and its 90% of the device) is closed before the next.
		t.Run(tc.model+"/"+tc.kv, func(t *testing.T) {
			e := newTestEngine(t, tc.model, func(c *Config) { c.Device, c.KVCacheDType = "auto", tc.kv })
			t.Logf("%s --kv-cache-dtype %s: %s", tc.model, tc.kv, e.Backend())
			if tc.cpu {
				require.Contains(t, e.Backend(), "cpu (--device auto: the gpu backend cannot serve this model", tc.model)
			} else {
				require.True(t, strings.HasPrefix(e.Backend(), "gpu: "), "%s: %s", tc.model, e.Backend())
			}
			out := collect(t, e, Request{ID: "r", PromptIDs: []int32{1, 2, 3}, Params: greedy(4)})
			require.Len(t, out.TokenIDs, 4)
		})
	}
}
