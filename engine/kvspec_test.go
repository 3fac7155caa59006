package engine

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestKVCacheSizedFromSpec: the cpu engine's blocks are --kv-cache-memory over what the
// model's KV spec says a block takes on every rank (float32 K and V of each rank's KV heads in
// every layer), and KVBlockBytes reports that block over all ranks.
func TestKVCacheSizedFromSpec(t *testing.T) {
	const layers, headDim, f32 = 2, 16, 4 // testdata/models/llama-bf16, 2 KV heads
	for _, tc := range []struct {
		tp, rankHeads int
	}{{1, 2}, {2, 1}, {4, 1}} { // at TP 4 each rank holds one replicated KV head
		e := newTestEngine(t, "llama-bf16", func(c *Config) { c.TensorParallelSize = tc.tp })
		bs := e.Config().BlockSize
		perRank := int64(2 * layers * tc.rankHeads * headDim * f32 * bs)
		require.Equal(t, int(e.Config().KVCacheMemory/(perRank*int64(tc.tp))), e.NumKVBlocks(), "tp=%d", tc.tp)
		require.Equal(t, perRank*int64(tc.tp), e.KVBlockBytes(bs), "tp=%d", tc.tp)
		require.Equal(t, perRank*int64(tc.tp)/2, e.KVBlockBytes(bs/2), "tp=%d", tc.tp)
	}
}
