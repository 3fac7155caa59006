package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// restartServer is a running `atom-plugin serve` with its engine in a subprocess.
type restartServer struct {
	cmd    *exec.Cmd
	base   string
	tmp    string // the server's TMPDIR: the engines' socket directories are made there
	stderr *lockedBuffer
	hc     *http.Client
}

// lockedBuffer is the server's stderr, read while the process may still write it.
type lockedBuffer struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	grew chan struct{} // closed by the next Write (nil: nobody waits)
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.grew != nil {
		close(b.grew)
		b.grew = nil
	}
	return b.buf.Write(p)
}

// waitFor reports whether the buffer holds sub within limit, waking at each write.
func (b *lockedBuffer) waitFor(sub string, limit time.Duration) bool {
	deadline := time.After(limit)
	for {
		b.mu.Lock()
		if strings.Contains(b.buf.String(), sub) {
			b.mu.Unlock()
			return true
		}
		if b.grew == nil {
			b.grew = make(chan struct{})
		}
		grew := b.grew
		b.mu.Unlock()
		select {
		case <-grew:
		case <-deadline:
			return false
		}
	}
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func startRestartServer(t *testing.T, env []string, args ...string) *restartServer {
	t.Helper()
	modelDir, err := filepath.Abs("../../../testdata/models/llama-bf16")
	require.NoError(t, err)
	return startRestartServerOn(t, modelDir, env, args...)
}

// startRestartServerOn is startRestartServer serving the checkpoint in modelDir.
func startRestartServerOn(t *testing.T, modelDir string, env []string, args ...string) *restartServer {
	t.Helper()
	// At most 4 sequences run at once, so that a batch of 16 long requests is far from done
	// when its first token arrives.
	return startServe(t, pluginBinary(t), 3*time.Minute, env, append([]string{"--model", modelDir,
		"--kv-cache-memory", "67108864", "--threads", "1", "--max-num-seqs", "4"}, args...)...)
}

// startServe runs `bin serve --port 0 --shutdown-grace 0s args...` with env added, killed
// after limit at the latest, and returns once it listens.
func startServe(t *testing.T, bin string, limit time.Duration, env []string, args ...string) *restartServer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	t.Cleanup(cancel)
	s := &restartServer{tmp: t.TempDir(), stderr: &lockedBuffer{}, hc: &http.Client{Timeout: limit}}
	s.cmd = exec.CommandContext(ctx, bin, append([]string{"serve", "--port", "0", "--shutdown-grace", "0s"}, args...)...)
	s.cmd.Env = append(append(os.Environ(), "TMPDIR="+s.tmp), env...)
	s.cmd.Stderr = s.stderr
	stdout, err := s.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, s.cmd.Start())
	t.Cleanup(func() { _ = s.cmd.Process.Kill(); _ = s.cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "stderr: %s", s.stderr.String())
	_, rest, ok := strings.Cut(strings.TrimSpace(line), " at ")
	require.True(t, ok, line)
	s.base = strings.TrimSuffix(rest, "/v1")
	return s
}

// children are the server's child processes, read from /proc.
func (s *restartServer) children(t *testing.T) []int {
	t.Helper()
	files, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", s.cmd.Process.Pid))
	require.NoError(t, err)
	var pids []int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // a thread that ended
		}
		for _, p := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(p)
			require.NoError(t, err)
			pids = append(pids, pid)
		}
	}
	return pids
}

