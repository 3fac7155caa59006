package main

import (
	"fmt"
	"io"
	"strings"
)

// Result is everything one run measured (written as JSON).
type Result struct {
	Date            string          `json:"date"`
	GPU             string          `json:"gpu"`
	Commit          string          `json:"commit"`
	Model           string          `json:"model"`
	Arch            string          `json:"architecture"`
	DType           string          `json:"dtype"`
	Layers          int             `json:"layers"`
	Hidden          int             `json:"hidden"`
	MatmulParams    float64         `json:"matmul_params"`
	WeightBytes     float64         `json:"weight_bytes_per_pass"`
	CheckpointBytes float64         `json:"checkpoint_bytes"`
	KVBytesPerToken float64         `json:"kv_bytes_per_token"`
	Prompt          int             `json:"prompt_tokens"`
	Output          int             `json:"output_tokens"`
	Ceilings        Ceilings        `json:"ceilings"`
	StartupSeconds  float64         `json:"startup_seconds"` // engine.New: load, KV cache, graph capture
	KVBlocks        int             `json:"kv_blocks"`
	Graphs          bool            `json:"cuda_graphs"`
	EngineSteps     int64           `json:"engine_steps"`
	Decode1         DecodeRow       `json:"decode_batch1"`
	TTFT            TTFTRow         `json:"ttft"`
	Throughput      []ThroughputRow `json:"throughput"`
	Forward         ForwardResult   `json:"runner"`
	HF              *HFResult       `json:"hf_reference,omitempty"`
	// SpeculativeConfig is the engine's --speculative-config (empty: no speculation).
	SpeculativeConfig string `json:"speculative_config,omitempty"`
}

// DecodeRow is (a): batch-1 decode through the engine.
type DecodeRow struct {
	TPOTMs          float64 `json:"tpot_ms"`
	TokensPerS      float64 `json:"tokens_per_s"`
	FloorTokensPerS float64 `json:"roofline_tokens_per_s"`
	Pct             float64 `json:"pct_of_roofline"`
	// MedianGapMs and MaxGapMs are the typical and the longest gap between two tokens: a TPOT
	// above the median gap is made of stalls, not of steps.
	MedianGapMs float64 `json:"median_gap_ms,omitempty"`
	MaxGapMs    float64 `json:"max_gap_ms,omitempty"`
}

// TTFTRow is (b): time to first token of one prompt through the engine.
type TTFTRow struct {
	Tokens  int     `json:"tokens"`
	Ms      float64 `json:"ms"`
	FloorMs float64 `json:"roofline_ms"`
	TFLOPs  float64 `json:"tflops"`
	PctGemm float64 `json:"pct_of_gemm_rate"`
}

// ThroughputRow is (c): one concurrency through the engine.
type ThroughputRow struct {
	Concurrency     int     `json:"concurrency"`
	WallSeconds     float64 `json:"wall_s"`
	TokensPerS      float64 `json:"output_tokens_per_s"`
	FloorTokensPerS float64 `json:"roofline_tokens_per_s"`
	Pct             float64 `json:"pct_of_roofline"`
	Bound           string  `json:"bound"`
	MeanTTFTMs      float64 `json:"mean_ttft_ms"`
	MeanTPOTMs      float64 `json:"mean_tpot_ms"`
	// Speculative decoding over this run (with --speculative-config): the fraction of drafts
	// accepted and the tokens emitted per verify step (vLLM's mean acceptance length).
	SpecAcceptanceRate     float64 `json:"spec_acceptance_rate,omitempty"`
	SpecMeanAcceptedLength float64 `json:"spec_mean_accepted_length,omitempty"`
}

// ForwardResult is the runner alone: no scheduler, no sampler.
type ForwardResult struct {
	LoadSeconds    float64      `json:"load_s"`
	CaptureSeconds float64      `json:"graph_capture_s"`
	Decode         []ForwardRow `json:"decode"`
	// Verify is a speculative verify step at each concurrency (with --speculative-config).
	Verify  []VerifyRow `json:"verify,omitempty"`
	Prefill PrefillRow  `json:"prefill"`
}

// VerifyRow is one speculative verify batch as the engine verifies greedy requests: each of
// Batch sequences' last token plus Drafts drafts, every position drawn on the device
// (Runner.RunSampled).
type VerifyRow struct {
	Batch  int `json:"batch"`
	Drafts int `json:"drafts"`
	// GraphMs is the step replaying the graph of its Batch x (1+Drafts) tokens (-1: none).
	GraphMs  float64 `json:"graph_ms"`
	ReplayMs float64 `json:"replay_ms,omitempty"`
	EagerMs  float64 `json:"eager_ms"`
	// DecodeMs is the plain decode step of the same batch timed the same way (RunSampled,
	// graph), and DecodeRatio GraphMs over it.
	DecodeMs    float64 `json:"decode_ms,omitempty"`
	DecodeRatio float64 `json:"decode_ratio,omitempty"`
}

