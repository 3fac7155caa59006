package formats

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// f32Tensor3 is a [a, b, c] float32 tensor of values 0, 1, 2, ...
func f32Tensor3(name string, shape ...int) *TensorInfo {
	n := 1
	for _, d := range shape {
		n *= d
	}
	data := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(float32(i)))
	}
	return &TensorInfo{Name: name, File: "mem", DType: ops.F32, Shape: shape, Data: data}
}

// TestPackedExperts: gpt-oss's bf16 experts, stored [E, in, out] with gate and up interleaved,
// load as the standard w13 [E, 2I, H] (gate rows then up rows, the rank's slice of each) and
// w2 [E, H, I] (the rank's columns); biases likewise (the down bias whole).
func TestPackedExperts(t *testing.T) {
	// E 2, H 3, I 2: gate_up_proj [2, 3, 4] (value (e*3+k)*4+n), down_proj [2, 2, 3].
	src := memSource{"gu": f32Tensor3("gu", 2, 3, 4), "gu_bias": f32Tensor3("gu_bias", 2, 4),
		"dn": f32Tensor3("dn", 2, 2, 3), "dn_bias": f32Tensor3("dn_bias", 2, 3)}
	gu := func(lo, hi int) ExpertWeight {
		return ExpertWeight{Name: "w13", Layout: Stacked, Packed: &PackedExperts{Tensor: "gu", Experts: 2, Rows: 4, Cols: 3,
			Interleaved: true, Lo: lo, Hi: hi}}
	}
	dn := func(lo, hi int) ExpertWeight {
		return ExpertWeight{Name: "w2", Layout: Cols, Packed: &PackedExperts{Tensor: "dn", Experts: 2, Rows: 3, Cols: 2, Lo: lo, Hi: hi}}
	}
	at := func(e, k, n int) float32 { return float32((e*3+k)*4 + n) }
	for _, tc := range []struct {
		name  string
		w     ExpertWeight
		shape []int
		want  []float32
	}{
		// Expert e's w13 row r is checkpoint column n = 0 (gate 0), 2 (gate 1), 1 (up 0), 3 (up 1).
		{"w13 whole", gu(0, 2), []int{2, 4, 3}, func() (out []float32) {
			for e := range 2 {
				for _, n := range []int{0, 2, 1, 3} {
					for k := range 3 {
						out = append(out, at(e, k, n))
					}
				}
			}
			return out
		}()},
		{"w13 rank 1 of 2", gu(1, 2), []int{2, 2, 3}, []float32{2, 6, 10, 3, 7, 11, 14, 18, 22, 15, 19, 23}},
		// down_proj [E, I, H] value (e*2+i)*3+j; w2 [E, H, I'] of columns i in [1, 2).
		{"w2 rank 1 of 2", dn(1, 2), []int{2, 3, 1}, []float32{3, 4, 5, 9, 10, 11}},
		{"w2 whole", dn(0, 2), []int{2, 3, 2}, []float32{0, 3, 1, 4, 2, 5, 6, 9, 7, 10, 8, 11}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := &captureBackend{}
			_, err := Unquantized{}.LoadExperts(NewLoader(src, be, 0, nil), tc.w)
			require.NoError(t, err)
			require.Len(t, be.calls, 1)
			require.Equal(t, tc.shape, be.calls[0].shape)
			require.Equal(t, ops.Plain(ops.F32), be.calls[0].d)
			require.Equal(t, tc.want, values(be.calls[0].raw...))
		})
	}
	be := &captureBackend{}
	l := NewLoader(src, be, 0, nil)
	_, err := l.PackedBias(gu(1, 2))
	require.NoError(t, err)
	_, err = l.PackedBias(dn(1, 2))
	require.NoError(t, err)
	require.Equal(t, []int{2, 2}, be.calls[0].shape)
	require.Equal(t, []float32{2, 3, 6, 7}, values(be.calls[0].raw...)) // gate 1, up 1 of each expert
	require.Equal(t, []int{2, 3}, be.calls[1].shape)
	require.Equal(t, []float32{0, 1, 2, 3, 4, 5}, values(be.calls[1].raw...))

	for _, tc := range []struct {
		w    ExpertWeight
		want string
	}{
		{gu(0, 3), "gate and up rows [0, 3) of 4"},
		{gu(1, 1), "gate and up rows [1, 1) of 4"},
		{dn(0, 3), "columns [0, 3) of 2"},
		{ExpertWeight{Name: "w13", Layout: Stacked, Packed: &PackedExperts{Tensor: "gu", Experts: 2, Rows: 4, Cols: 2, Lo: 0, Hi: 2}},
			"has shape [2 3 4], the config implies [2 2 4]"},
		{ExpertWeight{Name: "w13", Layout: Stacked, Packed: &PackedExperts{Tensor: "gu", Experts: 1 << 20, Rows: 1 << 10, Cols: 1 << 10, Lo: 0, Hi: 2}},
			"experts of"},
	} {
		_, err := Unquantized{}.LoadExperts(NewLoader(src, &captureBackend{}, 0, nil), tc.w)
		require.ErrorContains(t, err, tc.want)
	}
}

