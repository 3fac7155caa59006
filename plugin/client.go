package plugin

import (
	"context"
	"fmt"
	"io"
	"os/exec"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health/grpc_health_v1"

	"github.com/atom-go/atom/bridge"
	"github.com/atom-go/atom/bridge/pb"
)

// Conn is a host's gRPC connection to atom-plugin: the AtomEngine client and the connection,
// for go-plugin's own services (health, controller, stdio).
type Conn struct {
	pb.AtomEngineClient
	ClientConn *grpc.ClientConn
}

// Health checks go-plugin's health service for the "plugin" service.
func (c *Conn) Health(ctx context.Context) error {
	resp, err := grpc_health_v1.NewHealthClient(c.ClientConn).Check(ctx, &grpc_health_v1.HealthCheckRequest{Service: goplugin.GRPCServiceName})
	if err != nil {
		return fmt.Errorf("health check: %w", err)
	}
	if s := resp.GetStatus(); s != grpc_health_v1.HealthCheckResponse_SERVING {
		return fmt.Errorf("health check: plugin is %s", s)
	}
	return nil
}

// ClientConfig says how to start atom-plugin as a go-plugin subprocess.
type ClientConfig struct {
	// Path of the atom-plugin binary; Args are passed to it (none: serve).
	Path string
	Args []string
	// Logger receives go-plugin's client logs and the plugin's relayed log lines; nil: none.
	Logger hclog.Logger
	// Stdout and Stderr receive what the plugin writes to its stdout/stderr after the
	// handshake (go-plugin's stdio stream); nil: discarded.
	Stdout, Stderr io.Writer
}

// Client is a started atom-plugin subprocess.
type Client struct {
	*goplugin.Client
}

// NewClient prepares the plugin subprocess the way a framework host does: go-plugin's client
// with the handshake, AutoMTLS, gRPC only, and message limits raised. Nothing runs until
// Start or Connect.
func NewClient(cfg ClientConfig) *Client {
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	stdout, stderr := cfg.Stdout, cfg.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	return &Client{goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: map[int]goplugin.PluginSet{bridge.ProtocolVersion: {bridge.PluginName: &EnginePlugin{}}},
		Cmd:              exec.Command(cfg.Path, cfg.Args...),
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		AutoMTLS:         true,
		Logger:           log,
		SyncStdout:       stdout,
		SyncStderr:       stderr,
		GRPCDialOptions: []grpc.DialOption{grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(bridge.MaxMessageBytes), grpc.MaxCallSendMsgSize(bridge.MaxMessageBytes))},
	})}
}

// Connect completes the handshake (starting the process if Start was not called), connects
// and dispenses the engine service.
func (c *Client) Connect() (*Conn, error) {
	rpc, err := c.Client.Client()
	if err != nil {
		return nil, fmt.Errorf("connect to atom-plugin: %w", err)
	}
	raw, err := rpc.Dispense(bridge.PluginName)
	if err != nil {
		return nil, fmt.Errorf("dispense %q: %w", bridge.PluginName, err)
	}
	conn, ok := raw.(*Conn)
	if !ok {
		return nil, fmt.Errorf("dispense %q: got %T", bridge.PluginName, raw)
	}
	return conn, nil
}

// Pid returns the plugin's process id, 0 before it started.
func (c *Client) Pid() int {
	if rc := c.ReattachConfig(); rc != nil {
		return rc.Pid
	}
	return 0
}
