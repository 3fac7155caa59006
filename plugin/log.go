package plugin

import (
	"context"
	"io"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/atom-go/atom/engine"
)

// NewHCLogger returns the plugin's logger: hclog's JSON lines on w (the process's real stderr,
// which go-plugin's host parses and relays), at ATOM_GO_LOG_LEVEL.
func NewHCLogger(w io.Writer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:       "atom-plugin",
		Output:     w,
		JSONFormat: true,
		Level:      hclog.LevelFromString(strings.ToLower(engine.Env("ATOM_GO_LOG_LEVEL"))),
	})
}

// SlogFromHCLog returns a slog.Logger (what package engine logs with) writing to l.
func SlogFromHCLog(l hclog.Logger) *slog.Logger { return slog.New(&hclogHandler{l: l}) }

// hclogHandler is a slog.Handler that forwards records to an hclog.Logger.
type hclogHandler struct {
	l      hclog.Logger
	attrs  []any
	prefix string
}

func (h *hclogHandler) Enabled(_ context.Context, level slog.Level) bool {
	return h.l.GetLevel() <= hclogLevel(level)
}

func (h *hclogHandler) Handle(_ context.Context, r slog.Record) error {
	args := append([]any(nil), h.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		args = append(args, h.prefix+a.Key, a.Value.Resolve().Any())
		return true
	})
	h.l.Log(hclogLevel(r.Level), r.Message, args...)
	return nil
}

func (h *hclogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append([]any(nil), h.attrs...)
	for _, a := range attrs {
		c.attrs = append(c.attrs, h.prefix+a.Key, a.Value.Resolve().Any())
	}
	return &c
}

func (h *hclogHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.prefix = h.prefix + name + "."
	return &c
}

func hclogLevel(l slog.Level) hclog.Level {
	switch {
	case l < slog.LevelInfo:
		return hclog.Debug
	case l < slog.LevelWarn:
		return hclog.Info
	case l < slog.LevelError:
		return hclog.Warn
	default:
		return hclog.Error
	}
}
