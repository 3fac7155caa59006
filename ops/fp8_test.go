package ops

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestF8E4M3ToFloat32 checks every one of the 256 codes against float8_e4m3fn's definition,
// spelled out independently: the known landmarks, then each code's value from its fields.
func TestF8E4M3ToFloat32(t *testing.T) {
	for _, tc := range []struct {
		code uint8
		want float64
	}{
		{0x00, 0}, {0x01, 1.0 / 512}, {0x07, 7.0 / 512}, {0x08, 1.0 / 64}, {0x38, 1}, {0x3c, 1.5},
		{0x40, 2}, {0x7e, 448}, {0xfe, -448}, {0xb8, -1}, {0x81, -1.0 / 512}, {0x77, 240}, {0x78, 256},
	} {
		require.Equal(t, float32(tc.want), F8E4M3ToFloat32(tc.code), "code %#x", tc.code)
	}
	require.True(t, math.Signbit(float64(F8E4M3ToFloat32(0x80))), "0x80 is -0")
	for c := 0; c < 256; c++ {
		got := float64(F8E4M3ToFloat32(uint8(c)))
		if c&0x7f == 0x7f {
			require.True(t, math.IsNaN(got), "code %#x is NaN", c)
			continue
		}
		exp, man := (c>>3)&15, c&7
		want := float64(man) / 8 * math.Pow(2, -6)
		if exp > 0 {
			want = (1 + float64(man)/8) * math.Pow(2, float64(exp-7))
		}
		if c&0x80 != 0 {
			want = -want
		}
		require.Equal(t, want, got, "code %#x", c)
		require.LessOrEqual(t, math.Abs(got), 448.0)
	}
}

// TestFloat32ToF8E4M3: every code round-trips; values between codes round to the nearest (ties
// to even), past ±448 saturate; the results equal torch's float8_e4m3fn conversion after the
// clamp vLLM applies.
func TestFloat32ToF8E4M3(t *testing.T) {
	for c := 0; c < 256; c++ {
		if c&0x7f == 0x7f {
			require.Equal(t, uint8(0x7f), Float32ToF8E4M3(F8E4M3ToFloat32(uint8(c)))&0x7f, "NaN %#x", c)
			continue
		}
		require.Equal(t, uint8(c), Float32ToF8E4M3(F8E4M3ToFloat32(uint8(c))), "code %#x", c)
	}
	for _, tc := range []struct {
		x    float32
		want uint8
	}{ // from torch: x.clamp(-448, 448).to(torch.float8_e4m3fn)
		{0, 0x00}, {1.0625, 0x38}, {1.1875, 0x3a}, {0.0009765625, 0x00}, {0.0029296875, 0x02},
		{0.01171875, 0x06}, {0.013671875, 0x07}, {300, 0x79}, {447.9, 0x7e}, {450, 0x7e}, {1e-4, 0x00},
		{-3.3, 0xc5}, {17, 0x58}, {0.3, 0x2a}, {248, 0x78}, {232, 0x76}, {1e30, 0x7e}, {-1e30, 0xfe},
		{77.0498046875, 0x6a}, {-14.6714448928833, 0xd7}, {-108.93946838378906, 0xee}, {28.42156219482422, 0x5e},
		{-54.22611999511719, 0xe6}, {-69.92977142333984, 0xe9}, {20.167341232299805, 0x5a}, {41.90131759643555, 0x62},
		{-35.9628791809082, 0xe1}, {-20.167177200317383, 0xda}, {-29.831768035888672, 0xdf}, {9.101824760437012, 0x51},
	} {
		require.Equal(t, tc.want, Float32ToF8E4M3(tc.x), "%v", tc.x)
	}
	require.Equal(t, uint8(0x7f), Float32ToF8E4M3(float32(math.NaN())))
}

// TestKVCacheFP8: vLLM's --kv-cache-dtype names.
func TestKVCacheFP8(t *testing.T) {
	for _, tc := range []struct {
		s    string
		fp8  bool
		fail bool
	}{{"", false, false}, {"auto", false, false}, {"fp8", true, false}, {"fp8_e4m3", true, false},
		{"fp8_e5m2", false, true}, {"float16", false, true}, {"FP8", false, true}} {
		got, err := KVCacheFP8(tc.s)
		if tc.fail {
			require.ErrorIs(t, err, ErrUnsupportedKVCache, tc.s)
			continue
		}
		require.NoError(t, err, tc.s)
		require.Equal(t, tc.fp8, got, tc.s)
	}
}
