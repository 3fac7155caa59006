package plugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/atom-go/atom/bridge"
	"github.com/atom-go/atom/bridge/pb"
	"github.com/atom-go/atom/engine"
)

// panicky panics in its first Describe and first Generate, then behaves.
type panicky struct {
	pb.UnimplementedAtomEngineServer
	describes, generates int
}

func (p *panicky) Describe(context.Context, *pb.DescribeRequest) (*pb.ModelInfo, error) {
	p.describes++
	if p.describes == 1 {
		var m map[string]int
		m["boom"]++ // a nil-map write: a runtime panic
	}
	return &pb.ModelInfo{WireVersion: bridge.WireVersion}, nil
}

func (p *panicky) Generate(_ *pb.GenerateRequest, s pb.AtomEngine_GenerateServer) error {
	p.generates++
	if p.generates == 1 {
		panic(fmt.Errorf("stream handler failed"))
	}
	return s.Send(&pb.GenerateResponse{RequestId: "ok"})
}

func TestPanicsBecomeInternal(t *testing.T) {
	var logs bytes.Buffer
	srv := NewGRPCServer(hclog.New(&hclog.LoggerOptions{Output: &logs}))(nil)
	pb.RegisterAtomEngineServer(srv, &panicky{})
	lis := bufconn.Listen(1 << 20)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient("passthrough:///bufnet", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	require.NoError(t, err)
	t.Cleanup(func() { cc.Close() })
	c := pb.NewAtomEngineClient(cc)
	ctx := context.Background()

	_, err = c.Describe(ctx, &pb.DescribeRequest{})
	require.Equal(t, codes.Internal, status.Code(err))
	require.Contains(t, err.Error(), "panic")
	_, err = c.Describe(ctx, &pb.DescribeRequest{})
	require.NoError(t, err, "the server survives")

	recv := func() error {
		s, err := c.Generate(ctx, &pb.GenerateRequest{})
		require.NoError(t, err)
		for {
			if _, err := s.Recv(); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
		}
	}
	err = recv()
	require.Equal(t, codes.Internal, status.Code(err))
	require.Contains(t, err.Error(), "stream handler failed")
	require.NoError(t, recv())
	require.Contains(t, logs.String(), "panic in handler")
}

func TestConfigFromRequest(t *testing.T) {
	on, off := true, false
	tests := []struct {
		name string
		req  *pb.LoadModelRequest
		want func(*engine.Config)
		err  string
	}{
		{"defaults", &pb.LoadModelRequest{ModelPath: "m"}, func(c *engine.Config) {}, ""},
		{"fields", &pb.LoadModelRequest{ModelPath: "m", Device: "gpu", Dtype: "float16", KvCacheMemoryBytes: 5 << 20,
			NumKvBlocks: 7, BlockSize: 32, MaxModelLen: 99, MaxNumSeqs: 3, MaxNumBatchedTokens: 64, Tokenizer: "tok",
			EnablePrefixCaching: &off}, func(c *engine.Config) {
			c.Device, c.DType, c.KVCacheMemory, c.NumKVBlocks, c.BlockSize, c.MaxModelLen = "gpu", "float16", 5<<20, 7, 32, 99
			c.MaxNumSeqs, c.MaxNumBatchedTokens, c.Tokenizer, c.NoPrefixCaching = 3, 64, "tok", true
		}, ""},
		{"prefix caching on", &pb.LoadModelRequest{ModelPath: "m", EnablePrefixCaching: &on}, func(c *engine.Config) {}, ""},
		{"extra args win", &pb.LoadModelRequest{ModelPath: "m", BlockSize: 32, ExtraArgs: []string{"--block-size=8", "--threads", "3", "--seed=5"}},
			func(c *engine.Config) { c.BlockSize, c.Threads, c.Seed = 8, 3, 5 }, ""},
		{"no model", &pb.LoadModelRequest{}, nil, "model_path is required"},
		{"unknown flag", &pb.LoadModelRequest{ModelPath: "m", ExtraArgs: []string{"--bogus"}}, nil, "bogus"},
		{"positional", &pb.LoadModelRequest{ModelPath: "m", ExtraArgs: []string{"x"}}, nil, "not a flag"},
		{"invalid", &pb.LoadModelRequest{ModelPath: "m", BlockSize: 5000}, nil, "--block-size"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := configFromRequest(tt.req)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			want := engine.DefaultConfig()
			want.Model = "m"
			tt.want(&want)
			require.Equal(t, want, got)
		})
	}
}

func TestToStatus(t *testing.T) {
	tests := []struct {
		err  error
		code codes.Code
	}{
		{fmt.Errorf("x: %w", engine.ErrInvalidParams), codes.InvalidArgument},
		{fmt.Errorf("x: %w", engine.ErrInvalidRequest), codes.InvalidArgument},
		{fmt.Errorf("x: %w", bridge.ErrInvalidPayload), codes.InvalidArgument},
		{fmt.Errorf("x: %w", engine.ErrUnknownRequest), codes.NotFound},
		{fmt.Errorf("x: %w", engine.ErrRequestExists), codes.AlreadyExists},
		{fmt.Errorf("x: %w", engine.ErrBusy), codes.FailedPrecondition},
		{fmt.Errorf("x: %w", engine.ErrHostMode), codes.FailedPrecondition},
		{engine.ErrClosed, codes.Unavailable},
		{context.Canceled, codes.Canceled},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
		{status.Error(codes.ResourceExhausted, "kept"), codes.ResourceExhausted},
		{errors.New("other"), codes.Internal},
	}
	for _, tt := range tests {
		t.Run(tt.err.Error(), func(t *testing.T) {
			got := toStatus(tt.err)
			require.Equal(t, tt.code, status.Code(got))
			require.Contains(t, got.Error(), tt.err.Error())
		})
	}
	require.NoError(t, toStatus(nil))
}

func TestSlogFromHCLog(t *testing.T) {
	var buf bytes.Buffer
	l := SlogFromHCLog(hclog.New(&hclog.LoggerOptions{Output: &buf, JSONFormat: true, Level: hclog.Info}))
	l.Debug("hidden")
	l.With("a", 1).WithGroup("g").Info("shown", "b", "two")
	l.Error("bad", "err", errors.New("boom"))
	out := buf.String()
	require.NotContains(t, out, "hidden")
	require.Contains(t, out, `"@message":"shown"`)
	require.Contains(t, out, `"a":1`)
	require.Contains(t, out, `"g.b":"two"`)
	require.Contains(t, out, `"@level":"error"`)
	require.Contains(t, out, "boom")
}
