#include "textflag.h"

// Vector dot products of 16-bit weight rows (float16 or bfloat16, widened in registers) with
// float32 activation rows (AVX2, FMA, F16C): one weight row against 4 or 1 activation rows,
// every row through the same instructions (ROW16), so that its result does not depend on the
// rows beside it. n is a multiple of 16; a row's sums are two accumulators of 8 lanes (even
// and odd chunks of 8), added and reduced at the end.

// The weights' next 16 values widened into Y8 and Y9.
#define WIDEN_F16 \
	VCVTPH2PS (SI)(AX*2), Y8 \
	VCVTPH2PS 16(SI)(AX*2), Y9

#define WIDEN_BF16 \
	VPMOVZXWD (SI)(AX*2), Y8 \
	VPMOVZXWD 16(SI)(AX*2), Y9 \
	VPSLLD $16, Y8, Y8 \
	VPSLLD $16, Y9, Y9

#define ROW16(x, x32, a0, a1) \
	VFMADD231PS x, Y8, a0 \
	VFMADD231PS x32, Y9, a1

#define RED16(a0, a1, a0x, a1x, off) \
	VADDPS a1, a0, a0 \
	VEXTRACTF128 $1, a0, a1x \
	VADDPS a1x, a0x, a0x \
	VHADDPS a0x, a0x, a0x \
	VHADDPS a0x, a0x, a0x \
	VMOVSS a0x, off(DX)

#define ARGS16 \
	MOVQ w+0(FP), SI \
	MOVQ x+8(FP), DI \
	MOVQ n+16(FP), BX \
	MOVQ xstride+24(FP), R10 \
	MOVQ out+32(FP), DX \
	LEAQ (R10)(R10*2), R11 \
	XORQ AX, AX \
	VXORPS Y0, Y0, Y0 \
	VXORPS Y1, Y1, Y1 \
	VXORPS Y2, Y2, Y2 \
	VXORPS Y3, Y3, Y3 \
	VXORPS Y4, Y4, Y4 \
	VXORPS Y5, Y5, Y5 \
	VXORPS Y6, Y6, Y6 \
	VXORPS Y7, Y7, Y7

// func dotF16x4AVX2(w *uint16, x *float32, n, xstride int, out *float32)
//
// out[r] = Σ_i w[i]·x[r·xstride/4 + i] for r < 4, xstride in bytes.
TEXT ·dotF16x4AVX2(SB), NOSPLIT, $0-40
	ARGS16
df16x4loop:
	CMPQ AX, BX
	JGE df16x4done
	WIDEN_F16
	LEAQ (DI)(AX*4), R12
	ROW16((R12), 32(R12), Y0, Y1)
	ROW16((R12)(R10*1), 32(R12)(R10*1), Y2, Y3)
	ROW16((R12)(R10*2), 32(R12)(R10*2), Y4, Y5)
	ROW16((R12)(R11*1), 32(R12)(R11*1), Y6, Y7)
	ADDQ $16, AX
	JMP df16x4loop
df16x4done:
	RED16(Y0, Y1, X0, X1, 0)
	RED16(Y2, Y3, X2, X3, 4)
	RED16(Y4, Y5, X4, X5, 8)
	RED16(Y6, Y7, X6, X7, 12)
	VZEROUPPER
	RET

// func dotF16x1AVX2(w *uint16, x *float32, n, xstride int, out *float32)
//
// out[r] = Σ_i w[i]·x[r·xstride/4 + i] for r < 1, xstride in bytes.
TEXT ·dotF16x1AVX2(SB), NOSPLIT, $0-40
	ARGS16
df16x1loop:
	CMPQ AX, BX
	JGE df16x1done
	WIDEN_F16
	LEAQ (DI)(AX*4), R12
	ROW16((R12), 32(R12), Y0, Y1)
	ADDQ $16, AX
	JMP df16x1loop
df16x1done:
	RED16(Y0, Y1, X0, X1, 0)
	VZEROUPPER
	RET

// func dotBF16x4AVX2(w *uint16, x *float32, n, xstride int, out *float32)
//
// out[r] = Σ_i w[i]·x[r·xstride/4 + i] for r < 4, xstride in bytes.
TEXT ·dotBF16x4AVX2(SB), NOSPLIT, $0-40
	ARGS16
dbf16x4loop:
	CMPQ AX, BX
	JGE dbf16x4done
	WIDEN_BF16
	LEAQ (DI)(AX*4), R12
	ROW16((R12), 32(R12), Y0, Y1)
	ROW16((R12)(R10*1), 32(R12)(R10*1), Y2, Y3)
	ROW16((R12)(R10*2), 32(R12)(R10*2), Y4, Y5)
	ROW16((R12)(R11*1), 32(R12)(R11*1), Y6, Y7)
	ADDQ $16, AX
	JMP dbf16x4loop
dbf16x4done:
	RED16(Y0, Y1, X0, X1, 0)
	RED16(Y2, Y3, X2, X3, 4)
	RED16(Y4, Y5, X4, X5, 8)
	RED16(Y6, Y7, X6, X7, 12)
	VZEROUPPER
	RET

// func dotBF16x1AVX2(w *uint16, x *float32, n, xstride int, out *float32)
//
// out[r] = Σ_i w[i]·x[r·xstride/4 + i] for r < 1, xstride in bytes.
TEXT ·dotBF16x1AVX2(SB), NOSPLIT, $0-40
	ARGS16
dbf16x1loop:
	CMPQ AX, BX
	JGE dbf16x1done
	WIDEN_BF16
	LEAQ (DI)(AX*4), R12
	ROW16((R12), 32(R12), Y0, Y1)
	ADDQ $16, AX
	JMP dbf16x1loop
dbf16x1done:
	RED16(Y0, Y1, X0, X1, 0)
	VZEROUPPER
	RET