// ForwardRow is one decode batch through Runner.Run.
type ForwardRow struct {
	Batch   int     `json:"batch"`
	Context int     `json:"context"`
	GraphMs float64 `json:"graph_ms"` // -1: no graph of this size
	// ReplayMs is the graph alone: replays back to back, no host work between them.
	ReplayMs float64 `json:"replay_ms,omitempty"`
	// ChainMs is the step as the engine queues it ahead (upload, graph, draw on the device, the
	// next step fed from it), timed over consecutive draws, with no scheduler.
	ChainMs float64 `json:"chain_ms,omitempty"`
	EagerMs float64 `json:"eager_ms"`
	FloorMs float64 `json:"roofline_ms"`
	Bound   string  `json:"bound"`
}

// PrefillRow is one prompt through Runner.Run.
type PrefillRow struct {
	Tokens  int     `json:"tokens"`
	Ms      float64 `json:"ms"`
	FloorMs float64 `json:"roofline_ms"`
	TFLOPs  float64 `json:"tflops"`
}

// HFResult is what hf_reference.py writes.
type HFResult struct {
	Transformers string  `json:"transformers"`
	Torch        string  `json:"torch"`
	Attention    string  `json:"attn_implementation"`
	LoadSeconds  float64 `json:"load_s"`
	TTFTMs       float64 `json:"ttft_ms"`
	Decode1      struct {
		TPOTMs     float64 `json:"tpot_ms"`
		TokensPerS float64 `json:"tokens_per_s"`
	} `json:"decode_batch1"`
	Throughput []struct {
		Concurrency int     `json:"concurrency"`
		WallSeconds float64 `json:"wall_s"`
		TokensPerS  float64 `json:"output_tokens_per_s"`
	} `json:"throughput"`
	Skipped []string `json:"skipped"`
}

func (h *HFResult) tput(c int) string {
	if h == nil {
		return "-"
	}
	for _, t := range h.Throughput {
		if t.Concurrency == c {
			return fmt.Sprintf("%.0f", t.TokensPerS)
		}
	}
	return "skipped"
}

// rows builds the main table: figure, atom-go, roofline, % of roofline, transformers.
func rows(r *Result, hf *HFResult) [][]string {
	hfs := func(f string, v float64) string {
		if hf == nil || v == 0 {
			return "-"
		}
		return fmt.Sprintf(f, v)
	}
	var hfTPOT, hfTok, hfTTFT float64
	if hf != nil {
		hfTPOT, hfTok, hfTTFT = hf.Decode1.TPOTMs, hf.Decode1.TokensPerS, hf.TTFTMs
	}
	out := [][]string{
		{"figure", "atom-go", "roofline", "% of roofline", "transformers"},
		{"(a) batch-1 decode, tokens/s", fmt.Sprintf("%.1f", r.Decode1.TokensPerS), fmt.Sprintf("%.1f", r.Decode1.FloorTokensPerS),
			fmt.Sprintf("%.1f%%", r.Decode1.Pct), hfs("%.1f", hfTok)},
		{"(a) time per output token, ms", fmt.Sprintf("%.2f", r.Decode1.TPOTMs), fmt.Sprintf("%.2f", 1e3/max(r.Decode1.FloorTokensPerS, 1e-9)),
			"", hfs("%.2f", hfTPOT)},
		{fmt.Sprintf("(b) TTFT, %d-token prompt, ms", r.TTFT.Tokens), fmt.Sprintf("%.1f", r.TTFT.Ms), fmt.Sprintf("%.1f", r.TTFT.FloorMs),
			fmt.Sprintf("%.1f%% (%.0f TFLOP/s)", r.TTFT.PctGemm, r.TTFT.TFLOPs), hfs("%.1f", hfTTFT)},
	}
	for _, t := range r.Throughput {
		out = append(out, []string{fmt.Sprintf("(c) concurrency %d, output tokens/s", t.Concurrency), fmt.Sprintf("%.0f", t.TokensPerS),
			fmt.Sprintf("%.0f", t.FloorTokensPerS), fmt.Sprintf("%.1f%% (%s)", t.Pct, t.Bound), hf.tput(t.Concurrency)})
	}
	out = append(out, []string{"startup (engine.New to ready), s", fmt.Sprintf("%.1f", r.StartupSeconds), "", "", hfs("%.1f", func() float64 {
		if hf == nil {
			return 0
		}
		return hf.LoadSeconds
	}())})
	return out
}

