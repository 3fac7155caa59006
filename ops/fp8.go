package ops

import (
	"fmt"
	"math"
)

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

// Float32ToF8E4M3 encodes f as float8_e4m3fn, rounding to the nearest code (ties to even) and
// saturating at ±448 (as vLLM's scaled_fp8_conversion clamps before converting; the format has
// no infinity); NaN stays NaN.
func Float32ToF8E4M3(f float32) uint8 {
	if f != f {
		return 0x7f
	}
	var sign uint8
	x := float64(f)
	if math.Signbit(x) {
		sign, x = 0x80, -x
	}
	if x >= 448 {
		return sign | 0x7e
	}
	if x == 0 {
		return sign
	}
	_, e := math.Frexp(x) // x = m · 2^e, m in [0.5, 1): the leading bit is 2^(e-1)
	e = max(e-1, -6)      // below 2⁻⁶ the codes are subnormal, all 2⁻⁹ apart
	step := math.Ldexp(1, e-3)
	q := math.RoundToEven(x/step) * step // exact: x/step < 16 and step is a power of two
	if q < math.Ldexp(1, -6) {
		return sign | uint8(q/math.Ldexp(1, -9))
	}
	_, qe := math.Frexp(q)
	qe--
	return sign | uint8(qe+7)<<3 | uint8((q/math.Ldexp(1, qe)-1)*8)
}

// KVCacheFP8 reports whether a --kv-cache-dtype value asks for an fp8 (e4m3) KV cache: "auto"
// (or "") keeps the activations' dtype, "fp8" and "fp8_e4m3" store e4m3 (vLLM's names); other
// values (fp8_e5m2, float16, ...) are refused.
func KVCacheFP8(dtype string) (bool, error) {
	switch dtype {
	case "", "auto":
		return false, nil
	case "fp8", "fp8_e4m3":
		return true, nil
	}
	return false, fmt.Errorf("%w: --kv-cache-dtype %.40q (supported: auto, fp8, fp8_e4m3)", ErrUnsupportedKVCache, dtype)
}
