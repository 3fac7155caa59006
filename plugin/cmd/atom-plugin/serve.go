package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/atom-go/atom/engine"
	"github.com/atom-go/atom/plugin/openai"
)

func init() { subcommands["serve"] = runServe }

// runServe is `atom-plugin serve`: the OpenAI-compatible HTTP server. SIGTERM or SIGINT shut it
// down gracefully (see openai.Server.Serve); it then exits 0.
func runServe(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := engine.DefaultConfig()
	cfg.Register(fs)
	opts := openai.DefaultOptions()
	opts.Register(fs)
	host := fs.String("host", "127.0.0.1", "address to listen on")
	port := fs.Int("port", 8000, "port to listen on (0: any free port, printed on start)")
	name := fs.String("served-model-name", "", "model name clients use (default: the model path's base name)")
	inProcess := fs.Bool("no-engine-subprocess", false, "run the engine in this process (debugging): a crash of the engine then takes the server down")
	maxRestarts := fs.Int("engine-max-restarts", 3, "engine crashes recovered within --engine-restart-window; one more and requests fail, /health stays 503")
	window := fs.Duration("engine-restart-window", 5*time.Minute, "the window of --engine-max-restarts")
	fs.Usage = func() { usageOf(fs, "serve --model DIR|FILE.gguf [--host H --port P --device cpu|gpu ...]") }
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := opts.Validate(); err != nil {
		return err
	}
	if *maxRestarts < 0 {
		return fmt.Errorf("--engine-max-restarts %d: want >= 0", *maxRestarts)
	}
	if *name == "" {
		*name = strings.TrimSuffix(filepath.Base(filepath.Clean(cfg.Model)), ".gguf")
	}
	if !*inProcess {
		return serveSubprocess(fs, cfg, opts, *name, *host, *port, *maxRestarts, *window, stdout, stderr)
	}
	log := newLogger(stderr)
	e, err := engine.New(cfg, log)
	if err != nil {
		return err
	}
	defer e.Close()
	if tok := e.Tokenizer(); tok != nil {
		tok.SetTemplateLimits(opts.TemplateLimits())
		// A runaway or broken chat template is reported now, not at the first chat request.
		if err := tok.CheckChatTemplate(); err != nil {
			return fmt.Errorf("%s: %w", cfg.Model, err)
		}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(*host, fmt.Sprint(*port)))
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(stdout, "atom-plugin serving %s at http://%s/v1\n", *name, ln.Addr())
	return openai.NewWithOptions(e, *name, log, opts).Serve(ctx, ln)
}
