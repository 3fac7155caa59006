package plugin_test

import (
	"fmt"
	"os"
	"sync"
	"syscall"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/bridge"
	"github.com/atom-go/atom/bridge/pb"
	"github.com/atom-go/atom/plugin"
)

// startSupervisor supervises a real atom-plugin with llama-bf16 loaded; its socket directories
// are made under the returned directory, so that a test sees what is left behind. At most 4
// sequences run at once, so that a batch of 16 long requests is far from done when the first
// token of the first one arrives.
func startSupervisor(t *testing.T, maxRestarts int) (*plugin.Supervisor, string) {
	t.Helper()
	base := t.TempDir()
	s, err := plugin.StartSupervisor(testCtx(t), plugin.SupervisorConfig{
		Client: plugin.ClientConfig{Path: binary, SocketDirBase: base,
			Logger: hclog.New(&hclog.LoggerOptions{Name: "host", Output: os.Stderr, Level: hclog.Error})},
		Load: &pb.LoadModelRequest{WireVersion: bridge.WireVersion, ModelPath: model(t, "llama-bf16"),
			KvCacheMemoryBytes: 64 << 20, MaxNumBatchedTokens: 512, MaxNumSeqs: 4, ExtraArgs: []string{"--threads=2"}},
		MaxRestarts: maxRestarts,
	})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s, base
}

const streams = 16

// request i of a batch: a distinct prompt, greedy, up to the model's length (256).
func batchRequest(i int) *pb.GenerateRequest {
	return &pb.GenerateRequest{RequestId: fmt.Sprint("r", i),
		PromptTokenIds: []int32{1, int32(10 + i), int32(200 + 3*i), 7}, Params: greedyParams(250)}
}

// runBatch runs the 16 requests at once. When kill is set, it is called as soon as the first
// token of the batch arrives: the engine then holds four sequences at their first tokens and
// twelve waiting, so every request is live. Each stream is held at its first message until
// kill has returned.
func runBatch(t *testing.T, s *plugin.Supervisor, reqs func(int) *pb.GenerateRequest, kill func()) ([][]int32, []error) {
	t.Helper()
	ctx := testCtx(t)
	toks := make([][]int32, streams)
	errs := make([]error, streams)
	var done sync.WaitGroup
	var once sync.Once
	first := make(chan struct{})
	resume := make(chan struct{})
	for i := range streams {
		done.Add(1)
		go func() {
			defer done.Done()
			held := false
			errs[i] = s.Generate(ctx, reqs(i), func(resp *pb.GenerateResponse) error {
				for _, o := range resp.GetOutputs() {
					toks[i] = append(toks[i], o.GetTokenIds()...)
				}
				if kill != nil && !held {
					held = true
					once.Do(func() { close(first) })
					<-resume
				}
				return nil
			})
			once.Do(func() { close(first) }) // failed before its first message
		}()
	}
	if kill != nil {
		<-first
		kill()
		close(resume)
	}
	done.Wait()
	return toks, errs
}

func sigkill(t *testing.T, s *plugin.Supervisor) int {
	t.Helper()
	pid := s.Pid()
	require.NotZero(t, pid)
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	return pid
}

// TestSupervisorRecomputesAfterSIGKILL: 16 greedy streams, the engine SIGKILLed mid-batch,
// twice (within the budget): every stream completes with exactly the tokens of an
// uninterrupted run, and the supervisor serves again.
func TestSupervisorRecomputesAfterSIGKILL(t *testing.T) {
	s, _ := startSupervisor(t, 3)
	want, errs := runBatch(t, s, batchRequest, nil)
	for i := range streams {
		require.NoError(t, errs[i])
		require.Len(t, want[i], 250)
	}
	for round := 1; round <= 2; round++ {
		got, errs := runBatch(t, s, batchRequest, func() { sigkill(t, s) })
		for i := range streams {
			require.NoError(t, errs[i], "round %d stream %d", round, i)
			require.Equal(t, want[i], got[i], "round %d stream %d", round, i)
		}
		require.True(t, s.Healthy())
		st := s.Stats()
		require.Equal(t, int64(round), st.Restarts)
		// The streams whose Generate had not begun at the kill go to the new engine as they are.
		require.GreaterOrEqual(t, st.Recomputed, int64(round))
		require.LessOrEqual(t, st.Recomputed, int64(round*streams))
		require.Positive(t, st.LastRecovery)
	}
}

