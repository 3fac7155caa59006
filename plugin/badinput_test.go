package plugin_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/atom-go/atom/bridge"
	"github.com/atom-go/atom/bridge/pb"
	"github.com/atom-go/atom/plugin"
)

// badCall is one bad input: call must fail with code and a message containing msg.
type badCall struct {
	name string
	call func(ctx context.Context, conn *plugin.Conn) error
	code codes.Code
	msg  string
}

// runBad runs each bad call, then valid on the same plugin, which must succeed.
func runBad(t *testing.T, conn *plugin.Conn, tests []badCall, valid func(t *testing.T)) {
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			requireCode(t, tt.call(testCtx(t), conn), tt.code, tt.msg)
			valid(t)
		})
	}
}

func generate(req *pb.GenerateRequest) func(ctx context.Context, conn *plugin.Conn) error {
	return func(ctx context.Context, conn *plugin.Conn) error {
		_, err := collect(ctx, conn, req)
		return err
	}
}

func executeRaw(b []byte) func(ctx context.Context, conn *plugin.Conn) error {
	return func(ctx context.Context, conn *plugin.Conn) error {
		_, err := conn.ExecuteModel(ctx, &pb.ExecuteModelRequest{Payload: b})
		return err
	}
}

func executeEdit(t *testing.T, edit func(p *bridge.ExecuteModelPayload)) func(ctx context.Context, conn *plugin.Conn) error {
	p := &bridge.ExecuteModelPayload{WireVersion: bridge.WireVersion,
		NewRequests:        []bridge.NewRequest{{ReqID: "bad", PromptTokenIDs: []int64{1, 2, 3}, BlockIDs: [][]int64{{1}}}},
		NumScheduledTokens: map[string]int64{"bad": 3}}
	edit(p)
	b, err := bridge.EncodeExecuteModel(p)
	require.NoError(t, err)
	return executeRaw(b)
}

func TestBadInputsBeforeLoad(t *testing.T) {
	_, conn := startPlugin(t)
	tests := []badCall{
		{"generate", generate(&pb.GenerateRequest{RequestId: "a", PromptTokenIds: []int32{1}}), codes.FailedPrecondition, "LoadModel first"},
		{"init kv", func(ctx context.Context, c *plugin.Conn) error {
			_, err := c.InitKVCache(ctx, &pb.InitKVCacheRequest{NumBlocks: 4, BlockSize: 4})
			return err
		}, codes.FailedPrecondition, "LoadModel first"},
		{"execute", executeRaw([]byte{0x80}), codes.FailedPrecondition, "LoadModel first"},
		{"abort", func(ctx context.Context, c *plugin.Conn) error {
			_, err := c.Abort(ctx, &pb.AbortRequest{RequestId: "a"})
			return err
		}, codes.FailedPrecondition, "LoadModel first"},
		{"describe wire version", func(ctx context.Context, c *plugin.Conn) error {
			_, err := c.Describe(ctx, &pb.DescribeRequest{})
			return err
		}, codes.FailedPrecondition, "wire_version 0"},
	}
	loadBad := func(name string, edit func(*pb.LoadModelRequest), code codes.Code, msg string) badCall {
		return badCall{"load " + name, func(ctx context.Context, c *plugin.Conn) error {
			req := &pb.LoadModelRequest{WireVersion: bridge.WireVersion, ModelPath: model(t, "llama-bf16")}
			edit(req)
			_, err := loadProgress(ctx, c, req)
			return err
		}, code, msg}
	}
	tests = append(tests,
		loadBad("wire version", func(r *pb.LoadModelRequest) { r.WireVersion = 7 }, codes.FailedPrecondition, "wire_version 7"),
		loadBad("no path", func(r *pb.LoadModelRequest) { r.ModelPath = "" }, codes.InvalidArgument, "model_path is required"),
		loadBad("missing dir", func(r *pb.LoadModelRequest) { r.ModelPath += "-nope" }, codes.NotFound, "no such file"),
		loadBad("bad flag", func(r *pb.LoadModelRequest) { r.ExtraArgs = []string{"--no-such-flag"} }, codes.InvalidArgument, "no-such-flag"),
		loadBad("stray arg", func(r *pb.LoadModelRequest) { r.ExtraArgs = []string{"stray"} }, codes.InvalidArgument, "not a flag"),
		loadBad("bad device", func(r *pb.LoadModelRequest) { r.Device = "tpu" }, codes.InvalidArgument, "--device"),
		loadBad("negative blocks", func(r *pb.LoadModelRequest) { r.NumKvBlocks = -1 }, codes.InvalidArgument, "must not be negative"),
		loadBad("length over model", func(r *pb.LoadModelRequest) { r.MaxModelLen = 100000 }, codes.InvalidArgument, "exceeds"),
	)
	runBad(t, conn, tests, func(t *testing.T) { require.False(t, describe(t, conn).GetLoaded()) })
	load(t, conn, "llama-bf16", nil)
	require.True(t, describe(t, conn).GetLoaded())
}

