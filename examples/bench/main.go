// Command bench measures atom-go on a checkpoint and sets every figure against the roofline of
// the GPU it runs on:
//
//	(a) batch-1 decode: tokens/s and time per output token,
//	(b) time to first token of a --prompt-len prompt,
//	(c) output throughput at each --concurrency with --prompt-len prompts and --output-len
//	    outputs (all requests submitted at once, greedy, EOS ignored),
//	(d) for each, the floor: weight plus KV bytes over the measured copy bandwidth, FLOPs over
//	    the measured bf16 GEMM rate, and the percentage of it reached,
//	(e) the same workloads through Hugging Face transformers (hf_reference.py, run beside it;
//	    its JSON is merged with --hf-json).
//
// It also times the model runner alone (forward passes replayed from CUDA graphs and eager),
// which separates the GPU's share of a step from the engine's host work (scheduling, sampling).
//
//	bench --model DIR --out bench.json            measure, print the table, write JSON
//	bench --report --out bench.json --hf-json hf.json --md table.md   merge and print
//	bench --plot bench.json                       plot saved results to bench.svg
//
// Wherever the JSON is written, the plot (plot.go) is written beside it.
//
// Prompts are random token ids (a random-weight checkpoint has no meaningful text).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/atom-go/atom/models"
	"github.com/atom-go/atom/ops"
	"github.com/atom-go/atom/ops/gpu"
)

// options are the command's flags.
type options struct {
	model, out, hfJSON, md, commit string
	plot                           string
	prompt, output, ttftReps       int
	replays                        int
	maxModelLen                    int
	conc                           []int
	memUtil                        float64
	report, skipForward, eager     bool
	noAsync                        bool
	specConfig                     string
	specWorkloads                  bool
	device                         string
	skipEngine                     bool
	verbose                        bool
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.StringVar(&o.model, "model", "", "checkpoint directory (config.json + safetensors) or GGUF file")
	fs.StringVar(&o.out, "out", "bench.json", "JSON results (read back by --report)")
	fs.StringVar(&o.hfJSON, "hf-json", "", "results of hf_reference.py to merge into the table")
	fs.StringVar(&o.md, "md", "", "also write the table as Markdown to this file")
	fs.StringVar(&o.commit, "commit", "", "commit measured (recorded in the results)")
	fs.StringVar(&o.plot, "plot", "", "only plot these saved JSON results to an SVG beside them")
	fs.IntVar(&o.prompt, "prompt-len", 1024, "prompt tokens")
	fs.IntVar(&o.output, "output-len", 256, "output tokens per request")
	fs.IntVar(&o.ttftReps, "ttft-reps", 3, "time-to-first-token repetitions (median)")
	fs.IntVar(&o.replays, "replays", 20, "back-to-back graph replays timed for the runner table's replay column")
	fs.IntVar(&o.maxModelLen, "max-model-len", 2048, "engine --max-model-len")
	fs.Float64Var(&o.memUtil, "gpu-memory-utilization", 0.9, "engine --gpu-memory-utilization")
	concs := fs.String("concurrency", "1,16,64,256", "concurrent requests of the throughput runs")
	fs.BoolVar(&o.report, "report", false, "only merge --out and --hf-json and print the table")
	fs.BoolVar(&o.skipForward, "skip-forward", false, "skip the runner-only timings")
	fs.BoolVar(&o.skipEngine, "skip-engine", false, "skip the engine workloads (runner-only timings)")
	fs.BoolVar(&o.eager, "enforce-eager", false, "engine without CUDA graphs")
	fs.BoolVar(&o.noAsync, "no-async-scheduling", false, "engine reading each decode step's tokens before scheduling the next")
	fs.StringVar(&o.specConfig, "speculative-config", "", "engine --speculative-config (vLLM's JSON: ngram or draft_model); the throughput rows report acceptance")
	fs.BoolVar(&o.specWorkloads, "spec-workloads", false, "only the speculative decoding workloads (spec_workloads.go): the model's chat template, with and without --speculative-config")
	fs.StringVar(&o.device, "device", "gpu", "device of the --spec-workloads engines (cpu or gpu; the other phases run on the gpu)")
	fs.BoolVar(&o.verbose, "v", false, "engine logs at info level")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.plot != "" {
		p, err := plotJSON(o.plot)
		if err == nil {
			fmt.Println("plot:", p)
		}
		return err
	}
	for _, f := range strings.Split(*concs, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return fmt.Errorf("--concurrency: %q is not a positive integer", f)
		}
		o.conc = append(o.conc, n)
	}
	if o.replays < 1 || o.ttftReps < 1 {
		return fmt.Errorf("--replays %d, --ttft-reps %d: both must be at least 1", o.replays, o.ttftReps)
	}
	if o.report {
		return report(o)
	}
	if o.model == "" {
		return fmt.Errorf("--model is required")
	}
	if o.specWorkloads {
		rows, err := runSpecWorkloads(o, o.device, os.Stdout)
		if err != nil {
			return err
		}
		return writeJSON(o.out, rows)
	}
	checkpoint = func(r *Result) { _ = writeJSON(o.out, r); _, _ = writePlotFile(o.out, r) }
	res, err := measure(o)
	if res != nil {
		if werr := writeJSON(o.out, res); werr != nil && err == nil {
			err = werr
		}
		if p, perr := writePlotFile(o.out, res); perr != nil && err == nil {
			err = perr
		} else if perr == nil {
			logf("plot: %s", p)
		}
		printTable(os.Stdout, res, nil)
	}
	return err
}

