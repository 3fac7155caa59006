package offheap

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAllocIsZeroedWritableAndFreedOnce(t *testing.T) {
	b, err := Alloc(3<<20 + 4)
	require.NoError(t, err)
	f := b.Float32s()
	require.Len(t, f, (3<<20+4)/4)
	for i, v := range f {
		if v != 0 {
			require.Zero(t, v, "element %d", i)
		}
	}
	f[len(f)-1] = 1.5
	require.Equal(t, float32(1.5), b.Float32s()[len(f)-1])
	require.NoError(t, b.Free())
	require.NoError(t, b.Free())
	require.Nil(t, b.Bytes())
	require.Nil(t, b.Float32s())
}

func TestAllocEdgeSizes(t *testing.T) {
	b, err := Alloc(0)
	require.NoError(t, err)
	require.Nil(t, b.Float32s())
	require.NoError(t, b.Free())
	_, err = Alloc(-1)
	require.ErrorContains(t, err, "negative size")
}

func TestSize(t *testing.T) {
	cases := []struct {
		dims []int
		want int
		ok   bool
	}{
		{[]int{2, 3, 4}, 24, true},
		{nil, 1, true},
		{[]int{5, 0}, 0, true},
		{[]int{-1, 2}, 0, false},
		{[]int{1 << 32, 1 << 32}, 0, false},
		{[]int{math.MaxInt, 2}, 0, false},
		{[]int{1 << 31, 1 << 31}, 1 << 62, true},
	}
	for _, tc := range cases {
		got, ok := Size(tc.dims...)
		require.Equal(t, tc.ok, ok, "%v", tc.dims)
		if ok {
			require.Equal(t, tc.want, got, "%v", tc.dims)
		}
	}
}