// runnerRows is the runner-only table: graph and eager decode steps against their floors.
func runnerRows(r *Result) [][]string {
	out := [][]string{{"runner step", "graph ms", "replay ms", "chain ms", "eager ms", "roofline ms", "% (graph)", "bound"}}
	opt := func(v float64) string {
		if v > 0 {
			return fmt.Sprintf("%.2f", v)
		}
		return "-"
	}
	for _, f := range r.Forward.Decode {
		pct := "-"
		if f.GraphMs > 0 {
			pct = fmt.Sprintf("%.1f%%", 100*f.FloorMs/f.GraphMs)
		}
		out = append(out, []string{fmt.Sprintf("decode batch %d, context %d", f.Batch, f.Context), opt(f.GraphMs),
			opt(f.ReplayMs), opt(f.ChainMs), fmt.Sprintf("%.2f", f.EagerMs), fmt.Sprintf("%.2f", f.FloorMs), pct, f.Bound})
	}
	for _, v := range r.Forward.Verify {
		ratio := "-"
		if v.DecodeRatio > 0 {
			ratio = fmt.Sprintf("%.2fx decode (%.2f)", v.DecodeRatio, v.DecodeMs)
		}
		out = append(out, []string{fmt.Sprintf("verify batch %d, %d drafts each", v.Batch, v.Drafts), opt(v.GraphMs),
			opt(v.ReplayMs), "-", fmt.Sprintf("%.2f", v.EagerMs), "-", ratio, ""})
	}
	p := r.Forward.Prefill
	if p.Ms > 0 {
		out = append(out, []string{fmt.Sprintf("prefill %d tokens (%.0f TFLOP/s)", p.Tokens, p.TFLOPs), "-",
			"-", "-", fmt.Sprintf("%.2f", p.Ms), fmt.Sprintf("%.2f", p.FloorMs), fmt.Sprintf("%.1f%%", 100*p.FloorMs/p.Ms), "compute"})
	}
	return out
}

func header(r *Result) string {
	return fmt.Sprintf("%s, %s, commit %s: %s (%s, %d layers, hidden %d), %.2f GB of weights read per pass (checkpoint %.2f GB), "+
		"KV %.0f KiB/token; measured copy %.2f TB/s, bf16 GEMM %.0f TFLOP/s; CUDA graphs %v",
		r.Date, r.GPU, r.Commit, r.Model, r.DType, r.Layers, r.Hidden, r.WeightBytes/1e9, r.CheckpointBytes/1e9,
		r.KVBytesPerToken/1024, r.Ceilings.CopyBytesPerS/1e12, r.Ceilings.GemmFlopsPerS/1e12, r.Graphs) + specHeader(r)
}

// specHeader describes speculative decoding's acceptance at each concurrency, when it was on.
func specHeader(r *Result) string {
	if r.SpeculativeConfig == "" {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "; speculative decoding %s:", r.SpeculativeConfig)
	for _, t := range r.Throughput {
		fmt.Fprintf(&b, " concurrency %d accepts %.1f%% of drafts, %.2f tokens per verify step;", t.Concurrency,
			100*t.SpecAcceptanceRate, t.SpecMeanAcceptedLength)
	}
	return strings.TrimSuffix(b.String(), ";")
}

func printTable(w io.Writer, r *Result, hf *HFResult) {
	fmt.Fprintln(w, header(r))
	for _, tb := range [][][]string{rows(r, hf), runnerRows(r)} {
		widths := make([]int, len(tb[0]))
		for _, row := range tb {
			for i, c := range row {
				widths[i] = max(widths[i], len(c))
			}
		}
		for _, row := range tb {
			for i, c := range row {
				fmt.Fprintf(w, "%-*s  ", widths[i], c)
			}
			fmt.Fprintln(w)
		}
	}
	if hf != nil && len(hf.Skipped) > 0 {
		fmt.Fprintf(w, "transformers skipped: %s\n", strings.Join(hf.Skipped, "; "))
	}
}

func printMarkdown(w io.Writer, r *Result, hf *HFResult) {
	fmt.Fprintf(w, "%s\n\n", header(r))
	if hf != nil {
		fmt.Fprintf(w, "Reference: transformers %s, torch %s, attention %s, greedy generate() (hf_reference.py).\n\n",
			hf.Transformers, hf.Torch, hf.Attention)
	}
	for _, tb := range [][][]string{rows(r, hf), runnerRows(r)} {
		fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(tb[0], " | "), strings.Repeat(" --- |", len(tb[0])))
		for _, row := range tb[1:] {
			fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
		}
		fmt.Fprintln(w)
	}
	if hf != nil && len(hf.Skipped) > 0 {
		fmt.Fprintf(w, "transformers skipped: %s\n", strings.Join(hf.Skipped, "; "))
	}
}