// mxfp4Source is gate_up_proj_blocks/_scales of 2 experts, 4 rows (I 2, interleaved), K 64,
// and down_proj_blocks/_scales of 2 experts, H 2 rows, I 64: code byte i is byte(i), scale i
// byte(100 + i).
func mxfp4Source() memSource {
	u8 := func(name string, shape ...int) *TensorInfo {
		n := 1
		for _, d := range shape {
			n *= d
		}
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(i)
			if len(shape) == 3 {
				data[i] = byte(100 + i)
			}
		}
		return &TensorInfo{Name: name, File: "mem", DType: ops.U8, Shape: shape, Data: data}
	}
	return memSource{"gu_blocks": u8("gu_blocks", 2, 4, 2, 16), "gu_scales": u8("gu_scales", 2, 4, 2),
		"dn_blocks": u8("dn_blocks", 2, 2, 2, 16), "dn_scales": u8("dn_scales", 2, 2, 2)}
}

// TestMXFP4Experts: MXFP4 experts reach the backend as ops.MXFP4 codes and E8M0 scales, the
// gate|up rows de-interleaved and cut for the rank, down's columns cut on whole blocks; cuts
// inside a block, 0xFF scales and shapes the config does not imply are refused.
func TestMXFP4Experts(t *testing.T) {
	gu := func(lo, hi int) ExpertWeight {
		return ExpertWeight{Name: "w13", Layout: Stacked, Packed: &PackedExperts{Tensor: "gu", Experts: 2, Rows: 4, Cols: 64,
			Interleaved: true, Lo: lo, Hi: hi}}
	}
	dn := func(lo, hi int) ExpertWeight {
		return ExpertWeight{Name: "w2", Layout: Cols, Packed: &PackedExperts{Tensor: "dn", Experts: 2, Rows: 2, Cols: 64, Lo: lo, Hi: hi}}
	}
	// row (e, n) of gu has code bytes [(e*4+n)*32, +32) and scales [(e*4+n)*2, +2).
	rowBytes := func(e, n, b0, nb int) (codes, scales []byte) {
		for b := b0; b < b0+nb; b++ {
			for j := range 16 {
				codes = append(codes, byte(((e*4+n)*2+b)*16+j))
			}
			scales = append(scales, byte(100+(e*4+n)*2+b))
		}
		return codes, scales
	}
	src := mxfp4Source()
	be := &captureBackend{}
	_, err := MXFP4{}.LoadExperts(NewLoader(src, be, 0, nil), gu(1, 2))
	require.NoError(t, err)
	c := be.calls[0]
	require.Equal(t, []int{2, 2, 64}, c.shape)
	require.Equal(t, ops.MXFP4, c.d.Format)
	require.Equal(t, ops.U8, c.d.DType)
	require.Equal(t, []int{2, 2, 2}, c.d.Scales.Shape)
	require.Equal(t, []int{1, 32}, c.d.Scales.Block)
	var codes, scales []byte
	for e := range 2 {
		for _, n := range []int{2, 3} { // gate 1, up 1
			cb, sb := rowBytes(e, n, 0, 2)
			codes, scales = append(codes, cb...), append(scales, sb...)
		}
	}
	require.Equal(t, codes, c.raw[0])
	require.Equal(t, scales, c.d.Scales.Raw[0])

	// down_proj rank 1 of 2: columns [32, 64) = block 1 of each row (dn rows: (e*2+n)*2 blocks).
	be = &captureBackend{}
	_, err = MXFP4{}.LoadExperts(NewLoader(src, be, 0, nil), dn(32, 64))
	require.NoError(t, err)
	c = be.calls[0]
	require.Equal(t, []int{2, 2, 32}, c.shape)
	codes, scales = nil, nil
	for r := range 4 {
		for j := range 16 {
			codes = append(codes, byte((r*2+1)*16+j))
		}
		scales = append(scales, byte(100+r*2+1))
	}
	require.Equal(t, codes, c.raw[0])
	require.Equal(t, scales, c.d.Scales.Raw[0])

	_, err = MXFP4{}.LoadExperts(NewLoader(src, &captureBackend{}, 0, nil), dn(16, 32))
	require.ErrorContains(t, err, "break mxfp4's 32-element blocks")
	bad := mxfp4Source()
	bad["gu_scales"].Data[5] = 0xFF
	_, err = MXFP4{}.LoadExperts(NewLoader(bad, &captureBackend{}, 0, nil), gu(0, 2))
	require.ErrorContains(t, err, "0xFF")
	w := gu(0, 2)
	w.Packed.Cols = 32
	_, err = MXFP4{}.LoadExperts(NewLoader(src, &captureBackend{}, 0, nil), w)
	require.ErrorContains(t, err, "the config implies [2 4 1 16]")
	w.Packed.Cols = 48
	_, err = MXFP4{}.LoadExperts(NewLoader(src, &captureBackend{}, 0, nil), w)
	require.ErrorContains(t, err, "not a multiple of 32")
	f32 := mxfp4Source()
	f32["gu_scales"].DType = ops.F32
	_, err = MXFP4{}.LoadExperts(NewLoader(f32, &captureBackend{}, 0, nil), gu(0, 2))
	require.ErrorContains(t, err, "must be uint8")
	// A uint8 tensor outside the experts is not read as a linear weight.
	_, err = MXFP4{}.Load(NewLoader(src, &captureBackend{}, 0, nil), LinearWeight{Name: "x", Layout: Whole,
		Parts: []Part{{Name: "gu_scales", Hi: 2, Shape: []int{2, 4, 2}}}})
	require.ErrorContains(t, err, "mxfp4 is read for gpt-oss's experts only")
}
