package formats

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// memSource is a checkpoint in memory.
type memSource map[string]*TensorInfo

func (m memSource) Tensor(name string) (*TensorInfo, error) {
	if t, ok := m[name]; ok {
		return t, nil
	}
	return nil, fmt.Errorf("no tensor %s", name)
}

func (m memSource) Has(name string) bool { _, ok := m[name]; return ok }

// captured is what a Weight call received.
type captured struct {
	name  string
	d     ops.WeightDesc
	shape []int
	raw   [][]byte
}

// captureBackend records Weight calls; nothing else is called by the loader.
type captureBackend struct {
	ops.Backend
	calls []captured
}

func (b *captureBackend) Weight(name string, d ops.WeightDesc, shape []int, raw ...[]byte) (ops.Tensor, error) {
	b.calls = append(b.calls, captured{name, d, shape, raw})
	return nil, nil
}

// f32Tensor is rows x cols float32 values 0, 1, 2, ...
func f32Tensor(name string, rows, cols int) *TensorInfo {
	data := make([]byte, 4*rows*cols)
	for i := range rows * cols {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(float32(i)))
	}
	return &TensorInfo{Name: name, File: "mem", DType: ops.F32, Shape: []int{rows, cols}, Data: data}
}

func values(raw ...[]byte) []float32 {
	var out []float32
	for _, p := range raw {
		for i := 0; i+4 <= len(p); i += 4 {
			out = append(out, math.Float32frombits(binary.LittleEndian.Uint32(p[i:])))
		}
	}
	return out
}

// TestLoaderCuts: each layout hands the backend the right bytes, in place where it can.
func TestLoaderCuts(t *testing.T) {
	a, b := f32Tensor("a", 2, 3), f32Tensor("b", 2, 3)
	bf := &TensorInfo{Name: "bf", File: "mem", DType: ops.BF16, Shape: []int{1, 3}, Data: []byte{0x80, 0x3f, 0, 0x40, 0x40, 0x40}}
	src := memSource{"a": a, "b": b, "bf": bf}
	for _, tc := range []struct {
		name    string
		w       LinearWeight
		shape   []int
		dt      ops.DType
		want    []float32
		inPlace bool
	}{
		{"whole", LinearWeight{"a", Whole, []Part{{"a", 0, 2, []int{2, 3}}}}, []int{2, 3}, ops.F32, []float32{0, 1, 2, 3, 4, 5}, true},
		{"rows", LinearWeight{"a", Rows, []Part{{"a", 1, 2, []int{2, 3}}}}, []int{1, 3}, ops.F32, []float32{3, 4, 5}, false},
		{"all columns", LinearWeight{"a", Cols, []Part{{"a", 0, 3, []int{2, 3}}}}, []int{2, 3}, ops.F32, []float32{0, 1, 2, 3, 4, 5}, true},
		{"some columns", LinearWeight{"a", Cols, []Part{{"a", 1, 3, []int{2, 3}}}}, []int{2, 2}, ops.F32, []float32{1, 2, 4, 5}, false},
		{"stacked", LinearWeight{"ab", Stacked, []Part{{"a", 1, 2, []int{2, 3}}, {"b", 0, 1, []int{2, 3}}}}, []int{2, 3}, ops.F32,
			[]float32{3, 4, 5, 0, 1, 2}, false},
		{"mixed dtypes widen", LinearWeight{"abf", Stacked, []Part{{"a", 0, 1, []int{2, 3}}, {"bf", 0, 1, []int{1, 3}}}}, []int{2, 3},
			ops.F32, []float32{0, 1, 2, 1, 2, 3}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := &captureBackend{}
			_, err := Unquantized{}.Load(NewLoader(src, be, 0, nil), tc.w)
			require.NoError(t, err)
			require.Len(t, be.calls, 1)
			c := be.calls[0]
			require.Equal(t, tc.shape, c.shape)
			require.Equal(t, ops.Plain(tc.dt), c.d)
			require.Equal(t, tc.want, values(c.raw...))
			if tc.inPlace {
				require.Equal(t, unsafe.SliceData(a.Data), unsafe.SliceData(c.raw[0]), "the mapping itself, not a copy")
			}
		})
	}
}

