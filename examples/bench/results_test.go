package main

import (
	"testing"

	"github.com/atom-go/atom/engine"

	"github.com/stretchr/testify/require"
)

// The runner table shows a measured column's value and "-" where it was not measured (no graph
// for the batch, no chain, no prefill).
func TestRunnerRows(t *testing.T) {
	r := &Result{Forward: ForwardResult{Decode: []ForwardRow{
		{Batch: 1, Context: 1153, GraphMs: 4.3, ReplayMs: 4.126, ChainMs: 4.161, EagerMs: 4.5, FloorMs: 3.56, Bound: "memory"},
		{Batch: 512, Context: 1153, GraphMs: -1, EagerMs: 40, FloorMs: 20, Bound: "memory"},
	}}}
	rows := runnerRows(r)
	require.Equal(t, []string{"runner step", "graph ms", "replay ms", "chain ms", "eager ms", "roofline ms", "% (graph)", "bound"}, rows[0])
	require.Equal(t, []string{"decode batch 1, context 1153", "4.30", "4.13", "4.16", "4.50", "3.56", "82.8%", "memory"}, rows[1])
	require.Equal(t, []string{"decode batch 512, context 1153", "-", "-", "-", "40.00", "20.00", "-", "memory"}, rows[2])
	require.Len(t, rows, 3) // no prefill row
}

// TestSpecDeltaAndHeader: a run's acceptance figures are the differences of the engine's
// counters, and the header reports them per concurrency only with --speculative-config.
func TestSpecDeltaAndHeader(t *testing.T) {
	var before, after engine.Stats
	before.SpecNumDrafts, before.SpecNumDraftTokens, before.SpecNumAcceptedTokens = 10, 30, 20
	after.SpecNumDrafts, after.SpecNumDraftTokens, after.SpecNumAcceptedTokens = 20, 60, 35
	rate, length := specDelta(before, after)
	require.InDelta(t, 0.5, rate, 1e-12)
	require.InDelta(t, 2.5, length, 1e-12)
	rate, length = specDelta(after, after)
	require.Zero(t, rate)
	require.Zero(t, length)

	r := &Result{Throughput: []ThroughputRow{{Concurrency: 1, SpecAcceptanceRate: 0.5, SpecMeanAcceptedLength: 2.5}}}
	require.Empty(t, specHeader(r))
	r.SpeculativeConfig = `{"method": "ngram"}`
	require.Equal(t, `; speculative decoding {"method": "ngram"}: concurrency 1 accepts 50.0% of drafts, 2.50 tokens per verify step`, specHeader(r))
}