// measure runs every phase; a failed phase ends the run but keeps what was measured.
func measure(o options) (*Result, error) {
	runtime.LockOSThread() // the ceilings and the runner phase drive the GPU from this thread
	ck, err := models.OpenCheckpoint(o.model)
	if err != nil {
		return nil, err
	}
	mc := ck.Config
	ck.Close()
	x := newCost(mc)
	res := &Result{Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), Commit: o.commit, Model: o.model,
		Arch: mc.Architecture, DType: mc.DType.String(), Layers: mc.NumLayers, Hidden: mc.HiddenSize,
		MatmulParams: x.matmulParams, WeightBytes: x.weightBytes, CheckpointBytes: x.ckptBytes,
		KVBytesPerToken: x.kvPerToken, Prompt: o.prompt, Output: o.output}
	logf("measuring the ceilings")
	if err := measureCeilings(res); err != nil {
		return res, fmt.Errorf("ceilings: %w", err)
	}
	logf("copy %.2f TB/s, bf16 GEMM %.0f TFLOP/s on %s", res.Ceilings.CopyBytesPerS/1e12, res.Ceilings.GemmFlopsPerS/1e12, res.GPU)
	checkpoint(res)
	if !o.skipForward {
		logf("runner phase")
		if err := measureForward(o, res, x); err != nil {
			return res, fmt.Errorf("runner phase: %w", err)
		}
		checkpoint(res)
	}
	if o.skipEngine {
		return res, nil
	}
	logf("engine phase")
	if err := measureEngine(o, res, x); err != nil {
		return res, fmt.Errorf("engine phase: %w", err)
	}
	return res, nil
}

// checkpoint saves the results measured so far (a run cut short keeps them).
var checkpoint = func(*Result) {}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s bench: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// measureCeilings times a large device-to-device copy and a bf16 8192³ GEMM (random data,
// median of 10 after 3 warm-ups, device events).
func measureCeilings(res *Result) error {
	be, err := gpu.New(0, gpu.Options{DType: ops.BF16})
	if err != nil {
		return err
	}
	defer be.Close()
	res.GPU = be.Device().Name
	lib, s := be.Lib(), be.Stream()
	const half = 2 << 30 // bytes copied: read once, written once
	src, dst := be.Buffer(half/(2*4096), 4096), be.Buffer(half/(2*4096), 4096)
	be.Fill(src, 0.5)
	sp, dp := src.(*gpu.Tensor).Ptr(), dst.(*gpu.Tensor).Ptr()
	ms, err := timeEvents(be, func() error { return lib.MemcpyD2D(dp, sp, half, s) })
	if err != nil {
		return err
	}
	res.Ceilings.CopyBytesPerS = 2 * half / (ms / 1e3)
	const n = 8192
	a, b, c := be.Buffer(n, n), be.Buffer(n, n), be.Buffer(n, n)
	vals := make([]float32, n*n)
	seed := uint64(88172645463325252)
	for i := range vals {
		seed ^= seed << 13
		seed ^= seed >> 7
		seed ^= seed << 17
		vals[i] = float32(int64(seed%2001)-1000) / 1000
	}
	be.WriteRows(a, vals)
	be.WriteRows(b, vals)
	ms, err = timeEvents(be, func() error { be.Linear(c, a, b, nil); return nil })
	if err != nil {
		return err
	}
	res.Ceilings.GemmFlopsPerS = 2 * n * n * n / (ms / 1e3)
	return nil
}

// timeEvents returns the median milliseconds of fn's device work over 10 runs after 3 warm-ups.
func timeEvents(be *gpu.Backend, fn func() error) (float64, error) {
	lib, s := be.Lib(), be.Stream()
	e0, err := lib.EventCreate()
	if err != nil {
		return 0, err
	}
	defer lib.EventDestroy(e0)
	e1, err := lib.EventCreate()
	if err != nil {
		return 0, err
	}
	defer lib.EventDestroy(e1)
	var times []float64
	for i := 0; i < 13; i++ {
		if err := lib.EventRecord(e0, s); err != nil {
			return 0, err
		}
		if err := fn(); err != nil {
			return 0, err
		}
		if err := lib.EventRecord(e1, s); err != nil {
			return 0, err
		}
		if err := lib.EventSync(e1); err != nil {
			return 0, err
		}
		ms, err := lib.EventElapsed(e0, e1)
		if err != nil {
			return 0, err
		}
		if i >= 3 {
			times = append(times, float64(ms))
		}
	}
	return median(times), nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// report merges the saved results with the Hugging Face reference and prints the table.
func report(o options) error {
	b, err := os.ReadFile(o.out)
	if err != nil {
		return fmt.Errorf("read results: %w", err)
	}
	var res Result
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("parse %s: %w", o.out, err)
	}
	var hf *HFResult
	if o.hfJSON != "" {
		if b, err := os.ReadFile(o.hfJSON); err != nil {
			fmt.Fprintf(os.Stderr, "bench: no Hugging Face reference: %v\n", err)
		} else {
			hf = &HFResult{}
			if err := json.Unmarshal(b, hf); err != nil {
				return fmt.Errorf("parse %s: %w", o.hfJSON, err)
			}
			res.HF = hf
			if err := writeJSON(o.out, &res); err != nil {
				return err
			}
			p, err := writePlotFile(o.out, &res)
			if err != nil {
				return err
			}
			logf("plot: %s", p)
		}
	}
	printTable(os.Stdout, &res, hf)
	if o.md != "" {
		f, err := os.Create(o.md)
		if err != nil {
			return err
		}
		defer f.Close()
		printMarkdown(f, &res, hf)
	}
	return nil
}

func quietLogger(verbose bool) *slog.Logger {
	if verbose {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
