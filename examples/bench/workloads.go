package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/atom-go/atom/engine"
)

// measureEngine starts the engine (timing the start) and runs the workloads through Generate.
func measureEngine(o options, res *Result, x cost) error {
	maxConc := 1
	for _, c := range o.conc {
		maxConc = max(maxConc, c)
	}
	cfg := engine.DefaultConfig()
	cfg.Model, cfg.Device, cfg.MaxModelLen, cfg.MaxNumSeqs = o.model, "gpu", o.maxModelLen, maxConc
	cfg.GPUMemoryUtilization, cfg.EnforceEager, cfg.NoAsyncScheduling = o.memUtil, o.eager, o.noAsync
	cfg.SpeculativeConfig = o.specConfig
	res.SpeculativeConfig = o.specConfig
	t0 := time.Now()
	e, err := engine.New(cfg, quietLogger(o.verbose))
	if err != nil {
		return err
	}
	defer e.Close()
	res.StartupSeconds = time.Since(t0).Seconds()
	res.KVBlocks = e.NumKVBlocks()
	res.Graphs = !o.eager
	logf("engine ready in %.1f s (%d KV blocks)", res.StartupSeconds, res.KVBlocks)
	rng := rand.New(rand.NewPCG(3, 4))
	vocab := e.ModelConfig().VocabSize
	prompt := func(n int) []int32 {
		p := make([]int32, n)
		for i := range p {
			p[i] = int32(rng.IntN(vocab))
		}
		return p
	}
	if _, err := runBatch(e, [][]int32{prompt(32)}, 8); err != nil { // warm-up
		return err
	}
	var ttfts []float64
	for i := 0; i < o.ttftReps; i++ {
		r, err := runBatch(e, [][]int32{prompt(o.prompt)}, 1)
		if err != nil {
			return err
		}
		ttfts = append(ttfts, r.ttft[0])
	}
	pf := x.prefill(res.Ceilings, o.prompt)
	ms := median(ttfts) * 1e3
	rate := pf.Flops / (ms / 1e3)
	res.TTFT = TTFTRow{Tokens: o.prompt, Ms: ms, FloorMs: pf.Seconds * 1e3, TFLOPs: rate / 1e12,
		PctGemm: 100 * rate / res.Ceilings.GemmFlopsPerS}
	logf("TTFT %d tokens: %.1f ms", o.prompt, ms)
	checkpoint(res)
	for _, c := range o.conc {
		ps := make([][]int32, c)
		for i := range ps {
			ps[i] = prompt(o.prompt)
		}
		before := e.Stats()
		r, err := runBatch(e, ps, o.output)
		if err != nil {
			return fmt.Errorf("concurrency %d: %w", c, err)
		}
		after := e.Stats()
		wl := x.workload(res.Ceilings, c, o.prompt, o.output)
		tput := float64(c*o.output) / r.wall
		floorTput := float64(c*o.output) / wl.Seconds
		row := ThroughputRow{Concurrency: c, WallSeconds: r.wall, TokensPerS: tput, FloorTokensPerS: floorTput,
			Pct: 100 * tput / floorTput, Bound: wl.Bound, MeanTTFTMs: mean(r.ttft) * 1e3, MeanTPOTMs: mean(r.tpot) * 1e3}
		row.SpecAcceptanceRate, row.SpecMeanAcceptedLength = specDelta(before, after)
		res.Throughput = append(res.Throughput, row)
		logf("concurrency %d: %.0f tokens/s (%.1f s), TPOT %.2f ms", c, tput, r.wall, row.MeanTPOTMs)
		if c == 1 {
			step := x.decodeStep(res.Ceilings, 1, o.prompt+o.output/2)
			tpot := r.tpot[0] * 1e3
			res.Decode1 = DecodeRow{TPOTMs: tpot, TokensPerS: 1e3 / tpot, FloorTokensPerS: 1 / step.Seconds,
				Pct: 100 * step.Seconds * 1e3 / tpot, MedianGapMs: median(r.gaps) * 1e3, MaxGapMs: slices.Max(append(r.gaps, 0)) * 1e3}
			logf("batch 1: TPOT %.3f ms, median gap %.3f ms, longest %.3f ms", tpot, res.Decode1.MedianGapMs, res.Decode1.MaxGapMs)
		}
		checkpoint(res)
	}
	st := e.Stats()
	res.EngineSteps = st.Steps
	return nil
}

// specDelta is the acceptance rate and mean accepted length of speculative decoding between
// two snapshots of the engine's counters (zeros without verify steps).
func specDelta(before, after engine.Stats) (rate, length float64) {
	var d engine.Stats
	d.SpecNumDrafts = after.SpecNumDrafts - before.SpecNumDrafts
	d.SpecNumDraftTokens = after.SpecNumDraftTokens - before.SpecNumDraftTokens
	d.SpecNumAcceptedTokens = after.SpecNumAcceptedTokens - before.SpecNumAcceptedTokens
	return d.SpecAcceptanceRate(), d.SpecMeanAcceptedLength()
}

// batchResult holds per-request times (seconds) of one batch of requests.
type batchResult struct {
	wall       float64   // first submission to last token
	ttft, tpot []float64 // per request: first token; mean gap between later tokens
	gaps       []float64 // request 0: the gap before each token after the first
}

// runBatch submits every prompt at once (greedy, EOS ignored, out tokens each) and waits for all.
func runBatch(e *engine.Engine, prompts [][]int32, out int) (*batchResult, error) {
	p := engine.DefaultSamplingParams()
	p.Temperature, p.MaxTokens, p.IgnoreEOS = 0, out, true
	res := &batchResult{ttft: make([]float64, len(prompts)), tpot: make([]float64, len(prompts))}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	streams := make([]*engine.Stream, len(prompts))
	for i, pr := range prompts {
		st, err := e.Generate(engine.Request{ID: fmt.Sprintf("b%d-%d", time.Now().UnixNano(), i), PromptIDs: pr, Params: p})
		if err != nil {
			return nil, err
		}
		streams[i] = st
	}
	var wg sync.WaitGroup
	errs := make([]error, len(prompts))
	for i, st := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var first, last time.Time
			n := 0
			for n < out {
				outs, err := st.Next(ctx)
				if err != nil {
					errs[i] = fmt.Errorf("request %d after %d tokens: %w", i, n, err)
					return
				}
				now := time.Now()
				k := 0
				for _, o := range outs {
					k += len(o.TokenIDs)
				}
				if k == 0 {
					continue
				}
				gaps := k // tokens that close a gap since the last hand-over
				if n == 0 {
					first, last = now, now
					gaps-- // the first token closes none
				}
				if i == 0 { // tokens handed over together share the gap
					for range gaps {
						res.gaps = append(res.gaps, now.Sub(last).Seconds()/float64(gaps))
					}
				}
				n += k
				last = now
			}
			res.ttft[i] = first.Sub(start).Seconds()
			if n > 1 {
				res.tpot[i] = last.Sub(first).Seconds() / float64(n-1)
			}
		}()
	}
	wg.Wait()
	res.wall = time.Since(start).Seconds()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return res, nil
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	var t float64
	for _, x := range v {
		t += x
	}
	return t / float64(len(v))
}
