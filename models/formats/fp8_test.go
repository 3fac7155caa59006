package formats

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// fp8Tensor is rows x cols float8_e4m3fn codes 0, 1, 2, ... (mod 0x7e, no NaN).
func fp8Tensor(name string, rows, cols int) *TensorInfo {
	data := make([]byte, rows*cols)
	for i := range data {
		data[i] = byte(i % 0x7e)
	}
	return &TensorInfo{Name: name, File: "mem", DType: ops.F8E4M3, Shape: []int{rows, cols}, Data: data}
}

// scaleTensor is rows x cols float32 scales 1, 2, 3, ...
func scaleTensor(name string, rows, cols int) *TensorInfo {
	t := f32Tensor(name, rows, cols)
	for i := 0; i < len(t.Data); i += 4 {
		binary.LittleEndian.PutUint32(t.Data[i:], math.Float32bits(float32(i/4+1)))
	}
	return t
}

// fp8Source: a [5, 4] (a partial row block at 2x2), b [4, 5] (a partial column block), c [2, 4],
// each with its weight_scale_inv (1, 2, 3, ...), an f32 norm and hostile variants.
func fp8Source() memSource {
	nan := scaleTensor("nan.weight_scale_inv", 1, 2)
	binary.LittleEndian.PutUint32(nan.Data[4:], math.Float32bits(float32(math.NaN())))
	zero := scaleTensor("zero.weight_scale_inv", 1, 2)
	binary.LittleEndian.PutUint32(zero.Data[0:], 0)
	return memSource{
		"a.weight": fp8Tensor("a.weight", 5, 4), "a.weight_scale_inv": scaleTensor("a.weight_scale_inv", 3, 2),
		"b.weight": fp8Tensor("b.weight", 4, 5), "b.weight_scale_inv": scaleTensor("b.weight_scale_inv", 2, 3),
		"c.weight": fp8Tensor("c.weight", 2, 4), "c.weight_scale_inv": scaleTensor("c.weight_scale_inv", 1, 2),
		"bad.weight": fp8Tensor("bad.weight", 2, 4), "bad.weight_scale_inv": scaleTensor("bad.weight_scale_inv", 2, 2),
		"f16.weight":           fp8Tensor("f16.weight", 2, 4),
		"f16.weight_scale_inv": {Name: "f16.weight_scale_inv", File: "mem", DType: ops.F16, Shape: []int{1, 2}, Data: make([]byte, 4)},
		"nan.weight":           fp8Tensor("nan.weight", 2, 4), "nan.weight_scale_inv": nan,
		"zero.weight": fp8Tensor("zero.weight", 2, 4), "zero.weight_scale_inv": zero,
		"noscale.weight": fp8Tensor("noscale.weight", 2, 4),
		"skip.weight":    fp8Tensor("skip.weight", 2, 4),
		"norm.weight":    f32Tensor("norm.weight", 2, 4),
	}
}

// rowsOf returns rows [lo, hi) of a rows x cols fp8Tensor's codes.
func rowsOf(cols, lo, hi int) []byte {
	return fp8Tensor("", hi, cols).Data[lo*cols:]
}

// TestBlockFP8Load: each layout cuts the weight on block boundaries and its scales with it.
func TestBlockFP8Load(t *testing.T) {
	f := BlockFP8{Block: [2]int{2, 2}, Ignore: []string{"skip"}}
	part := func(name string, lo, hi int, shape ...int) Part {
		return Part{Name: name, Lo: lo, Hi: hi, Shape: shape}
	}
	for _, tc := range []struct {
		name    string
		w       LinearWeight
		shape   []int
		q       []byte
		sshape  []int
		scales  []float32
		unquant bool
	}{
		{"whole, partial row block", LinearWeight{"a", Whole, []Part{part("a.weight", 0, 0, 5, 4)}}, []int{5, 4},
			rowsOf(4, 0, 5), []int{3, 2}, []float32{1, 2, 3, 4, 5, 6}, false},
		{"rows of the last rank", LinearWeight{"a", Rows, []Part{part("a.weight", 2, 5, 5, 4)}}, []int{3, 4},
			rowsOf(4, 2, 5), []int{2, 2}, []float32{3, 4, 5, 6}, false},
		{"columns with a partial block", LinearWeight{"b", Cols, []Part{part("b.weight", 2, 5, 4, 5)}}, []int{4, 3},
			[]byte{2, 3, 4, 7, 8, 9, 12, 13, 14, 17, 18, 19}, []int{2, 2}, []float32{2, 3, 5, 6}, false},
		{"stacked", LinearWeight{"ac", Stacked, []Part{part("c.weight", 0, 2, 2, 4), part("a.weight", 0, 5, 5, 4)}}, []int{7, 4},
			append(rowsOf(4, 0, 2), rowsOf(4, 0, 5)...), []int{4, 2}, []float32{1, 2, 1, 2, 3, 4, 5, 6}, false},
		{"unquantized tensor", LinearWeight{"norm", Whole, []Part{part("norm.weight", 0, 0, 2, 4)}}, []int{2, 4},
			nil, nil, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := &captureBackend{}
			_, err := f.Load(NewLoader(fp8Source(), be, 0, nil), tc.w)
			require.NoError(t, err)
			require.Len(t, be.calls, 1)
			c := be.calls[0]
			require.Equal(t, tc.shape, c.shape)
			if tc.unquant {
				require.Equal(t, ops.Plain(ops.F32), c.d)
				return
			}
			require.Equal(t, ops.BlockFP8, c.d.Format)
			require.Equal(t, ops.F8E4M3, c.d.DType)
			var q []byte
			for _, p := range c.raw {
				q = append(q, p...)
			}
			require.Equal(t, tc.q, q)
			require.Equal(t, tc.sshape, c.d.Scales.Shape)
			require.Equal(t, []int{2, 2}, c.d.Scales.Block)
			require.Equal(t, tc.scales, values(c.d.Scales.Raw...))
		})
	}
}

