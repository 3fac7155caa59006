package plugin_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/engine"
	"github.com/atom-go/atom/engine/sched"
	"github.com/atom-go/atom/plugin"
)

// TestStatsRoundTrip: every figure of engine.Stats crosses the Stats RPC's message unchanged
// (the hit rate is derived again on the far side).
func TestStatsRoundTrip(t *testing.T) {
	st := engine.Stats{Stats: sched.Stats{Running: 3, Waiting: 4, NumPreemptions: 5, KVBlocksUsed: 6, KVBlocksTotal: 60,
		KVCacheUsage: 0.1, PrefixCacheQueries: 40, PrefixCacheHits: 10, PrefixCacheHitRate: 0.25},
		NumRequests: 7, PromptTokens: 8, GeneratedTokens: 9, Steps: 10, TokensPerSecond: 11.5,
		LastStepDuration: 12 * time.Millisecond, SpecNumDrafts: 13, SpecNumDraftTokens: 14, SpecNumAcceptedTokens: 15}
	for _, stale := range []bool{false, true} {
		got, gotStale := plugin.StatsFromProto(plugin.StatsToProto(st, stale))
		require.Equal(t, st, got)
		require.Equal(t, stale, gotStale)
	}
}
