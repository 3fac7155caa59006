package openai

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// randomText is n bytes of space-separated pseudo-words, which tokenize about as English does.
func randomText(n int) string {
	r := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	b.Grow(n + 16)
	const letters = "abcdefghijklmnopqrstuvwxyz"
	for b.Len() < n {
		for k := 2 + r.IntN(8); k > 0; k-- {
			b.WriteByte(letters[r.IntN(len(letters))])
		}
		b.WriteByte(' ')
	}
	return b.String()[:n]
}

func TestHugePromptRefusedBeforeTokenizing(t *testing.T) {
	l := serveLive(t, "qwen2-bf16", DefaultOptions(), nil)
	body, err := json.Marshal(map[string]any{"prompt": randomText(30 << 20 / 32 * 31), "max_tokens": 1})
	require.NoError(t, err)
	require.Less(t, len(body), 32<<20)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	resp, err := client.Post(l.url+"/v1/completions", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	resp.Body.Close()
	took := time.Since(start)
	runtime.ReadMemStats(&after)

	require.Equal(t, http.StatusBadRequest, resp.StatusCode, out)
	e := errorOf(t, out)
	require.Equal(t, "prompt", e["param"])
	require.Contains(t, e["message"], "maximum context length is 256 tokens")
	// Reading and decoding the body costs a few copies of it (about 5); tokenizing all of it
	// costs about 190 (5.8 GB: ids, pre-tokenized words, merges) and 12 s of CPU.
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("30 MB prompt refused in %v, %d MB allocated", took, allocated>>20)
	require.Less(t, allocated, uint64(10*len(body)), "bytes allocated to refuse the prompt")
	// Time against what tokenizing would take, measured here on 1/30 of the text, so that a
	// loaded machine slows both alike.
	text := randomText(1 << 20)
	start = time.Now()
	_, err = l.srv.m.tok.Encode(text, true)
	require.NoError(t, err)
	full := time.Since(start) * time.Duration(len(body)>>20)
	t.Logf("tokenizing it all would take about %v", full)
	if !raceEnabled {
		require.Less(t, took, full/4)
	}

	// The same text as one chat message is refused before the template renders it.
	chat, err := json.Marshal(map[string]any{"messages": []any{map[string]any{"role": "user", "content": randomText(8 << 20)}}})
	require.NoError(t, err)
	status, out := l.call(t, "/v1/chat/completions", string(chat))
	require.Equal(t, http.StatusBadRequest, status, out)
	require.Equal(t, "messages", errorOf(t, out)["param"])
	l.mustServe(t)
}

func TestBoundedCountAgreesWithEncode(t *testing.T) {
	l := serveLive(t, "qwen2-bf16", DefaultOptions(), nil)
	tok := l.srv.m.tok
	for _, n := range []int{100, 3000, 40000, 200000} {
		text := randomText(n)
		full, err := tok.Encode(text, true)
		require.NoError(t, err)
		for _, limit := range []int{len(full) / 2, len(full), len(full) + 1, 2 * len(full)} {
			over, err := countOver(tok, text, true, limit)
			require.NoError(t, err)
			if over {
				require.GreaterOrEqual(t, len(full), limit, "a chunked count never refuses a prompt that fits (n=%d limit=%d)", n, limit)
			}
			if n >= 40000 && limit == len(full)/2 {
				require.True(t, over, "a prompt twice the limit is refused by the chunked count (n=%d)", n)
			}
		}
	}
}

func TestRequestBodyLimits(t *testing.T) {
	opts := DefaultOptions()
	opts.MaxRequestBytes, opts.MaxTotalRequestBytes = 1<<20, 3<<19
	l := serveLive(t, "llama-bf16", opts, nil)

	// One body over the per-request cap: 413, with or without a Content-Length.
	big := `{"prompt": "` + strings.Repeat("a", 2<<20) + `"}`
	status, out := l.call(t, "/v1/completions", big)
	require.Equal(t, http.StatusRequestEntityTooLarge, status, out)
	errorOf(t, out)
	resp, err := client.Post(l.url+"/v1/completions", "application/json", io.MultiReader(strings.NewReader(big)))
	require.NoError(t, err)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	resp.Body.Close()
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, out)
	l.mustServe(t)

	// A body being received holds its size of the global budget: another that does not fit
	// with it is a 503 at once, not a wait.
	conn, err := net.Dial("tcp", l.addr)
	require.NoError(t, err)
	defer conn.Close()
	held := 1 << 20
	_, err = fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{\"prompt\": [1,", held)
	require.NoError(t, err)
	deadline := time.Now().Add(30 * time.Second)
	for l.srv.bodies.inUse() != int64(held) {
		require.True(t, time.Now().Before(deadline), "the held body reserves its size")
		time.Sleep(time.Millisecond)
	}
	second := `{"prompt": [1, 2], "max_tokens": 1, "x": "` + strings.Repeat("b", 600<<10) + `"}`
	status, out = l.call(t, "/v1/completions", second)
	require.Equal(t, http.StatusServiceUnavailable, status, out)
	require.Contains(t, errorOf(t, out)["message"], "max-total-request-bytes")
	conn.Close()
	for l.srv.bodies.inUse() != 0 {
		require.True(t, time.Now().Before(deadline), "a body given up gives its budget back")
		time.Sleep(time.Millisecond)
	}
	l.mustServe(t)
}

