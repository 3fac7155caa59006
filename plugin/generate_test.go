package plugin_test

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/atom-go/atom/bridge/pb"
	"github.com/atom-go/atom/engine"
	"github.com/atom-go/atom/plugin"
)

func greedyParams(maxTokens int32) *pb.SamplingParams {
	t := 0.0
	return &pb.SamplingParams{Temperature: &t, MaxTokens: maxTokens, IgnoreEos: true}
}

// collected is a Generate stream merged per choice.
type collected struct {
	first   *pb.GenerateResponse
	choices map[int32]*pb.Output
	msgs    int
}

func collect(ctx context.Context, conn *plugin.Conn, req *pb.GenerateRequest) (*collected, error) {
	stream, err := conn.Generate(ctx, req)
	if err != nil {
		return nil, err
	}
	c := &collected{choices: map[int32]*pb.Output{}}
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return c, nil
		}
		if err != nil {
			return c, err
		}
		if c.first == nil {
			c.first = resp
		}
		c.msgs++
		for _, o := range resp.GetOutputs() {
			m := c.choices[o.GetIndex()]
			if m == nil {
				m = &pb.Output{Index: o.GetIndex()}
				c.choices[o.GetIndex()] = m
			}
			m.TokenIds = append(m.TokenIds, o.GetTokenIds()...)
			m.Text += o.GetText()
			m.Logprobs = append(m.Logprobs, o.GetLogprobs()...)
			m.Finished, m.FinishReason, m.StopReason = o.GetFinished(), o.GetFinishReason(), o.StopReason
			m.NumPromptTokens = o.GetNumPromptTokens()
		}
	}
}

// engineGreedy runs prompts through an in-process engine: the reference for the plugin.
func engineGreedy(t *testing.T, name string, prompts [][]int32, maxTokens int) []engine.Output {
	cfg := engine.DefaultConfig()
	cfg.Model = model(t, name)
	cfg.KVCacheMemory = 16 << 20
	e, err := engine.New(cfg, nil)
	require.NoError(t, err)
	defer e.Close()
	out := make([]engine.Output, len(prompts))
	for i, p := range prompts {
		params := engine.DefaultSamplingParams()
		params.Temperature, params.MaxTokens, params.IgnoreEOS, params.Logprobs = 0, maxTokens, true, 2
		st, err := e.Generate(engine.Request{ID: "ref", PromptIDs: p, Params: params})
		require.NoError(t, err)
		outs, err := st.Collect(testCtx(t))
		require.NoError(t, err)
		out[i] = outs[0]
	}
	return out
}

var testPrompts = [][]int32{{1, 2, 3, 4, 5}, {17, 300, 42}, {9, 8, 7, 6, 5, 4, 3, 2, 1, 100, 200, 300, 383, 0, 1, 2, 3, 4, 5, 6}}

func TestGenerateMatchesEngine(t *testing.T) {
	want := engineGreedy(t, "llama-bf16", testPrompts, 8)
	_, conn := startPlugin(t)
	load(t, conn, "llama-bf16", nil)
	for i, p := range testPrompts {
		params := greedyParams(8)
		params.Logprobs = 2
		got, err := collect(testCtx(t), conn, &pb.GenerateRequest{RequestId: "g", PromptTokenIds: p, Params: params})
		require.NoError(t, err)
		c := got.choices[0]
		require.Equal(t, want[i].TokenIDs, c.GetTokenIds(), "prompt %d", i)
		require.True(t, c.GetFinished())
		require.Equal(t, "length", c.GetFinishReason())
		require.Equal(t, int32(len(p)), c.GetNumPromptTokens())
		require.Len(t, c.GetLogprobs(), 8)
		for j, lp := range c.GetLogprobs() {
			require.Equal(t, want[i].Logprobs[j].Token, lp.GetToken())
			require.InDelta(t, want[i].Logprobs[j].Logprob, lp.GetLogprob(), 1e-5)
			require.Equal(t, want[i].Logprobs[j].TopIDs, lp.GetTopIds())
		}
		require.Empty(t, got.first.GetPromptTokenIds(), "token-id prompts are not echoed")
	}
}

func TestGenerateTextAndStops(t *testing.T) {
	_, conn := startPlugin(t)
	info := load(t, conn, "qwen2-bf16", nil)
	require.True(t, info.GetHasTokenizer())
	ctx := testCtx(t)
	got, err := collect(ctx, conn, &pb.GenerateRequest{RequestId: "text", Prompt: "Hello world", Params: greedyParams(6)})
	require.NoError(t, err)
	require.NotEmpty(t, got.first.GetPromptTokenIds(), "a text prompt's ids come back on the first message")
	toks := got.choices[0].GetTokenIds()
	require.Len(t, toks, 6)

	// The same prompt as ids, stopped by its third token: stop_token carries it.
	params := greedyParams(6)
	params.StopTokenIds = []int32{toks[2]}
	stopped, err := collect(ctx, conn, &pb.GenerateRequest{RequestId: "stop", PromptTokenIds: got.first.GetPromptTokenIds(), Params: params})
	require.NoError(t, err)
	c := stopped.choices[0]
	require.Equal(t, "stop", c.GetFinishReason())
	require.Equal(t, toks[2], c.GetStopToken())

	// n=3 with sampling: three choices, each finished.
	temp, seed := 1.0, int64(7)
	multi, err := collect(ctx, conn, &pb.GenerateRequest{RequestId: "n3", PromptTokenIds: []int32{1, 2, 3},
		Params: &pb.SamplingParams{N: 3, Temperature: &temp, Seed: &seed, MaxTokens: 5, IgnoreEos: true}})
	require.NoError(t, err)
	require.Len(t, multi.choices, 3)
	for _, c := range multi.choices {
		require.Len(t, c.GetTokenIds(), 5)
		require.True(t, c.GetFinished())
	}
}

