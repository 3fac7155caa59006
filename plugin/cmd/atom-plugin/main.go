// Command atom-plugin is atom-go's single binary. Started by a host with go-plugin's magic
// cookie (and no arguments) it serves the engine over gRPC (package plugin); started by hand
// without the cookie it prints go-plugin's explanation and exits 1; otherwise it runs a
// subcommand:
//
//	atom-plugin generate --model DIR --prompt TEXT     offline smoke test (DIR or FILE.gguf, as for every --model)
//	atom-plugin tokenize --model DIR --text TEXT       check a tokenizer
//	atom-plugin gguf-dir FILE.gguf DIR                 a Hugging Face-style directory for a GGUF file
//	atom-plugin serve --model DIR                      OpenAI-compatible HTTP server
//	atom-plugin replay FILE [--device gpu]             replay a recording (docs/recording.md)
//	atom-plugin --handshake [--model DIR]              act as a go-plugin host against itself
//	atom-plugin --version | --help
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/atom-go/atom/engine"
	"github.com/atom-go/atom/plugin"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

var subcommands = map[string]func(args []string, stdout, stderr io.Writer) error{
	"generate": runGenerate,
	"tokenize": runTokenize,
	"gguf-dir": runGGUFDir,
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		return servePlugin()
	}
	name := args[0]
	switch name {
	case "--version", "-version", "version":
		fmt.Fprintf(stdout, "atom-plugin %s\n", version)
		return 0
	case "--help", "-help", "-h", "help":
		printHelp(stdout)
		return 0
	}
	cmd, ok := subcommands[name]
	if !ok {
		fmt.Fprintf(stderr, "atom-plugin: unknown command %q\n\n", name)
		printHelp(stderr)
		return 2
	}
	if err := cmd(args[1:], stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "atom-plugin %s: %v\n", name, err)
		return 1
	}
	return 0
}

func printHelp(w io.Writer) {
	fmt.Fprintf(w, `atom-plugin %s: the atom-go inference engine.

Usage:
  atom-plugin                      serve the engine to a go-plugin host (needs the host's magic cookie)
  atom-plugin generate [flags]     run one prompt offline and print the result
  atom-plugin tokenize [flags]     print a text's (or a chat's) token ids
  atom-plugin serve [flags]        serve the OpenAI-compatible HTTP API
  atom-plugin gguf-dir [--copy] FILE.gguf DIR
                                   write DIR/config.json and tokenizer files from the GGUF's metadata and
                                   link DIR/model.gguf to it: vllm serve DIR, sglang --model-path DIR
  atom-plugin replay [flags] FILE  replay a recording of a host's bridge calls (ATOM_GO_RECORD) and compare
  atom-plugin --handshake [--model DIR|FILE.gguf] [--device cpu|gpu]
                                   start this binary as a go-plugin host would, check the handshake,
                                   health and Describe, optionally load the model and stream 8 greedy tokens
  atom-plugin --version            print the version
  atom-plugin COMMAND --help       the flags of COMMAND

--model, everywhere: a checkpoint directory (config.json + safetensors) or a GGUF file.

Engine flags (generate, serve):
`, version)
	fs := flag.NewFlagSet("engine", flag.ContinueOnError)
	fs.SetOutput(w)
	cfg := engine.DefaultConfig()
	cfg.Register(fs)
	fs.PrintDefaults()
	fmt.Fprintln(w)
	engine.PrintEnvHelp(w)
}

// newLogger logs to stderr at ATOM_GO_LOG_LEVEL.
func newLogger(w io.Writer) *slog.Logger {
	var level slog.Level
	switch strings.ToLower(engine.Env("ATOM_GO_LOG_LEVEL")) {
	case "trace", "debug":
		level = slog.LevelDebug
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// servePlugin serves the engine to the go-plugin host that started this process, until the
// host shuts it down. Without the host's magic cookie go-plugin explains and exits with 1.
func servePlugin() int {
	plugin.Serve(plugin.Options{Version: version})
	return 0
}
