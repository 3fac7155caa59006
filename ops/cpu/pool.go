package cpu

import (
	"runtime"
	"sync/atomic"
)

// pool runs a range of independent work items on a fixed set of goroutines. Each worker has
// its own scratch buffer so kernels need no allocation per call.
//
// A decode step calls run a few hundred times, each for tens of microseconds of work, from the
// engine's goroutine, which is locked to its OS thread: handing work over and waiting through
// channels and a WaitGroup put that thread to sleep and woke it through the kernel at every
// call, which cost as much as the work. So a worker spins a while on its slot before it
// sleeps, and run spins until its workers are done (yielding now and then, so that a process
// with fewer threads than workers still makes progress).
type pool struct {
	workers int
	procs   int // GOMAXPROCS when the pool was made
	scratch [][]float32
	slots   []*slot // workers 1..n-1; the caller is worker 0
	pending atomic.Int32
	closed  atomic.Bool
}

// slot is one worker's mailbox: run writes the job, then bumps seq; the worker runs it and
// decrements pool.pending.
type slot struct {
	seq      atomic.Uint64
	sleeping atomic.Bool
	wake     chan struct{}
	lo, hi   int
	fn       func(lo, hi, worker int)
	_        [64]byte // keep slots on their own cache lines
}

// Spin budgets: checks of an atomic before a worker sleeps, and before run starts yielding
// (at once where the process has fewer threads than the pool has workers).
const (
	workerSpins = 1 << 16
	callerSpins = 1 << 18
)

func newPool(workers int) *pool {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	p := &pool{workers: workers, procs: runtime.GOMAXPROCS(0), scratch: make([][]float32, workers), slots: make([]*slot, workers)}
	for i := 1; i < workers; i++ {
		s := &slot{wake: make(chan struct{}, 1)}
		p.slots[i] = s
		go p.work(i, s)
	}
	return p
}

// work is worker i's loop: wait for the next job in s, run it, report it done.
func (p *pool) work(i int, s *slot) {
	var last uint64
	for {
		for spin := 0; s.seq.Load() == last; spin++ {
			if spin < workerSpins {
				continue
			}
			s.sleeping.Store(true)
			if s.seq.Load() != last || p.closed.Load() {
				s.sleeping.Store(false)
				break
			}
			<-s.wake
			spin = 0
			if p.closed.Load() {
				return
			}
		}
		if p.closed.Load() {
			return
		}
		last = s.seq.Load()
		s.fn(s.lo, s.hi, i)
		s.fn = nil
		p.pending.Add(-1)
	}
}

// close stops the workers.
func (p *pool) close() {
	p.closed.Store(true)
	for _, s := range p.slots[1:] {
		s.seq.Add(1)
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// buf returns worker w's scratch of at least n floats.
func (p *pool) buf(w, n int) []float32 {
	if cap(p.scratch[w]) < n {
		p.scratch[w] = make([]float32, n)
	}
	return p.scratch[w][:n]
}

// run splits [0,n) into one contiguous chunk per worker; the caller's goroutine takes the
// first. Calls must not overlap (the backend's ops are issued by one goroutine).
func (p *pool) run(n int, fn func(lo, hi, worker int)) {
	if n <= 0 {
		return
	}
	w := min(p.workers, n)
	if w == 1 {
		fn(0, n, 0)
		return
	}
	chunk := (n + w - 1) / w
	for i := 1; i < w; i++ {
		lo, hi := i*chunk, min((i+1)*chunk, n)
		if lo >= hi {
			continue
		}
		s := p.slots[i]
		s.lo, s.hi, s.fn = lo, hi, fn
		p.pending.Add(1)
		s.seq.Add(1)
		if s.sleeping.Swap(false) {
			select {
			case s.wake <- struct{}{}:
			default:
			}
		}
	}
	fn(0, min(chunk, n), 0)
	spins := callerSpins
	if p.procs < w {
		spins = 0
	}
	for spin := 0; p.pending.Load() != 0; spin++ {
		if spin >= spins {
			runtime.Gosched()
		}
	}
}
