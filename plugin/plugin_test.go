package plugin_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/atom-go/atom/bridge"
	"github.com/atom-go/atom/bridge/pb"
	"github.com/atom-go/atom/plugin"
)

// binary is the atom-plugin executable built by TestMain.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "atom-plugin-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "atom-plugin")
	build := exec.Command("go", "build", "-o", binary, "./cmd/atom-plugin")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build atom-plugin: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// model returns the absolute path of a testdata checkpoint.
func model(t testing.TB, name string) string {
	p, err := filepath.Abs(filepath.Join("..", "testdata", "models", name))
	require.NoError(t, err)
	return p
}

// testCtx is the guard deadline of one test's calls.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// startPlugin launches the binary through go-plugin's client, as a framework would.
func startPlugin(t testing.TB) (*plugin.Client, *plugin.Conn) {
	t.Helper()
	c := plugin.NewClient(plugin.ClientConfig{Path: binary,
		Logger: hclog.New(&hclog.LoggerOptions{Name: "host", Output: os.Stderr, Level: hclog.Warn})})
	t.Cleanup(c.Kill)
	conn, err := c.Connect()
	require.NoError(t, err)
	return c, conn
}

// load loads a checkpoint with test-sized limits and returns its ModelInfo.
func load(t testing.TB, conn *plugin.Conn, name string, edit func(*pb.LoadModelRequest)) *pb.ModelInfo {
	t.Helper()
	req := &pb.LoadModelRequest{WireVersion: bridge.WireVersion, ModelPath: model(t, name),
		KvCacheMemoryBytes: 64 << 20, MaxNumBatchedTokens: 512, ExtraArgs: []string{"--threads=2"}}
	if edit != nil {
		edit(req)
	}
	progress, err := loadProgress(testCtx(t), conn, req)
	require.NoError(t, err)
	last := progress[len(progress)-1]
	require.True(t, last.GetDone())
	return last.GetInfo()
}

func loadProgress(ctx context.Context, conn *plugin.Conn, req *pb.LoadModelRequest) ([]*pb.LoadProgress, error) {
	stream, err := conn.LoadModel(ctx, req)
	if err != nil {
		return nil, err
	}
	var out []*pb.LoadProgress
	for {
		p, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, p)
	}
}

func describe(t testing.TB, conn *plugin.Conn) *pb.ModelInfo {
	t.Helper()
	info, err := conn.Describe(testCtx(t), &pb.DescribeRequest{WireVersion: bridge.WireVersion})
	require.NoError(t, err)
	return info
}

func requireCode(t testing.TB, err error, code codes.Code, msg string) {
	t.Helper()
	require.Error(t, err)
	st, ok := status.FromError(err)
	require.True(t, ok, "not a gRPC status: %v", err)
	require.Equal(t, code, st.Code(), "%v", err)
	require.Contains(t, st.Message(), msg)
}

func TestHandshakeHealthDescribe(t *testing.T) {
	c, conn := startPlugin(t)
	require.Equal(t, bridge.ProtocolVersion, c.NegotiatedVersion())
	require.NoError(t, conn.Health(testCtx(t)))
	info := describe(t, conn)
	require.False(t, info.GetLoaded())
	require.Equal(t, uint32(bridge.WireVersion), info.GetWireVersion())
	require.Equal(t, uint32(bridge.ProtocolVersion), info.GetProtocolVersion())
	require.NotEmpty(t, info.GetEngineVersion())
	_, err := conn.Describe(testCtx(t), &pb.DescribeRequest{WireVersion: 99})
	requireCode(t, err, codes.FailedPrecondition, "wire_version 99")
	c.Kill()
	require.True(t, c.Exited())
}

