package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// metrics scrapes /metrics into name -> value (unlabelled lines).
func (s *restartServer) metrics(t *testing.T) map[string]float64 {
	t.Helper()
	resp, err := s.hc.Get(s.base + "/metrics")
	require.NoError(t, err)
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	m := map[string]float64{}
	for _, line := range strings.Split(string(raw), "\n") {
		var name string
		var v float64
		if _, err := fmt.Sscanf(line, "%s %g", &name, &v); err == nil && !strings.HasPrefix(line, "#") {
			m[name] = v
		}
	}
	return m
}

// TestServeRecoversFromADeviceFault: the first engine corrupts its device state at its 20th
// output message (devicefault@20:1; simulated on the cpu, where the next step fails as a lost
// device does), exits with status 4, and is restarted; the 16 greedy streams in flight
// complete with exactly the tokens of a run on the clean second engine, and /metrics counts the
// restart, the recomputed requests and the recovery time.
func TestServeRecoversFromADeviceFault(t *testing.T) {
	s := startRestartServer(t, []string{"ATOM_GO_DEBUG_FAULT=devicefault@20:1"}, "--engine-max-restarts", "1")
	got := s.runStreams(t, nil)
	require.Contains(t, s.stderr.String(), "the device is lost: exiting so that the host restarts the engine")
	require.Contains(t, s.stderr.String(), "exit status 4")
	want := s.runStreams(t, nil) // the restarted engine is not armed: an uninterrupted run
	for i := range got {
		require.Empty(t, got[i].errMsg, "stream %d", i)
		require.Empty(t, want[i].errMsg, "stream %d", i)
		require.Len(t, want[i].tokens, 250, "stream %d", i)
		require.Equal(t, want[i].tokens, got[i].tokens, "stream %d", i)
	}
	require.Equal(t, http.StatusOK, s.health(t))
	m := s.metrics(t)
	require.Equal(t, 1.0, m["atom_engine_restarts_total"])
	require.GreaterOrEqual(t, m["atom_recomputed_requests_total"], 1.0)
	require.LessOrEqual(t, m["atom_recomputed_requests_total"], 16.0)
	require.Positive(t, m["atom_engine_recovery_seconds"])
	require.Len(t, s.children(t), 1, "one engine process")
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, s.cmd.Wait(), "stderr: %s", s.stderr.String())
	left, err := filepath.Glob(filepath.Join(s.tmp, "*"))
	require.NoError(t, err)
	require.Empty(t, left, "socket directories are left")
}

// TestServeHealthWhileTheEngineRestarts: /health answers 503 while a killed engine is being
// restarted and 200 once the new one serves. The restart is held at a known point without
// timing: the served checkpoint's config.json is swapped for a FIFO before the kill, so the new
// engine's load blocks opening it until the test opens the FIFO's other end; the test then
// reads /health, puts the file back and feeds the FIFO, and the streams carry on.
func TestServeHealthWhileTheEngineRestarts(t *testing.T) {
	src, err := filepath.Abs("../../../testdata/models/llama-bf16")
	require.NoError(t, err)
	dir := t.TempDir()
	files, err := os.ReadDir(src)
	require.NoError(t, err)
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(src, f.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f.Name()), b, 0o644))
	}
	s := startRestartServerOn(t, dir, nil)
	want := s.runStreams(t, nil)
	cfgPath := filepath.Join(dir, "config.json")
	config, err := os.ReadFile(cfgPath)
	require.NoError(t, err)
	fifo := filepath.Join(dir, "config.fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	require.NoError(t, os.Rename(fifo, cfgPath))
	var during, after int
	got := s.runStreams(t, func() {
		s.killEngine(t)
		w, err := os.OpenFile(cfgPath, os.O_WRONLY, 0) // returns once the new engine opened it
		require.NoError(t, err)
		during = s.health(t)
		require.NoError(t, os.WriteFile(cfgPath+".tmp", config, 0o644))
		require.NoError(t, os.Rename(cfgPath+".tmp", cfgPath)) // later reads get the file
		_, err = w.Write(config)
		require.NoError(t, err)
		require.NoError(t, w.Close())
	})
	after = s.health(t)
	require.Equal(t, http.StatusServiceUnavailable, during, "while the engine restarts")
	require.Equal(t, http.StatusOK, after, "once the new engine serves")
	for i := range got {
		require.Empty(t, got[i].errMsg, "stream %d", i)
		require.Equal(t, want[i].tokens, got[i].tokens, "stream %d", i)
	}
	require.Equal(t, 1.0, s.metrics(t)["atom_engine_restarts_total"])
}
