package models

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops/cpu"
)

// TestWholeColumnShardIsNotCopied: with one rank, the row-parallel weights (o_proj, down_proj)
// are loaded in place like every other tensor, not copied onto the Go heap.
func TestWholeColumnShardIsNotCopied(t *testing.T) {
	ck, err := OpenCheckpoint("../testdata/models/llama-bf16")
	require.NoError(t, err)
	defer ck.Close()
	be := cpu.New(1)
	defer be.Close()
	w := newWeightLoader(ck, be, nil)
	const name = "model.layers.0.mlp.down_proj.weight"
	ti, err := ck.Tensor(name)
	require.NoError(t, err)
	var n uint64
	for _, tc := range []struct {
		lo, hi int
		copied bool
	}{{0, ti.Shape[1], false}, {0, ti.Shape[1] / 2, true}} {
		n = allocated(func() { _, err = w.getShard(name, 1, tc.lo, tc.hi, ti.Shape...) })
		require.NoError(t, err)
		if tc.copied {
			require.GreaterOrEqual(t, n, uint64(len(ti.Data)/2), "a half-column shard is a copy")
		} else {
			require.Less(t, n, uint64(len(ti.Data)/4), "columns [0, %d) of %v allocated %d bytes", tc.hi, ti.Shape, n)
		}
	}
}
