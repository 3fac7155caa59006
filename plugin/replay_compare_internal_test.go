package plugin

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/bridge"
)

// TestCrossBackendComparison: the tolerance rules of a replay on another backend, on
// hand-made results (the cpu machine has no GPU to produce them).
func TestCrossBackendComparison(t *testing.T) {
	gpu := Tolerance{Logprob: 0.05, Tie: 0.1, CrossBackend: true}
	lp := func(ids []int32, lps ...float32) *bridge.Logprobs {
		return &bridge.Logprobs{TokenIDs: ids, Logprobs: lps, Rank: 1}
	}
	zero, seed := 0.0, int64(1)
	payload := func(t *testing.T, greedy bool) []byte {
		sp := bridge.SamplingParams{Temperature: &zero}
		if !greedy {
			sp = bridge.SamplingParams{Seed: &seed}
		}
		b, err := bridge.EncodeExecuteModel(&bridge.ExecuteModelPayload{WireVersion: bridge.WireVersion,
			NewRequests:        []bridge.NewRequest{{ReqID: "r", PromptTokenIDs: []int64{1}, BlockIDs: [][]int64{{1}}, SamplingParams: sp}},
			NumScheduledTokens: map[string]int64{"r": 1}})
		require.NoError(t, err)
		return b
	}
	result := func(tok int32, l *bridge.Logprobs) *bridge.ExecuteModelResult {
		return &bridge.ExecuteModelResult{WireVersion: bridge.WireVersion, ReqIDs: []string{"r"}, SampledTokenIDs: [][]int32{{tok}},
			Logprobs: []*bridge.Logprobs{l}}
	}
	tests := []struct {
		name              string
		tol               Tolerance
		greedy            bool
		want, got         *bridge.ExecuteModelResult
		mismatch, nearTie int
		skipped           int
		what              string
	}{
		{"same token, logprobs within", gpu, true, result(5, lp([]int32{5, 5, 6}, -1, -1, -2)), result(5, lp([]int32{5, 5, 6}, -1.04, -1.04, -2.01)), 0, 0, 0, ""},
		{"same token, logprob beyond", gpu, true, result(5, lp([]int32{5, 5}, -1, -1)), result(5, lp([]int32{5, 5}, -1.2, -1.2)), 1, 0, 0, "logprob 0 (token 5)"},
		{"alternatives swapped near a tie", gpu, true, result(5, lp([]int32{5, 5, 6, 7}, -1, -1, -2, -2.01)), result(5, lp([]int32{5, 5, 7, 6}, -1, -1, -2, -2.02)), 0, 0, 0, ""},
		{"alternatives swapped on the cpu", Tolerance{Logprob: 0.05}, true, result(5, lp([]int32{5, 5, 6, 7}, -1, -1, -2, -2.01)), result(5, lp([]int32{5, 5, 7, 6}, -1, -1, -2, -2.02)), 1, 0, 0, "top ids"},
		{"greedy flip within the tie", gpu, true, result(5, lp([]int32{5, 5, 6}, -1, -1, -1.05)), result(6, lp([]int32{6, 6, 5}, -1.02, -1.02, -1.03)), 0, 1, 0, ""},
		{"greedy flip beyond the tie", gpu, true, result(5, lp([]int32{5, 5, 6}, -1, -1, -1.5)), result(6, lp([]int32{6, 6, 5}, -1.2, -1.2, -1.4)), 1, 0, 0, "greedy token"},
		{"greedy flip without logprobs", gpu, true, result(5, nil), result(6, nil), 1, 0, 0, "greedy token"},
		{"greedy flip on the cpu", Tolerance{Logprob: 1e-5}, true, result(5, lp([]int32{5, 5, 6}, -1, -1, -1)), result(6, lp([]int32{6, 6, 5}, -1, -1, -1)), 1, 0, 0, "greedy token"},
		{"seeded row, device sampler", gpu, false, result(5, nil), result(9, nil), 0, 0, 1, ""},
		{"seeded flip, distributions agree", Tolerance{Logprob: 0.05, Tie: 0.1, CrossBackend: true, RandomRows: true}, false,
			result(5, lp([]int32{5, 5, 6}, -1, -1, -1.5)), result(6, lp([]int32{6, 5, 6}, -1.49, -1.01, -1.49)), 0, 1, 0, ""},
		{"seeded flip, distributions differ", Tolerance{Logprob: 0.05, Tie: 0.1, CrossBackend: true, RandomRows: true}, false,
			result(5, lp([]int32{5, 5, 6}, -1, -1, -1.5)), result(6, lp([]int32{6, 5, 6}, -1.2, -1.3, -1.2)), 1, 0, 0, "seeded token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newComparer(tt.tol, 0)
			c.track(payload(t, tt.greedy))
			c.compare(1, 1, tt.want, tt.got)
			require.Equal(t, tt.mismatch, c.rep.Mismatches, "%+v", c.rep.Mismatch)
			require.Equal(t, tt.nearTie, c.rep.NumNearTies)
			require.Equal(t, tt.skipped, c.rep.Skipped)
			if tt.what != "" {
				require.Equal(t, tt.what, c.rep.Mismatch.What)
				require.Equal(t, "r", c.rep.Mismatch.RequestID)
			}
		})
	}
}
