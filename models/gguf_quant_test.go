package models

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

const ggufTestdata = "../testdata/gguf"

// TestGGUFDequantMatchesReference expands the blocks of testdata/gguf/dequant_*.bin and
// compares them bit for bit with what the gguf Python package's gguf.quants.dequantize made
// of them (testdata/gguf/make_fixtures.py).
func TestGGUFDequantMatchesReference(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(ggufTestdata, "dequant.json"))
	require.NoError(t, err)
	var cases []struct {
		Type     string `json:"type"`
		ID       uint32 `json:"id"`
		Blocks   int    `json:"blocks"`
		Raw      string `json:"raw"`
		Expected string `json:"expected"`
	}
	require.NoError(t, json.Unmarshal(b, &cases))
	require.Len(t, cases, 13)
	for _, tc := range cases {
		t.Run(tc.Type, func(t *testing.T) {
			info, ok := ggmlTypes[ggmlType(tc.ID)]
			require.True(t, ok)
			require.Equal(t, tc.Type, info.name)
			require.NotNil(t, info.dequant, "no dequantizer")
			raw, err := os.ReadFile(filepath.Join(ggufTestdata, tc.Raw))
			require.NoError(t, err)
			require.Len(t, raw, tc.Blocks*info.size)
			wantBytes, err := os.ReadFile(filepath.Join(ggufTestdata, tc.Expected))
			require.NoError(t, err)
			require.Len(t, wantBytes, 4*tc.Blocks*info.block)
			got := make([]float32, tc.Blocks*info.block)
			info.dequant(got, raw)
			for i := range got {
				want := math.Float32frombits(binary.LittleEndian.Uint32(wantBytes[4*i:]))
				require.Equal(t, math.Float32bits(want), math.Float32bits(got[i]),
					"element %d (block %d): got %v, want %v", i, i/info.block, got[i], want)
			}
			// Row-wise conversion through the parallel driver gives the same bytes.
			dst := float32Bytes(len(got))
			perRow := info.block
			runRowJobs([]*rowJob{{dst: dst, src: raw, rows: tc.Blocks, dstRow: 4 * perRow, srcRow: info.size, conv: dequantConv(info.dequant)}})
			require.Equal(t, wantBytes, dst)
		})
	}
}

func TestF16Decoding(t *testing.T) {
	cases := []struct {
		bits uint16
		want float32
	}{
		{0x0000, 0}, {0x3c00, 1}, {0xc000, -2}, {0x3555, 0.333251953125}, {0x7bff, 65504},
		{0x0001, 5.960464477539063e-08}, {0x03ff, 6.097555160522461e-05}, {0x0400, 6.103515625e-05},
		{0x8001, -5.960464477539063e-08}, {0x7c00, float32(math.Inf(1))}, {0xfc00, float32(math.Inf(-1))},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, ops.F16ToFloat32(tc.bits), "0x%04x", tc.bits)
	}
	require.Equal(t, uint32(0x80000000), math.Float32bits(ops.F16ToFloat32(0x8000)), "negative zero")
	require.True(t, math.IsNaN(float64(ops.F16ToFloat32(0x7e00))))
	// Every finite half round-trips through float32 -> float16 rounding exactly.
	for h := 0; h < 0x10000; h++ {
		if h&0x7c00 == 0x7c00 {
			continue
		}
		f := ops.F16ToFloat32(uint16(h))
		require.Equal(t, uint16(h), toF16(f), "0x%04x -> %v", h, f)
	}
}

// toF16 encodes a float32 that is exactly representable as a half (a test helper).
func toF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	a := math.Abs(float64(f))
	if a == 0 {
		return sign
	}
	if a < 6.103515625e-05 { // subnormal: a = m * 2^-24
		return sign | uint16(a*(1<<24))
	}
	exp := int(b>>23&0xff) - 127 + 15
	return sign | uint16(exp)<<10 | uint16(b>>13&0x3ff)
}

func TestGGUFTypeTable(t *testing.T) {
	for id, ti := range ggmlTypes {
		require.Positive(t, ti.block, ti.name)
		require.Positive(t, ti.size, ti.name)
		require.Equal(t, ti.name, id.String())
	}
	require.Equal(t, "type(99)", ggmlType(99).String())
	require.Equal(t, "BF16, F16, F32, IQ4_NL, IQ4_XS, Q2_K, Q3_K, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0, Q8_K",
		ggufSupportedTypes())
}

func BenchmarkGGUFDequant(b *testing.B) {
	for _, typ := range []ggmlType{ggmlQ4_0, ggmlQ4_1, ggmlQ8_0, ggmlQ4_K, ggmlQ6_K} {
		info := ggmlTypes[typ]
		const n = 1 << 20
		src := make([]byte, n/info.block*info.size)
		dst := make([]float32, n)
		b.Run(info.name, func(b *testing.B) {
			b.SetBytes(4 * n)
			for range b.N {
				info.dequant(dst, src)
			}
		})
	}
}

// float32Bytes allocates n float32s and returns them as bytes.
func float32Bytes(n int) []byte {
	if n == 0 {
		return []byte{}
	}
	f := make([]float32, n)
	return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), 4*n)
}
