package cpu

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// TestWeightRefusesQuantized: the cpu backend has unquantized kernels only; a weight with
// scales or another format is a clear error.
func TestWeightRefusesQuantized(t *testing.T) {
	b := New(1)
	defer b.Close()
	raw := make([]byte, 8)
	for _, d := range []ops.WeightDesc{
		{Format: ops.WeightFormat(1), DType: ops.BF16},
		{DType: ops.BF16, Scales: &ops.WeightScales{DType: ops.F32, Shape: []int{1}}},
	} {
		_, err := b.Weight("w", d, []int{2, 2}, raw)
		require.ErrorIs(t, err, ops.ErrUnsupportedWeight)
		require.ErrorContains(t, err, "weight w")
	}
	_, err := b.Weight("w", ops.Plain(ops.BF16), []int{2, 2}, raw)
	require.NoError(t, err)
}
