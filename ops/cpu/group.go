package cpu

import (
	"fmt"
	"sync"

	"github.com/atom-go/atom/ops"
)

// Group is an in-process tensor-parallel group: ranks are goroutines of one process, each with
// its own cpu Backend, and AllReduce sums their float32 buffers through shared memory.
type Group struct {
	n    int
	bufs [][]float32
	mu   sync.Mutex
	cond *sync.Cond
	gen  int
	wait int
}

var _ ops.Group = (*Group)(nil)

// NewGroup returns a group of n ranks.
func NewGroup(n int) *Group {
	g := &Group{n: n, bufs: make([][]float32, n)}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// Size returns the number of ranks.
func (g *Group) Size() int { return g.n }

// AllReduce sums t across ranks. Rank r reduces the r-th slice of the elements over all
// ranks in rank order (so the result is the same on every rank and from run to run) and
// writes it back to every rank's buffer; two barriers separate publishing, reducing and reuse.
func (g *Group) AllReduce(rank int, t ops.Tensor) {
	if g.n == 1 {
		return
	}
	buf := t.(*Tensor).f32
	g.mu.Lock()
	g.bufs[rank] = buf
	g.mu.Unlock()
	g.barrier()
	n := len(g.bufs[0])
	for r := range g.bufs {
		if len(g.bufs[r]) != n {
			panic(fmt.Sprintf("cpu AllReduce: rank %d has %d elements, rank 0 has %d", r, len(g.bufs[r]), n))
		}
	}
	chunk := (n + g.n - 1) / g.n
	lo, hi := min(rank*chunk, n), min((rank+1)*chunk, n)
	for i := lo; i < hi; i++ {
		var s float32
		for r := range g.bufs {
			s += g.bufs[r][i]
		}
		for r := range g.bufs {
			g.bufs[r][i] = s
		}
	}
	g.barrier()
}

// barrier blocks until all n ranks arrived.
func (g *Group) barrier() {
	g.mu.Lock()
	defer g.mu.Unlock()
	gen := g.gen
	g.wait++
	if g.wait == g.n {
		g.wait = 0
		g.gen++
		g.cond.Broadcast()
		return
	}
	for gen == g.gen {
		g.cond.Wait()
	}
}
