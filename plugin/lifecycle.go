package plugin

import (
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
)

// How the plugin ends. A host stops it with go-plugin's GRPCController/Shutdown; atom-plugin
// also stops on SIGTERM or SIGHUP, and when its host is gone (the process was re-parented: a
// host killed with SIGKILL cannot stop it), so that neither the process nor its socket and
// socket directory outlive the host. Stopping removes the socket directory, then stops the
// gRPC server, which makes goplugin.Serve return and Serve's deferred cleanup (the engine) run;
// a stop that takes longer than stopGrace (a model load holding the engine) exits at once.
// SIGINT stays ignored, as go-plugin wants: a terminal's Ctrl-C reaches the host's whole
// process group, and the host decides.

const (
	// stopGrace bounds how long a stop waits for Serve to return.
	stopGrace = 5 * time.Second
	// parentPoll is how often the plugin checks that its host still runs.
	parentPoll = 200 * time.Millisecond
)

// lifecycle watches for the reasons to stop and stops the plugin's gRPC server.
type lifecycle struct {
	log  hclog.Logger
	dir  *socketDir
	once sync.Once
	done chan struct{}

	mu  sync.Mutex
	srv *grpc.Server // nil until go-plugin builds it
}

func newLifecycle(log hclog.Logger, dir *socketDir) *lifecycle {
	return &lifecycle{log: log, dir: dir, done: make(chan struct{})}
}

// server wraps go-plugin's server constructor to keep the server it builds.
func (l *lifecycle) server(build func([]grpc.ServerOption) *grpc.Server) func([]grpc.ServerOption) *grpc.Server {
	return func(opts []grpc.ServerOption) *grpc.Server {
		s := build(opts)
		l.mu.Lock()
		l.srv = s
		l.mu.Unlock()
		return s
	}
}

// hostPID is the process's parent when the program started: read as early as possible, so
// that a host dying while the plugin starts up is still seen going.
var hostPID = os.Getppid()

// start watches, until close, for SIGTERM, SIGHUP and the process's parent no longer being
// hostPID. The signals are caught from the moment start returns: a host may signal as soon as
// it has read the handshake line.
func (l *lifecycle) start() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGHUP)
	go l.watch(sigs, hostPID)
}

// watch stops the plugin on a signal from sigs or once the parent is no longer parent.
func (l *lifecycle) watch(sigs chan os.Signal, parent int) {
	defer signal.Stop(sigs)
	t := time.NewTicker(parentPoll)
	defer t.Stop()
	tick := t.C
	for {
		select {
		case <-l.done:
			return
		case s := <-sigs:
			l.stop("received " + s.String())
		case <-tick:
			if os.Getppid() != parent {
				tick = nil
				l.stop("the host process exited (pid " + strconv.Itoa(parent) + ")")
			}
		}
	}
}

// stop stops the gRPC server (once), or exits at once when it is not serving yet. The socket
// directory goes first: after a host's death, nothing that follows (a log line to its pipe,
// closing the engine) may keep it from going.
func (l *lifecycle) stop(why string) {
	l.once.Do(func() {
		l.dir.remove()
		l.log.Info("stopping", "reason", why)
		l.mu.Lock()
		srv := l.srv
		l.mu.Unlock()
		if srv == nil {
			l.exit(1)
		}
		time.AfterFunc(stopGrace, func() {
			l.log.Warn("the plugin did not stop in time; exiting", "grace", stopGrace.String())
			l.exit(1)
		})
		srv.Stop()
	})
}

// exit removes the socket directory and ends the process.
func (l *lifecycle) exit(code int) {
	l.dir.remove()
	os.Exit(code)
}

// close ends watch.
func (l *lifecycle) close() { close(l.done) }
