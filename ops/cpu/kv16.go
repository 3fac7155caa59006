package cpu

import "math"

// The float16 KV cache of Options.KVFloat16: K and V rows stored as IEEE binary16 (half the
// bytes a decode step reads from the cache, as llama.cpp's default cache type), written from
// the float32 rows the rope step computes and widened again by the attention kernels.

// f32ToF16 rounds f to the nearest binary16 (ties to even), as vcvtps2ph does: overflow to
// infinity, NaN kept NaN, subnormals rounded.
func f32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	man := b & 0x7fffff
	switch {
	case exp == 0xff: // inf or NaN
		if man != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp-127 > 15: // overflows even before rounding
		return sign | 0x7c00
	case exp-127 >= -14: // normal
		h := uint32(exp-127+15)<<10 | man>>13
		rest := man & 0x1fff
		if rest > 0x1000 || rest == 0x1000 && h&1 == 1 {
			h++ // may carry into the exponent, up to infinity: correct
		}
		return sign | uint16(h)
	case exp-127 >= -25: // subnormal half (or rounds up to the smallest normal)
		m := man | 0x800000
		shift := uint(-(exp - 127) - 14 + 13) // 14..24 for exponents -15..-25
		h := m >> shift
		rest := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rest > half || rest == half && h&1 == 1 {
			h++
		}
		return sign | uint16(h)
	}
	return sign // underflows to zero
}

// putF16Go writes src rounded to binary16 into dst (putF16's portable kernel).
func putF16Go(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = f32ToF16(v)
	}
}

// attnScores16Go is attnScoresGo over float16 K rows.
func attnScores16Go(q []float32, k []uint16, kstride, n, hd, g int, scale float32, out []float32, ostride int) {
	for i := range n {
		krow := k[i*kstride : i*kstride+hd]
		for h := range g {
			qh := q[h*hd : (h+1)*hd]
			var s float32
			for d, v := range krow {
				s += qh[d] * f16Table[v]
			}
			out[h*ostride+i] = s * scale
		}
	}
}

// attnAccum16Go is attnAccumGo over float16 V rows.
func attnAccum16Go(acc []float32, v []uint16, vstride, n, hd, g int, w []float32, wstride int) {
	for i := range n {
		vrow := v[i*vstride : i*vstride+hd]
		for h := range g {
			a, wt := acc[h*hd:(h+1)*hd], w[h*wstride+i]
			for d, x := range vrow {
				a[d] += wt * f16Table[x]
			}
		}
	}
}
