package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/atom-go/atom/models"
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
// Under tensor parallelism (a models.RankedModel) every rank captures its own graph of each
// size, with its own StepInputs: the rank's forward pass, all-reduces (NCCL) included, plus
// its slice of the vocabulary's logits. The ranks warm up and capture concurrently, each on
// its own thread, since the warm-up's all-reduces need every rank. A replay uploads every
// rank's inputs, launches every rank's graph, then gathers the vocabulary slices into rank
// 0's logits through the host, as the eager path does; sampling then runs unchanged.
//
// A speculative verify batch (each sequence's last sampled token plus its drafts, every
// position's logits wanted) replays the same graphs: the token at position p of a sequence
// becomes a sequence of its own, one query token long with context p+1 and its sequence's
// block table. Each layer writes the KV of all rows before its attention reads any, so a row
// sees the drafts before it exactly as the causal chunk would; the logits come out one row per
// position, in order. With k drafts the runner also captures each decode size times 1+k.
//
// Prefills, mixed batches, batches larger than the largest size and --enforce-eager take the
// eager path, as does every batch on the cpu backend.

// decodeGraphs are the captured graphs of a runner and the buffers they read.
type decodeGraphs struct {
	be     *gpu.Backend // rank 0's under tensor parallelism
	in     *gpu.StepInputs
	sizes  []int // ascending
	graphs map[int]*decodeGraph

	ranked models.RankedModel // non-nil: one graph per size per rank
	ranks  []rankInputs       // each rank's backend and inputs (ranked only)
	errs   []error            // one per rank, reused by every replay
}

// rankInputs are one rank's backend and the inputs its graphs read.
type rankInputs struct {
	be *gpu.Backend
	in *gpu.StepInputs
}

// decodeGraph is the graph of one batch size and the logits tensor it writes; under tensor
// parallelism g and logits are nil and ranks holds each rank's graph and vocabulary slice.
type decodeGraph struct {
	n      int
	g      *gpu.Graph
	logits ops.Tensor
	ranks  []*decodeGraph
}

