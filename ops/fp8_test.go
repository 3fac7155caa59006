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
