package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/atom-go/atom/bridge/pb"
)

// SupervisorConfig says how a Supervisor starts, loads and restarts its engine.
type SupervisorConfig struct {
	// Client starts the atom-plugin subprocess; every restart uses it again, unchanged.
	Client ClientConfig
	// Load is the LoadModel request sent to every engine the supervisor starts.
	Load *pb.LoadModelRequest
	// MaxRestarts engine deaths within RestartWindow are recovered; one more and the
	// supervisor gives up (a crash loop). Zero values: 3 in 5 minutes; MaxRestarts < 0: none.
	MaxRestarts   int
	RestartWindow time.Duration
	// Log receives the supervisor's own records; nil: none.
	Log hclog.Logger
}

// ErrEngineGone wraps the error requests get once the restart budget is spent.
var ErrEngineGone = errors.New("the engine is gone")

// Supervisor runs atom-plugin as a go-plugin subprocess and keeps it alive: when the engine
// process dies it is restarted with the same arguments and the same LoadModel request, and the
// Generate requests that were running are recomputed on the new engine (see Generate), so that
// their callers see one uninterrupted stream. A restart budget ends a crash loop.
type Supervisor struct {
	cfg SupervisorConfig
	log hclog.Logger

	mu       sync.Mutex
	client   *Client
	conn     *Conn
	gen      uint64        // the engine's generation: it grows by one at each death
	ready    chan struct{} // closed once generation gen is serving (or dead is set)
	deaths   []time.Time   // deaths within the window, for the budget
	dead     error         // set when the budget is spent: every request fails with it
	closed   bool
	restarts atomic.Int64
	recomp   atomic.Int64
	recovery atomic.Int64 // nanoseconds the last restart took, from the death to serving
	info     atomic.Pointer[pb.ModelInfo]
}

// ErrRestarting is what Ready says while a dead engine is being restarted.
var ErrRestarting = errors.New("the engine is restarting after a crash")

// StartSupervisor starts and loads the first engine; it fails if that does.
func StartSupervisor(ctx context.Context, cfg SupervisorConfig) (*Supervisor, error) {
	if cfg.MaxRestarts == 0 {
		cfg.MaxRestarts = 3
	}
	if cfg.RestartWindow == 0 {
		cfg.RestartWindow = 5 * time.Minute
	}
	if cfg.Load == nil {
		return nil, errors.New("supervisor: no LoadModel request")
	}
	s := &Supervisor{cfg: cfg, log: cfg.Log, ready: make(chan struct{})}
	if s.log == nil {
		s.log = hclog.NewNullLogger()
	}
	c, conn, err := s.launch(ctx, 0)
	if err != nil {
		return nil, err
	}
	s.client, s.conn = c, conn
	close(s.ready)
	go s.watch(conn, 0)
	return s, nil
}

// launch starts a fresh plugin for generation gen and loads the model into it.
func (s *Supervisor) launch(ctx context.Context, gen uint64) (*Client, *Conn, error) {
	cfg := s.cfg.Client
	cfg.Env = append(cfg.Env[:len(cfg.Env):len(cfg.Env)], fmt.Sprintf("%s=%d", GenerationEnv, gen))
	c := NewClient(cfg)
	conn, err := c.Connect()
	if err != nil {
		c.Kill()
		return nil, nil, fmt.Errorf("start the engine: %w", err)
	}
	stream, err := conn.LoadModel(ctx, s.cfg.Load)
	for err == nil {
		var p *pb.LoadProgress
		if p, err = stream.Recv(); err == nil && p.GetDone() {
			s.info.Store(p.GetInfo())
			return c, conn, nil
		}
	}
	c.Kill()
	if errors.Is(err, io.EOF) {
		err = errors.New("the load stream ended without its last message")
	}
	return nil, nil, fmt.Errorf("load the engine's model: %w", err)
}

// watch notices the death of generation gen's process while no request is running, so that
// Healthy turns false and the restart starts at once: a connection that leaves Ready is probed
// with go-plugin's health check, which fails at once on a dead socket.
func (s *Supervisor) watch(conn *Conn, gen uint64) {
	cc := conn.ClientConn
	for st := cc.GetState(); ; st = cc.GetState() {
		if st == connectivity.Shutdown {
			s.died(gen, errors.New("the connection to the engine shut down"))
			return
		}
		if st != connectivity.Ready && st != connectivity.Connecting {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := conn.Health(ctx)
			cancel()
			if err != nil {
				s.died(gen, err)
				return
			}
			continue
		}
		if !cc.WaitForStateChange(context.Background(), st) {
			return
		}
		if s.generation() != gen {
			return
		}
	}
}