func TestFanOutIsBounded(t *testing.T) {
	opts := DefaultOptions()
	opts.MaxN, opts.MaxSeqsPerRequest, opts.MaxPendingSeqs = 16, 64, 64
	l := serveLive(t, "llama-bf16", opts, nil)
	prompts := make([][]int, 8)
	for i := range prompts {
		prompts[i] = []int{1, 2, 3 + i}
	}
	for _, tc := range []struct {
		body  map[string]any
		param string
	}{
		{map[string]any{"prompt": []int{1, 2}, "n": 17}, "n"},
		{map[string]any{"prompt": prompts, "n": 9}, "prompt"},
		{map[string]any{"prompt": slices.Repeat([][]int{{1, 2}}, 65)}, "prompt"},
		{map[string]any{"prompt": []any{1, nil}}, "prompt"},
	} {
		status, out := l.call(t, "/v1/completions", tc.body)
		require.Equal(t, http.StatusBadRequest, status, out)
		require.Equal(t, tc.param, errorOf(t, out)["param"])
	}
	// 64 sequences in flight fill --max-pending-seqs: one more request is a 503.
	stream := l.firstEvent(t, "/v1/completions", map[string]any{"prompt": prompts, "n": 8, "max_tokens": 200, "ignore_eos": true})
	status, out := l.call(t, "/v1/completions", map[string]any{"prompt": []int{1, 2}, "max_tokens": 1})
	require.Equal(t, http.StatusServiceUnavailable, status, out)
	require.Contains(t, errorOf(t, out)["message"], "max-pending-seqs")
	stream.Close()
	settle(t, l.eng, "the stream is aborted", idle)
	deadline := time.Now().Add(30 * time.Second)
	for l.srv.pending.Load() != 0 {
		require.True(t, time.Now().Before(deadline), "the aborted request leaves the pending count")
		time.Sleep(time.Millisecond)
	}
	l.mustServe(t)
}

func TestFanOutDisconnectAbortsEverything(t *testing.T) {
	l := serveLive(t, "llama-bf16", DefaultOptions(), nil)
	prompts := make([][]int, 8)
	for i := range prompts {
		prompts[i] = []int{1, 2, 3 + i}
	}
	const n, maxTokens = 64, 200
	stream := l.firstEvent(t, "/v1/completions", map[string]any{"prompt": prompts, "n": n, "max_tokens": maxTokens, "ignore_eos": true})
	st := l.eng.Stats()
	require.Equal(t, len(prompts)*n, st.Running+st.Waiting, "everything was admitted at once")
	require.Positive(t, st.Waiting, "most sequences wait behind --max-num-seqs")
	stream.Close()
	after := settle(t, l.eng, "every sequence of the request is aborted", idle)
	// Finishing the request would take len(prompts)*n*maxTokens/32 steps; the abort is one
	// engine command, handled between two steps once the server sees the disconnect.
	full := int64(len(prompts) * n * maxTokens / 32)
	t.Logf("%d steps after the disconnect (finishing would take about %d)", after.Steps-st.Steps, full)
	require.Less(t, after.Steps-st.Steps, full/4)
	require.Less(t, after.GeneratedTokens, int64(len(prompts)*n*maxTokens/4))
	require.Zero(t, after.NumRequests)
	l.mustServe(t)
}

