package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/atom-go/atom/bridge"
	"github.com/atom-go/atom/bridge/pb"
	"github.com/atom-go/atom/engine"
	"github.com/atom-go/atom/plugin"
	"github.com/atom-go/atom/plugin/openai"
)

// serveSubprocess is `atom-plugin serve` with the engine in a go-plugin subprocess of this
// binary: the front end loads only the tokenizer, the subprocess loads the model with the
// engine flags given to serve, and a plugin.Supervisor restarts it when it dies.
func serveSubprocess(fs *flag.FlagSet, cfg engine.Config, opts openai.Options, name, host string, port, maxRestarts int,
	window time.Duration, stdout, stderr io.Writer) error {
	log := newLogger(stderr)
	tok := cfg.Tokenizer
	if tok == "" {
		tok = cfg.Model
	}
	t, err := engine.LoadTokenizer(tok)
	if err != nil {
		return fmt.Errorf("%s: %w", tok, err)
	}
	if t != nil {
		t.SetTemplateLimits(opts.TemplateLimits())
		if err := t.CheckChatTemplate(); err != nil {
			return fmt.Errorf("%s: %w", cfg.Model, err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this binary to run the engine: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if maxRestarts == 0 {
		maxRestarts = -1 // the supervisor's "none": its zero means the default
	}
	sup, err := plugin.StartSupervisor(ctx, plugin.SupervisorConfig{
		Client: plugin.ClientConfig{Path: self, Stderr: stderr,
			Logger: hclog.New(&hclog.LoggerOptions{Name: "engine", Output: stderr, Level: hclog.Info})},
		Load:        &pb.LoadModelRequest{WireVersion: bridge.WireVersion, ModelPath: cfg.Model, ExtraArgs: engineArgs(fs)},
		MaxRestarts: maxRestarts, RestartWindow: window,
		Log: hclog.New(&hclog.LoggerOptions{Name: "supervisor", Output: stderr, Level: hclog.Info}),
	})
	if err != nil {
		return err
	}
	defer sup.Close()
	info := sup.Info()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, fmt.Sprint(port)))
	if err != nil {
		return err
	}
	log.Info("engine subprocess serving", "pid", sup.Pid(), "max_restarts", maxRestarts, "window", window)
	fmt.Fprintf(stdout, "atom-plugin serving %s at http://%s/v1\n", name, ln.Addr())
	srv := openai.NewWithBackend(newSubprocessEngine(sup), openai.ModelInfo{Tokenizer: t,
		MaxModelLen: int(info.GetMaxModelLen()), VocabSize: int(info.GetVocabSize())}, name, log, opts)
	return srv.Serve(ctx, ln)
}

// engineArgs returns the engine flags set on serve's command line, for the subprocess's
// LoadModel: the front end's own flags stay here.
func engineArgs(fs *flag.FlagSet) []string {
	eng := flag.NewFlagSet("engine", flag.ContinueOnError)
	c := engine.DefaultConfig()
	c.Register(eng)
	var args []string
	fs.Visit(func(f *flag.Flag) {
		if eng.Lookup(f.Name) != nil {
			args = append(args, "--"+f.Name+"="+f.Value.String())
		}
	})
	return args
}
