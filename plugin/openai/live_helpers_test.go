package openai

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/engine"
)

// live is a Server running its own Serve (timeouts, connection cap, shutdown) on loopback.
type live struct {
	url  string
	addr string
	srv  *Server
	eng  *engine.Engine
	stop context.CancelFunc
	done chan error
}

// serveLive starts model with the given options; cfgFn may adjust the engine config.
func serveLive(t *testing.T, modelName string, opts Options, cfgFn func(*engine.Config)) *live {
	t.Helper()
	cfg := engine.DefaultConfig()
	cfg.Model = filepath.Join("../../testdata/models", modelName)
	cfg.KVCacheMemory, cfg.MaxNumBatchedTokens, cfg.MaxNumSeqs = 8<<20, 512, 32
	if cfgFn != nil {
		cfgFn(&cfg)
	}
	e, err := engine.New(cfg, quiet)
	require.NoError(t, err)
	require.NoError(t, opts.Validate())
	s := NewWithOptions(e, modelName, quiet, opts)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	l := &live{url: "http://" + ln.Addr().String(), addr: ln.Addr().String(), srv: s, eng: e, stop: cancel, done: make(chan error, 1)}
	go func() { l.done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-l.done)
		e.Close()
	})
	return l
}

// client has a generous timeout: it turns a server that hangs into a failure, not a stuck test.
var client = &http.Client{Timeout: 60 * time.Second}

// call posts body (a string as is, anything else as JSON) and decodes the JSON answer.
func (l *live) call(t *testing.T, path string, body any) (int, map[string]any) {
	t.Helper()
	b, ok := body.(string)
	if !ok {
		raw, err := json.Marshal(body)
		require.NoError(t, err)
		b = string(raw)
	}
	resp, err := client.Post(l.url+path, "application/json", strings.NewReader(b))
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return resp.StatusCode, out
}

// mustServe checks that a small valid request succeeds: every limit test ends with one.
func (l *live) mustServe(t *testing.T) {
	t.Helper()
	status, out := l.call(t, "/v1/completions", map[string]any{"prompt": []int{1, 2, 3}, "max_tokens": 3, "ignore_eos": true})
	require.Equal(t, http.StatusOK, status, out)
	require.Len(t, out["choices"], 1)
}

// errorOf returns the OpenAI-format error of an answer, checking its shape.
func errorOf(t *testing.T, out map[string]any) map[string]any {
	t.Helper()
	e, ok := out["error"].(map[string]any)
	require.True(t, ok, "an OpenAI error body: %v", out)
	require.NotEmpty(t, e["message"])
	require.Contains(t, e, "type")
	require.Contains(t, e, "code")
	return e
}

// settle polls the engine (not a clock) until cond holds or a generous deadline passes.
func settle(t *testing.T, e *engine.Engine, what string, cond func(engine.Stats) bool) engine.Stats {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := e.Stats()
		if cond(st) {
			return st
		}
		require.True(t, time.Now().Before(deadline), "%s: engine state %+v", what, st)
		time.Sleep(time.Millisecond)
	}
}

func idle(st engine.Stats) bool { return st.Running == 0 && st.Waiting == 0 && st.KVBlocksUsed == 0 }

// firstEvent opens a stream and returns its body once the first event arrived.
func (l *live) firstEvent(t *testing.T, path string, body map[string]any) io.ReadCloser {
	t.Helper()
	body["stream"] = true
	raw, err := json.Marshal(body)
	require.NoError(t, err)
	resp, err := http.Post(l.url+path, "application/json", strings.NewReader(string(raw)))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(line, "data: "), line)
	return resp.Body
}

// pollDeadline bounds a polling loop; ok pauses a millisecond and reports whether time is left.
type pollDeadline time.Time

func settleDeadline() pollDeadline { return pollDeadline(time.Now().Add(30 * time.Second)) }

func (d pollDeadline) ok() bool {
	time.Sleep(time.Millisecond)
	return time.Now().Before(time.Time(d))
}
