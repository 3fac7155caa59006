package engine

import (
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/atom-go/atom/ops"
	"github.com/atom-go/atom/ops/gpu"
)

// CUDA graphs for decode steps (gpu backend only).
//
// At startup, after the KV cache is allocated, the runner captures one graph per capture size
// n (--cudagraph-capture-sizes, limited by --max-num-seqs and --max-num-batched-tokens): the
// whole forward pass of n decode tokens plus the logits of all n rows. A later decode-only
// batch (every item one sampled token) of k <= the largest size replays the graph of the
// smallest n >= k: its inputs are uploaded into persistent device buffers (gpu.StepInputs)
// padded to n rows, the graph is launched, and the first k rows of logits are read back (or
// sampled on the device after the graph, see Runner.RunSampled).
// Padding rows write no KV (slot -1) and read block 0, so real blocks are never touched.
//
// Block tables have a fixed width in a graph: the model length over the block size. The
// attention of a graph is launched for that bound on the context; the kernel divides each
// token's own context among the splits, so short contexts are not penalised.
//
// Prefills, mixed batches, batches larger than the largest size and --enforce-eager take the
// eager path, as does every batch on the cpu backend or under tensor parallelism.

// decodeGraphs are the captured graphs of a runner and the buffers they read.
type decodeGraphs struct {
	be     *gpu.Backend
	in     *gpu.StepInputs
	sizes  []int // ascending
	graphs map[int]*decodeGraph
}

// decodeGraph is the graph of one batch size and the logits tensor it writes.
type decodeGraph struct {
	n      int
	g      *gpu.Graph
	logits ops.Tensor
}

// setupGraphs captures the decode graphs when the engine runs on the gpu without
// --enforce-eager; maxLen is the engine's model length.
func setupGraphs(cfg Config, r *Runner, maxLen int, log *slog.Logger) error {
	if cfg.Device != "gpu" || cfg.EnforceEager || len(cfg.CudagraphCaptureSizes) == 0 {
		return nil
	}
	if cfg.TensorParallelSize > 1 {
		log.Info("decode graphs off: not captured across tensor-parallel ranks yet")
		return nil
	}
	if Env("ATOM_GO_DUMP_DIR") != "" {
		log.Info("decode graphs off: ATOM_GO_DUMP_DIR reads every layer on the host")
		return nil
	}
	start := time.Now()
	if err := r.CaptureGraphs(cfg.CudagraphCaptureSizes, maxLen); err != nil {
		return err
	}
	log.Info("decode graphs captured", "sizes", r.GraphSizes(), "seconds", fmt.Sprintf("%.2f", time.Since(start).Seconds()))
	return nil
}

// CaptureGraphs captures a decode graph for each of sizes (those above the runner's limits
// are skipped) whose sequences are at most maxLen tokens long. On a backend without graphs
// (cpu) and for a model split across tensor-parallel ranks it does nothing. Calling it again
// replaces the graphs.
func (r *Runner) CaptureGraphs(sizes []int, maxLen int) (err error) {
	be, ok := r.be.(*gpu.Backend)
	if _, single := r.cache.(*gpu.KVCache); !ok || !single {
		return nil // the cpu backend, or a model split across tensor-parallel ranks
	}
	var keep []int
	for _, n := range sizes {
		if n > 0 && n <= r.limits.MaxSeqs && n <= r.limits.MaxTokens && !slices.Contains(keep, n) {
			keep = append(keep, n)
		}
	}
	slices.Sort(keep)
	r.graphs = nil
	if len(keep) == 0 {
		return nil
	}
	if maxLen <= 0 || maxLen > r.numBlocks*r.blockSize {
		maxLen = r.numBlocks * r.blockSize
	}
	stride := (maxLen + r.blockSize - 1) / r.blockSize
	in, err := be.NewStepInputs(keep[len(keep)-1], stride)
	if err != nil {
		return fmt.Errorf("capture decode graphs: %w", err)
	}
	dg := &decodeGraphs{be: be, in: in, sizes: keep, graphs: map[int]*decodeGraph{}}
	for _, n := range keep {
		g, err := r.captureOne(be, in, n)
		if err != nil {
			return fmt.Errorf("capture the decode graph of %d sequences: %w", n, err)
		}
		dg.graphs[n] = g
	}
	if err := be.Synchronize(); err != nil {
		return fmt.Errorf("capture decode graphs: %w", err)
	}
	r.graphs = dg
	return nil
}

// captureOne warms up the forward pass of n padding rows bound to in, then captures it.
func (r *Runner) captureOne(be *gpu.Backend, in *gpu.StepInputs, n int) (g *decodeGraph, err error) {
	if err := be.LoadDecode(in, n, nil, &ops.AttnMetadata{}, r.cache); err != nil {
		return nil, err
	}
	if err := be.BindStepInputs(in, n, r.cache); err != nil {
		return nil, err
	}
	defer be.UnbindStepInputs()
	// The model reads only the lengths of its host inputs while the step inputs are bound.
	ids, rows := make([]int32, n), make([]int32, n)
	meta := &ops.AttnMetadata{Positions: make([]int32, n), SlotMapping: make([]int32, n),
		QueryStart: make([]int32, n+1), SeqLens: make([]int32, n), BlockTables: make([]int32, n), BlockTableStride: 1}
	for i := range rows {
		rows[i], meta.QueryStart[i+1], meta.SeqLens[i] = int32(i), int32(i+1), 1
	}
	pass := func() ops.Tensor { return r.model.Logits(r.model.Forward(ids, meta, r.cache), rows) }
	defer func() {
		if p := recover(); p != nil {
			g, err = nil, fmt.Errorf("warm-up: %v", p)
		}
	}()
	pass() // lazily created resources (BLAS plans, tables, workspaces) must exist before the capture
	g = &decodeGraph{n: n}
	g.g, err = be.Capture(func() { g.logits = pass() })
	if err != nil {
		return nil, err
	}
	return g, nil
}

// GraphSizes lists the captured decode batch sizes (none: every step is eager).
func (r *Runner) GraphSizes() []int {
	if r.graphs == nil {
		return nil
	}
	return slices.Clone(r.graphs.sizes)
}

// StepCounts returns how many forward passes replayed a graph and how many ran eagerly.
func (r *Runner) StepCounts() (graph, eager int64) { return r.graphSteps, r.eagerSteps }

// graphFor returns the graph that runs the prepared batch, or nil for the eager path.
func (r *Runner) graphFor(work []Work) *decodeGraph {
	dg := r.graphs
	if dg == nil || len(work) > dg.sizes[len(dg.sizes)-1] || len(r.sampleRows) != len(work) {
		return nil
	}
	for _, w := range work {
		if w.NumTokens != 1 || !w.Sample || (w.Start+r.blockSize)/r.blockSize > dg.in.Stride() {
			return nil
		}
	}
	i, _ := slices.BinarySearch(dg.sizes, len(work))
	return dg.graphs[dg.sizes[i]]
}

// runGraph replays g for the prepared decode batch and returns its logits (the first rows of
// the graph's logits buffer, one per sequence of the batch).
func (r *Runner) runGraph(g *decodeGraph) (ops.Tensor, error) {
	dg := r.graphs
	if err := dg.be.LoadDecode(dg.in, g.n, r.ids, &r.meta, r.cache); err != nil {
		return nil, fmt.Errorf("decode graph of %d: %w", g.n, err)
	}
	if err := g.g.Launch(); err != nil {
		return nil, err
	}
	r.graphSteps++
	return dg.be.View(g.logits, len(r.sampleRows)), nil
}
