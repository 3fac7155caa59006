package plugin

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/atom-go/atom/bridge"
	"github.com/atom-go/atom/bridge/pb"
)

// Handshake is the go-plugin handshake of atom-plugin: app protocol bridge.ProtocolVersion and
// the magic cookie a host must set.
var Handshake = goplugin.HandshakeConfig{
	ProtocolVersion:  bridge.ProtocolVersion,
	MagicCookieKey:   bridge.MagicCookieKey,
	MagicCookieValue: bridge.MagicCookieValue,
}

// EnginePlugin is the go-plugin plugin of the AtomEngine service: on the plugin side it
// registers Impl on the gRPC server; on the host side it returns a *Conn.
type EnginePlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	// Impl serves the RPCs (plugin side only).
	Impl pb.AtomEngineServer
}

// GRPCServer registers the service.
func (p *EnginePlugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return fmt.Errorf("atom-plugin: EnginePlugin has no server implementation")
	}
	pb.RegisterAtomEngineServer(s, p.Impl)
	return nil
}

// GRPCClient wraps the host's connection to the plugin.
func (p *EnginePlugin) GRPCClient(_ context.Context, _ *goplugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &Conn{AtomEngineClient: pb.NewAtomEngineClient(c), ClientConn: c}, nil
}

// Options configure Serve.
type Options struct {
	// Version is reported as engine_version by Describe.
	Version string
	// Logger receives the plugin's logs; nil: NewHCLogger(os.Stderr).
	Logger hclog.Logger
}

// Serve serves the engine to the go-plugin host that started this process and returns when
// the host shuts it down, or on SIGTERM, SIGHUP or the host's death (lifecycle.go). It prints
// the handshake line at once; no model is loaded until the LoadModel RPC. The socket lives in
// a private directory (socketdir.go) that is removed when Serve returns; a socket directory
// the plugin must not use ends the process with status 1 and the reason on stderr. Started
// without the magic cookie, go-plugin prints its explanation to stderr and exits the process
// with status 1.
func Serve(opts Options) {
	log := opts.Logger
	if log == nil {
		log = NewHCLogger(os.Stderr) // the real stderr: Serve replaces os.Stderr afterwards
	}
	if os.Getenv(bridge.MagicCookieKey) != bridge.MagicCookieValue {
		goplugin.Serve(&goplugin.ServeConfig{HandshakeConfig: Handshake, Logger: log}) // explains, exits 1
		return
	}
	dir, err := prepareSocketDir()
	if err != nil {
		log.Error("plugin socket directory", "error", err)
		os.Exit(1)
	}
	// A host that died leaves broken stdout/stderr pipes: writing to them must fail, not
	// kill the process (Go's default for SIGPIPE on fds 1 and 2) before it cleaned up.
	signal.Ignore(syscall.SIGPIPE)
	srv := NewServer(opts.Version, log)
	defer srv.Close()
	impl, closeRecording := WithRecording(srv, opts.Version, log)
	defer closeRecording()
	defer dir.remove() // before the engine closes: goplugin.Serve has removed the socket
	lc := newLifecycle(log, dir)
	defer lc.close()
	lc.start()
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: map[int]goplugin.PluginSet{bridge.ProtocolVersion: {bridge.PluginName: &EnginePlugin{Impl: impl}}},
		GRPCServer:       lc.server(NewGRPCServer(log)),
		Logger:           log,
	})
}

// NewGRPCServer returns go-plugin's server constructor for atom-plugin: go-plugin's options
// (its TLS credentials under AutoMTLS) plus raised message limits and interceptors that turn a
// handler's panic into codes.Internal, logged to log.
func NewGRPCServer(log hclog.Logger) func([]grpc.ServerOption) *grpc.Server {
	return func(opts []grpc.ServerOption) *grpc.Server {
		opts = append(append([]grpc.ServerOption(nil), opts...),
			grpc.MaxRecvMsgSize(bridge.MaxMessageBytes),
			grpc.MaxSendMsgSize(bridge.MaxMessageBytes),
			grpc.ChainUnaryInterceptor(RecoverUnary(log)),
			grpc.ChainStreamInterceptor(RecoverStream(log)),
		)
		return grpc.NewServer(opts...)
	}
}

// RecoverUnary returns an interceptor turning a panic in a unary handler into codes.Internal.
func RecoverUnary(log hclog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer recoverInto(log, info.FullMethod, &err)
		return handler(ctx, req)
	}
}

// RecoverStream returns an interceptor turning a panic in a streaming handler into
// codes.Internal.
func RecoverStream(log hclog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer recoverInto(log, info.FullMethod, &err)
		return handler(srv, ss)
	}
}

func recoverInto(log hclog.Logger, method string, err *error) {
	if p := recover(); p != nil {
		log.Error("panic in handler", "method", method, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		*err = status.Errorf(codes.Internal, "%s: internal error (panic): %v", method, p)
	}
}
