package main

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/atom-go/atom/engine"
	"github.com/atom-go/atom/engine/spec"
	"github.com/atom-go/atom/models"
	"github.com/atom-go/atom/ops"
	"github.com/atom-go/atom/ops/gpu"
)

// measureForward times the model runner alone, without the engine's scheduler or sampler:
// decode steps of each concurrency at the mean context of the throughput runs, replayed from
// CUDA graphs and run eagerly, and one prefill of the prompt. A step is Runner.Run: upload of
// the inputs, the forward pass, the logits copied to the host as float32. The KV blocks of the
// decode batches are never written (zeros; the attention kernel has no data-dependent branch).
func measureForward(o options, res *Result, x cost) error {
	ck, err := models.OpenCheckpoint(o.model)
	if err != nil {
		return err
	}
	defer ck.Close()
	be, err := gpu.New(0, gpu.Options{DType: ck.Config.DType})
	if err != nil {
		return err
	}
	defer be.Close()
	maxConc := 1
	for _, c := range o.conc {
		maxConc = max(maxConc, c)
	}
	drafts, err := verifyDrafts(o.specConfig)
	if err != nil {
		return err
	}
	limits := models.Options{MaxTokens: max(o.prompt, maxConc*(1+drafts)), MaxSeqs: maxConc * (1 + drafts)}
	t0 := time.Now()
	m, err := models.Load(ck, be, limits)
	if err != nil {
		return err
	}
	if err := be.Synchronize(); err != nil {
		return err
	}
	res.Forward.LoadSeconds = time.Since(t0).Seconds()
	const bs = 16
	ctx := o.prompt + o.output/2
	perSeq := (ctx + o.replays + 1 + bs) / bs // room for the chain's steps past ctx
	// Every sequence of a decode batch has blocks of its own (shared ones would sit in L2 and
	// flatter the attention): a batch whose KV does not fit beside the weights (a 61 GB MoE
	// on an 80 GB card at 256) is left to the engine phase, whose KV cache is sized to memory.
	free, _, err := be.Lib().MemInfo()
	if err != nil {
		return err
	}
	const reserve = 3 << 30 // graphs, workspaces, the logits of the largest batch
	var conc []int
	for _, c := range o.conc {
		if kv := float64((c*perSeq+1)*bs) * x.kvPerToken; kv <= float64(free)-reserve {
			conc = append(conc, c)
		} else {
			logf("runner phase: decode batch %d skipped: its %.1f GB of KV cache does not fit in the %.1f GB free", c, kv/1e9, float64(free)/1e9)
		}
	}
	if len(conc) == 0 {
		return fmt.Errorf("runner phase: no decode batch of %v fits in the %.1f GB free", o.conc, float64(free)/1e9)
	}
	maxConc = 1
	for _, c := range conc {
		maxConc = max(maxConc, c)
	}
	r, err := engine.NewRunner(m, be, limits, maxConc*perSeq+1, bs)
	if err != nil {
		return err
	}
	t0 = time.Now()
	sizes := engine.DefaultConfig().CudagraphCaptureSizes
	for _, c := range conc {
		if drafts > 0 {
			sizes = append(sizes, c*(1+drafts))
		}
	}
	if err := r.CaptureGraphs(sizes, o.maxModelLen); err != nil {
		return err
	}
	res.Forward.CaptureSeconds = time.Since(t0).Seconds()
	rng := rand.New(rand.NewPCG(1, 2))
	vocab := ck.Config.VocabSize
	tokens := make([]int32, max(ctx+o.replays+2, o.prompt))
	for i := range tokens {
		tokens[i] = int32(rng.IntN(vocab))
	}
	decode := func(c int) []engine.Work {
		w := make([]engine.Work, c)
		for s := range w {
			tb := make([]int32, perSeq)
			for j := range tb {
				tb[j] = int32(s*perSeq + j)
			}
			w[s] = engine.Work{Tokens: tokens[:ctx+1], Start: ctx, NumTokens: 1, BlockTable: tb, Sample: true}
		}
		return w
	}
	timeRun := func(w []engine.Work, reps int) (float64, error) {
		var ts []float64
		for i := 0; i < reps+3; i++ {
			t := time.Now()
			if _, err := r.Run(w); err != nil {
				return 0, err
			}
			if i >= 3 {
				ts = append(ts, float64(time.Since(t).Microseconds())/1e3)
			}
		}
		return median(ts), nil
	}
	for _, c := range conc {
		g0, _ := r.StepCounts()
		ms, err := timeRun(decode(c), 20)
		if err != nil {
			return fmt.Errorf("decode batch %d: %w", c, err)
		}
		replay, chain := 0.0, 0.0
		if g1, _ := r.StepCounts(); g1 == g0 {
			ms = -1 // no graph for this size: reported as eager only
		} else if d, err := r.ReplayGraph(decode(c), o.replays); err == nil {
			replay = float64(d.Microseconds()) / 1e3
		} else {
			return fmt.Errorf("decode batch %d replay: %w", c, err)
		}
		if replay > 0 {
			// A diagnostic column: its failure is reported and leaves the column empty.
			if chain, err = chainMs(r, decode(c), ctx, o.replays); err != nil { // chain is 0
				logf("decode batch %d chain (not timed): %v", c, err)
			}
		}
		f := x.decodeStep(res.Ceilings, c, ctx+1)
		res.Forward.Decode = append(res.Forward.Decode, ForwardRow{Batch: c, Context: ctx + 1, GraphMs: ms,
			ReplayMs: replay, ChainMs: chain, FloorMs: f.Seconds * 1e3, Bound: f.Bound})
	}
	// Verify steps: the last sampled token and the drafts of each sequence (the KV of the
	// drafts' positions is written, as the engine's verify step writes it).
	verify := func(c int) []engine.Work {
		w := decode(c)
		for s := range w {
			w[s].Start, w[s].NumTokens, w[s].Drafts = ctx-drafts, 1+drafts, drafts
		}
		return w
	}
	timeSampled := func(w []engine.Work, reps int) (float64, error) {
		if !r.DeviceSampling() {
			return timeRun(w, reps)
		}
		params := make([]ops.RowSampling, 0, len(w)*(1+drafts))
		for _, it := range w {
			for range it.Drafts + 1 {
				params = append(params, ops.RowSampling{TopP: 1}) // greedy
			}
		}
		var ts []float64
		for i := 0; i < reps+3; i++ {
			t := time.Now()
			if _, err := r.RunSampled(w, params); err != nil {
				return 0, err
			}
			if i >= 3 {
				ts = append(ts, float64(time.Since(t).Microseconds())/1e3)
			}
		}
		return median(ts), nil
	}
	for _, c := range conc {
		if drafts == 0 {
			break
		}
		g0, _ := r.StepCounts()
		ms, err := timeSampled(verify(c), 20)
		if err != nil {
			return fmt.Errorf("verify batch %d: %w", c, err)
		}
		row := VerifyRow{Batch: c, Drafts: drafts, GraphMs: ms}
		if g1, _ := r.StepCounts(); g1 == g0 {
			row.GraphMs = -1
		} else if d, err := r.ReplayGraph(verify(c), o.replays); err == nil {
			row.ReplayMs = float64(d.Microseconds()) / 1e3
		} else {
			return fmt.Errorf("verify batch %d replay: %w", c, err)
		}
		if row.DecodeMs, err = timeSampled(decode(c), 20); err != nil {
			return fmt.Errorf("decode batch %d: %w", c, err)
		}
		if row.GraphMs > 0 {
			row.DecodeRatio = row.GraphMs / row.DecodeMs
		}
		res.Forward.Verify = append(res.Forward.Verify, row)
	}
	if err := r.CaptureGraphs(nil, 0); err != nil { // drop the graphs: eager from here on
		return err
	}
	for i, c := range conc {
		ms, err := timeRun(decode(c), 10)
		if err != nil {
			return fmt.Errorf("eager decode batch %d: %w", c, err)
		}
		res.Forward.Decode[i].EagerMs = ms
	}
	for i := range res.Forward.Verify {
		ms, err := timeSampled(verify(res.Forward.Verify[i].Batch), 10)
		if err != nil {
			return fmt.Errorf("eager verify batch %d: %w", res.Forward.Verify[i].Batch, err)
		}
		res.Forward.Verify[i].EagerMs = ms
	}
	tb := make([]int32, (o.prompt+bs-1)/bs)
	for j := range tb {
		tb[j] = int32(j)
	}
	pw := []engine.Work{{Tokens: tokens[:o.prompt], NumTokens: o.prompt, BlockTable: tb, Sample: true}}
	ms, err := timeRun(pw, 5)
	if err != nil {
		return fmt.Errorf("prefill: %w", err)
	}
	f := x.prefill(res.Ceilings, o.prompt)
	res.Forward.Prefill = PrefillRow{Tokens: o.prompt, Ms: ms, FloorMs: f.Seconds * 1e3, TFLOPs: f.Flops / (ms / 1e3) / 1e12}
	return nil
}

