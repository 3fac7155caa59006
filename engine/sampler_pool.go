package engine

import (
	"runtime"
	"sync"

	"github.com/atom-go/atom/ops"
)

// samplerPool samples the rows of one step in parallel: each row depends only on its own
// logits, sequence and generator, so splitting rows across goroutines changes no result. With
// a 128k vocabulary one row costs about 1.7 ms on one core, which otherwise bounds a GPU
// step's throughput at a few hundred tokens per second.
type samplerPool struct {
	samplers []sampler
	ins      []sampleInput
	outs     []Sample

	params []ops.RowSampling // device sampling (sampler_device.go): one step's rows
	devOut []Sample
}

// minRowsPerWorker keeps small steps on one goroutine, where spawning would cost more.
const minRowsPerWorker = 2

func newSamplerPool() *samplerPool {
	return &samplerPool{samplers: make([]sampler, runtime.GOMAXPROCS(0))}
}

// add queues one row's input; run samples every queued row.
func (p *samplerPool) add(in sampleInput) { p.ins = append(p.ins, in) }

// run samples row i of logits (width vocab) with input i and returns the samples in order;
// the queue is emptied for the next step.
func (p *samplerPool) run(logits []float32, vocab int) []Sample {
	n := len(p.ins)
	p.outs = p.outs[:0]
	for i := 0; i < n; i++ {
		p.outs = append(p.outs, Sample{})
	}
	workers := min(len(p.samplers), max(1, n/minRowsPerWorker))
	chunk := (n + workers - 1) / workers
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		lo, hi := w*chunk, min((w+1)*chunk, n)
		if lo >= hi {
			break
		}
		body := func() {
			for i := lo; i < hi; i++ {
				if p.ins[i].skip {
					continue
				}
				p.outs[i] = p.samplers[w].sample(logits[i*vocab:(i+1)*vocab], &p.ins[i])
			}
		}
		if w == workers-1 || hi == n {
			body()
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); body() }()
	}
	wg.Wait()
	p.ins = p.ins[:0]
	return p.outs
}
