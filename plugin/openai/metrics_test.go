package openai

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// holdStep installs a layer hook that stops the forward pass after the first skip ones, once it
// started: entered is closed once the engine is inside that step, and the step goes on when
// release is closed.
func holdStep(t *testing.T, l *live, skip int) (entered, release chan struct{}) {
	entered, release = make(chan struct{}), make(chan struct{})
	passes := 0
	require.True(t, l.eng.SetLayerHook(func(layer int, _ []float32, _ int) {
		if layer != 0 { // layer 0 (the embeddings) starts each forward pass
			return
		}
		if passes++; passes == skip+1 {
			close(entered)
			<-release
		}
	}))
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	return entered, release
}

func TestScrapeAndHealthDuringAStep(t *testing.T) {
	l := serveLive(t, "llama-bf16", DefaultOptions(), nil)
	entered, release := holdStep(t, l, 0)
	prefill := make([]int, 200)
	for i := range prefill {
		prefill[i] = 1 + i%50
	}
	done := make(chan int, 1)
	go func() {
		status, _ := l.call(t, "/v1/completions", map[string]any{"prompt": prefill, "max_tokens": 2})
		done <- status
	}()
	<-entered // the engine is inside the prefill step, and stays there until release

	for _, path := range []string{"/metrics", "/health", "/v1/models"} {
		resp, err := client.Get(l.url + path)
		require.NoError(t, err, "%s answers while a step runs", path)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		if path == "/metrics" {
			require.Contains(t, string(b), "atom_engine_stats_stale 1", "the figures are from before the step")
			require.Contains(t, string(b), "atom_pending_sequences 1")
		}
	}
	select {
	case <-done:
		t.Fatal("the request finished although its step was held")
	default:
	}
	_, stale := l.eng.StatsNow()
	require.True(t, stale, "the step is still running: every answer above came during it")
	close(release)
	require.Equal(t, http.StatusOK, <-done)
	l.mustServe(t)
}

func TestClientDisconnectIsItsOwnOutcome(t *testing.T) {
	l := serveLive(t, "llama-bf16", DefaultOptions(), nil)
	stream := l.firstEvent(t, "/v1/completions", map[string]any{"prompt": []int{1, 2, 3}, "n": 8, "max_tokens": 250, "ignore_eos": true})
	stream.Close()
	settle(t, l.eng, "the stream is aborted", idle)

	// A non-streaming request whose client gives up while its step is held. It asks for 250
	// tokens without EOS, so it cannot complete (and count as a 200) before the server's
	// connection reader, which wakes on the client's FIN, has cancelled it.
	entered, release := holdStep(t, l, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", l.url+"/v1/completions",
		strings.NewReader(`{"prompt": [1, 2, 3], "max_tokens": 250, "ignore_eos": true}`))
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() {
		_, err := client.Do(req)
		errc <- err
	}()
	<-entered
	cancel() // the client goes away while the engine holds its step
	require.Error(t, <-errc)
	close(release)
	settle(t, l.eng, "the abandoned request is aborted", idle)

	var metrics string
	deadline := settleDeadline()
	for !strings.Contains(metrics, `atom_requests_total{endpoint="completions",status="499"} 2`) {
		require.True(t, deadline.ok(), "both disconnects are counted as 499: %s", metrics)
		metrics = scrape(t, l)
	}
	require.NotContains(t, metrics, `status="500"`)
	require.NotContains(t, metrics, `status="200"`)
	require.Contains(t, metrics, "atom_e2e_request_latency_seconds_count 0", "disconnects stay out of the latency histogram")
	l.mustServe(t)
	require.Contains(t, scrape(t, l), "atom_e2e_request_latency_seconds_count 1")
}

func scrape(t *testing.T, l *live) string {
	resp, err := client.Get(l.url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}
