package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/atom-go/atom/bridge"
	"github.com/atom-go/atom/bridge/pb"
	"github.com/atom-go/atom/engine"
	"github.com/atom-go/atom/plugin"
)

func init() { subcommands["--handshake"] = runHandshake }

// runHandshake is `atom-plugin --handshake`: play a framework host against this very binary
// (go-plugin's client, a private socket directory, AutoMTLS when asked for), check every step of the plugin protocol, optionally load a
// model and stream a short greedy generation, then shut the plugin down through go-plugin's
// controller.
func runHandshake(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("--handshake", flag.ContinueOnError)
	fs.SetOutput(stderr)
	model := fs.String("model", "", engine.ModelFlagUsage+" to load through LoadModel (none: stop after Describe)")
	device := fs.String("device", "auto", "device the plugin loads the model on: auto (gpu where one serves, else cpu), cpu or gpu")
	maxTokens := fs.Int("max-tokens", 8, "tokens of the greedy generation, >= 1")
	prompt := fs.String("prompt", "The capital of France is", "prompt text, when the model has a tokenizer")
	timeout := fs.Duration("timeout", 5*time.Minute, "deadline of the whole check")
	autoMTLS := fs.Bool("auto-mtls", envSwitch(engine.Env("ATOM_GO_AUTO_MTLS")),
		"go-plugin AutoMTLS on the connection (default from ATOM_GO_AUTO_MTLS; off: the socket is in a private 0700 directory)")
	fs.Usage = func() {
		usageOf(fs, "--handshake [--model DIR|FILE.gguf] [--device auto|cpu|gpu] [--max-tokens N] [--auto-mtls]")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := checkMaxTokens(*maxTokens, 8); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this executable: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	level := hclog.LevelFromString(strings.ToLower(engine.Env("ATOM_GO_LOG_LEVEL")))
	client := plugin.NewClient(plugin.ClientConfig{Path: self, Stdout: stderr, Stderr: stderr, AutoMTLS: *autoMTLS,
		Logger: hclog.New(&hclog.LoggerOptions{Name: "host", Output: stderr, Level: max(level, hclog.Warn)})})
	defer client.Kill()

	start := time.Now()
	step := func(name string, fn func() (string, error)) error {
		t := time.Now()
		detail, err := fn()
		el := fmt.Sprintf("%8.3fs %8.3fs", time.Since(t).Seconds(), time.Since(start).Seconds())
		if err != nil {
			fmt.Fprintf(stdout, "FAIL %-9s %s  %v\n", name, el, err)
			return fmt.Errorf("step %q failed: %w", name, err)
		}
		fmt.Fprintf(stdout, "ok   %-9s %s  %s\n", name, el, detail)
		return nil
	}
	fmt.Fprintf(stdout, "     %-9s %9s %9s\n", "step", "took", "elapsed")
	var conn *plugin.Conn
	var info *pb.ModelInfo
	steps := []hsStep{
		{"launch", func() (string, error) {
			addr, err := client.Start()
			if err != nil {
				return "", err
			}
			transport := "plaintext"
			if *autoMTLS {
				transport = "AutoMTLS"
			}
			fi, err := os.Stat(client.SocketDir())
			if err != nil {
				return "", fmt.Errorf("socket directory: %w", err)
			}
			return fmt.Sprintf("pid %d, %s %s (directory mode %04o), app protocol %d, %s", client.Pid(), addr.Network(), addr,
				fi.Mode().Perm(), client.NegotiatedVersion(), transport), nil
		}},
		{"connect", func() (string, error) {
			conn, err = client.Connect()
			return "dispensed " + bridge.PluginName, err
		}},
		{"health", func() (string, error) { return `service "plugin" SERVING`, conn.Health(ctx) }},
		{"describe", func() (string, error) {
			info, err = conn.Describe(ctx, &pb.DescribeRequest{WireVersion: bridge.WireVersion})
			if err == nil && (info.GetWireVersion() != bridge.WireVersion || info.GetProtocolVersion() != bridge.ProtocolVersion) {
				err = fmt.Errorf("plugin speaks wire %d protocol %d, want %d and %d", info.GetWireVersion(), info.GetProtocolVersion(), bridge.WireVersion, bridge.ProtocolVersion)
			}
			return fmt.Sprintf("engine %s, wire %d, loaded=%v", info.GetEngineVersion(), info.GetWireVersion(), info.GetLoaded()), err
		}},
	}
	if *model != "" {
		steps = append(steps,
			hsStep{"load", func() (string, error) {
				info, err = loadModel(ctx, conn, &pb.LoadModelRequest{WireVersion: bridge.WireVersion, ModelPath: *model, Device: *device}, stdout)
				return fmt.Sprintf("%s %s on %s, vocab %d, %d layers, max_model_len %d, %d KV blocks of %d", info.GetArchitecture(), info.GetDtype(),
					info.GetDevice(), info.GetVocabSize(), info.GetNumLayers(), info.GetMaxModelLen(), info.GetNumKvBlocks(), info.GetBlockSize()), err
			}},
			hsStep{"generate", func() (string, error) { return generate(ctx, conn, info, *prompt, *maxTokens) }})
	}
	for _, s := range steps {
		if err := step(s.name, s.fn); err != nil {
			return err
		}
	}
	return step("shutdown", func() (string, error) {
		client.Kill()
		if !client.Exited() {
			return "", errors.New("the plugin process did not exit")
		}
		return "go-plugin controller Shutdown, process exited", nil
	})
}

// envSwitch reads an on/off environment value: 1, true, yes, on (any case) are on.
func envSwitch(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

// hsStep is one checked step of --handshake: fn returns what to print or the error.
type hsStep struct {
	name string
	fn   func() (string, error)
}

// loadModel runs LoadModel, printing each progress message.
func loadModel(ctx context.Context, conn *plugin.Conn, req *pb.LoadModelRequest, stdout io.Writer) (*pb.ModelInfo, error) {
	stream, err := conn.LoadModel(ctx, req)
	if err != nil {
		return nil, err
	}
	for {
		p, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("the progress stream ended without a done message")
			}
			return nil, err
		}
		fmt.Fprintf(stdout, "     load: %-7s %3.0f%%  %s\n", p.GetStage(), 100*p.GetFraction(), p.GetMessage())
		if p.GetDone() {
			return p.GetInfo(), nil
		}
	}
}