func (s *restartServer) health(t *testing.T) int {
	t.Helper()
	resp, err := s.hc.Get(s.base + "/health")
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// streamResult is one streamed completion: its tokens, when each event arrived, and its error
// event, if any.
type streamResult struct {
	tokens []int32
	times  []time.Time
	errMsg string
}

// runStreams runs 16 greedy streamed completions at once. When kill is set it is called as soon
// as the first event of the batch arrives (the engine then holds four sequences at their first
// tokens and twelve waiting); each stream is held at its first event until kill has returned.
func (s *restartServer) runStreams(t *testing.T, kill func()) []streamResult {
	t.Helper()
	return s.runStreamsWith(t, func(int) map[string]any { return map[string]any{"temperature": 0} }, kill)
}

// runStreamsWith is runStreams with request i's sampling fields from params.
func (s *restartServer) runStreamsWith(t *testing.T, params func(i int) map[string]any, kill func()) []streamResult {
	t.Helper()
	const n = 16
	res := make([]streamResult, n)
	var wg sync.WaitGroup
	var once sync.Once
	first, resume := make(chan struct{}), make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer once.Do(func() { close(first) })
			req := map[string]any{"prompt": []int{1, 10 + i, 200 + 3*i, 7}, "max_tokens": 250,
				"ignore_eos": true, "stream": true, "return_token_ids": true}
			for k, v := range params(i) {
				req[k] = v
			}
			body, _ := json.Marshal(req)
			resp, err := s.hc.Post(s.base+"/v1/completions", "application/json", bytes.NewReader(body))
			if err != nil {
				res[i].errMsg = err.Error()
				return
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			held := false
			for sc.Scan() {
				data, ok := strings.CutPrefix(sc.Text(), "data: ")
				if !ok || data == "[DONE]" {
					continue
				}
				var ev struct {
					Choices []struct {
						TokenIDs []int32 `json:"token_ids"`
					} `json:"choices"`
					Error *struct {
						Message string `json:"message"`
					} `json:"error"`
				}
				if err := json.Unmarshal([]byte(data), &ev); err != nil {
					res[i].errMsg = err.Error()
					return
				}
				if ev.Error != nil {
					res[i].errMsg = ev.Error.Message
				}
				for _, c := range ev.Choices {
					res[i].tokens = append(res[i].tokens, c.TokenIDs...)
				}
				res[i].times = append(res[i].times, time.Now())
				if kill != nil && !held {
					held = true
					once.Do(func() { close(first) })
					<-resume
				}
			}
			if err := sc.Err(); err != nil {
				res[i].errMsg = err.Error()
			}
		}()
	}
	if kill != nil {
		<-first
		kill()
		close(resume)
	}
	wg.Wait()
	return res
}

func (s *restartServer) killEngine(t *testing.T) int {
	t.Helper()
	kids := s.children(t)
	require.Len(t, kids, 1, "one engine process")
	require.NoError(t, syscall.Kill(kids[0], syscall.SIGKILL))
	return kids[0]
}

// TestServeRecomputesAfterEngineKill: under `atom-plugin serve`, the engine subprocess is
// SIGKILLed under 16 greedy streams, twice within the budget of 2: every stream completes with
// exactly the tokens of an uninterrupted run and /health is 200 again. A third kill is beyond
// the budget: the streams end with an error event, /health stays 503, and no engine process
// or socket directory is left.
func TestServeRecomputesAfterEngineKill(t *testing.T) {
	s := startRestartServer(t, nil, "--engine-max-restarts", "2")
	require.Equal(t, http.StatusOK, s.health(t))
	want := s.runStreams(t, nil)
	for i, r := range want {
		require.Empty(t, r.errMsg, "stream %d", i)
		require.Len(t, r.tokens, 250, "stream %d", i)
	}
	var killed []int
	for round := 1; round <= 2; round++ {
		got := s.runStreams(t, func() { killed = append(killed, s.killEngine(t)) })
		for i := range got {
			require.Empty(t, got[i].errMsg, "round %d stream %d", round, i)
			require.Equal(t, want[i].tokens, got[i].tokens, "round %d stream %d", round, i)
		}
		require.Equal(t, http.StatusOK, s.health(t), "round %d", round)
	}
	resp, err := s.hc.Get(s.base + "/metrics")
	require.NoError(t, err)
	metrics, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Contains(t, string(metrics), "atom_engine_restarts_total 2\n")
	// The requests not yet submitted at a kill go to the new engine as they are: 2 to 32.
	require.Regexp(t, `\natom_recomputed_requests_total ([2-9]|[12][0-9]|3[0-2])\n`, string(metrics))

	got := s.runStreams(t, func() { killed = append(killed, s.killEngine(t)) })
	for i := range got {
		require.Contains(t, got[i].errMsg, "restart budget", "stream %d", i)
	}
	require.Equal(t, http.StatusServiceUnavailable, s.health(t))
	require.Empty(t, s.children(t), "no engine process is left")
	for _, pid := range killed {
		require.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "process %d is left", pid)
	}
	s.requireClean(t)
}

