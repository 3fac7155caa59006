package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/atom-go/atom/bridge"
	"github.com/atom-go/atom/bridge/pb"
	"github.com/atom-go/atom/engine"
	"github.com/atom-go/atom/plugin"
)

func init() { subcommands["replay"] = runReplay }

// errMismatch makes `atom-plugin replay` exit 1 after it printed the report.
var errMismatch = errors.New("the replay differs from the recording")

// runReplay is `atom-plugin replay FILE`: replays a recording (docs/recording.md) on a fresh
// engine and compares what it answers with what was recorded.
func runReplay(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	modelPath := fs.String("model", "", engine.ModelFlagUsage+" to load instead of the recorded path")
	device := fs.String("device", "", "backend to replay on: cpu or gpu (default: the recorded one)")
	dtype := fs.String("dtype", "", "activations' dtype to replay in: bfloat16, float16 or float32 (default: the recorded one)")
	var extra multiFlag
	fs.Var(&extra, "engine-arg", "engine flag added after the recorded ones, e.g. --engine-arg=--enforce-eager (repeatable)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	info := fs.Bool("info", false, "print the recording's header and exit")
	ignoreID := fs.Bool("ignore-model-identity", false, "replay on a checkpoint that is not the recorded one")
	logprobTol := fs.Float64("logprob-tol", -1, "logprob tolerance (default: the backends', docs/recording.md)")
	tieTol := fs.Float64("tie-tol", -1, "near-tie tolerance of a flipped token (default: the backends')")
	fs.Usage = func() {
		usageOf(fs, "replay [--model DIR|FILE.gguf] [--device cpu|gpu] [--dtype float32] [--engine-arg=--enforce-eager] [--json] FILE")
	}
	// The file may come before the flags too.
	var file string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		file, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case file == "" && fs.NArg() == 1:
		file = fs.Arg(0)
	case file == "" || fs.NArg() != 0:
		fs.Usage()
		return fmt.Errorf("want exactly one recording file")
	}
	if *info {
		return printHeader(file, stdout)
	}
	opts := plugin.ReplayOptions{Model: *modelPath, Device: *device, DType: *dtype, ExtraArgs: extra, IgnoreModelIdentity: *ignoreID, Version: version,
		Logger: hclog.New(&hclog.LoggerOptions{Name: "replay", Output: stderr, Level: hclog.Warn})}
	if *logprobTol >= 0 || *tieTol >= 0 {
		opts.Tolerance = toleranceOverride(file, *device, *logprobTol, *tieTol)
	}
	rep, err := plugin.Replay(file, opts)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		printReport(stdout, rep)
	}
	if !rep.OK {
		return errMismatch
	}
	return nil
}

// toleranceOverride starts from the defaults of the devices and replaces what was given.
func toleranceOverride(file, device string, logprob, tie float64) *plugin.Tolerance {
	recDevice := "cpu"
	if h, err := readHeader(file); err == nil {
		var req pb.LoadModelRequest
		if proto.Unmarshal(h.LoadModelRequest, &req) == nil && req.GetDevice() != "" {
			recDevice = req.GetDevice()
		}
	}
	if device == "" {
		device = recDevice
	}
	t := plugin.DefaultTolerance(recDevice, device, "")
	if logprob >= 0 {
		t.Logprob = logprob
	}
	if tie >= 0 {
		t.Tie = tie
	}
	return &t
}

func printReport(w io.Writer, r *plugin.ReplayReport) {
	fmt.Fprintf(w, "replay of %s (recorded by atom-go %s on %s) on %s %s, model %s\n", r.Recording, r.RecordedWith, r.RecordedDevice, r.Device, r.DType, r.Model)
	fmt.Fprintf(w, "%d calls, %d steps; tokens compared: %d greedy, %d seeded, %d random; %d not compared\n",
		r.Calls, r.Steps, r.Tokens["greedy"], r.Tokens["seeded"], r.Tokens["random"], r.Skipped)
	wl := r.Workload
	fmt.Fprintf(w, "workload: %d requests (%d prefix hits), %d prefill chunks, %d resumed after preemption, %d finished ids, %d aborts, %d refused calls, batches of up to %d\n",
		wl.NewRequests, wl.PrefixHits, wl.PrefillChunks, wl.Resumed, wl.Finished, wl.AbortCalls, wl.Refused, wl.MaxBatch)
	fmt.Fprintf(w, "tolerance: logprob %.2g, tie %.2g; largest logprob difference %.3g\n", r.Tolerance.Logprob, r.Tolerance.Tie, r.MaxLogprobDiff)
	if r.EndedEarly != "" {
		fmt.Fprintf(w, "the recording ended early: %s\n", r.EndedEarly)
	}
	if r.NumNearTies > 0 {
		fmt.Fprintf(w, "%d near-ties (not failures; the request is not compared after one):\n", r.NumNearTies)
		for _, d := range r.NearTies {
			fmt.Fprintf(w, "  %s\n", d)
		}
	}
	if r.OK {
		fmt.Fprintln(w, "OK: the replay matches the recording")
		return
	}
	fmt.Fprintf(w, "MISMATCH: %d differences; the first: %s\n", r.Mismatches, r.Mismatch)
	for _, d := range r.Listed[1:] {
		fmt.Fprintf(w, "  %s\n", d)
	}
}

func readHeader(file string) (*bridge.RecordingHeader, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rr, err := bridge.NewRecordingReader(f)
	if err != nil {
		return nil, err
	}
	return &rr.Header, nil
}

// printHeader prints the header as JSON, the LoadModel request decoded.
func printHeader(file string, w io.Writer) error {
	h, err := readHeader(file)
	if err != nil {
		return err
	}
	var req pb.LoadModelRequest
	if err := proto.Unmarshal(h.LoadModelRequest, &req); err != nil {
		return fmt.Errorf("decode the LoadModel request: %w", err)
	}
	lm, err := protojson.Marshal(&req)
	if err != nil {
		return err
	}
	out := map[string]any{"format_version": h.FormatVersion, "atom_go_version": h.AtomGoVersion, "wire_version": h.WireVersion,
		"protocol_version": h.ProtocolVersion, "created": h.Created, "load_model_request": json.RawMessage(lm), "model": h.Model}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