// generate streams a greedy generation: from text when the model has a tokenizer, from fixed
// token ids otherwise.
func generate(ctx context.Context, conn *plugin.Conn, info *pb.ModelInfo, prompt string, maxTokens int) (string, error) {
	t := 0.0
	req := &pb.GenerateRequest{RequestId: "handshake", Params: &pb.SamplingParams{Temperature: &t, MaxTokens: int32(maxTokens), IgnoreEos: true}}
	if info.GetHasTokenizer() {
		req.Prompt = prompt
	} else {
		for i := int32(1); i <= 8; i++ {
			req.PromptTokenIds = append(req.PromptTokenIds, i%info.GetVocabSize())
		}
	}
	start := time.Now()
	stream, err := conn.Generate(ctx, req)
	if err != nil {
		return "", err
	}
	var toks []int32
	var text, reason string
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", err
		}
		for _, o := range resp.GetOutputs() {
			toks = append(toks, o.GetTokenIds()...)
			text += o.GetText()
			if o.GetFinished() {
				reason = o.GetFinishReason()
			}
		}
	}
	if len(toks) != maxTokens || reason == "" {
		return "", fmt.Errorf("got %d tokens (finish reason %q), want %d", len(toks), reason, maxTokens)
	}
	detail := fmt.Sprintf("%d tokens %v in %s", len(toks), toks, time.Since(start).Round(time.Millisecond))
	if info.GetHasTokenizer() {
		detail += fmt.Sprintf(", text %q", text)
	}
	return detail, nil
}