func TestBadGenerateInputs(t *testing.T) {
	_, conn := startPlugin(t)
	load(t, conn, "llama-bf16", func(r *pb.LoadModelRequest) { r.MaxModelLen = 64 })
	ok := func(t *testing.T) {
		got, err := collect(testCtx(t), conn, &pb.GenerateRequest{RequestId: "ok", PromptTokenIds: []int32{1, 2}, Params: greedyParams(3)})
		require.NoError(t, err)
		require.Len(t, got.choices[0].GetTokenIds(), 3)
	}
	params := func(edit func(*pb.SamplingParams)) *pb.SamplingParams {
		p := greedyParams(3)
		edit(p)
		return p
	}
	req := func(ids []int32, p *pb.SamplingParams) *pb.GenerateRequest {
		return &pb.GenerateRequest{RequestId: "bad", PromptTokenIds: ids, Params: p}
	}
	tests := []badCall{
		{"empty id", generate(&pb.GenerateRequest{PromptTokenIds: []int32{1}}), codes.InvalidArgument, "request_id is required"},
		{"long id", generate(&pb.GenerateRequest{RequestId: strings.Repeat("x", 5000), PromptTokenIds: []int32{1}}), codes.InvalidArgument, "request_id of 5000 bytes"},
		{"empty prompt", generate(req(nil, nil)), codes.InvalidArgument, "prompt is empty"},
		{"text without tokenizer", generate(&pb.GenerateRequest{RequestId: "t", Prompt: "hi"}), codes.InvalidArgument, "no tokenizer"},
		{"text and ids", generate(&pb.GenerateRequest{RequestId: "t", Prompt: "hi", PromptTokenIds: []int32{1}}), codes.InvalidArgument, "not both"},
		{"token outside vocab", generate(req([]int32{1, 384}, nil)), codes.InvalidArgument, "outside the vocabulary"},
		{"negative token", generate(req([]int32{-1}, nil)), codes.InvalidArgument, "outside the vocabulary"},
		{"prompt over model length", generate(req(make([]int32, 64), nil)), codes.InvalidArgument, "model length 64"},
		{"top_p", generate(req([]int32{1}, params(func(p *pb.SamplingParams) { p.TopP = 1.5 }))), codes.InvalidArgument, "top_p"},
		{"temperature", generate(req([]int32{1}, params(func(p *pb.SamplingParams) { p.Temperature = proto.Float64(-1) }))), codes.InvalidArgument, "temperature"},
		{"n", generate(req([]int32{1}, params(func(p *pb.SamplingParams) { p.N = 1000 }))), codes.InvalidArgument, "n must be"},
		{"logprobs", generate(req([]int32{1}, params(func(p *pb.SamplingParams) { p.Logprobs = 21 }))), codes.InvalidArgument, "logprobs"},
		{"max_tokens", generate(req([]int32{1}, params(func(p *pb.SamplingParams) { p.MaxTokens = -4 }))), codes.InvalidArgument, "max_tokens"},
		{"stop token", generate(req([]int32{1}, params(func(p *pb.SamplingParams) { p.StopTokenIds = []int32{9999} }))), codes.InvalidArgument, "stop_token_ids"},
		{"empty stop", generate(req([]int32{1}, params(func(p *pb.SamplingParams) { p.Stop = []string{""} }))), codes.InvalidArgument, "stop"},
		{"too many stops", generate(req([]int32{1}, params(func(p *pb.SamplingParams) { p.Stop = make([]string, 100) }))), codes.InvalidArgument, "stop strings"},
		{"abort unknown", func(ctx context.Context, c *plugin.Conn) error {
			_, err := c.Abort(ctx, &pb.AbortRequest{RequestId: "nope"})
			return err
		}, codes.NotFound, "not running"},
		{"execute before init", executeRaw([]byte{0x80}), codes.FailedPrecondition, "InitKVCache first"},
		{"init zero blocks", func(ctx context.Context, c *plugin.Conn) error {
			_, err := c.InitKVCache(ctx, &pb.InitKVCacheRequest{NumBlocks: 0, BlockSize: 16})
			return err
		}, codes.InvalidArgument, "must be positive"},
		{"init too many blocks", func(ctx context.Context, c *plugin.Conn) error {
			_, err := c.InitKVCache(ctx, &pb.InitKVCacheRequest{NumBlocks: 1 << 30, BlockSize: 16})
			return err
		}, codes.InvalidArgument, "exceed the cache"},
	}
	runBad(t, conn, tests, ok)

	// A duplicated running id.
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	stream, err := conn.Generate(ctx, longRequest("dup"))
	require.NoError(t, err)
	_, err = stream.Recv()
	require.NoError(t, err)
	_, err = collect(testCtx(t), conn, &pb.GenerateRequest{RequestId: "dup", PromptTokenIds: []int32{1}})
	requireCode(t, err, codes.AlreadyExists, "already running")
	// InitKVCache while a Generate request runs.
	_, err = conn.InitKVCache(testCtx(t), &pb.InitKVCacheRequest{NumBlocks: 8, BlockSize: 16})
	requireCode(t, err, codes.FailedPrecondition, "running")
	ok(t)
}

