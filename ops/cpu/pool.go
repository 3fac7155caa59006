package cpu

import (
	"runtime"
	"sync"
)

// pool runs a range of independent work items on a fixed set of goroutines. Each worker has
// its own scratch buffer so kernels need no allocation per call.
type pool struct {
	workers int
	scratch [][]float32
	jobs    chan job
}

type job struct {
	lo, hi, worker int
	fn             func(lo, hi, worker int)
	wg             *sync.WaitGroup
}

func newPool(workers int) *pool {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	p := &pool{workers: workers, scratch: make([][]float32, workers), jobs: make(chan job)}
	for i := 1; i < workers; i++ {
		go func() {
			for j := range p.jobs {
				j.fn(j.lo, j.hi, j.worker)
				j.wg.Done()
			}
		}()
	}
	return p
}

// buf returns worker w's scratch of at least n floats.
func (p *pool) buf(w, n int) []float32 {
	if cap(p.scratch[w]) < n {
		p.scratch[w] = make([]float32, n)
	}
	return p.scratch[w][:n]
}

// run splits [0,n) into one contiguous chunk per worker; the caller's goroutine takes the first.
func (p *pool) run(n int, fn func(lo, hi, worker int)) {
	if n <= 0 {
		return
	}
	w := p.workers
	if w > n {
		w = n
	}
	if w == 1 {
		fn(0, n, 0)
		return
	}
	var wg sync.WaitGroup
	wg.Add(w - 1)
	chunk := (n + w - 1) / w
	for i := 1; i < w; i++ {
		lo, hi := i*chunk, min((i+1)*chunk, n)
		if lo >= hi {
			wg.Done()
			continue
		}
		p.jobs <- job{lo: lo, hi: hi, worker: i, fn: fn, wg: &wg}
	}
	fn(0, min(chunk, n), 0)
	wg.Wait()
}
