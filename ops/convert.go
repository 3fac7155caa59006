package ops

import "math"

// BF16ToFloat32 widens a bfloat16 (its bits are the top half of a float32's).
func BF16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F16ToFloat32 widens an IEEE 754 binary16, subnormals, infinities and NaNs included.
func F16ToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch exp {
	case 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case 0:
		f := float32(man) * (1.0 / (1 << 24)) // exact: man < 2^10
		if sign != 0 {
			return -f
		}
		return f
	}
	return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
}