// setupGraphs captures the decode graphs when the engine runs on the gpu without
// --enforce-eager; maxLen is the engine's model length.
func setupGraphs(cfg Config, r *Runner, maxLen int, log *slog.Logger) error {
	if cfg.Device != "gpu" || cfg.EnforceEager || len(cfg.CudagraphCaptureSizes) == 0 {
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
// are skipped) whose sequences are at most maxLen tokens long; a model split across
// tensor-parallel ranks gets one graph per size per rank. On a backend without graphs (cpu)
// it does nothing. Calling it again replaces the graphs.
func (r *Runner) CaptureGraphs(sizes []int, maxLen int) (err error) {
	be, ok := r.be.(*gpu.Backend)
	rm, ranked := r.model.(models.RankedModel)
	if _, single := r.cache.(*gpu.KVCache); !ok || !single && !ranked {
		return nil // the cpu backend
	}
	maxSeqs := r.limits.MaxSeqs
	if r.decodeSeqs > 0 {
		maxSeqs = min(maxSeqs, r.decodeSeqs)
	}
	keep := captureSizes(sizes, maxSeqs, r.verifyRows, min(r.limits.MaxSeqs, r.limits.MaxTokens))
	r.graphs = nil
	if len(keep) == 0 {
		return nil
	}
	if maxLen <= 0 || maxLen > r.numBlocks*r.blockSize {
		maxLen = r.numBlocks * r.blockSize
	}
	stride := (maxLen + r.blockSize - 1) / r.blockSize
	if ranked {
		dg, err := r.captureRanked(rm, keep, stride)
		if err != nil {
			return err
		}
		r.graphs = dg
		return nil
	}
	in, err := be.NewStepInputs(keep[len(keep)-1], stride)
	if err != nil {
		return fmt.Errorf("capture decode graphs: %w", err)
	}
	dg := &decodeGraphs{be: be, in: in, sizes: keep, graphs: map[int]*decodeGraph{}}
	for _, n := range keep {
		g, err := captureOne(be, in, n, r.model, r.cache)
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

// captureSizes returns the ascending distinct graph sizes to capture: each of sizes up to
// maxSeqs decode rows and, with verifyRows > 1, each such size times verifyRows, every one at
// most maxRows (the rows of the runner's logits and the tokens of a step).
func captureSizes(sizes []int, maxSeqs, verifyRows, maxRows int) []int {
	var keep []int
	add := func(n int) {
		if n > 0 && n <= maxRows && !slices.Contains(keep, n) {
			keep = append(keep, n)
		}
	}
	for _, n := range sizes {
		if n <= maxSeqs {
			add(n)
			if verifyRows > 1 {
				add(n * verifyRows)
			}
		}
	}
	slices.Sort(keep)
	return keep
}

// captureOne warms up the forward pass of model m over n padding rows bound to in, then
// captures it.
func captureOne(be *gpu.Backend, in *gpu.StepInputs, n int, m models.Model, cache ops.KVCache) (g *decodeGraph, err error) {
	if err := be.LoadDecode(in, n, nil, &ops.AttnMetadata{}, cache, nil); err != nil {
		return nil, err
	}
	if err := be.BindStepInputs(in, n, cache); err != nil {
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
	pass := func() ops.Tensor { return m.Logits(m.Forward(ids, meta, cache), rows) }
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

// VerifyGraphSteps returns how many of the graph replays were speculative verify steps.
func (r *Runner) VerifyGraphSteps() int64 { return r.verifyGraphSteps }

// graphFor returns the graph that runs the prepared batch, or nil for the eager path. A decode
// batch's graph reads r.meta; a verify batch's reads r.vmeta, its tokens as one-token
// sequences (r.gmeta says which).
func (r *Runner) graphFor(work []Work) *decodeGraph {
	dg := r.graphs
	if dg == nil || len(r.ids) > dg.sizes[len(dg.sizes)-1] || len(r.sampleRows) != len(r.ids) {
		return nil
	}
	verify := false
	for _, w := range work {
		// Every token sampled: a decode token, or a verify chunk (its drafts and the token before).
		if !w.Sample || w.Drafts != w.NumTokens-1 || (w.Start+w.NumTokens+r.blockSize-1)/r.blockSize > dg.in.Stride() {
			return nil
		}
		verify = verify || w.NumTokens > 1
	}
	r.gmeta = &r.meta
	if verify {
		r.gmeta = r.splitTokens()
	}
	i, _ := slices.BinarySearch(dg.sizes, len(r.ids))
	return dg.graphs[dg.sizes[i]]
}

// splitTokens writes the prepared batch into r.vmeta with each token a sequence of its own:
// context up to and including its position, its sequence's block table.
func (r *Runner) splitTokens() *ops.AttnMetadata {
	m, v := &r.meta, &r.vmeta
	stride := m.BlockTableStride
	v.Positions, v.SlotMapping, v.BlockTableStride = m.Positions, m.SlotMapping, stride
	v.QueryStart, v.SeqLens, v.BlockTables = append(v.QueryStart[:0], 0), v.SeqLens[:0], v.BlockTables[:0]
	for s := range m.NumSeqs() {
		table := m.BlockTables[s*stride : (s+1)*stride]
		for t := m.QueryStart[s]; t < m.QueryStart[s+1]; t++ {
			v.QueryStart = append(v.QueryStart, t+1)
			v.SeqLens = append(v.SeqLens, m.Positions[t]+1)
			v.BlockTables = append(v.BlockTables, table...)
		}
	}
	return v
}

// runGraph replays g for the prepared decode batch and returns its logits (the first rows of
// the graph's logits buffer, one per sequence of the batch).
func (r *Runner) runGraph(g *decodeGraph) (ops.Tensor, error) {
	if r.graphs.ranked != nil {
		return r.runRanked(g)
	}
	return r.replay(g, false, nil)
}

// replay uploads the prepared decode batch into the single-rank graphs' inputs, with its ids
// taken on the device from the last queued draw when fed is set (see QueueSampled) and the
// rows' sampling params when the step's draw is on the device (params not nil), launches g and
// returns its logits (the first rows of the graph's logits buffer, one per sequence).
func (r *Runner) replay(g *decodeGraph, fed bool, params []ops.RowSampling) (ops.Tensor, error) {
	dg := r.graphs
	var err error
	if fed {
		err = dg.be.LoadDecodeFed(dg.in, g.n, r.ids, r.gmeta, r.cache, params)
	} else {
		err = dg.be.LoadDecode(dg.in, g.n, r.ids, r.gmeta, r.cache, params)
	}
	if err != nil {
		return nil, fmt.Errorf("decode graph of %d: %w", g.n, err)
	}
	if fed {
		r.fedSteps++
	}
	if err := g.g.Launch(); err != nil {
		return nil, err
	}
	r.graphSteps++
	if r.gmeta == &r.vmeta {
		r.verifyGraphSteps++
	}
	return dg.be.View(g.logits, len(r.sampleRows)), nil
}

// captureRanked captures the graphs of a tensor-parallel model: all ranks allocate their
// inputs, then capture each size together. Every phase ends before the next starts, so a rank
// that failed never leaves the others waiting in an all-reduce of a later warm-up.
func (r *Runner) captureRanked(rm models.RankedModel, keep []int, stride int) (*decodeGraphs, error) {
	nr := rm.Ranks()
	dg := &decodeGraphs{sizes: keep, graphs: map[int]*decodeGraph{}, ranked: rm, ranks: make([]rankInputs, nr), errs: make([]error, nr)}
	rm.OnRanks(r.cache, func(rank int, be ops.Backend, _ models.Model, _ ops.KVCache) {
		gb, ok := be.(*gpu.Backend)
		if !ok {
			dg.errs[rank] = fmt.Errorf("the %s backend has no graphs", be.Name())
			return
		}
		in, err := gb.NewStepInputs(keep[len(keep)-1], stride)
		dg.ranks[rank], dg.errs[rank] = rankInputs{be: gb, in: in}, err
	})
	if err := dg.rankErrs(); err != nil {
		return nil, fmt.Errorf("capture decode graphs: %w", err)
	}
	for _, n := range keep {
		g := &decodeGraph{n: n, ranks: make([]*decodeGraph, nr)}
		rm.OnRanks(r.cache, func(rank int, _ ops.Backend, m models.Model, shard ops.KVCache) {
			ri := dg.ranks[rank]
			g.ranks[rank], dg.errs[rank] = captureOne(ri.be, ri.in, n, m, shard)
		})
		if err := dg.rankErrs(); err != nil {
			return nil, fmt.Errorf("capture the decode graph of %d sequences: %w", n, err)
		}
		dg.graphs[n] = g
	}
	rm.OnRanks(r.cache, func(rank int, _ ops.Backend, _ models.Model, _ ops.KVCache) {
		dg.errs[rank] = dg.ranks[rank].be.Synchronize()
	})
	if err := dg.rankErrs(); err != nil {
		return nil, fmt.Errorf("capture decode graphs: %w", err)
	}
	dg.be, dg.in = dg.ranks[0].be, dg.ranks[0].in
	return dg, nil
}

// rankErrs joins the ranks' errors of the last phase, naming each rank, and clears them.
func (dg *decodeGraphs) rankErrs() error {
	var errs []error
	for rank, err := range dg.errs {
		if err != nil {
			errs = append(errs, fmt.Errorf("rank %d: %w", rank, err))
			dg.errs[rank] = nil
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return errors.Join(errs...)
}

// runRanked replays the graph of every rank for the prepared decode batch and gathers the
// ranks' vocabulary slices into rank 0's logits. All ranks upload their inputs before any
// launches: a rank's graph waits in its all-reduces for every other rank's graph, so either
// all ranks launch or none does.
func (r *Runner) runRanked(g *decodeGraph) (ops.Tensor, error) {
	dg, k := r.graphs, len(r.sampleRows)
	dg.ranked.OnRanks(r.cache, func(rank int, _ ops.Backend, _ models.Model, shard ops.KVCache) {
		ri := dg.ranks[rank]
		dg.errs[rank] = ri.be.LoadDecode(ri.in, g.n, r.ids, r.gmeta, shard, nil)
	})
	if err := dg.rankErrs(); err != nil {
		return nil, fmt.Errorf("decode graph of %d: %w", g.n, err)
	}
	out := dg.ranked.GatherLogits(k, func(rank int) ops.Tensor {
		rg := g.ranks[rank]
		dg.errs[rank] = rg.g.Launch()
		return dg.ranks[rank].be.View(rg.logits, k)
	})
	if err := dg.rankErrs(); err != nil {
		return nil, fmt.Errorf("decode graph of %d: %w", g.n, err)
	}
	r.graphSteps++
	if r.gmeta == &r.vmeta {
		r.verifyGraphSteps++
	}
	return out, nil
}

// ReplayGraph times the device alone on a decode batch: it prepares work, uploads its inputs
// once, launches the batch's graph k times back to back and waits once, so the host's share
// of a step (scheduling, uploads, launch and wake-up latency) is left out. It returns the mean
// time per replay; a batch without a graph (or k < 1) is an error. For benchmarks: the logits
// are not read and the KV cache receives k writes of the same tokens.
func (r *Runner) ReplayGraph(work []Work, k int) (time.Duration, error) {
	if k < 1 {
		return 0, fmt.Errorf("ReplayGraph: %d replays", k)
	}
	if err := r.prepare(work); err != nil {
		return 0, err
	}
	g := r.graphFor(work)
	if g == nil || r.graphs.ranked != nil {
		return 0, fmt.Errorf("ReplayGraph: no single-rank graph for a batch of %d", len(work))
	}
	dg := r.graphs
	if err := dg.be.LoadDecode(dg.in, g.n, r.ids, r.gmeta, r.cache, nil); err != nil {
		return 0, fmt.Errorf("ReplayGraph: %w", err)
	}
	if err := dg.be.Synchronize(); err != nil {
		return 0, err
	}
	start := time.Now()
	for range k {
		if err := g.g.Launch(); err != nil {
			return 0, err
		}
	}
	if err := dg.be.Synchronize(); err != nil {
		return 0, err
	}
	return time.Since(start) / time.Duration(k), nil
}