// TestSupervisorGivesUpBeyondBudget: with a budget of one restart, the second death fails the
// streams in flight with ErrEngineGone, Healthy stays false, and neither a process nor a socket
// directory is left.
func TestSupervisorGivesUpBeyondBudget(t *testing.T) {
	s, base := startSupervisor(t, 1)
	var pids []int
	_, errs := runBatch(t, s, batchRequest, func() { pids = append(pids, sigkill(t, s)) })
	for i := range streams {
		require.NoError(t, errs[i])
	}
	_, errs = runBatch(t, s, batchRequest, func() { pids = append(pids, sigkill(t, s)) })
	for i := range streams {
		require.ErrorIs(t, errs[i], plugin.ErrEngineGone, "stream %d", i)
		require.ErrorContains(t, errs[i], "restart budget")
	}
	require.False(t, s.Healthy())
	require.Zero(t, s.Pid())
	for _, pid := range pids {
		require.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "process %d is left", pid)
	}
	left, err := os.ReadDir(base)
	require.NoError(t, err)
	require.Empty(t, left, "socket directories are left")
	err = s.Generate(testCtx(t), batchRequest(0), func(*pb.GenerateResponse) error { return nil })
	require.ErrorIs(t, err, plugin.ErrEngineGone)
}

// TestSupervisorRecomputesSeeded: seeded sampled streams (top-k and top-p cuts included) are
// recomputed with their output offset after a SIGKILL, so each continues with the tokens of an
// uninterrupted run: the sampler's draws go on where they stopped.
func TestSupervisorRecomputesSeeded(t *testing.T) {
	s, _ := startSupervisor(t, 3)
	seeded := func(i int) *pb.GenerateRequest {
		r := batchRequest(i)
		temp, seed := 0.8+0.1*float64(i%3), int64(100+i)
		r.Params.Temperature, r.Params.Seed = &temp, &seed
		r.Params.TopK, r.Params.TopP = int32(i%2)*20, 0.95
		return r
	}
	want, errs := runBatch(t, s, seeded, nil)
	for i := range streams {
		require.NoError(t, errs[i])
		require.Len(t, want[i], 250)
	}
	require.NotEqual(t, want[0], want[1], "different seeds, different streams")
	got, errs := runBatch(t, s, seeded, func() { sigkill(t, s) })
	for i := range streams {
		require.NoError(t, errs[i], "stream %d", i)
		require.Equal(t, want[i], got[i], "stream %d", i)
	}
	require.Equal(t, int64(1), s.Stats().Restarts)
}

// TestSupervisorRefusesToRecomputePenalised: a request with a presence penalty is not
// recomputed (the penalty counts the engine's own outputs, which a prefill's history is not):
// it fails with the reason rather than continuing with other tokens, and the engine is back
// for the next request.
func TestSupervisorRefusesToRecomputePenalised(t *testing.T) {
	s, _ := startSupervisor(t, 3)
	penalised := func(i int) *pb.GenerateRequest {
		r := batchRequest(i)
		r.Params.PresencePenalty = 0.5
		return r
	}
	toks, errs := runBatch(t, s, penalised, func() { sigkill(t, s) })
	failed := 0
	for i := range streams {
		if errs[i] == nil { // its Generate began after the kill, on the new engine
			require.Len(t, toks[i], 250, "stream %d", i)
			continue
		}
		require.ErrorContains(t, errs[i], "cannot be recomputed (presence or frequency penalty)", "stream %d", i)
		failed++
	}
	require.Positive(t, failed, "the stream held at the kill fails")
	_, errs = runBatch(t, s, batchRequest, nil)
	for i := range streams {
		require.NoError(t, errs[i])
	}
}

// TestSupervisorWithoutRestarts: MaxRestarts < 0 (serve's --engine-max-restarts 0) gives up at
// the first death.
func TestSupervisorWithoutRestarts(t *testing.T) {
	s, base := startSupervisor(t, -1)
	_, errs := runBatch(t, s, batchRequest, func() { sigkill(t, s) })
	for i := range streams {
		require.ErrorIs(t, errs[i], plugin.ErrEngineGone, "stream %d", i)
	}
	require.ErrorIs(t, s.Ready(), plugin.ErrEngineGone)
	require.Zero(t, s.Stats().Restarts)
	left, err := os.ReadDir(base)
	require.NoError(t, err)
	require.Empty(t, left, "socket directories are left")
}
