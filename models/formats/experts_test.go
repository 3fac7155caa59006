package formats

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// TestStackExperts: w13 stacks each expert's rows of every part, w2 each expert's columns, as
// one [E, rows, cols] weight; mixed dtypes widen; bad cuts are refused before the backend.
func TestStackExperts(t *testing.T) {
	// Expert e's gate is g<e>, its up u<e> ([2, 3] each); its down d<e> [3, 2].
	src := memSource{"g0": f32Tensor("g0", 2, 3), "u0": f32Tensor("u0", 2, 3), "g1": f32Tensor("g1", 2, 3),
		"u1": f32Tensor("u1", 2, 3), "d0": f32Tensor("d0", 3, 2), "d1": f32Tensor("d1", 3, 2),
		"bf": {Name: "bf", File: "mem", DType: ops.BF16, Shape: []int{2, 3}, Data: []byte{0x80, 0x3f, 0, 0x40, 0x40, 0x40, 0x80, 0x40, 0xa0, 0x40, 0xc0, 0x40}}}
	part := func(name string, lo, hi int, shape ...int) Part {
		return Part{Name: name, Lo: lo, Hi: hi, Shape: shape}
	}
	for _, tc := range []struct {
		name  string
		w     ExpertWeight
		shape []int
		dt    ops.DType
		want  []float32
	}{
		{"w13 whole", ExpertWeight{Name: "w13", Layout: Stacked, Experts: [][]Part{{part("g0", 0, 2, 2, 3), part("u0", 0, 2, 2, 3)},
			{part("g1", 0, 2, 2, 3), part("u1", 0, 2, 2, 3)}}}, []int{2, 4, 3}, ops.F32,
			[]float32{0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5}},
		{"w13 rank 1 of 2", ExpertWeight{Name: "w13", Layout: Stacked, Experts: [][]Part{{part("g0", 1, 2, 2, 3), part("u0", 1, 2, 2, 3)},
			{part("g1", 1, 2, 2, 3), part("u1", 1, 2, 2, 3)}}}, []int{2, 2, 3}, ops.F32,
			[]float32{3, 4, 5, 3, 4, 5, 3, 4, 5, 3, 4, 5}},
		{"w2 rank 0 of 2", ExpertWeight{Name: "w2", Layout: Cols, Experts: [][]Part{{part("d0", 0, 1, 3, 2)}, {part("d1", 0, 1, 3, 2)}}},
			[]int{2, 3, 1}, ops.F32, []float32{0, 2, 4, 0, 2, 4}},
		{"w2 whole", ExpertWeight{Name: "w2", Layout: Cols, Experts: [][]Part{{part("d0", 0, 2, 3, 2)}, {part("d1", 0, 2, 3, 2)}}},
			[]int{2, 3, 2}, ops.F32, []float32{0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5}},
		{"mixed dtypes widen", ExpertWeight{Name: "w13", Layout: Stacked, Experts: [][]Part{{part("g0", 0, 1, 2, 3), part("bf", 1, 2, 2, 3)}}},
			[]int{1, 2, 3}, ops.F32, []float32{0, 1, 2, 4, 5, 6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := &captureBackend{}
			_, err := Unquantized{}.LoadExperts(NewLoader(src, be, 0, nil), tc.w)
			require.NoError(t, err)
			require.Len(t, be.calls, 1)
			c := be.calls[0]
			require.Equal(t, tc.w.Name, c.name)
			require.Equal(t, tc.shape, c.shape)
			require.Equal(t, ops.Plain(tc.dt), c.d)
			require.Equal(t, tc.want, values(c.raw...))
		})
	}
	for _, tc := range []struct {
		w    ExpertWeight
		want string
	}{
		{ExpertWeight{Name: "w13", Layout: Stacked}, "0 experts"},
		{ExpertWeight{Name: "w13", Layout: Rows, Experts: [][]Part{{part("g0", 0, 2, 2, 3)}}}, "layout"},
		{ExpertWeight{Name: "w13", Layout: Stacked, Experts: [][]Part{{part("g0", 0, 3, 2, 3)}}}, "[0, 3) of g0"},
		{ExpertWeight{Name: "w13", Layout: Stacked, Experts: [][]Part{{part("g0", 0, 2, 3, 2)}}}, "has shape [2 3], the config implies [3 2]"},
		{ExpertWeight{Name: "w13", Layout: Stacked, Experts: [][]Part{{part("g0", 0, 2, 2, 3)}, {part("g1", 0, 1, 2, 3)}}}, "expert 1 has 1 rows, expert 0 2"},
		{ExpertWeight{Name: "w13", Layout: Stacked, Experts: [][]Part{{part("g0", 0, 2, 2, 3), part("d0", 0, 2, 3, 2)}}}, "cannot stack d0"},
		{ExpertWeight{Name: "w2", Layout: Cols, Experts: [][]Part{{part("d0", 0, 1, 3, 2), part("d1", 0, 1, 3, 2)}}}, "expert 0 has 2 parts"},
		{ExpertWeight{Name: "w13", Layout: Stacked, Experts: [][]Part{{part("missing", 0, 1, 2, 3)}}}, "no tensor missing"},
	} {
		be := &captureBackend{}
		_, err := Unquantized{}.LoadExperts(NewLoader(src, be, 0, nil), tc.w)
		require.ErrorContains(t, err, tc.want)
		require.Empty(t, be.calls)
	}
}
