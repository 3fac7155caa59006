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
// with fewer threads than workers still makes progress). Items are taken a grain at a time by
// whoever is free, and the caller takes back a job from a worker that has not started it, so
// that a worker the OS holds back (the machine may be shared) or one still waking up delays a
// call by a grain at most.
type pool struct {
	workers int
	procs   int // GOMAXPROCS when the pool was made
	scratch [][]float32
	slots   []*slot // workers 1..n-1; the caller is worker 0
	closed  atomic.Bool
	// The current job, written by run while no worker runs one.
	next     atomic.Int64
	n, grain int64
	fn       func(lo, hi, worker int)
}

// The states of a slot.
const (
	slotIdle    = iota
	slotPosted  // a job is waiting for the worker
	slotRunning // the worker took it
)

// slot is one worker's mailbox: run sets the pool's job, marks the slot posted and bumps seq;
// the worker marks it running, takes items until none are left, and marks it idle.
type slot struct {
	state    atomic.Int32
	seq      atomic.Uint64
	sleeping atomic.Bool
	wake     chan struct{}
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
	spins := workerSpins
	if p.procs < p.workers {
		spins = 0 // a spinning worker would hold a thread the caller needs
	}
	for {
		for spin := 0; s.seq.Load() == last; spin++ {
			if spin < spins {
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
		if s.state.CompareAndSwap(slotPosted, slotRunning) {
			p.take(i)
			s.state.Store(slotIdle)
		}
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

// take runs the current job's items, a grain at a time, until none are left.
func (p *pool) take(worker int) {
	for {
		lo := p.next.Add(p.grain) - p.grain
		if lo >= p.n {
			return
		}
		p.fn(int(lo), int(min(lo+p.grain, p.n)), worker)
	}
}

// run calls fn over [0,n) in contiguous ranges, on the caller's goroutine (worker 0) and the
// workers; each range goes to one worker, which may get several. Calls must not overlap (the
// backend's ops are issued by one goroutine), and fn's result must not depend on the ranges.
func (p *pool) run(n int, fn func(lo, hi, worker int)) {
	if n <= 0 {
		return
	}
	w := min(p.workers, n)
	if w == 1 {
		fn(0, n, 0)
		return
	}
	p.fn, p.n, p.grain = fn, int64(n), int64(max(1, n/(4*w)))
	p.next.Store(0)
	for _, s := range p.slots[1:w] {
		s.state.Store(slotPosted)
		s.seq.Add(1)
		if s.sleeping.Swap(false) {
			select {
			case s.wake <- struct{}{}:
			default:
			}
		}
	}
	p.take(0)
	spins := callerSpins
	if p.procs < w {
		spins = 0
	}
	for _, s := range p.slots[1:w] {
		if s.state.CompareAndSwap(slotPosted, slotIdle) {
			continue // never started: nothing left for it anyway
		}
		for spin := 0; s.state.Load() != slotIdle; spin++ {
			if spin >= spins {
				runtime.Gosched()
			}
		}
	}
	p.fn = nil
}
