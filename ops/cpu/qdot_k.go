package cpu

import (
	"encoding/binary"

	"github.com/atom-go/atom/ops"
)

// The portable kernels of the 5-bit and K-quant blocks (Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) against
// the 8-bit activations of quantizeRow: exact int32 sums per block of 32 (per 16 where Q6_K
// scales by 16), scaled as the type's dequantization scales each value. One row at a time, so
// a row's result does not depend on its batch.

// dotQ5_0Go: Σ_blocks d_w·(d_a·Σ q_w·q_a - 16·s_a), q_w the 5-bit values.
func dotQ5_0Go(w []byte, a []int8, ds []float32) float32 {
	var sum, msum float32
	for b := 0; b < len(a)/qBlock; b++ {
		blk, qa := w[b*22:b*22+22], a[b*qBlock:b*qBlock+qBlock]
		d := f16le(blk)
		sum += d * ds[2*b] * float32(dot5(blk[6:22], binary.LittleEndian.Uint32(blk[2:]), qa))
		msum += d * ds[2*b+1]
	}
	return sum - 16*msum
}

// dotQ5_1Go: Σ_blocks d_w·d_a·Σ q_w·q_a + m_w·s_a.
func dotQ5_1Go(w []byte, a []int8, ds []float32) float32 {
	var sum, msum float32
	for b := 0; b < len(a)/qBlock; b++ {
		blk, qa := w[b*24:b*24+24], a[b*qBlock:b*qBlock+qBlock]
		sum += f16le(blk) * ds[2*b] * float32(dot5(blk[8:24], binary.LittleEndian.Uint32(blk[4:]), qa))
		msum += f16le(blk[2:]) * ds[2*b+1]
	}
	return sum + msum
}

// dot5 is Σ q·qa over a Q5 block: element j the low nibble of qs[j] with bit j of qh above
// it, element j+16 the high nibble with bit j+16.
func dot5(qs []byte, qh uint32, qa []int8) int32 {
	qa = qa[:32]
	var si int32
	for j, v := range qs[:16] {
		lo := int32(v&15) | int32(qh>>j&1)<<4
		hi := int32(v>>4) | int32(qh>>(j+16)&1)<<4
		si += lo*int32(qa[j]) + hi*int32(qa[j+16])
	}
	return si
}

// dotQ4KGo: per sub-block of 32, sc·d_a·Σ q_w·q_a - m·s_a (sc, m of KScaleMin).
func dotQ4KGo(w []byte, a []int8, ds []float32) float32 {
	var sum, msum float32
	for s := 0; s < len(a)/256; s++ {
		blk := w[s*144 : (s+1)*144]
		sc, mn := ops.KScaleMin(blk[4:16], f16le(blk), f16le(blk[2:]))
		for c := range 4 {
			qs, b := blk[16+c*32:48+c*32], s*8+2*c
			qa0, qa1 := a[b*qBlock:(b+1)*qBlock], a[(b+1)*qBlock:(b+2)*qBlock]
			var s0, s1 int32
			for l, q := range qs {
				s0 += int32(q&15) * int32(qa0[l])
				s1 += int32(q>>4) * int32(qa1[l])
			}
			sum += sc[2*c]*ds[2*b]*float32(s0) + sc[2*c+1]*ds[2*b+2]*float32(s1)
			msum += mn[2*c]*ds[2*b+1] + mn[2*c+1]*ds[2*b+3]
		}
	}
	return sum - msum
}

// dotQ5KGo is dotQ4KGo with Q5_K's fifth bits (bits 2c and 2c+1 of qh[l] for the pair c).
func dotQ5KGo(w []byte, a []int8, ds []float32) float32 {
	var sum, msum float32
	for s := 0; s < len(a)/256; s++ {
		blk := w[s*176 : (s+1)*176]
		sc, mn := ops.KScaleMin(blk[4:16], f16le(blk), f16le(blk[2:]))
		qh := blk[16:48]
		for c := range 4 {
			qs, b := blk[48+c*32:80+c*32], s*8+2*c
			qa0, qa1 := a[b*qBlock:(b+1)*qBlock], a[(b+1)*qBlock:(b+2)*qBlock]
			var s0, s1 int32
			for l, q := range qs {
				h := qh[l] >> (2 * c)
				s0 += int32(q&15|(h&1)<<4) * int32(qa0[l])
				s1 += int32(q>>4|(h&2)<<3) * int32(qa1[l])
			}
			sum += sc[2*c]*ds[2*b]*float32(s0) + sc[2*c+1]*ds[2*b+2]*float32(s1)
			msum += mn[2*c]*ds[2*b+1] + mn[2*c+1]*ds[2*b+3]
		}
	}
	return sum - msum
}

// dotQ6KGo: per 16 values, d·sc·d_a·Σ (q_w-32)·q_a, in DequantQ6K's order: half h of a block
// holds sub-blocks j = 0..3 of 32 (activation block 8s+4h+j), value l of sub-block j from
// ql[l + 32·(j&1)] (low nibble for j < 2) and bits 2j..2j+1 of qh[l], scaled by sc[8h+2j+l/16].
func dotQ6KGo(w []byte, a []int8, ds []float32) float32 {
	var sum float32
	for s := 0; s < len(a)/256; s++ {
		blk := w[s*210 : (s+1)*210]
		d := f16le(blk[208:])
		for h := range 2 {
			ql, qh, scs := blk[h*64:h*64+64], blk[128+h*32:128+h*32+32], blk[192+h*8:200+h*8]
			for j := range 4 {
				b := s*8 + 4*h + j
				qa := a[b*qBlock : (b+1)*qBlock]
				var half [2]int32
				for l := range 32 {
					q := ql[l+32*(j&1)]
					if j >= 2 {
						q >>= 4
					}
					v := int32(q&15|(qh[l]>>(2*j)&3)<<4) - 32
					half[l/16] += v * int32(qa[l])
				}
				da := ds[2*b]
				sum += d*float32(int8(scs[2*j]))*da*float32(half[0]) + d*float32(int8(scs[2*j+1]))*da*float32(half[1])
			}
		}
	}
	return sum
}
