package formats

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// TestBlockFP8LoadExperts: each expert's fp8 gate|up rows (w13) or down columns (w2) and their
// weight_scale_inv stack into [E, rows, cols] beside scales [E, sn, sk]; 16-bit experts stack
// as they are; damaged or mixed experts are refused, naming the expert and the tensor.
func TestBlockFP8LoadExperts(t *testing.T) {
	f := BlockFP8{Block: [2]int{2, 2}}
	src := fp8Source()
	// Experts 0 and 1: gate c [2, 4], up c again (scales 1, 2); down a [5, 4] (scales 1..6).
	part := func(name string, lo, hi int, shape ...int) Part {
		return Part{Name: name, Lo: lo, Hi: hi, Shape: shape}
	}
	gu := []Part{part("c.weight", 0, 2, 2, 4), part("c.weight", 0, 2, 2, 4)}
	for _, tc := range []struct {
		name   string
		w      ExpertWeight
		shape  []int
		q      []byte
		sshape []int
		scales []float32
	}{
		{"w13", ExpertWeight{Name: "w13", Layout: Stacked, Experts: [][]Part{gu, gu}}, []int{2, 4, 4},
			append(append(rowsOf(4, 0, 2), rowsOf(4, 0, 2)...), append(rowsOf(4, 0, 2), rowsOf(4, 0, 2)...)...),
			[]int{2, 2, 2}, []float32{1, 2, 1, 2, 1, 2, 1, 2}},
		{"w2 columns of rank 1", ExpertWeight{Name: "w2", Layout: Cols, Experts: [][]Part{{part("a.weight", 2, 4, 5, 4)}, {part("a.weight", 2, 4, 5, 4)}}},
			[]int{2, 5, 2}, append(cols(rowsOf(4, 0, 5), 4, 2, 4), cols(rowsOf(4, 0, 5), 4, 2, 4)...),
			[]int{2, 3, 1}, []float32{2, 4, 6, 2, 4, 6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := &captureBackend{}
			_, err := f.LoadExperts(NewLoader(src, be, 0, nil), tc.w)
			require.NoError(t, err)
			require.Len(t, be.calls, 1)
			c := be.calls[0]
			require.Equal(t, tc.shape, c.shape)
			require.Equal(t, ops.BlockFP8, c.d.Format)
			var q []byte
			for _, p := range c.raw {
				q = append(q, p...)
			}
			require.Equal(t, tc.q, q)
			require.Equal(t, tc.sshape, c.d.Scales.Shape)
			require.Equal(t, tc.scales, values(c.d.Scales.Raw...))
		})
	}
	be := &captureBackend{}
	_, err := f.LoadExperts(NewLoader(src, be, 0, nil), ExpertWeight{Name: "w13", Layout: Stacked, Experts: [][]Part{{part("norm.weight", 0, 2, 2, 4)}}})
	require.NoError(t, err)
	require.Equal(t, ops.Plain(ops.F32), be.calls[0].d)
	for _, tc := range []struct {
		w    ExpertWeight
		want string
	}{
		{ExpertWeight{Name: "w13", Layout: Stacked, Experts: nil}, "0 experts"},
		{ExpertWeight{Name: "w13", Layout: Stacked, Experts: [][]Part{gu, {part("nan.weight", 0, 2, 2, 4)}}}, "expert 1: mem: scale tensor nan.weight_scale_inv has NaN"},
		{ExpertWeight{Name: "w13", Layout: Stacked, Experts: [][]Part{gu, {part("noscale.weight", 0, 2, 2, 4)}}}, "has no scale tensor noscale.weight_scale_inv"},
		{ExpertWeight{Name: "w13", Layout: Stacked, Experts: [][]Part{gu, {part("norm.weight", 0, 2, 2, 4)}}}, "expert 1 is unquantized, expert 0 fp8"},
		{ExpertWeight{Name: "w13", Layout: Stacked, Experts: [][]Part{gu, {part("c.weight", 0, 2, 2, 4)}}}, "expert 1 is [2 4], expert 0 [4 4]"},
		{ExpertWeight{Name: "w2", Layout: Cols, Experts: [][]Part{{part("a.weight", 1, 3, 5, 4)}}}, "columns [1, 3) of a.weight break"},
	} {
		be := &captureBackend{}
		_, err := f.LoadExperts(NewLoader(src, be, 0, nil), tc.w)
		require.ErrorContains(t, err, tc.want)
		require.Empty(t, be.calls)
	}
}

// cols returns columns [lo, hi) of a row-major matrix of bytes with n columns.
func cols(b []byte, n, lo, hi int) []byte {
	var out []byte
	for r := 0; r*n < len(b); r++ {
		out = append(out, b[r*n+lo:r*n+hi]...)
	}
	return out
}
