package openai

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// soakClients streaming clients run soakRequests requests each, a mix of complete and
// abandoned streams, plain requests, fan-outs and malformed bodies.
const (
	soakClients  = 64
	soakRequests = 120 // about half a minute a run on 2 cores: long enough for a slow leak to show
)

func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("soak test skipped in -short mode")
	}
	l := serveLive(t, "qwen2-bf16", DefaultOptions(), nil)
	tr := &http.Transport{MaxIdleConnsPerHost: soakClients}
	hc := &http.Client{Transport: tr, Timeout: 120 * time.Second}
	l.mustServe(t)
	tr.CloseIdleConnections()
	waitGoroutines(t, -1) // let the warm-up's connection goroutines go
	startG := runtime.NumGoroutine()
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	var wg sync.WaitGroup
	errs := make(chan error, soakClients)
	for c := 0; c < soakClients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(c), 99))
			for i := 0; i < soakRequests; i++ {
				if err := soakOne(hc, l.url, r); err != nil {
					errs <- fmt.Errorf("client %d request %d: %w", c, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	st := settle(t, l.eng, "no request, sequence or KV block is left", idle)
	require.Zero(t, st.NumRequests)
	deadline := settleDeadline()
	for l.srv.pending.Load() != 0 || l.srv.bodies.inUse() != 0 {
		require.True(t, deadline.ok(), "pending %d, body bytes %d", l.srv.pending.Load(), l.srv.bodies.inUse())
	}
	tr.CloseIdleConnections()
	waitGoroutines(t, startG)
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	rss := vmRSS()
	t.Logf("heap %d -> %d MB, RSS %d MB, %d goroutines", before.HeapAlloc>>20, after.HeapAlloc>>20, rss>>20, runtime.NumGoroutine())
	require.Less(t, after.HeapAlloc, before.HeapAlloc+64<<20, "the heap returns near its start")
	if rss > 0 {
		require.Less(t, rss, uint64(1<<30), "RSS stays bounded")
	}
	l.mustServe(t)
}

// soakOne sends one request of a random kind and checks its answer.
func soakOne(hc *http.Client, url string, r *rand.Rand) error {
	words := strings.Repeat("the quick brown fox ", 1+r.IntN(8))
	kind := r.IntN(10)
	var path, body string
	stream, abandon := false, 0
	switch kind {
	case 0, 1, 2: // a stream read to its end
		path, stream = "/v1/completions", true
		body = fmt.Sprintf(`{"prompt": %q, "max_tokens": %d, "ignore_eos": true, "stream": true}`, words, 1+r.IntN(48))
	case 3, 4: // a stream abandoned after a few events
		path, stream, abandon = "/v1/completions", true, 1+r.IntN(5)
		body = fmt.Sprintf(`{"prompt": %q, "n": %d, "max_tokens": 200, "ignore_eos": true, "stream": true}`, words, 1+r.IntN(4))
	case 5: // a chat stream
		path, stream = "/v1/chat/completions", true
		if r.IntN(2) == 0 {
			abandon = 2
		}
		body = fmt.Sprintf(`{"messages": [{"role": "user", "content": %q}], "max_tokens": %d, "stream": true}`, words, 1+r.IntN(32))
	case 6: // a plain request with fan-out
		path = "/v1/completions"
		body = fmt.Sprintf(`{"prompt": [%q, "hello"], "n": 3, "max_tokens": 8, "temperature": 0.8}`, words)
	default: // malformed or refused
		path = "/v1/completions"
		bad := []string{`{"prompt": `, `{"prompt": "x", "top_k": -5}`, `{"prompt": "x"} }`, `{"prompt": "x", "guided_json": {}}`,
			`{"prompt": "x", "max_tokens": 100000}`, `{"prompt": [99999999]}`, `{"prompt": "x", "n": 1000}`, "\x00\xff"}
		body = bad[r.IntN(len(bad))]
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", url+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if kind >= 7 {
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusBadRequest || out["error"] == nil {
			return fmt.Errorf("%q: got %d %v, want an OpenAI 400", body, resp.StatusCode, out)
		}
		return nil
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s: got %d %s", body, resp.StatusCode, b)
	}
	if !stream {
		var out struct {
			Choices []any `json:"choices"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			return err
		}
		if len(out.Choices) != 6 {
			return fmt.Errorf("fan-out: %d choices, want 6", len(out.Choices))
		}
		return nil
	}
	sc := bufio.NewScanner(resp.Body)
	events := 0
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("data: ")) {
			continue
		}
		if bytes.Equal(line, []byte("data: [DONE]")) {
			return nil
		}
		if bytes.Contains(line, []byte(`"error"`)) {
			return fmt.Errorf("error event: %s", line)
		}
		if events++; abandon > 0 && events >= abandon {
			cancel() // the client goes away mid-stream
			return nil
		}
	}
	return fmt.Errorf("stream ended without [DONE]: %v", sc.Err())
}

// waitGoroutines polls until at most want goroutines run (want < 0: until the count stops
// falling for a while), with a deadline.
func waitGoroutines(t *testing.T, want int) {
	t.Helper()
	deadline := settleDeadline()
	if want < 0 {
		for prev, stable := -1, 0; stable < 100; {
			n := runtime.NumGoroutine()
			if n == prev {
				stable++
			} else {
				prev, stable = n, 0
			}
			require.True(t, deadline.ok(), "goroutines settle")
		}
		return
	}
	for runtime.NumGoroutine() > want {
		if !deadline.ok() {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d at the start:\n%s", runtime.NumGoroutine(), want, buf[:runtime.Stack(buf, true)])
		}
	}
}

// vmRSS returns the resident set size from /proc (0 where there is none).
func vmRSS() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