func TestLoadModelStreamsProgressAndReplaces(t *testing.T) {
	_, conn := startPlugin(t)
	progress, err := loadProgress(testCtx(t), conn, &pb.LoadModelRequest{WireVersion: bridge.WireVersion,
		ModelPath: model(t, "llama-bf16"), NumKvBlocks: 64, BlockSize: 8, MaxModelLen: 200, MaxNumSeqs: 8})
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(progress), 2)
	require.Equal(t, "config", progress[0].GetStage())
	last := progress[len(progress)-1]
	require.True(t, last.GetDone())
	require.Equal(t, float32(1), last.GetFraction())
	for _, p := range progress[:len(progress)-1] {
		require.False(t, p.GetDone())
	}
	want := &pb.ModelInfo{WireVersion: bridge.WireVersion, ProtocolVersion: bridge.ProtocolVersion, Loaded: true,
		Architecture: "LlamaForCausalLM", Dtype: "bfloat16", Device: "cpu", VocabSize: 384, MaxModelLen: 200,
		BlockSize: 8, NumKvBlocks: 64, NumLayers: 2, MaxNumSeqs: 8}
	got := last.GetInfo()
	require.Equal(t, want.GetArchitecture(), got.GetArchitecture())
	require.Equal(t, want.GetDtype(), got.GetDtype())
	for name, pair := range map[string][2]int32{
		"vocab": {want.VocabSize, got.VocabSize}, "max_model_len": {want.MaxModelLen, got.MaxModelLen},
		"block_size": {want.BlockSize, got.BlockSize}, "num_kv_blocks": {want.NumKvBlocks, got.NumKvBlocks},
		"num_layers": {want.NumLayers, got.NumLayers}, "max_num_seqs": {want.MaxNumSeqs, got.MaxNumSeqs},
	} {
		require.Equal(t, pair[0], pair[1], name)
	}
	require.Positive(t, got.GetNumKvHeads())
	require.Positive(t, got.GetHeadDim())
	require.NotEmpty(t, got.GetCaptureSizes())
	require.False(t, got.GetHasTokenizer())
	require.Equal(t, int64(2*got.GetNumLayers()*got.GetNumKvHeads()*got.GetHeadDim()*4*8), got.GetKvBlockBytes())
	require.Equal(t, got.GetArchitecture(), describe(t, conn).GetArchitecture())

	// Loading again replaces the model.
	info := load(t, conn, "qwen2-bf16", nil)
	require.Equal(t, "Qwen2ForCausalLM", info.GetArchitecture())
	require.True(t, info.GetHasTokenizer())
	require.Equal(t, "Qwen2ForCausalLM", describe(t, conn).GetArchitecture())
}

func TestBinaryWithoutCookieExits1(t *testing.T) {
	cmd := exec.Command(binary)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, 1, exit.ExitCode())
	require.Contains(t, stderr.String(), "This binary is a plugin. These are not meant to be executed directly.")
	require.Empty(t, stdout.String(), "no handshake line without the cookie")
}

func TestHandshakeCommand(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"no model", []string{"--handshake"}, 0, []string{"ok   launch", "ok   health", "ok   describe", "ok   shutdown"}},
		{"llama", []string{"--handshake", "--model", model(t, "llama-bf16")}, 0, []string{"ok   load", "ok   generate", "8 tokens", "ok   shutdown"}},
		{"qwen2 text", []string{"--handshake", "--model", model(t, "qwen2-bf16"), "--max-tokens", "4"}, 0, []string{"4 tokens", "text "}},
		{"missing model", []string{"--handshake", "--model", model(t, "does-not-exist")}, 1, []string{"FAIL load", "NotFound"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.CommandContext(testCtx(t), binary, tt.args...)
			out, err := cmd.CombinedOutput()
			if tt.code == 0 {
				require.NoError(t, err, "%s", out)
			} else {
				var exit *exec.ExitError
				require.ErrorAs(t, err, &exit, "%s", out)
				require.Equal(t, tt.code, exit.ExitCode(), "%s", out)
			}
			for _, w := range tt.want {
				require.Contains(t, string(out), w)
			}
			if tt.code != 0 {
				require.True(t, strings.Contains(string(out), `step "load" failed`), "%s", out)
			}
		})
	}
}

// syncBuffer is a bytes.Buffer safe for the client's log goroutine and the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func newBufLogger(w io.Writer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "host", Output: w, Level: hclog.Info})
}
