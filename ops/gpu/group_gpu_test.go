//go:build gpu

package gpu

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// TestGroupOneRankThroughNCCL: a one-rank NCCL group leaves a tensor's values as they were
// (the sum over one rank), exercising communicator creation and the all-reduce call path that
// tensor parallelism uses; several GPUs are needed for more ranks.
func TestGroupOneRankThroughNCCL(t *testing.T) {
	b := newGPU(t, ops.F32)
	g, err := NewGroup([]*Backend{b})
	require.NoError(t, err)
	defer g.Close()
	vals := randVals(ops.F32, 3*1000, 1)
	x := b.Buffer(3, 1000)
	b.WriteRows(x, vals)
	g.AllReduce(0, x)
	g.AllReduce(0, x)
	require.Equal(t, vals, read(b, x.(*Tensor)))
}
