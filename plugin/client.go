package plugin

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

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
	// AutoMTLS turns on go-plugin's AutoMTLS. Off by default, as in go-plugin's own client and
	// atom-go's Python host: the socket is in a directory only this user can enter, so mutual
	// TLS keeps out no one who could not read the host's memory anyway, and it costs two key
	// generations at start-up and TLS on every message. ATOM_GO_AUTO_MTLS=1 turns it on for
	// `atom-plugin --handshake` and the Python hosts.
	AutoMTLS bool
	// Env is added to the plugin's environment (this process's, which it inherits), last
	// value of a name winning.
	Env []string
	// SocketDirBase is where the plugin's private socket directory is made; "": the system's
	// temporary directory (keep it short: a socket path is limited to about 108 bytes).
	SocketDirBase string
}

// Client is a started atom-plugin subprocess.
type Client struct {
	*goplugin.Client
	cmd  *exec.Cmd
	base string
	env  []string

	mu      sync.Mutex
	sockDir string // the private socket directory, once made
}

// NewClient prepares the plugin subprocess the way a framework host does: go-plugin's client
// with the handshake, gRPC only, message limits raised, AutoMTLS when asked for, and a fresh
// private (0700) socket directory passed in PLUGIN_UNIX_SOCKET_DIR. Nothing runs until Start
// or Connect; Kill stops the plugin and removes the directory.
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
	cmd := exec.Command(cfg.Path, cfg.Args...)
	return &Client{cmd: cmd, base: cfg.SocketDirBase, env: cfg.Env, Client: goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: map[int]goplugin.PluginSet{bridge.ProtocolVersion: {bridge.PluginName: &EnginePlugin{}}},
		Cmd:              cmd,
		// go-plugin would put this process's environment after cmd.Env, so an inherited
		// PLUGIN_UNIX_SOCKET_DIR would win over the private directory: prepare sets it all.
		SkipHostEnv:      true,
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		AutoMTLS:         cfg.AutoMTLS,
		Logger:           log,
		SyncStdout:       stdout,
		SyncStderr:       stderr,
		GRPCDialOptions: []grpc.DialOption{grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(bridge.MaxMessageBytes), grpc.MaxCallSendMsgSize(bridge.MaxMessageBytes))},
	})}
}

// SocketDir is the plugin's private socket directory; "" before Start.
func (c *Client) SocketDir() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sockDir
}

// prepare makes the socket directory and the plugin's environment, once.
func (c *Client) prepare() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sockDir != "" {
		return nil
	}
	dir, err := NewSocketDir(c.base)
	if err != nil {
		return err
	}
	c.sockDir = dir
	env := make([]string, 0, len(os.Environ())+len(c.env)+1)
	for _, kv := range append(os.Environ(), c.env...) {
		if !strings.HasPrefix(kv, EnvSocketDir+"=") {
			env = append(env, kv)
		}
	}
	c.cmd.Env = append(env, EnvSocketDir+"="+dir)
	return nil
}

// Start starts the plugin and completes the handshake; the plugin must listen inside its
// private socket directory.
func (c *Client) Start() (net.Addr, error) {
	if err := c.prepare(); err != nil {
		return nil, err
	}
	addr, err := c.Client.Start()
	if err != nil {
		return nil, err
	}
	if dir := c.SocketDir(); addr.Network() == "unix" && filepath.Dir(addr.String()) != dir {
		c.Kill()
		return nil, fmt.Errorf("atom-plugin listens on %s, outside the private directory %s it was given", addr, dir)
	}
	return addr, nil
}

// Kill stops the plugin (go-plugin's controller, then a kill) and removes its socket
// directory. Safe to call more than once.
func (c *Client) Kill() {
	c.Client.Kill()
	c.mu.Lock()
	dir := c.sockDir
	c.mu.Unlock()
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
}

// Connect completes the handshake (starting the process if Start was not called), connects
// and dispenses the engine service.
func (c *Client) Connect() (*Conn, error) {
	if _, err := c.Start(); err != nil {
		return nil, fmt.Errorf("connect to atom-plugin: %w", err)
	}
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
