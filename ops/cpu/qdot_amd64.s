#include "textflag.h"

// The vector kernels of qdot_amd64.go (AVX2, FMA, F16C). Go's operand order: sources first,
// destination last (VPMADDUBSW src2, src1, dst treats src1 as unsigned and src2 as signed).

// Q4_1 block (20 bytes): f16 d, f16 m, 16 bytes of nibbles. One block: unpack the nibbles to
// 32 unsigned bytes (low nibbles first), multiply-add them with the 32 int8 activations into
// eight int32 sums, and fma them, scaled by d·d_a, into acc; m·s_a goes into lane 1 of X7.
#define Q4_1_BLOCK(woff, aoff, doff, acc) \
	VMOVDQU woff+4(SI), X3 \
	VPSRLW $4, X3, X4 \
	VINSERTI128 $1, X4, Y3, Y3 \
	VPAND Y1, Y3, Y3 \
	VPMADDUBSW aoff(DI), Y3, Y3 \
	VPMADDWD Y2, Y3, Y3 \
	VCVTDQ2PS Y3, Y3 \
	VMOVD woff(SI), X8 \
	VCVTPH2PS X8, X8 \
	VMOVQ doff(R8), X9 \
	VMULPS X9, X8, X8 \
	VADDPS X8, X7, X7 \
	VBROADCASTSS X8, Y8 \
	VFMADD231PS Y8, Y3, acc