func (s *Supervisor) generation() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen
}

// died handles the death of generation gen (reported once by whoever sees it first): the dead
// process is reaped and its socket directory removed, then the budget is checked and a restart
// begins, or the supervisor gives up.
func (s *Supervisor) died(gen uint64, cause error) {
	now := time.Now()
	s.mu.Lock()
	if gen != s.gen || s.dead != nil || s.closed {
		s.mu.Unlock()
		return
	}
	s.gen++
	s.ready = make(chan struct{})
	old := s.client
	s.client, s.conn = nil, nil
	kept := s.deaths[:0]
	for _, t := range s.deaths {
		if now.Sub(t) < s.cfg.RestartWindow {
			kept = append(kept, t)
		}
	}
	s.deaths = append(kept, now)
	giveUp := len(s.deaths) > max(s.cfg.MaxRestarts, 0)
	if giveUp {
		s.dead = fmt.Errorf("%w: it died %d times within %s (restart budget %d), last: %v",
			ErrEngineGone, len(s.deaths), s.cfg.RestartWindow, s.cfg.MaxRestarts, cause)
	}
	gen, ready := s.gen, s.ready
	s.mu.Unlock()
	if old != nil {
		old.Kill()
	}
	if giveUp {
		s.log.Error("engine died beyond the restart budget: giving up", "error", cause)
		close(ready)
		return
	}
	s.log.Warn("engine died: restarting it", "error", cause, "generation", gen)
	go s.restart(gen, ready, now)
}

// restart brings generation gen up and opens ready; a failed start spends the budget.
func (s *Supervisor) restart(gen uint64, ready chan struct{}, since time.Time) {
	c, conn, err := s.launch(context.Background(), gen)
	s.mu.Lock()
	if err != nil || s.closed {
		if c != nil {
			defer c.Kill()
		}
		if err == nil {
			err = errors.New("the supervisor is closed")
		}
		s.dead = fmt.Errorf("%w: restart failed: %v", ErrEngineGone, err)
		s.log.Error("engine restart failed: giving up", "error", err)
		s.mu.Unlock()
		close(ready)
		return
	}
	s.client, s.conn = c, conn
	s.restarts.Add(1)
	s.recovery.Store(int64(time.Since(since)))
	s.mu.Unlock()
	s.log.Info("engine restarted", "generation", gen, "took", time.Since(since))
	close(ready)
	go s.watch(conn, gen)
}

// current waits until an engine serves and returns it with its generation.
func (s *Supervisor) current(ctx context.Context) (*Conn, uint64, error) {
	for {
		s.mu.Lock()
		conn, gen, ready, dead := s.conn, s.gen, s.ready, s.dead
		s.mu.Unlock()
		switch {
		case dead != nil:
			return nil, 0, dead
		case conn != nil:
			return conn, gen, nil
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
}

// Healthy reports whether an engine serves now: false while one restarts and after the
// supervisor gave up.
func (s *Supervisor) Healthy() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn != nil && s.dead == nil
}

// Ready returns nil while an engine serves, ErrRestarting while one restarts, and the error
// that made the supervisor give up after that.
func (s *Supervisor) Ready() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.dead != nil:
		return s.dead
	case s.conn == nil:
		return ErrRestarting
	}
	return nil
}

// Info is the loaded model's description, as the last engine started reported it.
func (s *Supervisor) Info() *pb.ModelInfo { return s.info.Load() }

// Pid is the engine process's id, 0 while none runs (for tests and debugging).
func (s *Supervisor) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == nil {
		return 0
	}
	return s.client.Pid()
}

// SupervisorStats are a Supervisor's counters.
type SupervisorStats struct {
	Restarts     int64         // engines restarted after a death
	Recomputed   int64         // requests resubmitted to a restarted engine
	LastRecovery time.Duration // from the last death to the new engine serving
}

// Stats returns the counters.
func (s *Supervisor) Stats() SupervisorStats {
	return SupervisorStats{Restarts: s.restarts.Load(), Recomputed: s.recomp.Load(),
		LastRecovery: time.Duration(s.recovery.Load())}
}

// Close stops the engine for good and removes its socket directory.
func (s *Supervisor) Close() {
	s.mu.Lock()
	s.closed = true
	c := s.client
	s.client, s.conn = nil, nil
	s.mu.Unlock()
	if c != nil {
		c.Kill()
	}
}

// engineDeath reports whether err from a stream means the engine process went away (rather
// than the request being refused or cancelled).
func engineDeath(err error) bool {
	c := status.Code(err)
	return c == codes.Unavailable || (c == codes.Canceled && !errors.Is(err, context.Canceled))
}
