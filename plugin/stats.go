package plugin

import (
	"context"
	"time"

	"github.com/atom-go/atom/bridge/pb"
	"github.com/atom-go/atom/engine"
	"github.com/atom-go/atom/engine/sched"
)

// Stats reports the loaded engine's figures without waiting for a step (see atom.proto), so
// that a host running the engine in this subprocess (`atom-plugin serve`'s front end) shows
// the live engine's gauges.
func (s *Server) Stats(context.Context, *pb.StatsRequest) (*pb.EngineStats, error) {
	e, _, err := s.state()
	if err != nil {
		return nil, err
	}
	st, stale := e.StatsNow()
	return StatsToProto(st, stale), nil
}

// StatsToProto is engine.Stats on the wire.
func StatsToProto(st engine.Stats, stale bool) *pb.EngineStats {
	return &pb.EngineStats{Stale: stale, Running: int32(st.Running), Waiting: int32(st.Waiting),
		NumPreemptions: st.NumPreemptions, KvBlocksUsed: int32(st.KVBlocksUsed), KvBlocksTotal: int32(st.KVBlocksTotal),
		KvCacheUsage: st.KVCacheUsage, PrefixCacheQueries: st.PrefixCacheQueries, PrefixCacheHits: st.PrefixCacheHits,
		NumRequests: int32(st.NumRequests), PromptTokens: st.PromptTokens, GeneratedTokens: st.GeneratedTokens,
		Steps: st.Steps, TokensPerSecond: st.TokensPerSecond, LastStepNanos: int64(st.LastStepDuration),
		SpecNumDrafts: st.SpecNumDrafts, SpecNumDraftTokens: st.SpecNumDraftTokens,
		SpecNumAcceptedTokens: st.SpecNumAcceptedTokens}
}

// StatsFromProto is StatsToProto's inverse; it reports whether the figures are stale.
func StatsFromProto(p *pb.EngineStats) (engine.Stats, bool) {
	st := engine.Stats{Stats: sched.Stats{Running: int(p.GetRunning()), Waiting: int(p.GetWaiting()),
		NumPreemptions: p.GetNumPreemptions(), KVBlocksUsed: int(p.GetKvBlocksUsed()),
		KVBlocksTotal: int(p.GetKvBlocksTotal()), KVCacheUsage: p.GetKvCacheUsage(),
		PrefixCacheQueries: p.GetPrefixCacheQueries(), PrefixCacheHits: p.GetPrefixCacheHits()},
		NumRequests: int(p.GetNumRequests()), PromptTokens: p.GetPromptTokens(), GeneratedTokens: p.GetGeneratedTokens(),
		Steps: p.GetSteps(), TokensPerSecond: p.GetTokensPerSecond(), LastStepDuration: time.Duration(p.GetLastStepNanos()),
		SpecNumDrafts: p.GetSpecNumDrafts(), SpecNumDraftTokens: p.GetSpecNumDraftTokens(),
		SpecNumAcceptedTokens: p.GetSpecNumAcceptedTokens()}
	if q := st.PrefixCacheQueries; q > 0 {
		st.PrefixCacheHitRate = float64(st.PrefixCacheHits) / float64(q)
	}
	return st, p.GetStale()
}

// EngineStats asks the serving engine for its figures; it fails at once (waiting for no
// restart) when none serves, and after timeout when the engine does not answer.
func (s *Supervisor) EngineStats(ctx context.Context, timeout time.Duration) (engine.Stats, bool, error) {
	s.mu.Lock()
	conn := s.conn
	s.mu.Unlock()
	if conn == nil {
		return engine.Stats{}, true, ErrRestarting
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	p, err := conn.Stats(ctx, &pb.StatsRequest{})
	if err != nil {
		return engine.Stats{}, true, err
	}
	st, stale := StatsFromProto(p)
	return st, stale, nil
}