// func dotQ4_1AVX2(w *byte, a *int8, ds *float32, nb int) float32
//
// One accumulator, blocks in order, and the same final sums as dotQ4_1x4AVX2: a row's result
// does not depend on whether it was computed alone or among four (batch invariance).
TEXT ·dotQ4_1AVX2(SB), NOSPLIT, $0-36
	MOVQ w+0(FP), SI
	MOVQ a+8(FP), DI
	MOVQ ds+16(FP), R8
	MOVQ nb+24(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y11, Y11, Y11
	VXORPS X7, X7, X7
	MOVL $0x0f0f0f0f, AX
	VMOVD AX, X1
	VPBROADCASTD X1, Y1
	MOVL $0x00010001, AX
	VMOVD AX, X2
	VPBROADCASTD X2, Y2

q41pair:
	CMPQ CX, $2
	JL q41tail
	Q4_1_BLOCK(0, 0, 0, Y0)
	Q4_1_BLOCK(20, 32, 8, Y0)
	ADDQ $40, SI
	ADDQ $64, DI
	ADDQ $16, R8
	SUBQ $2, CX
	JMP q41pair

q41tail:
	TESTQ CX, CX
	JZ q41done
	Q4_1_BLOCK(0, 0, 0, Y0)

q41done:
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VMOVSHDUP X7, X7
	VADDSS X7, X0, X0
	VMOVSS X0, ret+32(FP)
	VZEROUPPER
	RET

// Q4_0 block (18 bytes): f16 d, 16 bytes of nibbles; x = d·(q-8), so a block adds
// d·d_a·Σ q·q_a into acc and d·s_a into lane 1 of X7, which is taken 8 times at the end.
#define Q4_0_BLOCK(woff, aoff, doff, acc) \
	VMOVDQU woff+2(SI), X3 \
	VPSRLW $4, X3, X4 \
	VINSERTI128 $1, X4, Y3, Y3 \
	VPAND Y1, Y3, Y3 \
	VPMADDUBSW aoff(DI), Y3, Y3 \
	VPMADDWD Y2, Y3, Y3 \
	VCVTDQ2PS Y3, Y3 \
	MOVWLZX woff(SI), AX \
	VMOVD AX, X8 \
	VCVTPH2PS X8, X8 \
	VBROADCASTSS X8, X8 \
	VMOVQ doff(R8), X9 \
	VMULPS X9, X8, X8 \
	VADDPS X8, X7, X7 \
	VBROADCASTSS X8, Y8 \
	VFMADD231PS Y8, Y3, acc

// func dotQ4_0AVX2(w *byte, a *int8, ds *float32, nb int) float32
TEXT ·dotQ4_0AVX2(SB), NOSPLIT, $0-36
	MOVQ w+0(FP), SI
	MOVQ a+8(FP), DI
	MOVQ ds+16(FP), R8
	MOVQ nb+24(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y11, Y11, Y11
	VXORPS X7, X7, X7
	MOVL $0x0f0f0f0f, AX
	VMOVD AX, X1
	VPBROADCASTD X1, Y1
	MOVL $0x00010001, AX
	VMOVD AX, X2
	VPBROADCASTD X2, Y2

q40pair:
	CMPQ CX, $2
	JL q40tail
	Q4_0_BLOCK(0, 0, 0, Y0)
	Q4_0_BLOCK(18, 32, 8, Y11)
	ADDQ $36, SI
	ADDQ $64, DI
	ADDQ $16, R8
	SUBQ $2, CX
	JMP q40pair

q40tail:
	TESTQ CX, CX
	JZ q40done
	Q4_0_BLOCK(0, 0, 0, Y0)

q40done:
	VADDPS Y11, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VMOVSHDUP X7, X7
	MOVL $0x41000000, AX // 8.0
	VMOVD AX, X9
	VMULSS X9, X7, X7
	VSUBSS X7, X0, X0
	VMOVSS X0, ret+32(FP)
	VZEROUPPER
	RET

// Q8_0 block (34 bytes): f16 d, 32 int8. Signed by signed: |w| times a·sign(w) (vpmaddubsw
// wants one unsigned operand; |-128| = 128 read unsigned, and 2·128·127 fits an int16).
#define Q8_0_BLOCK(woff, aoff, doff, acc) \
	VMOVDQU woff+2(SI), Y3 \
	VMOVDQU aoff(DI), Y5 \
	VPSIGNB Y3, Y3, Y4 \
	VPSIGNB Y3, Y5, Y5 \
	VPMADDUBSW Y5, Y4, Y4 \
	VPMADDWD Y2, Y4, Y4 \
	VCVTDQ2PS Y4, Y4 \
	MOVWLZX woff(SI), AX \
	VMOVD AX, X8 \
	VCVTPH2PS X8, X8 \
	VMULSS doff(R8), X8, X8 \
	VBROADCASTSS X8, Y8 \
	VFMADD231PS Y8, Y4, acc

// func dotQ8_0AVX2(w *byte, a *int8, ds *float32, nb int) float32
//
// One accumulator, blocks in order, as dotQ8_0x4AVX2 (batch invariance).
TEXT ·dotQ8_0AVX2(SB), NOSPLIT, $0-36
	MOVQ w+0(FP), SI
	MOVQ a+8(FP), DI
	MOVQ ds+16(FP), R8
	MOVQ nb+24(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y11, Y11, Y11
	MOVL $0x00010001, AX
	VMOVD AX, X2
	VPBROADCASTD X2, Y2

q80pair:
	CMPQ CX, $2
	JL q80tail
	Q8_0_BLOCK(0, 0, 0, Y0)
	Q8_0_BLOCK(34, 32, 8, Y0)
	ADDQ $68, SI
	ADDQ $64, DI
	ADDQ $16, R8
	SUBQ $2, CX
	JMP q80pair

q80tail:
	TESTQ CX, CX
	JZ q80done
	Q8_0_BLOCK(0, 0, 0, Y0)

q80done:
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VMOVSS X0, ret+32(FP)
	VZEROUPPER
	RET

// func dotF32AVX2(a, b *float32, n int) float32
TEXT ·dotF32AVX2(SB), NOSPLIT, $0-28
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

f32by32:
	CMPQ CX, $32
	JL f32by8
	VMOVUPS (SI), Y4
	VFMADD231PS (DI), Y4, Y0
	VMOVUPS 32(SI), Y5
	VFMADD231PS 32(DI), Y5, Y1
	VMOVUPS 64(SI), Y6
	VFMADD231PS 64(DI), Y6, Y2
	VMOVUPS 96(SI), Y7
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ $128, SI
	ADDQ $128, DI
	SUBQ $32, CX
	JMP f32by32

f32by8:
	CMPQ CX, $8
	JL f32reduce
	VMOVUPS (SI), Y4
	VFMADD231PS (DI), Y4, Y0
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP f32by8

f32reduce:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0

f32tail:
	TESTQ CX, CX
	JZ f32done
	VMOVSS (SI), X4
	VFMADD231SS (DI), X4, X0
	ADDQ $4, SI
	ADDQ $4, DI
	DECQ CX
	JMP f32tail

f32done:
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func axpyF32AVX2(dst, src *float32, a float32, n int)
TEXT ·axpyF32AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	VBROADCASTSS a+16(FP), Y0
	MOVQ n+24(FP), CX

axpyby8:
	CMPQ CX, $8
	JL axpytail
	VMOVUPS (DI), Y1
	VFMADD231PS (SI), Y0, Y1
	VMOVUPS Y1, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP axpyby8

axpytail:
	TESTQ CX, CX
	JZ axpydone
	VMOVSS (DI), X1
	VFMADD231SS (SI), X0, X1
	VMOVSS X1, (DI)
	ADDQ $4, SI
	ADDQ $4, DI
	DECQ CX
	JMP axpytail

axpydone:
	VZEROUPPER
	RET

// func cpuidF16C() bool
TEXT ·cpuidF16C(SB), NOSPLIT, $0-1
	MOVL $1, AX
	XORL CX, CX
	CPUID
	SHRL $29, CX
	ANDL $1, CX
	MOVB CX, ret+0(FP)
	RET

// One activation row r of dotQ4_1x4AVX2: the unpacked weights Y3 against the row's 32 int8
// at aaddr, its (d_a, s_a) at daddr, into acc (the block sums) and msum (lane 1: Σ m·s_a).
#define Q4_1_ROW(aaddr, daddr, acc, msum) \
	VPMADDUBSW aaddr, Y3, Y4 \
	VPMADDWD Y2, Y4, Y4 \
	VCVTDQ2PS Y4, Y4 \
	VMOVQ daddr, X9 \
	VMULPS X9, X8, X9 \
	VADDPS X9, msum, msum \
	VBROADCASTSS X9, Y9 \
	VFMADD231PS Y9, Y4, acc

// The horizontal sum of acc plus lane 1 of msum, stored at dst.
#define HSUM_STORE(acc, accx, msum, dst) \
	VEXTRACTF128 $1, acc, X5 \
	VADDPS X5, accx, accx \
	VHADDPS accx, accx, accx \
	VHADDPS accx, accx, accx \
	VMOVSHDUP msum, msum \
	VADDSS msum, accx, accx \
	VMOVSS accx, dst

// func dotQ4_1x4AVX2(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)
//
// One Q4_1 weight row against four activation rows (a + i·astride bytes, ds + i·dstride
// bytes): each block's nibbles are unpacked once for the four.
TEXT ·dotQ4_1x4AVX2(SB), NOSPLIT, $0-56
	MOVQ w+0(FP), SI
	MOVQ a+8(FP), DI
	MOVQ ds+16(FP), R8
	MOVQ nb+24(FP), CX
	MOVQ astride+32(FP), R10
	MOVQ dstride+40(FP), R12
	LEAQ (R10)(R10*2), R11
	LEAQ (R12)(R12*2), R13
	VXORPS Y0, Y0, Y0
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	VXORPS Y12, Y12, Y12
	VXORPS X13, X13, X13
	VXORPS X14, X14, X14
	VXORPS X15, X15, X15
	VXORPS X6, X6, X6
	MOVL $0x0f0f0f0f, AX
	VMOVD AX, X1
	VPBROADCASTD X1, Y1
	MOVL $0x00010001, AX
	VMOVD AX, X2
	VPBROADCASTD X2, Y2

q41x4loop:
	TESTQ CX, CX
	JZ q41x4done
	VMOVDQU 4(SI), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND Y1, Y3, Y3
	VMOVD (SI), X8
	VCVTPH2PS X8, X8
	Q4_1_ROW((DI), (R8), Y0, X13)
	Q4_1_ROW((DI)(R10*1), (R8)(R12*1), Y10, X14)
	Q4_1_ROW((DI)(R10*2), (R8)(R12*2), Y11, X15)
	Q4_1_ROW((DI)(R11*1), (R8)(R13*1), Y12, X6)
	ADDQ $20, SI
	ADDQ $32, DI
	ADDQ $8, R8
	DECQ CX
	JMP q41x4loop

q41x4done:
	MOVQ out+48(FP), DX
	HSUM_STORE(Y0, X0, X13, (DX))
	HSUM_STORE(Y10, X10, X14, 4(DX))
	HSUM_STORE(Y11, X11, X15, 8(DX))
	HSUM_STORE(Y12, X12, X6, 12(DX))
	VZEROUPPER
	RET

// func attnScoresAVX2(q, k *float32, kstride, n, hd, heads int, scale float32, out *float32, ostride int)
//
// out[h·ostride + i] = scale · q[h·hd:(h+1)·hd]·k[i·kstride:][:hd] for i < n, h < g; hd a
// multiple of 16. Strides are in elements. Each K row is read once for the g heads.
TEXT ·attnScoresAVX2(SB), NOSPLIT, $0-72
	MOVQ q+0(FP), SI
	MOVQ k+8(FP), DI
	MOVQ kstride+16(FP), R8
	SHLQ $2, R8
	MOVQ n+24(FP), CX
	MOVQ hd+32(FP), BX
	SHLQ $2, BX // row bytes
	MOVQ heads+40(FP), R9
	VBROADCASTSS scale+48(FP), Y7
	MOVQ out+56(FP), R10
	MOVQ ostride+64(FP), R11
	SHLQ $2, R11

scpos:
	TESTQ CX, CX
	JZ scdone
	PREFETCHT0 (DI)(R8*2)
	PREFETCHT0 64(DI)(R8*2)
	PREFETCHT0 128(DI)(R8*2)
	PREFETCHT0 192(DI)(R8*2)
	MOVQ SI, R12 // this head's q
	MOVQ R10, R13 // this head's out
	MOVQ R9, DX // heads left

schead:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	XORQ AX, AX // byte offset into the rows

scdim:
	VMOVUPS (R12)(AX*1), Y2
	VFMADD231PS (DI)(AX*1), Y2, Y0
	VMOVUPS 32(R12)(AX*1), Y3
	VFMADD231PS 32(DI)(AX*1), Y3, Y1
	ADDQ $64, AX
	CMPQ AX, BX
	JL scdim
	VADDPS Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VMULSS X7, X0, X0
	VMOVSS X0, (R13)
	ADDQ BX, R12
	ADDQ R11, R13
	DECQ DX
	JNZ schead
	ADDQ R8, DI
	ADDQ $4, R10
	DECQ CX
	JMP scpos

scdone:
	VZEROUPPER
	RET

// func attnAccumAVX2(acc, v *float32, vstride, n, hd, heads int, w *float32, wstride int)
//
// acc[h·hd + d] += w[h·wstride + i] · v[i·vstride + d] for i < n, h < g, d < hd; hd a
// multiple of 32. Each head's accumulator slice of 32 stays in registers over the n rows.
TEXT ·attnAccumAVX2(SB), NOSPLIT, $0-64
	MOVQ acc+0(FP), SI
	MOVQ v+8(FP), DI
	MOVQ vstride+16(FP), R8
	SHLQ $2, R8
	MOVQ n+24(FP), CX
	MOVQ hd+32(FP), BX
	SHLQ $2, BX // row bytes
	MOVQ heads+40(FP), R9
	MOVQ w+48(FP), R10
	MOVQ wstride+56(FP), R11
	SHLQ $2, R11
	TESTQ CX, CX
	JZ acdone

achead:
	XORQ AX, AX // byte offset into the head's accumulator and the rows

acslice:
	VMOVUPS (SI)(AX*1), Y0
	VMOVUPS 32(SI)(AX*1), Y1
	VMOVUPS 64(SI)(AX*1), Y2
	VMOVUPS 96(SI)(AX*1), Y3
	MOVQ DI, R12 // row i
	MOVQ R10, R13 // w[h·wstride + i]
	MOVQ CX, DX

acrow:
	VBROADCASTSS (R13), Y4
	VFMADD231PS (R12)(AX*1), Y4, Y0
	VFMADD231PS 32(R12)(AX*1), Y4, Y1
	VFMADD231PS 64(R12)(AX*1), Y4, Y2
	VFMADD231PS 96(R12)(AX*1), Y4, Y3
	ADDQ R8, R12
	ADDQ $4, R13
	DECQ DX
	JNZ acrow
	VMOVUPS Y0, (SI)(AX*1)
	VMOVUPS Y1, 32(SI)(AX*1)
	VMOVUPS Y2, 64(SI)(AX*1)
	VMOVUPS Y3, 96(SI)(AX*1)
	ADDQ $128, AX
	CMPQ AX, BX
	JL acslice
	ADDQ BX, SI
	ADDQ R11, R10
	DECQ R9
	JNZ achead

acdone:
	VZEROUPPER
	RET

// One activation row of dotQ8_0x4AVX2: |w| (Y4) times the row's 32 int8 signed by w (Y3),
// scaled by d_w (X8) · d_a into acc.
#define Q8_0_ROW(aaddr, daddr, acc) \
	VMOVDQU aaddr, Y5 \
	VPSIGNB Y3, Y5, Y5 \
	VPMADDUBSW Y5, Y4, Y5 \
	VPMADDWD Y2, Y5, Y5 \
	VCVTDQ2PS Y5, Y5 \
	VMULSS daddr, X8, X9 \
	VBROADCASTSS X9, Y9 \
	VFMADD231PS Y9, Y5, acc

// The horizontal sum of acc, stored at dst.
#define HSUM8_STORE(acc, accx, dst) \
	VEXTRACTF128 $1, acc, X5 \
	VADDPS X5, accx, accx \
	VHADDPS accx, accx, accx \
	VHADDPS accx, accx, accx \
	VMOVSS accx, dst

// func dotQ8_0x4AVX2(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)
//
// One Q8_0 weight row against four activation rows, as dotQ4_1x4AVX2.
TEXT ·dotQ8_0x4AVX2(SB), NOSPLIT, $0-56
	MOVQ w+0(FP), SI
	MOVQ a+8(FP), DI
	MOVQ ds+16(FP), R8
	MOVQ nb+24(FP), CX
	MOVQ astride+32(FP), R10
	MOVQ dstride+40(FP), R12
	LEAQ (R10)(R10*2), R11
	LEAQ (R12)(R12*2), R13
	VXORPS Y0, Y0, Y0
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	VXORPS Y12, Y12, Y12
	MOVL $0x00010001, AX
	VMOVD AX, X2
	VPBROADCASTD X2, Y2

q80x4loop:
	TESTQ CX, CX
	JZ q80x4done
	VMOVDQU 2(SI), Y3
	VPSIGNB Y3, Y3, Y4
	MOVWLZX (SI), AX
	VMOVD AX, X8
	VCVTPH2PS X8, X8
	Q8_0_ROW((DI), (R8), Y0)
	Q8_0_ROW((DI)(R10*1), (R8)(R12*1), Y10)
	Q8_0_ROW((DI)(R10*2), (R8)(R12*2), Y11)
	Q8_0_ROW((DI)(R11*1), (R8)(R13*1), Y12)
	ADDQ $34, SI
	ADDQ $32, DI
	ADDQ $8, R8
	DECQ CX
	JMP q80x4loop

q80x4done:
	MOVQ out+48(FP), DX
	HSUM8_STORE(Y0, X0, (DX))
	HSUM8_STORE(Y10, X10, 4(DX))
	HSUM8_STORE(Y11, X11, 8(DX))
	HSUM8_STORE(Y12, X12, 12(DX))
	VZEROUPPER
	RET

DATA q8perm<>+0(SB)/4, $0
DATA q8perm<>+4(SB)/4, $4
DATA q8perm<>+8(SB)/4, $1
DATA q8perm<>+12(SB)/4, $5
DATA q8perm<>+16(SB)/4, $2
DATA q8perm<>+20(SB)/4, $6
DATA q8perm<>+24(SB)/4, $3
DATA q8perm<>+28(SB)/4, $7
GLOBL q8perm<>(SB), RODATA|NOPTR, $32

// func quantizeAVX2(x *float32, qs *int8, ds *float32, nb int)
//
// quantizeRow's arithmetic, bit for bit: per block of 32, d = max|x|/127, id = 1/d (0 when d
// is 0), q = x·id rounded to nearest even (vcvtps2dq under the default rounding mode), s =
// d·Σq.
TEXT ·quantizeAVX2(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ qs+8(FP), DI
	MOVQ ds+16(FP), R8
	MOVQ nb+24(FP), CX
	MOVL $0x7fffffff, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	MOVL $0x42fe0000, AX // 127.0
	VMOVD AX, X14
	MOVL $0x3f800000, AX // 1.0
	VMOVD AX, X13
	VMOVDQU q8perm<>(SB), Y12
	VXORPS X10, X10, X10

qzloop:
	TESTQ CX, CX
	JZ qzdone
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	VANDPS Y15, Y0, Y4
	VANDPS Y15, Y1, Y5
	VANDPS Y15, Y2, Y6
	VANDPS Y15, Y3, Y7
	VMAXPS Y5, Y4, Y4
	VMAXPS Y7, Y6, Y6
	VMAXPS Y6, Y4, Y4
	VEXTRACTF128 $1, Y4, X5
	VMAXPS X5, X4, X4
	VPERMILPS $0x4e, X4, X5
	VMAXPS X5, X4, X4
	VPERMILPS $0xb1, X4, X5
	VMAXPS X5, X4, X4
	VDIVSS X14, X4, X8   // d
	VDIVSS X8, X13, X9   // 1/d
	VCMPSS $4, X10, X8, X11
	VANDPS X11, X9, X9   // 0 where d is 0
	VBROADCASTSS X9, Y9
	VMULPS Y9, Y0, Y0
	VMULPS Y9, Y1, Y1
	VMULPS Y9, Y2, Y2
	VMULPS Y9, Y3, Y3
	VCVTPS2DQ Y0, Y0
	VCVTPS2DQ Y1, Y1
	VCVTPS2DQ Y2, Y2
	VCVTPS2DQ Y3, Y3
	VPADDD Y1, Y0, Y4
	VPADDD Y3, Y2, Y5
	VPADDD Y5, Y4, Y4
	VEXTRACTI128 $1, Y4, X5
	VPADDD X5, X4, X4
	VPHADDD X4, X4, X4
	VPHADDD X4, X4, X4
	VCVTDQ2PS X4, X4
	VMULSS X4, X8, X4    // s = d·Σq
	VPACKSSDW Y1, Y0, Y0
	VPACKSSDW Y3, Y2, Y2
	VPACKSSWB Y2, Y0, Y0
	VPERMD Y0, Y12, Y0
	VMOVDQU Y0, (DI)
	VMOVSS X8, (R8)
	VMOVSS X4, 4(R8)
	ADDQ $128, SI
	ADDQ $32, DI
	ADDQ $8, R8
	DECQ CX
	JMP qzloop

qzdone:
	VZEROUPPER
	RET

// func attnScores16AVX2(q *float32, k *uint16, kstride, n, hd, heads int, scale float32, out *float32, ostride int)
//
// attnScoresAVX2 over float16 K rows (widened with vcvtph2ps); hd a multiple of 16.
TEXT ·attnScores16AVX2(SB), NOSPLIT, $0-72
	MOVQ q+0(FP), SI
	MOVQ k+8(FP), DI
	MOVQ kstride+16(FP), R8
	SHLQ $1, R8
	MOVQ n+24(FP), CX
	MOVQ hd+32(FP), BX
	MOVQ heads+40(FP), R9
	VBROADCASTSS scale+48(FP), Y7
	MOVQ out+56(FP), R10
	MOVQ ostride+64(FP), R11
	SHLQ $2, R11

s16pos:
	TESTQ CX, CX
	JZ s16done
	PREFETCHT0 (DI)(R8*2)
	PREFETCHT0 64(DI)(R8*2)
	MOVQ SI, R12
	MOVQ R10, R13
	MOVQ R9, DX

s16head:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	XORQ AX, AX // element index

s16dim:
	VCVTPH2PS (DI)(AX*2), Y4
	VFMADD231PS (R12)(AX*4), Y4, Y0
	VCVTPH2PS 16(DI)(AX*2), Y5
	VFMADD231PS 32(R12)(AX*4), Y5, Y1
	ADDQ $16, AX
	CMPQ AX, BX
	JL s16dim
	VADDPS Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VMULSS X7, X0, X0
	VMOVSS X0, (R13)
	LEAQ (R12)(BX*4), R12
	ADDQ R11, R13
	DECQ DX
	JNZ s16head
	ADDQ R8, DI
	ADDQ $4, R10
	DECQ CX
	JMP s16pos

s16done:
	VZEROUPPER
	RET

// func attnAccum16AVX2(acc *float32, v *uint16, vstride, n, hd, heads int, w *float32, wstride int)
//
// attnAccumAVX2 over float16 V rows; hd a multiple of 32.
TEXT ·attnAccum16AVX2(SB), NOSPLIT, $0-64
	MOVQ acc+0(FP), SI
	MOVQ v+8(FP), DI
	MOVQ vstride+16(FP), R8
	SHLQ $1, R8
	MOVQ n+24(FP), CX
	MOVQ hd+32(FP), BX
	MOVQ heads+40(FP), R9
	MOVQ w+48(FP), R10
	MOVQ wstride+56(FP), R11
	SHLQ $2, R11
	TESTQ CX, CX
	JZ a16done

a16head:
	XORQ AX, AX // element index

a16slice:
	VMOVUPS (SI)(AX*4), Y0
	VMOVUPS 32(SI)(AX*4), Y1
	VMOVUPS 64(SI)(AX*4), Y2
	VMOVUPS 96(SI)(AX*4), Y3
	MOVQ DI, R12
	MOVQ R10, R13
	MOVQ CX, DX

a16row:
	VBROADCASTSS (R13), Y4
	VCVTPH2PS (R12)(AX*2), Y5
	VFMADD231PS Y5, Y4, Y0
	VCVTPH2PS 16(R12)(AX*2), Y6
	VFMADD231PS Y6, Y4, Y1
	VCVTPH2PS 32(R12)(AX*2), Y5
	VFMADD231PS Y5, Y4, Y2
	VCVTPH2PS 48(R12)(AX*2), Y6
	VFMADD231PS Y6, Y4, Y3
	ADDQ R8, R12
	ADDQ $4, R13
	DECQ DX
	JNZ a16row
	VMOVUPS Y0, (SI)(AX*4)
	VMOVUPS Y1, 32(SI)(AX*4)
	VMOVUPS Y2, 64(SI)(AX*4)
	VMOVUPS Y3, 96(SI)(AX*4)
	ADDQ $32, AX
	CMPQ AX, BX
	JL a16slice
	LEAQ (SI)(BX*4), SI
	ADDQ R11, R10
	DECQ R9
	JNZ a16head

a16done:
	VZEROUPPER
	RET
