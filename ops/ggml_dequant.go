package ops

import "encoding/binary"

// The dequantizers of the ggml types whose blocks both the GGUF loader (dequantizing at load)
// and the cpu backend (the kept blocks' float32 form) read. They follow ggml's
// dequantize_row_* exactly, float32 rounding included: d*q+m is written float32(d*q)+m so
// no fused multiply-add can change the result.

func f16at(b []byte) float32 { return F16ToFloat32(binary.LittleEndian.Uint16(b)) }

// DequantQ5_0 expands whole Q5_0 blocks of x into y.
func DequantQ5_0(y []float32, x []byte) {
	for ; len(x) >= 22 && len(y) >= 32; x, y = x[22:], y[32:] {
		d, qh := f16at(x), binary.LittleEndian.Uint32(x[2:])
		qs, out := (*[16]byte)(x[6:22]), (*[32]float32)(y)
		for j, q := range qs {
			lo := uint32(q&15) | (qh>>j&1)<<4
			hi := uint32(q>>4) | (qh>>(j+16)&1)<<4
			out[j] = d * float32(int(lo)-16)
			out[j+16] = d * float32(int(hi)-16)
		}
	}
}

// DequantQ5_1 expands whole Q5_1 blocks of x into y.
func DequantQ5_1(y []float32, x []byte) {
	for ; len(x) >= 24 && len(y) >= 32; x, y = x[24:], y[32:] {
		d, m, qh := f16at(x), f16at(x[2:]), binary.LittleEndian.Uint32(x[4:])
		qs, out := (*[16]byte)(x[8:24]), (*[32]float32)(y)
		for j, q := range qs {
			lo := uint32(q&15) | (qh>>j&1)<<4
			hi := uint32(q>>4) | (qh>>(j+16)&1)<<4
			out[j] = float32(d*float32(lo)) + m
			out[j+16] = float32(d*float32(hi)) + m
		}
	}
}

// KScaleMin unpacks the eight 6-bit scales and mins of a Q4_K or Q5_K block.
func KScaleMin(s []byte, d, dmin float32) (sc, mn [8]float32) {
	for j := range 4 {
		sc[j] = float32(d * float32(s[j]&63))
		mn[j] = float32(dmin * float32(s[4+j]&63))
		sc[4+j] = float32(d * float32(s[8+j]&15|s[j]>>2&0x30))
		mn[4+j] = float32(dmin * float32(s[8+j]>>4|s[4+j]>>2&0x30))
	}
	return sc, mn
}

// DequantQ4K expands whole Q4_K blocks of x into y.
func DequantQ4K(y []float32, x []byte) {
	for ; len(x) >= 144 && len(y) >= 256; x, y = x[144:], y[256:] {
		sc, mn := KScaleMin(x[4:16], f16at(x), f16at(x[2:]))
		for c := range 4 {
			qs := (*[32]byte)(x[16+c*32:])
			lo, hi := (*[32]float32)(y[c*64:]), (*[32]float32)(y[c*64+32:])
			for l, q := range qs {
				lo[l] = float32(sc[2*c]*float32(q&15)) - mn[2*c]
				hi[l] = float32(sc[2*c+1]*float32(q>>4)) - mn[2*c+1]
			}
		}
	}
}

// DequantQ5K expands whole Q5_K blocks of x into y.
func DequantQ5K(y []float32, x []byte) {
	for ; len(x) >= 176 && len(y) >= 256; x, y = x[176:], y[256:] {
		sc, mn := KScaleMin(x[4:16], f16at(x), f16at(x[2:]))
		qh := (*[32]byte)(x[16:48])
		for c := range 4 {
			qs := (*[32]byte)(x[48+c*32:])
			lo, hi := (*[32]float32)(y[c*64:]), (*[32]float32)(y[c*64+32:])
			for l, q := range qs {
				h := qh[l] >> (2 * c)
				lo[l] = float32(sc[2*c]*float32(q&15|(h&1)<<4)) - mn[2*c]
				hi[l] = float32(sc[2*c+1]*float32(q>>4|(h&2)<<3)) - mn[2*c+1]
			}
		}
	}
}

// DequantQ6K expands whole Q6_K blocks of x into y.
func DequantQ6K(y []float32, x []byte) {
	var ds [16]float32
	for ; len(x) >= 210 && len(y) >= 256; x, y = x[210:], y[256:] {
		d := f16at(x[208:])
		for k, s := range (*[16]byte)(x[192:208]) {
			ds[k] = d * float32(int8(s))
		}
		for h := range 2 {
			ql, qh := (*[64]byte)(x[h*64:]), (*[32]byte)(x[128+h*32:])
			out, sc := (*[128]float32)(y[h*128:]), ds[h*8:h*8+8]
			for l := range 32 {
				is := l / 16
				out[l] = sc[is] * float32(int(ql[l]&15|(qh[l]&3)<<4)-32)
				out[l+32] = sc[is+2] * float32(int(ql[l+32]&15|(qh[l]>>2&3)<<4)-32)
				out[l+64] = sc[is+4] * float32(int(ql[l]>>4|(qh[l]>>4&3)<<4)-32)
				out[l+96] = sc[is+6] * float32(int(ql[l+32]>>4|(qh[l]>>6&3)<<4)-32)
			}
		}
	}
}
