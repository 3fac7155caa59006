package openai

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Serve answers on ln until ctx ends, then shuts down gracefully: it stops accepting, lets the
// requests in flight go on for ShutdownGrace, aborts those still running (a stream ends with an
// error event, a plain request gets a 503) and returns nil once every handler has returned.
//
// Timeouts: ReadHeaderTimeout for the headers, BodyTimeout for each body (set per request, so
// that it never ends a long stream), IdleTimeout between keep-alive requests and WriteTimeout
// per write. At most MaxConnections connections are open; one more is answered 503.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	ll := newLimitListener(ln, s.opts.MaxConnections)
	s.conns.Store(ll)
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: s.opts.ReadHeaderTimeout,
		IdleTimeout:       s.opts.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ll) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.log.Info("shutting down", "grace", s.opts.ShutdownGrace, "pending_seqs", s.pending.Load())
	s.draining.Store(true)
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(context.Background()) }()
	grace := time.NewTimer(s.opts.ShutdownGrace)
	defer grace.Stop()
	select {
	case <-shut:
	case <-grace.C:
		s.abortInFlight()
		// Handlers end their answers now; one stuck writing to a client that stopped reading is
		// cut by its write deadline, and the connections are closed outright after that.
		cut := time.NewTimer(s.opts.WriteTimeout + time.Second)
		defer cut.Stop()
		select {
		case <-shut:
		case <-cut.C:
			_ = srv.Close()
			<-shut
		}
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	ll.wg.Wait()
	return nil
}

// abortInFlight ends every request in flight with errShutdown.
func (s *Server) abortInFlight() { s.closeOnce.Do(func() { close(s.closing) }) }