// TestServeRecomputesSeededAfterEngineKill: seeded sampled streams (16 seeds, top-p and top-k
// cuts) through `atom-plugin serve`; the engine is SIGKILLed mid-stream, and every stream
// completes with exactly the tokens of an uninterrupted run: the recomputed requests' draws
// continue at their output offset.
func TestServeRecomputesSeededAfterEngineKill(t *testing.T) {
	s := startRestartServer(t, nil)
	params := func(i int) map[string]any {
		return map[string]any{"temperature": 0.7 + 0.1*float64(i%4), "seed": 1000 + i, "top_p": 0.9, "top_k": 8 * (i % 3)}
	}
	want := s.runStreamsWith(t, params, nil)
	for i, r := range want {
		require.Empty(t, r.errMsg, "stream %d", i)
		require.Len(t, r.tokens, 250, "stream %d", i)
	}
	require.NotEqual(t, want[0].tokens, want[1].tokens)
	got := s.runStreamsWith(t, params, func() { s.killEngine(t) })
	for i := range got {
		require.Empty(t, got[i].errMsg, "stream %d", i)
		require.Equal(t, want[i].tokens, got[i].tokens, "stream %d", i)
	}
	require.Equal(t, http.StatusOK, s.health(t))
}

// requireClean checks that no socket directory is left, then stops the server, which must exit 0.
func (s *restartServer) requireClean(t *testing.T) {
	t.Helper()
	left, err := filepath.Glob(filepath.Join(s.tmp, "*"))
	require.NoError(t, err)
	require.Empty(t, left, "socket directories are left")
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, s.cmd.Wait(), "stderr: %s", s.stderr.String())
}

// TestServeGivesUpOnACrashLoop: every engine panics at its 10th output message (the fault
// injection, inherited by each restarted engine), with a budget of one restart. 16 streams need
// at least 16 messages, so both engines die with streams in flight: every stream ends, with its
// tokens or with an error event naming the budget, /health stays 503, and nothing is left.
func TestServeGivesUpOnACrashLoop(t *testing.T) {
	s := startRestartServer(t, []string{"ATOM_GO_DEBUG_FAULT=panic@10"}, "--engine-max-restarts", "1")
	require.Equal(t, http.StatusOK, s.health(t))
	res := s.runStreams(t, nil)
	failed := 0
	for i, r := range res {
		if r.errMsg != "" {
			require.Contains(t, r.errMsg, "restart budget", "stream %d", i)
			failed++
		} else {
			require.Len(t, r.tokens, 250, "stream %d", i)
		}
	}
	require.Positive(t, failed)
	require.Equal(t, http.StatusServiceUnavailable, s.health(t))
	require.Empty(t, s.children(t), "no engine process is left")
	require.Contains(t, s.stderr.String(), "injected panic")
	s.requireClean(t)
}

// TestServeSubprocessMetricsShowTheEngine: in subprocess mode /metrics shows the live engine's
// figures, fetched with the Stats RPC. The engine's third forward pass stalls (the fault
// injection), so a streamed request that got its first token is running, deterministically:
// the scrape sees it running, its KV blocks in use and the figures of the last finished step.
func TestServeSubprocessMetricsShowTheEngine(t *testing.T) {
	s := startRestartServer(t, []string{"ATOM_GO_DEBUG_FAULT=stall@3"})
	body, _ := json.Marshal(map[string]any{"prompt": []int{1, 10, 200, 7}, "max_tokens": 100,
		"temperature": 0, "ignore_eos": true, "stream": true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+"/v1/completions", bytes.NewReader(body))
	require.NoError(t, err)
	resp, err := s.hc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "data: ") {
	}
	require.NoError(t, sc.Err())
	// The first token can arrive while the second pass still runs: scrape once the engine is
	// held inside the third.
	require.True(t, s.stderr.waitFor("injected stall at forward pass", time.Minute), "stderr: %s", s.stderr.String())
	mresp, err := s.hc.Get(s.base + "/metrics")
	require.NoError(t, err)
	raw, err := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	require.NoError(t, err)
	metrics := map[string]float64{}
	for _, line := range strings.Split(string(raw), "\n") {
		var name string
		var v float64
		if _, err := fmt.Sscanf(line, "%s %g", &name, &v); err == nil && !strings.HasPrefix(line, "#") {
			metrics[name] = v
		}
	}
	require.Equal(t, 1.0, metrics["atom_num_requests_running"], "%s", raw)
	require.Equal(t, 1.0, metrics["atom_engine_stats_stale"], "the engine is inside its stalled step")
	require.Positive(t, metrics["atom_kv_cache_usage_perc"])
	require.Positive(t, metrics["atom_kv_cache_blocks_total"])
	require.Equal(t, 2.0, metrics["atom_generation_tokens_total"], "two passes finished: two tokens")
	require.Equal(t, 4.0, metrics["atom_prompt_tokens_total"])
}
