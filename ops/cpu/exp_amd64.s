#include "textflag.h"

// Vector exp (AVX2, FMA) of exp_amd64.go: exp(x) = 2^n·p(r), n = round(x·log2 e), r = x - n·ln 2
// (ln 2 in two parts, so r is exact to float32), p a degree-7 polynomial (Cephes' expf); x
// clamped to the range where 2^n is a normal float32. Within 2 ulp of exp over that range.

DATA expc<>+0(SB)/4, $88.3762626647949   // clamp above
DATA expc<>+4(SB)/4, $-87.3365447505531  // clamp below
DATA expc<>+8(SB)/4, $1.44269504088896341 // log2 e
DATA expc<>+12(SB)/4, $0.693359375        // ln 2, high part
DATA expc<>+16(SB)/4, $-2.12194440e-4     // ln 2, low part
DATA expc<>+20(SB)/4, $1.9875691500e-4
DATA expc<>+24(SB)/4, $1.3981999507e-3
DATA expc<>+28(SB)/4, $8.3334519073e-3
DATA expc<>+32(SB)/4, $4.1665795894e-2
DATA expc<>+36(SB)/4, $1.6666665459e-1
DATA expc<>+40(SB)/4, $5.0000001201e-1
GLOBL expc<>(SB), RODATA|NOPTR, $44

// 1.0 and the exponent bias 127, 8 lanes each (memory operands).
DATA expv<>+0(SB)/4, $1.0
DATA expv<>+4(SB)/4, $1.0
DATA expv<>+8(SB)/4, $1.0
DATA expv<>+12(SB)/4, $1.0
DATA expv<>+16(SB)/4, $1.0
DATA expv<>+20(SB)/4, $1.0
DATA expv<>+24(SB)/4, $1.0
DATA expv<>+28(SB)/4, $1.0
DATA expv<>+32(SB)/4, $127
DATA expv<>+36(SB)/4, $127
DATA expv<>+40(SB)/4, $127
DATA expv<>+44(SB)/4, $127
DATA expv<>+48(SB)/4, $127
DATA expv<>+52(SB)/4, $127
DATA expv<>+56(SB)/4, $127
DATA expv<>+60(SB)/4, $127
GLOBL expv<>(SB), RODATA|NOPTR, $64

// The constants into Y5-Y15.
#define EXP_CONSTS \
	VBROADCASTSS expc<>+0(SB), Y5 \
	VBROADCASTSS expc<>+4(SB), Y6 \
	VBROADCASTSS expc<>+8(SB), Y7 \
	VBROADCASTSS expc<>+12(SB), Y8 \
	VBROADCASTSS expc<>+16(SB), Y9 \
	VBROADCASTSS expc<>+20(SB), Y10 \
	VBROADCASTSS expc<>+24(SB), Y11 \
	VBROADCASTSS expc<>+28(SB), Y12 \
	VBROADCASTSS expc<>+32(SB), Y13 \
	VBROADCASTSS expc<>+36(SB), Y14 \
	VBROADCASTSS expc<>+40(SB), Y15

// Y0 = exp(Y0); Y1-Y3 scratch.
#define EXP8 \
	VMINPS Y5, Y0, Y0 \
	VMAXPS Y6, Y0, Y0 \
	VMULPS Y7, Y0, Y1 \
	VROUNDPS $0, Y1, Y1 \
	VFNMADD231PS Y8, Y1, Y0 \
	VFNMADD231PS Y9, Y1, Y0 \
	VMOVAPS Y10, Y3 \
	VFMADD213PS Y11, Y0, Y3 \
	VFMADD213PS Y12, Y0, Y3 \
	VFMADD213PS Y13, Y0, Y3 \
	VFMADD213PS Y14, Y0, Y3 \
	VFMADD213PS Y15, Y0, Y3 \
	VMULPS Y0, Y0, Y2 \
	VFMADD213PS Y0, Y2, Y3 \
	VADDPS expv<>+0(SB), Y3, Y3 \
	VCVTPS2DQ Y1, Y1 \
	VPADDD expv<>+32(SB), Y1, Y1 \
	VPSLLD $23, Y1, Y1 \
	VMULPS Y1, Y3, Y0

// func expShiftAVX2(x *float32, n int, m float32) float32
//
// x[i] = exp(x[i] - m) for i < n (a multiple of 8); returns their sum (in 8 lanes, then across
// them).
TEXT ·expShiftAVX2(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	EXP_CONSTS
	VXORPS Y4, Y4, Y4

expsloop:
	CMPQ CX, $8
	JLT expsdone
	VBROADCASTSS m+16(FP), Y1
	VMOVUPS (SI), Y0
	VSUBPS Y1, Y0, Y0
	EXP8
	VMOVUPS Y0, (SI)
	VADDPS Y0, Y4, Y4
	ADDQ $32, SI
	SUBQ $8, CX
	JMP expsloop

expsdone:
	VEXTRACTF128 $1, Y4, X1
	VADDPS X1, X4, X4
	VHADDPS X4, X4, X4
	VHADDPS X4, X4, X4
	VMOVSS X4, ret+24(FP)
	VZEROUPPER
	RET

// func siluMulAVX2(dst, gate, up *float32, n int)
//
// dst[i] = gate[i] / (1 + exp(-gate[i])) · up[i] for i < n (a multiple of 8).
TEXT ·siluMulAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ gate+8(FP), SI
	MOVQ up+16(FP), DX
	MOVQ n+24(FP), CX
	EXP_CONSTS

siluloop:
	CMPQ CX, $8
	JLT siludone
	VMOVUPS (SI), Y4
	VXORPS Y0, Y0, Y0
	VSUBPS Y4, Y0, Y0
	EXP8
	VADDPS expv<>+0(SB), Y0, Y0
	VDIVPS Y0, Y4, Y4
	VMULPS (DX), Y4, Y4
	VMOVUPS Y4, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	ADDQ $32, DX
	SUBQ $8, CX
	JMP siluloop

siludone:
	VZEROUPPER
	RET

// func expSumAVX2(x *float32, n int, m float32) float64
//
// Σ exp(x[i] - m) for i < n (a multiple of 8), x unchanged; each 8 exps widened to float64
// before they are added (the sum of a vocabulary's worth stays exact to float32's precision).
TEXT ·expSumAVX2(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	EXP_CONSTS
	VXORPD Y4, Y4, Y4

esumloop:
	CMPQ CX, $8
	JLT esumdone
	VBROADCASTSS m+16(FP), Y1
	VMOVUPS (SI), Y0
	VSUBPS Y1, Y0, Y0
	EXP8
	VCVTPS2PD X0, Y1
	VADDPD Y1, Y4, Y4
	VEXTRACTF128 $1, Y0, X0
	VCVTPS2PD X0, Y1
	VADDPD Y1, Y4, Y4
	ADDQ $32, SI
	SUBQ $8, CX
	JMP esumloop

esumdone:
	VEXTRACTF128 $1, Y4, X1
	VADDPD X1, X4, X4
	VHADDPD X4, X4, X4
	VMOVSD X4, ret+24(FP)
	VZEROUPPER
	RET
