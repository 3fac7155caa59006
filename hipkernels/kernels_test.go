package hipkernels

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPerLayerCallsAllocateNothing calls the bindings whose library functions answer through
// out-parameters and run per layer of an eager step, against stand-ins for the library: the
// answers must come back, and a call must not allocate.
func TestPerLayerCallsAllocateNothing(t *testing.T) {
	l := &Lib{lastError: func() string { return "" }}
	l.f.gemmResidual = func(_, _ uintptr, _, _ int32, _, _, _, _, _ uintptr, m, n, _, _ int32, _ uintptr, _ int32,
		count, fused *int32) int32 {
		*count, *fused = n, m
		return 0
	}
	l.f.gemmSummed = func(_, _ uintptr, _, _ int32, _, _, _ uintptr, _ int32, _ float32, _, _ uintptr, m, _, _ int32,
		fused *int32) int32 {
		*fused = m
		return 0
	}
	for _, m := range []int{1, 2} {
		count, fused, err := l.GemmResidual(0, 0, BF16, BF16, 0, 0, 0, 0, 0, m, 37, 8, false, 0, 64)
		require.NoError(t, err)
		require.Equal(t, 37, count)
		require.Equal(t, m == 1, fused)
		fused, err = l.GemmNormSummed(0, 0, BF16, BF16, 0, 0, 0, 37, 1e-5, 0, 0, m, 8, 8)
		require.NoError(t, err)
		require.Equal(t, m == 1, fused)
	}
	l.f.attnWorkspace = func(tokens, _, _, _, _, window int32, n *uint64) int32 {
		*n = uint64(tokens)*100 + uint64(window)
		return 0
	}
	l.f.prefillTileRows = func(_, _, _, headDim int32, rows *int32) int32 {
		*rows = headDim / 2
		return 0
	}
	ws, err := l.PagedAttentionWorkspace(3, 32, 8, 128, 1024, 0)
	require.NoError(t, err)
	require.Equal(t, 300, ws)
	ws, err = l.PagedAttentionWorkspace(3, 32, 8, 128, 1024, 7)
	require.NoError(t, err)
	require.Equal(t, 307, ws, "the window reaches the library")
	rows, err := l.PrefillAttentionTileRows(BF16, 32, 8, 128)
	require.NoError(t, err)
	require.Equal(t, 64, rows)
	allocs := testing.AllocsPerRun(100, func() {
		_, _ = l.PagedAttentionWorkspace(3, 32, 8, 128, 1024, 128)
		_, _ = l.PrefillAttentionTileRows(BF16, 32, 8, 128)
		_, _, _ = l.GemmResidual(0, 0, BF16, BF16, 0, 0, 0, 0, 0, 1, 37, 8, true, 0, 64)
		_, _ = l.GemmNormSummed(0, 0, BF16, BF16, 0, 0, 0, 37, 1e-5, 0, 0, 1, 8, 8)
	})
	require.Zero(t, allocs)
}