// longRequest is a generation that takes long enough to be interrupted: 128 choices up to the
// model length, with 20 logprobs each, so its output also far exceeds gRPC's flow-control
// windows while the client does not read.
func longRequest(id string) *pb.GenerateRequest {
	temp := 1.0
	return &pb.GenerateRequest{RequestId: id, PromptTokenIds: []int32{1, 2, 3},
		Params: &pb.SamplingParams{N: 128, Temperature: &temp, IgnoreEos: true, Logprobs: 20}}
}

func TestAbortRPC(t *testing.T) {
	_, conn := startPlugin(t)
	load(t, conn, "llama-bf16", nil)
	ctx := testCtx(t)
	stream, err := conn.Generate(ctx, longRequest("long"))
	require.NoError(t, err)
	_, err = stream.Recv()
	require.NoError(t, err)
	_, err = conn.Abort(ctx, &pb.AbortRequest{RequestId: "long"})
	require.NoError(t, err)
	finished := map[int32]string{}
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		for _, o := range resp.GetOutputs() {
			if o.GetFinished() {
				finished[o.GetIndex()] = o.GetFinishReason()
			}
		}
	}
	require.Len(t, finished, 128)
	require.Contains(t, finished, int32(0))
	require.Equal(t, "abort", finished[0])
	_, err = conn.Abort(ctx, &pb.AbortRequest{RequestId: "long"})
	requireCode(t, err, codes.NotFound, "not running")
}

func TestClientCancelAbortsRequest(t *testing.T) {
	_, conn := startPlugin(t)
	load(t, conn, "llama-bf16", nil)
	ctx, cancel := context.WithCancel(testCtx(t))
	stream, err := conn.Generate(ctx, longRequest("cancelled"))
	require.NoError(t, err)
	_, err = stream.Recv()
	require.NoError(t, err)
	require.Equal(t, int32(1), describe(t, conn).GetRunningRequests())
	cancel()
	for err == nil { // messages received before the cancellation may still be delivered
		_, err = stream.Recv()
	}
	require.Equal(t, codes.Canceled, status.Code(err))
	t0 := time.Now()
	// The server aborts the request in the engine and waits for it to end before it forgets
	// the id; poll for that (a condition, not a sleep).
	require.Eventually(t, func() bool { return describe(t, conn).GetRunningRequests() == 0 }, time.Minute, 10*time.Millisecond)
	t.Log("drained in", time.Since(t0))
	got, err := collect(testCtx(t), conn, &pb.GenerateRequest{RequestId: "cancelled", PromptTokenIds: []int32{1}, Params: greedyParams(2)})
	require.NoError(t, err, "the id is free again")
	require.Len(t, got.choices[0].GetTokenIds(), 2)
}

// TestSIGKILLDuringGenerate: a plugin killed mid-stream gives the client an error, not a hang.
func TestSIGKILLDuringGenerate(t *testing.T) {
	c, conn := startPlugin(t)
	load(t, conn, "llama-bf16", nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // the guard only
	defer cancel()
	stream, err := conn.Generate(ctx, longRequest("killed"))
	require.NoError(t, err)
	_, err = stream.Recv()
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(c.Pid(), syscall.SIGKILL))
	for err == nil {
		_, err = stream.Recv()
	}
	require.NotErrorIs(t, err, io.EOF, "the stream cannot have finished normally")
	require.NoError(t, ctx.Err(), "the client must see the failure before the guard deadline")
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	_, err = conn.Describe(ctx, &pb.DescribeRequest{WireVersion: 1})
	require.Error(t, err)
}

func TestPluginLogsThroughHCLog(t *testing.T) {
	// The engine's slog records reach go-plugin's host logger as hclog JSON lines on stderr.
	var buf syncBuffer
	c := plugin.NewClient(plugin.ClientConfig{Path: binary, Logger: newBufLogger(&buf)})
	t.Cleanup(c.Kill)
	conn, err := c.Connect()
	require.NoError(t, err)
	load(t, conn, "llama-bf16", nil)
	c.Kill()
	require.Contains(t, buf.String(), "engine ready")
	require.Contains(t, buf.String(), filepath.Base(model(t, "llama-bf16")))
}
