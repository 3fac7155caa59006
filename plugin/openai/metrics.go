package openai

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"time"
)

// histogram is a Prometheus histogram with fixed buckets.
type histogram struct {
	bounds []float64
	counts []uint64
	sum    float64
	n      uint64
}

func newHistogram(bounds ...float64) *histogram {
	return &histogram{bounds: bounds, counts: make([]uint64, len(bounds))}
}

func (h *histogram) observe(v float64) {
	for i, b := range h.bounds {
		if v <= b {
			h.counts[i]++
		}
	}
	h.sum += v
	h.n++
}

func (h *histogram) write(w io.Writer, name, help string) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name)
	for i, b := range h.bounds {
		fmt.Fprintf(w, "%s_bucket{le=\"%g\"} %d\n", name, b, h.counts[i])
	}
	fmt.Fprintf(w, "%s_bucket{le=\"+Inf\"} %d\n%s_sum %g\n%s_count %d\n", name, h.n, name, h.sum, name, h.n)
}

type requestKey struct {
	endpoint string
	status   int
}

// metrics are the server's own counters; engine gauges are read at scrape time.
type metrics struct {
	mu       sync.Mutex
	requests map[requestKey]uint64
	latency  *histogram
	ttft     *histogram
	tpot     *histogram
}

var latencyBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}

func newMetrics() *metrics {
	return &metrics{requests: map[requestKey]uint64{},
		latency: newHistogram(latencyBuckets...),
		ttft:    newHistogram(0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
		tpot:    newHistogram(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1)}
}

// request counts a finished request; only answered ones enter the latency histogram, since a
// client that went away says nothing about how long an answer takes.
func (m *metrics) request(endpoint string, status int, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests[requestKey{endpoint, status}]++
	if status != statusClientClosed {
		m.latency.observe(d.Seconds())
	}
}

// observeLatency records a finished call's time to first token and time per output token.
func (m *metrics) observeLatency(c *call) {
	if c.first.IsZero() {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ttft.observe(c.first.Sub(c.start).Seconds())
	if c.tokens > 1 {
		m.tpot.observe(time.Since(c.first).Seconds() / float64(c.tokens-1))
	}
}

// serveMetrics renders the metrics into a buffer and writes it after every lock is released:
// engine state comes from StatsNow, which never waits for a step, and a slow scraper holds no
// lock that requests need.
func (s *Server) serveMetrics(w http.ResponseWriter, _ *http.Request) {
	var buf bytes.Buffer
	s.writeMetrics(&buf)
	s.writeRestartMetrics(&buf)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	extendWrite(w)
	_, _ = w.Write(buf.Bytes())
}

func (s *Server) writeMetrics(w io.Writer) {
	st, stale := s.eng.StatsNow()
	gauge := func(name, help string, v float64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n%s %g\n", name, help, name, name, v)
	}
	counter := func(name, help string, v float64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n%s %g\n", name, help, name, name, v)
	}
	gauge("atom_num_requests_running", "Sequences running in the engine.", float64(st.Running))
	gauge("atom_num_requests_waiting", "Sequences waiting (preempted included).", float64(st.Waiting))
	gauge("atom_kv_cache_usage_perc", "Fraction of KV-cache blocks in use.", st.KVCacheUsage)
	gauge("atom_kv_cache_blocks_total", "KV-cache blocks.", float64(st.KVBlocksTotal))
	counter("atom_num_preemptions_total", "Preemptions since start.", float64(st.NumPreemptions))
	counter("atom_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", float64(st.PrefixCacheQueries))
	counter("atom_prefix_cache_hits_total", "Prompt tokens served by the prefix cache.", float64(st.PrefixCacheHits))
	counter("atom_prompt_tokens_total", "Prompt tokens computed.", float64(st.PromptTokens))
	counter("atom_generation_tokens_total", "Tokens generated.", float64(st.GeneratedTokens))
	// Speculative decoding (--speculative-config), named after vLLM's spec_decode counters.
	counter("atom_spec_decode_num_drafts_total", "Verify steps' sequences that carried drafts.", float64(st.SpecNumDrafts))
	counter("atom_spec_decode_num_draft_tokens_total", "Draft tokens proposed and verified.", float64(st.SpecNumDraftTokens))
	counter("atom_spec_decode_num_accepted_tokens_total", "Draft tokens accepted.", float64(st.SpecNumAcceptedTokens))
	gauge("atom_spec_decode_acceptance_rate", "Accepted draft tokens over proposed ones since start.", st.SpecAcceptanceRate())
	gauge("atom_spec_decode_mean_accepted_length", "Tokens emitted per verify step (accepted drafts plus one) since start.", st.SpecMeanAcceptedLength())
	staleV := 0.0
	if stale {
		staleV = 1
	}
	gauge("atom_engine_stats_stale", "1 when the engine was inside a step and the engine figures are from the end of the previous one.", staleV)
	gauge("atom_pending_sequences", "Sequences of the HTTP requests in flight (--max-pending-seqs bounds them).", float64(s.pending.Load()))
	gauge("atom_open_connections", "Client connections open (--max-connections bounds them).", float64(s.openConns()))
	gauge("atom_request_body_bytes_in_use", "Bytes of request bodies being read and parsed (--max-total-request-bytes bounds them).", float64(s.bodies.inUse()))
	m := s.metrics
	m.mu.Lock()
	defer m.mu.Unlock()
	fmt.Fprintf(w, "# HELP atom_requests_total HTTP requests by endpoint and status (499: the client went away first).\n# TYPE atom_requests_total counter\n")
	keys := make([]requestKey, 0, len(m.requests))
	for k := range m.requests {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].endpoint < keys[j].endpoint || (keys[i].endpoint == keys[j].endpoint && keys[i].status < keys[j].status)
	})
	for _, k := range keys {
		fmt.Fprintf(w, "atom_requests_total{endpoint=%q,status=\"%d\"} %d\n", k.endpoint, k.status, m.requests[k])
	}
	m.latency.write(w, "atom_e2e_request_latency_seconds", "Request latency.")
	m.ttft.write(w, "atom_time_to_first_token_seconds", "Time to first token.")
	m.tpot.write(w, "atom_time_per_output_token_seconds", "Time per output token after the first.")
}
