package ops

import "math"

// F8E4M3ToFloat32 decodes a float8_e4m3fn code exactly: sign, 4 exponent bits (bias 7), 3
// mantissa bits; exponent 0 is subnormal (m/8 · 2⁻⁶); no infinities, and only S.1111.111
// (0x7f, 0xff) is NaN, so the largest finite value is 448.
func F8E4M3ToFloat32(b uint8) float32 {
	sign := float32(1)
	if b&0x80 != 0 {
		sign = -1
	}
	e, m := int(b>>3&0xf), int(b&7)
	switch {
	case e == 0xf && m == 7:
		return float32(math.NaN())
	case e == 0:
		return sign * float32(math.Ldexp(float64(m)/8, -6))
	}
	return sign * float32(math.Ldexp(1+float64(m)/8, e-7))
}
