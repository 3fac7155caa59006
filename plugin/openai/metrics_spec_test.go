package openai

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/atom-go/atom/engine"
	"github.com/stretchr/testify/require"
)

// TestMetricsSpecDecode: with --speculative-config, /metrics reports vLLM's spec-decode
// counters and the acceptance rate and mean accepted length derived from them.
func TestMetricsSpecDecode(t *testing.T) {
	l := serveLive(t, "qwen3-bf16", DefaultOptions(), func(c *engine.Config) {
		c.SpeculativeConfig = `{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3}`
	})
	prompt := []int{5, 6, 7, 8, 5, 6, 7, 8, 5, 6, 7, 8}
	status, _ := l.call(t, "/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 24, "temperature": 0, "ignore_eos": true})
	require.Equal(t, http.StatusOK, status)
	resp, err := client.Get(l.url + "/metrics")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	st := l.eng.Stats()
	require.Positive(t, st.SpecNumDraftTokens)
	for _, line := range []string{
		fmt.Sprintf("atom_spec_decode_num_drafts_total %d", st.SpecNumDrafts),
		fmt.Sprintf("atom_spec_decode_num_draft_tokens_total %d", st.SpecNumDraftTokens),
		fmt.Sprintf("atom_spec_decode_num_accepted_tokens_total %d", st.SpecNumAcceptedTokens),
		fmt.Sprintf("atom_spec_decode_acceptance_rate %g", st.SpecAcceptanceRate()),
		fmt.Sprintf("atom_spec_decode_mean_accepted_length %g", st.SpecMeanAcceptedLength()),
	} {
		require.True(t, strings.Contains(string(b), line+"\n"), "%q in\n%s", line, b)
	}
	l.mustServe(t)
}
