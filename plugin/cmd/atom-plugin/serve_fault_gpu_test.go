//go:build gpu

package main

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestServeGPURecovers runs `atom-plugin serve` on the GPU with a prebuilt binary (no Go on the
// GPU machine): ATOM_GO_PLUGIN names it, ATOM_GO_GPU_MODEL the checkpoint (default
// /dev/shm/llama3-8b, from `randmodel --shape llama3-8b`), ATOM_GO_GPU_DTYPE its compute dtype
// (default float32: a recomputed prefix's KV comes from the prefill kernels, the uninterrupted
// run's from the decode kernels, and in bfloat16 their rounding flips near-tied greedy choices
// of a random-weight model). Three runs of 16 concurrent greedy streams:
//
//  1. the first engine corrupts its device state at its FAULT_AT-th output message (the debug
//     fault injection devicefault, armed in the first engine only): a real sticky fault, after
//     which the plugin must exit (status 4) and be restarted, the streams carrying on;
//  2. the clean second engine, uninterrupted: the reference;
//  3. the engine SIGKILLed at the batch's first token, a second death within the budget.
//
// Runs 1 and 3 must equal run 2 token for token; /health is 200 after each. It prints, for
// runs 1 and 3, the longest silence between two tokens of the batch (from the last token before
// the death to the first after the recovery, as a client sees it) and the supervisor's
// recovery time (death to the new engine serving, /metrics).
func TestServeGPURecovers(t *testing.T) {
	bin := os.Getenv("ATOM_GO_PLUGIN")
	if bin == "" {
		t.Skip("ATOM_GO_PLUGIN names no prebuilt atom-plugin binary")
	}
	model := envOr("ATOM_GO_GPU_MODEL", "/dev/shm/llama3-8b")
	_, err := os.Stat(filepath.Join(model, "config.json"))
	require.NoError(t, err, "make the checkpoint with randmodel first")
	const tokens = 128
	faultAt := envOr("FAULT_AT", "320") // 16 streams: about the 20th decode step (fewer if messages carry several tokens)
	s := startServe(t, bin, 8*time.Minute, []string{"ATOM_GO_DEBUG_FAULT=devicefault@" + faultAt + ":1"},
		"--model", model, "--device", "gpu", "--dtype", envOr("ATOM_GO_GPU_DTYPE", "float32"),
		"--max-num-seqs", "16", "--engine-max-restarts", "2")
	params := func(int) map[string]any { return map[string]any{"temperature": 0, "max_tokens": tokens} }

	faulted := s.runStreamsWith(t, params, nil)
	logs := s.stderr.String()
	require.Contains(t, logs, "the device is lost: exiting so that the host restarts the engine")
	require.Contains(t, logs, "exit status 4")
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "the device is lost") {
			t.Logf("engine: %s", line)
		}
	}
	recovery1 := s.metrics(t)["atom_engine_recovery_seconds"]
	require.Equal(t, http.StatusOK, s.health(t))

	want := s.runStreamsWith(t, params, nil)
	for i := range want {
		require.Empty(t, want[i].errMsg, "reference stream %d", i)
		require.Len(t, want[i].tokens, tokens, "reference stream %d", i)
	}
	killed := s.runStreamsWith(t, params, func() { s.killEngine(t) })
	require.Equal(t, http.StatusOK, s.health(t))
	m := s.metrics(t)
	for _, run := range []struct {
		name     string
		got      []streamResult
		recovery float64
	}{{"device fault", faulted, recovery1}, {"SIGKILL", killed, m["atom_engine_recovery_seconds"]}} {
		t.Logf("%s: longest silence between tokens %s (the death to the first token after it); engine restart %.2f s (death to serving)",
			run.name, longestSilence(run.got).Round(time.Millisecond), run.recovery)
		same := 0
		for i := range run.got {
			require.Empty(t, run.got[i].errMsg, "%s: stream %d", run.name, i)
			if slices.Equal(want[i].tokens, run.got[i].tokens) {
				same++
				continue
			}
			k := 0
			for k < min(len(want[i].tokens), len(run.got[i].tokens)) && want[i].tokens[k] == run.got[i].tokens[k] {
				k++
			}
			t.Errorf("%s: stream %d differs from the uninterrupted run at token %d of %d", run.name, i, k, len(run.got[i].tokens))
		}
		t.Logf("%s: %d of %d streams equal to the uninterrupted run", run.name, same, len(run.got))
	}
	require.Equal(t, 2.0, m["atom_engine_restarts_total"])
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, s.cmd.Wait(), "stderr: %s", s.stderr.String())
	left, err := filepath.Glob(filepath.Join(s.tmp, "*"))
	require.NoError(t, err)
	require.Empty(t, left, "socket directories are left")
}

// longestSilence is the longest wait between two consecutive events of any of the streams.
func longestSilence(res []streamResult) time.Duration {
	var all []time.Time
	for _, r := range res {
		all = append(all, r.times...)
	}
	slices.SortFunc(all, func(a, b time.Time) int { return a.Compare(b) })
	var longest time.Duration
	for i := 1; i < len(all); i++ {
		longest = max(longest, all[i].Sub(all[i-1]))
	}
	return longest
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
