package openai

import (
	"flag"
	"fmt"
	"time"

	"github.com/atom-go/atom/engine/tokenizer"
)

// Options are the server's limits and timeouts. Each field is bound to one flag in Register,
// the single place their defaults and descriptions are defined.
type Options struct {
	// MaxRequestBytes bounds one request body (413 beyond it).
	MaxRequestBytes int64
	// MaxTotalRequestBytes bounds the bodies being read and parsed at once, across requests
	// (503 beyond it).
	MaxTotalRequestBytes int64
	// MaxN bounds a request's n.
	MaxN int
	// MaxSeqsPerRequest bounds prompts x n of one request.
	MaxSeqsPerRequest int
	// MaxPendingSeqs bounds the sequences of all requests in flight (503 beyond it).
	MaxPendingSeqs int
	// MaxConnections bounds open connections; one more is answered 503 and closed.
	MaxConnections int
	// ReadHeaderTimeout bounds reading a request's headers, BodyTimeout its body.
	ReadHeaderTimeout, BodyTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle this long.
	IdleTimeout time.Duration
	// WriteTimeout bounds each write (one SSE event, one JSON answer), not a whole stream.
	WriteTimeout time.Duration
	// ShutdownGrace is how long in-flight requests may go on after SIGTERM before they are
	// aborted (streams end with an error event).
	ShutdownGrace time.Duration
	// ChatTemplateTimeout, ChatTemplateMaxOutputBytes, ChatTemplateMaxMemoryBytes and
	// ChatTemplateMaxSteps bound one render of the checkpoint's chat template (its text, what
	// it builds beyond its inputs, its loop iterations and calls); a breach is a 400 naming it,
	// and a template that breaches them on sample conversations is refused at start.
	ChatTemplateTimeout        time.Duration
	ChatTemplateMaxOutputBytes int64
	ChatTemplateMaxMemoryBytes int64
	ChatTemplateMaxSteps       int
}

// DefaultOptions returns the defaults of Register.
func DefaultOptions() Options {
	var o Options
	o.Register(flag.NewFlagSet("defaults", flag.ContinueOnError))
	return o
}

// Register binds every server flag to o on fs, with its default and description.
func (o *Options) Register(fs *flag.FlagSet) {
	fs.Int64Var(&o.MaxRequestBytes, "max-request-bytes", 32<<20, "largest request body in bytes (413 beyond)")
	fs.Int64Var(&o.MaxTotalRequestBytes, "max-total-request-bytes", 256<<20, "request bodies being read and parsed at once, in bytes, across all requests (503 beyond)")
	fs.IntVar(&o.MaxN, "max-n", 128, "largest n (choices per prompt) of a request")
	fs.IntVar(&o.MaxSeqsPerRequest, "max-seqs-per-request", 1024, "largest prompts x n of one request")
	fs.IntVar(&o.MaxPendingSeqs, "max-pending-seqs", 4096, "sequences of all requests in flight, running or waiting (503 beyond)")
	fs.IntVar(&o.MaxConnections, "max-connections", 4096, "open client connections (503 and close beyond)")
	fs.DurationVar(&o.ReadHeaderTimeout, "read-header-timeout", 30*time.Second, "time to read a request's headers")
	fs.DurationVar(&o.BodyTimeout, "body-timeout", 60*time.Second, "time to read a request's body (408 beyond)")
	fs.DurationVar(&o.IdleTimeout, "idle-timeout", 120*time.Second, "keep-alive connections idle this long are closed")
	fs.DurationVar(&o.WriteTimeout, "write-timeout", 60*time.Second, "time for each write to the client (one stream event), not the whole stream")
	fs.DurationVar(&o.ShutdownGrace, "shutdown-grace", 30*time.Second, "on SIGTERM, time in-flight requests may finish before they are aborted")
	d := tokenizer.DefaultTemplateLimits
	fs.DurationVar(&o.ChatTemplateTimeout, "chat-template-timeout", d.MaxDuration, "longest render of the chat template")
	fs.Int64Var(&o.ChatTemplateMaxOutputBytes, "chat-template-max-output-bytes", d.MaxOutputBytes,
		"largest text a chat template renders, on top of twice the size of the conversation")
	fs.Int64Var(&o.ChatTemplateMaxMemoryBytes, "chat-template-max-memory-bytes", d.MaxAllocBytes,
		"bytes of the strings and lists a render builds, on top of 32 times the size of the conversation")
	fs.IntVar(&o.ChatTemplateMaxSteps, "chat-template-max-steps", d.MaxSteps, "loop iterations, calls, filters and outputs of one render")
}

// TemplateLimits are the chat-template limits of the flags.
func (o *Options) TemplateLimits() tokenizer.TemplateLimits {
	return tokenizer.TemplateLimits{MaxDuration: o.ChatTemplateTimeout, MaxOutputBytes: o.ChatTemplateMaxOutputBytes,
		MaxAllocBytes: o.ChatTemplateMaxMemoryBytes, MaxSteps: o.ChatTemplateMaxSteps}
}

// Validate refuses settings that would disable a limit by accident.
func (o *Options) Validate() error {
	switch {
	case o.MaxRequestBytes < 1 || o.MaxTotalRequestBytes < o.MaxRequestBytes:
		return fmt.Errorf("--max-request-bytes must be positive and at most --max-total-request-bytes")
	case o.MaxN < 1 || o.MaxSeqsPerRequest < o.MaxN:
		return fmt.Errorf("--max-n must be positive and at most --max-seqs-per-request")
	case o.MaxPendingSeqs < o.MaxSeqsPerRequest:
		return fmt.Errorf("--max-pending-seqs must be at least --max-seqs-per-request")
	case o.MaxConnections < 1:
		return fmt.Errorf("--max-connections must be positive")
	case o.ReadHeaderTimeout <= 0 || o.BodyTimeout <= 0 || o.IdleTimeout <= 0 || o.WriteTimeout <= 0:
		return fmt.Errorf("--read-header-timeout, --body-timeout, --idle-timeout and --write-timeout must be positive")
	case o.ShutdownGrace < 0:
		return fmt.Errorf("--shutdown-grace must not be negative")
	case o.ChatTemplateTimeout <= 0 || o.ChatTemplateMaxOutputBytes <= 0 || o.ChatTemplateMaxMemoryBytes <= 0 || o.ChatTemplateMaxSteps <= 0:
		return fmt.Errorf("--chat-template-timeout, --chat-template-max-output-bytes, --chat-template-max-memory-bytes and --chat-template-max-steps must be positive")
	}
	return nil
}