func TestSlowBodyAndIdleConnection(t *testing.T) {
	opts := DefaultOptions()
	opts.BodyTimeout, opts.IdleTimeout = 200*time.Millisecond, 200*time.Millisecond
	l := serveLive(t, "llama-bf16", opts, nil)

	// A body that stops arriving gets a 408 (after --body-timeout) and the connection closes.
	conn, err := net.Dial("tcp", l.addr)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(30*time.Second)))
	_, err = fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\"")
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	require.Equal(t, http.StatusRequestTimeout, resp.StatusCode, out)
	require.Contains(t, errorOf(t, out)["message"], "not received")
	_, err = br.ReadByte()
	require.ErrorIs(t, err, io.EOF, "the connection is closed after a body timeout")

	// A keep-alive connection left idle is closed by the server after --idle-timeout.
	idleConn, err := net.Dial("tcp", l.addr)
	require.NoError(t, err)
	defer idleConn.Close()
	require.NoError(t, idleConn.SetDeadline(time.Now().Add(30*time.Second)))
	_, err = fmt.Fprintf(idleConn, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	br = bufio.NewReader(idleConn)
	resp, err = http.ReadResponse(br, nil)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	_, err = br.ReadByte()
	require.ErrorIs(t, err, io.EOF, "the idle connection is closed by the server")

	// A stream outlives the body and idle timeouts: neither applies while it runs.
	body := l.firstEvent(t, "/v1/completions", map[string]any{"prompt": []int{1, 2, 3}, "max_tokens": 100, "ignore_eos": true})
	rest, err := io.ReadAll(body)
	body.Close()
	require.NoError(t, err)
	require.True(t, bytes.HasSuffix(rest, []byte("data: [DONE]\n\n")))
	l.mustServe(t)
}

func TestConnectionCap(t *testing.T) {
	opts := DefaultOptions()
	opts.MaxConnections = 2
	l := serveLive(t, "llama-bf16", opts, nil)
	var held []net.Conn
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", l.addr)
		require.NoError(t, err)
		defer c.Close()
		require.NoError(t, c.SetDeadline(time.Now().Add(30*time.Second)))
		_, err = fmt.Fprintf(c, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		held = append(held, c)
	}
	require.Equal(t, int64(2), l.srv.openConns())
	// A third connection is answered 503 at once rather than left in the accept queue.
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	c3 := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	resp, err := c3.Post(l.url+"/v1/completions", "application/json", strings.NewReader(`{"prompt": [1, 2]}`))
	require.NoError(t, err)
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, out)
	require.Contains(t, errorOf(t, out)["message"], "max-connections")

	held[0].Close()
	deadline := time.Now().Add(30 * time.Second)
	for l.srv.openConns() > 1 {
		require.True(t, time.Now().Before(deadline), "a closed connection frees its slot")
		time.Sleep(time.Millisecond)
	}
	l.mustServe(t)
}

func TestWriteTimeoutIsPerWrite(t *testing.T) {
	opts := DefaultOptions()
	opts.WriteTimeout = 100 * time.Millisecond
	l := serveLive(t, "llama-bf16", opts, nil)
	// Hold the step after the prefill for several write timeouts: a deadline set once for the
	// response would have passed when the stream resumes; one set per write has not.
	entered, release := holdStep(t, l, 1)
	body := l.firstEvent(t, "/v1/completions", map[string]any{"prompt": []int{1, 2, 3}, "max_tokens": 20, "ignore_eos": true})
	defer body.Close()
	<-entered
	time.Sleep(4 * opts.WriteTimeout)
	close(release)
	rest, err := io.ReadAll(body)
	require.NoError(t, err)
	require.True(t, bytes.HasSuffix(rest, []byte("data: [DONE]\n\n")), "the stream outlives the write timeout: %s", rest)
	require.NotContains(t, string(rest), `"error"`)
	l.mustServe(t)
}
