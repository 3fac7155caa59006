package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestServeShutsDownGracefully runs the real binary: SIGTERM during a stream ends the stream
// with an error event, then [DONE], and the process exits 0.
func TestServeShutsDownGracefully(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "atom-plugin")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	modelDir, err := filepath.Abs("../../../testdata/models/llama-bf16")
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve", "--model", modelDir, "--port", "0", "--kv-cache-memory", "67108864",
		"--shutdown-grace", "0s")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "stderr: %s", stderr.String())
	_, rest, ok := strings.Cut(strings.TrimSpace(line), " at ")
	require.True(t, ok, line)
	base := strings.TrimSuffix(rest, "/v1")

	hc := &http.Client{Timeout: time.Minute}
	resp, err := hc.Get(base + "/health")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	// A fan-out stream whose output (1024 choices x 250 tokens) far exceeds what the socket
	// buffers hold: while the client reads nothing, the handler cannot finish, so the request is
	// in flight when SIGTERM arrives however fast the engine is.
	prompts := make([][]int, 8)
	for i := range prompts {
		prompts[i] = []int{1, 2, 3 + i}
	}
	body, _ := json.Marshal(map[string]any{"prompt": prompts, "n": 128, "max_tokens": 250, "ignore_eos": true, "stream": true})
	sresp, err := hc.Post(base+"/v1/completions", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer sresp.Body.Close()
	require.Equal(t, http.StatusOK, sresp.StatusCode)
	br := bufio.NewReader(sresp.Body)
	first, err := br.ReadString('\n')
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(first, "data: "), first)

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	all, err := io.ReadAll(br)
	require.NoError(t, err, "the stream ends cleanly")
	events := strings.Split(strings.TrimSpace(string(all)), "\n\n")
	require.Equal(t, "data: [DONE]", events[len(events)-1])
	last := events[len(events)-2]
	require.Contains(t, last, `"error"`, "the stream ends with an error event")
	require.Contains(t, last, "shutting down")

	err = cmd.Wait()
	require.NoError(t, err, "exit status 0; stderr: %s", stderr.String())
	require.Equal(t, 0, cmd.ProcessState.ExitCode())
}