// chainMs times k decode steps of w queued as the engine's async scheduling queues them, with
// no scheduler: greedy draws on the device, each step fed on the device from the previous
// draw, each draw collected one step later, and each step one position further on, as the
// engine's are (w's token slices must have room for k+1 more tokens). Against the replay (one
// step at a fixed context) it is what the boundaries between steps and the moving context
// cost; against the engine's TPOT, what the engine's host side adds. 0 when the runner cannot
// queue the batch.
func chainMs(r *engine.Runner, w []engine.Work, maxStart, k int) (ms float64, err error) {
	if k < 1 || !r.CanQueue(len(w), maxStart+k) {
		return 0, nil
	}
	steps := make([][]engine.Work, k+1)
	for i := range steps {
		steps[i] = make([]engine.Work, len(w))
		for s, item := range w {
			item.Start += i
			item.Tokens = item.Tokens[:item.Start+item.NumTokens]
			steps[i][s] = item
		}
	}
	defer func() {
		if err != nil {
			r.DropQueued()
		}
	}()
	params := make([]ops.RowSampling, len(w))
	for i := range params {
		params[i].TopP = 1
	}
	if err := r.QueueSampled(steps[0], params, false); err != nil {
		return 0, err
	}
	var t0 time.Time
	for i := 1; i <= k; i++ {
		if err := r.QueueSampled(steps[i], params, true); err != nil {
			return 0, err
		}
		if _, err := r.CollectSampled(); err != nil {
			return 0, err
		}
		if i == 1 {
			t0 = time.Now() // draw 0 is read: the k draws after it are timed
		}
	}
	if _, err := r.CollectSampled(); err != nil {
		return 0, err
	}
	return float64(time.Since(t0).Microseconds()) / 1e3 / float64(k), nil
}

// verifyDrafts is the number of drafts a verify step carries under --speculative-config (0:
// none given).
func verifyDrafts(config string) (int, error) {
	sc, err := spec.Parse(config)
	if err != nil || sc == nil {
		return 0, err
	}
	return sc.NumSpeculativeTokens, nil
}