// TestBlockFP8Refuses: cuts inside a block, wrong scale shapes or dtypes, non-finite scales
// and fp8 tensors the config leaves unquantized are refused, naming the tensor, before the
// backend sees anything.
func TestBlockFP8Refuses(t *testing.T) {
	f := BlockFP8{Block: [2]int{2, 2}, Ignore: []string{"skip"}}
	part := func(name string, lo, hi int, shape ...int) Part {
		return Part{Name: name, Lo: lo, Hi: hi, Shape: shape}
	}
	for _, tc := range []struct {
		w    LinearWeight
		want string
	}{
		{LinearWeight{"a", Rows, []Part{part("a.weight", 1, 3, 5, 4)}}, "rows [1, 3) of a.weight break fp8 weight_block_size [2, 2]"},
		{LinearWeight{"a", Rows, []Part{part("a.weight", 0, 3, 5, 4)}}, "rows [0, 3) of a.weight break"},
		{LinearWeight{"b", Cols, []Part{part("b.weight", 1, 5, 4, 5)}}, "columns [1, 5) of b.weight break"},
		{LinearWeight{"a", Rows, []Part{part("a.weight", 4, 6, 5, 4)}}, "rows [4, 6) of a.weight, which has 5"},
		{LinearWeight{"ac", Stacked, []Part{part("a.weight", 0, 5, 5, 4), part("c.weight", 0, 2, 2, 4)}}, "end inside a block"},
		{LinearWeight{"ab", Stacked, []Part{part("c.weight", 0, 2, 2, 4), part("b.weight", 0, 4, 4, 5)}}, "cannot fuse b.weight"},
		{LinearWeight{"an", Stacked, []Part{part("c.weight", 0, 2, 2, 4), part("norm.weight", 0, 2, 2, 4)}}, "cannot stack fp8 and unquantized"},
		{LinearWeight{"bad", Whole, []Part{part("bad.weight", 0, 0, 2, 4)}}, "tensor bad.weight_scale_inv has shape [2 2], the config implies [1 2]"},
		{LinearWeight{"f16", Whole, []Part{part("f16.weight", 0, 0, 2, 4)}}, "scale tensor f16.weight_scale_inv is float16"},
		{LinearWeight{"nan", Whole, []Part{part("nan.weight", 0, 0, 2, 4)}}, "scale tensor nan.weight_scale_inv has NaN"},
		{LinearWeight{"zero", Whole, []Part{part("zero.weight", 0, 0, 2, 4)}}, "scale tensor zero.weight_scale_inv has 0 at 0"},
		{LinearWeight{"noscale", Whole, []Part{part("noscale.weight", 0, 0, 2, 4)}}, "has no scale tensor noscale.weight_scale_inv"},
		{LinearWeight{"skip", Whole, []Part{part("skip.weight", 0, 0, 2, 4)}}, "tensor skip.weight is float8_e4m3fn but the quantization_config leaves it unquantized"},
		{LinearWeight{"a", Whole, []Part{part("a.weight", 0, 0, 4, 5)}}, "tensor a.weight has shape [5 4], the config implies [4 5]"},
		{LinearWeight{"a", Rows, nil}, "0 parts"},
	} {
		be := &captureBackend{}
		_, err := f.Load(NewLoader(fp8Source(), be, 0, nil), tc.w)
		require.ErrorContains(t, err, tc.want)
		require.Empty(t, be.calls)
	}
	// An fp8 tensor under the unquantized format (no quantization_config) is refused too.
	be := &captureBackend{}
	_, err := Unquantized{}.Load(NewLoader(fp8Source(), be, 0, nil), LinearWeight{"c", Whole, []Part{{Name: "c.weight", Shape: []int{2, 4}}}})
	require.ErrorContains(t, err, "tensor c.weight is float8_e4m3fn, which needs an fp8 quantization_config")
	require.Empty(t, be.calls)
}
