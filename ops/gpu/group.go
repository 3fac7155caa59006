package gpu

import (
	"fmt"
	"sync"

	"github.com/atom-go/atom/hipkernels"
	"github.com/atom-go/atom/ops"
)

// Group is a tensor-parallel group of gpu backends, one rank per device, summing through
// NCCL (RCCL on AMD). Each rank's communicator is created on that rank's first AllReduce, on
// the rank's own thread: ncclCommInitRank blocks until every rank joined, and all ranks reach
// their first all-reduce together.
type Group struct {
	ranks []*Backend
	id    [128]byte
	mu    sync.Mutex
	comms []hipkernels.Comm
}

var _ ops.Group = (*Group)(nil)

// NewGroup makes a group of the given backends, rank i being ranks[i].
func NewGroup(ranks []*Backend) (*Group, error) {
	if len(ranks) == 0 {
		return nil, fmt.Errorf("gpu group: no ranks")
	}
	id, err := ranks[0].lib.NcclUniqueID()
	if err != nil {
		return nil, fmt.Errorf("gpu group: %w", err)
	}
	return &Group{ranks: ranks, id: id, comms: make([]hipkernels.Comm, len(ranks))}, nil
}

// Size returns the number of ranks.
func (g *Group) Size() int { return len(g.ranks) }

// AllReduce queues the in-place sum of t over all ranks on the rank's stream.
func (g *Group) AllReduce(rank int, t ops.Tensor) {
	b, x := g.ranks[rank], t.(*Tensor)
	g.mu.Lock()
	c := g.comms[rank]
	g.mu.Unlock()
	if c == 0 {
		var err error
		c, err = b.lib.NcclInit(len(g.ranks), g.id, rank)
		b.must("AllReduce: init communicator", err)
		g.mu.Lock()
		g.comms[rank] = c
		g.mu.Unlock()
	}
	b.must("AllReduce", b.lib.NcclAllReduceSum(c, b.kdt, x.ptr, x.ptr, x.elems(), b.stream))
}

// Close releases the communicators.
func (g *Group) Close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, c := range g.comms {
		if c != 0 {
			_ = g.ranks[i].lib.NcclDestroy(c)
			g.comms[i] = 0
		}
	}
}