// TestLoaderExact: GetExact and SliceExact ask the backend to keep float32 values (attention
// sinks, a router's bias), Slice does not; the rows are the slice's.
func TestLoaderExact(t *testing.T) {
	v := &TensorInfo{Name: "v", File: "mem", DType: ops.BF16, Shape: []int{4},
		Data: []byte{0x80, 0x3f, 0, 0x40, 0x40, 0x40, 0x80, 0x40}} // 1, 2, 3, 4
	be := &captureBackend{}
	l := NewLoader(memSource{"v": v}, be, 0, nil)
	_, err := l.SliceExact("v", 0, 1, 3, 4)
	require.NoError(t, err)
	_, err = l.Slice("v", 0, 1, 3, 4)
	require.NoError(t, err)
	_, err = l.GetExact("v", 4)
	require.NoError(t, err)
	require.Len(t, be.calls, 3)
	exact := ops.Plain(ops.BF16)
	exact.Exact = true
	for i, want := range []struct {
		d     ops.WeightDesc
		shape []int
		raw   []byte
	}{{exact, []int{2}, v.Data[2:6]}, {ops.Plain(ops.BF16), []int{2}, v.Data[2:6]}, {exact, []int{4}, v.Data}} {
		c := be.calls[i]
		require.Equal(t, want.d, c.d, "call %d", i)
		require.Equal(t, want.shape, c.shape, "call %d", i)
		require.Equal(t, [][]byte{want.raw}, c.raw, "call %d", i)
	}
}

// TestLoaderRefuses: a wrong shape, a slice out of range or an unknown tensor is an error
// naming it, before anything reaches the backend.
func TestLoaderRefuses(t *testing.T) {
	src := memSource{"a": f32Tensor("a", 2, 3)}
	for _, tc := range []struct {
		w    LinearWeight
		want string
	}{
		{LinearWeight{"a", Whole, []Part{{"a", 0, 2, []int{3, 2}}}}, "has shape [2 3], the config implies [3 2]"},
		{LinearWeight{"a", Rows, []Part{{"a", 1, 3, []int{2, 3}}}}, "cannot take [1, 3) of dimension 0"},
		{LinearWeight{"a", Cols, []Part{{"a", -1, 2, []int{2, 3}}}}, "cannot take [-1, 2) of dimension 1"},
		{LinearWeight{"x", Stacked, []Part{{"a", 0, 3, []int{2, 3}}}}, "rows [0, 3) of a"},
		{LinearWeight{"x", Stacked, []Part{{"zz", 0, 1, []int{2, 3}}}}, "no tensor zz"},
		{LinearWeight{"x", Rows, nil}, "0 parts"},
	} {
		be := &captureBackend{}
		_, err := Unquantized{}.Load(NewLoader(src, be, 0, nil), tc.w)
		require.ErrorContains(t, err, tc.want)
		require.Empty(t, be.calls)
	}
}

// TestFormatFor: unquantized and block-scaled fp8 have formats; the rest are refused.
func TestFormatFor(t *testing.T) {
	f, err := For(Spec{})
	require.NoError(t, err)
	require.Equal(t, "unquantized", f.Name())
	f, err = For(Spec{Method: "fp8", Block: [2]int{128, 128}})
	require.NoError(t, err)
	require.Equal(t, BlockFP8{Block: [2]int{128, 128}}, f)
	_, err = For(Spec{Method: "fp8"})
	require.ErrorIs(t, err, ops.ErrUnsupportedWeight)
	_, err = For(Spec{Method: "awq"})
	require.ErrorIs(t, err, ops.ErrUnsupportedWeight)
}

// TestLoaderProgress: progress counts the bytes handed over and ends at the total.
func TestLoaderProgress(t *testing.T) {
	src := memSource{"a": f32Tensor("a", 2, 3)}
	var seen [][2]int64
	l := NewLoader(src, &captureBackend{}, 100, func(done, total int64) { seen = append(seen, [2]int64{done, total}) })
	_, err := l.Slice("a", 0, 0, 1, 2, 3)
	require.NoError(t, err)
	l.Done()
	require.Equal(t, [][2]int64{{12, 100}, {100, 100}}, seen)
}
