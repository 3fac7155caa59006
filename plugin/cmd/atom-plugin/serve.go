package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
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

// runServe is `atom-plugin serve`: the OpenAI-compatible HTTP server.
func runServe(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := engine.DefaultConfig()
	cfg.Register(fs)
	host := fs.String("host", "127.0.0.1", "address to listen on")
	port := fs.Int("port", 8000, "port to listen on (0: any free port, printed on start)")
	name := fs.String("served-model-name", "", "model name clients use (default: the model path's base name)")
	fs.Usage = func() { usageOf(fs, "serve --model DIR|FILE [--host H --port P --device cpu|gpu ...]") }
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := newLogger(stderr)
	e, err := engine.New(cfg, log)
	if err != nil {
		return err
	}
	defer e.Close()
	if tok := e.Tokenizer(); tok != nil {
		// A runaway or broken chat template is reported now, not at the first chat request.
		if err := tok.CheckChatTemplate(); err != nil {
			return fmt.Errorf("%s: %w", cfg.Model, err)
		}
	}
	if *name == "" {
		*name = strings.TrimSuffix(filepath.Base(filepath.Clean(cfg.Model)), ".gguf")
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(*host, fmt.Sprint(*port)))
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: openai.New(e, *name, log).Handler(), ReadHeaderTimeout: 30 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	fmt.Fprintf(stdout, "atom-plugin serving %s at http://%s/v1\n", *name, ln.Addr())
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