func TestBadExecuteModelInputs(t *testing.T) {
	_, conn := startPlugin(t)
	load(t, conn, "llama-bf16", func(r *pb.LoadModelRequest) { r.MaxModelLen = 64 })
	initKV(t, conn, 32, 4)
	// A live request "live" with 3 prompt tokens and one sampled token.
	execute(t, conn, &bridge.ExecuteModelPayload{WireVersion: bridge.WireVersion,
		NewRequests:        []bridge.NewRequest{{ReqID: "live", PromptTokenIDs: []int64{1, 2, 3}, BlockIDs: [][]int64{{1, 2}}}},
		NumScheduledTokens: map[string]int64{"live": 3}})
	var n int
	var prev []string
	ok := func(t *testing.T) {
		n++
		id := fmt.Sprint("ok-", n)
		res := execute(t, conn, &bridge.ExecuteModelPayload{WireVersion: bridge.WireVersion, FinishedReqIDs: prev,
			NewRequests:        []bridge.NewRequest{{ReqID: id, PromptTokenIDs: []int64{4, 5, 6}, BlockIDs: [][]int64{{3}}}},
			NumScheduledTokens: map[string]int64{id: 3}})
		prev = []string{id}
		require.Len(t, res.SampledTokenIDs[0], 1)
		require.Equal(t, int32(2), describe(t, conn).GetRunningRequests(), "live and %s", id)
	}
	huge := make([]int64, 64)
	tests := []badCall{
		{"empty payload", executeRaw(nil), codes.InvalidArgument, "truncated"},
		{"garbage", executeRaw([]byte("not msgpack at all")), codes.InvalidArgument, "invalid payload"},
		{"truncated", executeRaw([]byte{0x82, 0xac, 'w', 'i', 'r', 'e'}), codes.InvalidArgument, "msgpack"},
		{"huge array header", executeRaw([]byte{0x81, 0xb2, 's', 'c', 'h', 'e', 'd', 'u', 'l', 'e', 'd', '_', 'n', 'e', 'w', '_', 'r', 'e', 'q', 's', 0xdd, 0x7f, 0xff, 0xff, 0xff}), codes.InvalidArgument, "declares"},
		{"extension type", executeRaw([]byte{0xd6, 0xff, 0, 0, 0, 0}), codes.InvalidArgument, "extension"},
		{"wire version", executeEdit(t, func(p *bridge.ExecuteModelPayload) { p.WireVersion = 9 }), codes.InvalidArgument, "wire_version 9"},
		{"unknown cached id", executeEdit(t, func(p *bridge.ExecuteModelPayload) {
			p.NewRequests = nil
			p.Cached = bridge.CachedRequests{ReqIDs: []string{"ghost"}, NumComputedTokens: []int64{3}}
			p.NumScheduledTokens = map[string]int64{"ghost": 1}
		}), codes.NotFound, "no state"},
		{"duplicated new ids", executeEdit(t, func(p *bridge.ExecuteModelPayload) {
			p.NewRequests = append(p.NewRequests, p.NewRequests[0])
		}), codes.InvalidArgument, "scheduled twice"},
		{"new id already live", executeEdit(t, func(p *bridge.ExecuteModelPayload) {
			p.NewRequests[0].ReqID = "live"
			p.NumScheduledTokens = map[string]int64{"live": 3}
		}), codes.AlreadyExists, "still has its state"},
		{"block out of range", executeEdit(t, func(p *bridge.ExecuteModelPayload) { p.NewRequests[0].BlockIDs = [][]int64{{32}} }), codes.InvalidArgument, "outside the host's KV cache"},
		{"negative block", executeEdit(t, func(p *bridge.ExecuteModelPayload) { p.NewRequests[0].BlockIDs = [][]int64{{-1}} }), codes.InvalidArgument, "block id -1"},
		{"too few blocks", executeEdit(t, func(p *bridge.ExecuteModelPayload) { p.NewRequests[0].BlockIDs = [][]int64{{}} }), codes.InvalidArgument, "KV blocks"},
		{"negative scheduled", executeEdit(t, func(p *bridge.ExecuteModelPayload) { p.NumScheduledTokens["bad"] = -3 }), codes.InvalidArgument, "want 1.."},
		{"negative computed", executeEdit(t, func(p *bridge.ExecuteModelPayload) { p.NewRequests[0].NumComputedTokens = -1 }), codes.InvalidArgument, "num_computed_tokens is -1"},
		{"scheduled past prompt", executeEdit(t, func(p *bridge.ExecuteModelPayload) { p.NumScheduledTokens["bad"] = 4 }), codes.InvalidArgument, "past its 3 known tokens"},
		{"bad sampling params", executeEdit(t, func(p *bridge.ExecuteModelPayload) { p.NewRequests[0].SamplingParams.TopP = 7 }), codes.InvalidArgument, "top_p"},
		{"prompt over model length", executeEdit(t, func(p *bridge.ExecuteModelPayload) {
			p.NewRequests[0].PromptTokenIDs = huge
			p.NewRequests[0].BlockIDs = [][]int64{{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}}
		}), codes.InvalidArgument, "model length 64"},
		{"token outside vocab", executeEdit(t, func(p *bridge.ExecuteModelPayload) { p.NewRequests[0].PromptTokenIDs[0] = 384 }), codes.InvalidArgument, "vocabulary"},
		{"cached outputs mismatch", executeEdit(t, func(p *bridge.ExecuteModelPayload) {
			p.NewRequests = nil
			p.Cached = bridge.CachedRequests{ReqIDs: []string{"live"}, NumComputedTokens: []int64{3}, NumOutputTokens: []int64{99}}
			p.NumScheduledTokens = map[string]int64{"live": 1}
		}), codes.InvalidArgument, "counts 99 output tokens"},
		{"init kv again while live is fine but bad geometry is not", func(ctx context.Context, c *plugin.Conn) error {
			_, err := c.InitKVCache(ctx, &pb.InitKVCacheRequest{NumBlocks: 1 << 30, BlockSize: 4})
			return err
		}, codes.InvalidArgument, "exceed the cache"},
	}
	runBad(t, conn, tests, ok)
}
