#include "textflag.h"
#include "qdot512_amd64.h"

// The AVX-512 VNNI kernels of qdot512_amd64.go for the blocks of 32 (Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0): one weight row against 8, 4 or 1 activation rows in the grouped layout (qgroup.go). A group is 4 blocks: the weight side
// loads their 16-byte halves into one register (Z16: the low 16 elements of each block, Z17:
// the high 16) once, and each activation row adds two VPDPBUSD (64 products each) into a
// register of 16 int32 lanes, 4 a block; the lanes are scaled by d_w·d_a of their block and
// summed into the row's float accumulator. Every row goes through the same instructions (ROW,
// REDUCE) whichever kernel computes it, so a row's result does not depend on the rows beside it
// (batch invariance).
//
// Q4_0, Q4_1 and Q8_0 rows start with super-groups of 16 blocks (groupQ4S and groupQ8S in
// qgroup.go), where a row spends one int32 lane a block instead of four: the weight side loads
// the 16 blocks' quants as 4 groups and transposes their dwords so that a register holds dword
// j of every block (lane p·4+g: block 4g+p; Q4's then split into low and high nibbles), and
// each activation row adds 8 VPDPBUSD into 16 block sums (in two chains) and scales them once
// (SGROW, SGROW8) where 4 groups scale 4 registers. The transposition is the weight side's,
// paid once for the 8 rows (docs/performance.md has the gain). The blocks past the last whole
// super-group take the group path. Super-group registers: the weight dwords in Z16-Z19 and
// Z22-Z25 (Q8_0: Z16-Z19, Z22, Z24-Z26), Z29 m_w and Z30 d_w of the 16 blocks, Z31 the gather
// offsets; the rows' two int32 chains in Z26-Z28 and Z31 (Q8_0: Z23, Z27-Z29).
//
// Every group loop first asks for the weight bytes 512 ahead (PREFETCHT0), every super-group
// loop 2 KiB ahead: at 8 activation rows a weight row is compute-bound only while its bytes
// arrive in time, which the hardware prefetcher alone did not manage for the 8-row step of the
// packaged model (BenchmarkSmolLM2Decode8; docs/performance.md).
//
// Registers: Z0-Z7 the rows' accumulators, Y8-Y15 their m·s sums (Q4_1, Q5_1; d·s for Q4_0,
// Q5_0), Z16/Z17 the group's low and high quants (unsigned; Q8_0's made so by +128), Z18 d_w of
// each lane, Y19 the (d_w, m_w) pairs of the group's blocks, Z20 the nibble mask (Q8_0: the
// 0x80 bytes), Z21 the lane→block index, Z22/Z23 the rows' int32 sums, Z24-Z27 and K1 scratch,
// Z31 the fifth bit (Q5).

// Lane i of Z18 takes element i/4·2 of Y19: each block's d_w over its 4 lanes.
DATA lane2block<>+0(SB)/4, $0
DATA lane2block<>+4(SB)/4, $0
DATA lane2block<>+8(SB)/4, $0
DATA lane2block<>+12(SB)/4, $0
DATA lane2block<>+16(SB)/4, $2
DATA lane2block<>+20(SB)/4, $2
DATA lane2block<>+24(SB)/4, $2
DATA lane2block<>+28(SB)/4, $2
DATA lane2block<>+32(SB)/4, $4
DATA lane2block<>+36(SB)/4, $4
DATA lane2block<>+40(SB)/4, $4
DATA lane2block<>+44(SB)/4, $4
DATA lane2block<>+48(SB)/4, $6
DATA lane2block<>+52(SB)/4, $6
DATA lane2block<>+56(SB)/4, $6
DATA lane2block<>+60(SB)/4, $6
GLOBL lane2block<>(SB), RODATA|NOPTR, $64

// Arguments, constants and zeroed accumulators. Strides in bytes: R10 = astride, R11 = 3·
// astride, R12 = dstride, R13 = 3·dstride; BX and R9 the rows 4-7 of a and ds.
#define PROLOGUE \
	MOVQ w+0(FP), SI \
	MOVQ a+8(FP), DI \
	MOVQ ds+16(FP), R8 \
	MOVQ nb+24(FP), CX \
	MOVQ astride+32(FP), R10 \
	MOVQ dstride+40(FP), R12 \
	MOVQ out+48(FP), DX \
	LEAQ (R10)(R10*2), R11 \
	LEAQ (R12)(R12*2), R13 \
	LEAQ (DI)(R10*4), BX \
	LEAQ (R8)(R12*4), R9 \
	MOVL $0x0f0f0f0f, AX \
	VPBROADCASTD AX, Z20 \
	VMOVDQU32 lane2block<>(SB), Z21 \
	ZERO16

// The nibbles of the 4 blocks' 16 quant bytes in Z16 into Z16 (low: elements 0-15 of each
// block) and Z17 (high: 16-31); the (d, m) pairs in X24 (f16) into Y19 and d over the lanes into
// Z18.
#define Q4_SPLIT \
	VPSRLW $4, Z16, Z17 \
	VPANDD Z20, Z16, Z16 \
	VPANDD Z20, Z17, Z17 \
	VCVTPH2PS X24, Y19 \
	VPERMPS Z19, Z21, Z18

// A whole Q4_1 group (4 blocks of 20 bytes: f16 d, f16 m, 16 bytes of nibbles).
#define Q4_1_GROUP \
	VMOVD (SI), X24 \
	VPINSRD $1, 20(SI), X24, X24 \
	VPINSRD $2, 40(SI), X24, X24 \
	VPINSRD $3, 60(SI), X24, X24 \
	VMOVDQU32 4(SI), X16 \
	VINSERTI32X4 $1, 24(SI), Z16, Z16 \
	VINSERTI32X4 $2, 44(SI), Z16, Z16 \
	VINSERTI32X4 $3, 64(SI), Z16, Z16 \
	Q4_SPLIT

// Lane p·4+g of a super-group register holds block 4g+p: the byte offsets of the Q4_1 blocks'
// (d, m) pairs in that order.
DATA sgq41<>+0(SB)/4, $0
DATA sgq41<>+4(SB)/4, $80
DATA sgq41<>+8(SB)/4, $160
DATA sgq41<>+12(SB)/4, $240
DATA sgq41<>+16(SB)/4, $20
DATA sgq41<>+20(SB)/4, $100
DATA sgq41<>+24(SB)/4, $180
DATA sgq41<>+28(SB)/4, $260
DATA sgq41<>+32(SB)/4, $40
DATA sgq41<>+36(SB)/4, $120
DATA sgq41<>+40(SB)/4, $200
DATA sgq41<>+44(SB)/4, $280
DATA sgq41<>+48(SB)/4, $60
DATA sgq41<>+52(SB)/4, $140
DATA sgq41<>+56(SB)/4, $220
DATA sgq41<>+60(SB)/4, $300
GLOBL sgq41<>(SB), RODATA|NOPTR, $64

// Lane p·4+g of a super-group register holds block 4g+p: the byte offsets of the Q4_0 blocks' d
// in that order.
DATA sgq40<>+0(SB)/4, $0
DATA sgq40<>+4(SB)/4, $72
DATA sgq40<>+8(SB)/4, $144
DATA sgq40<>+12(SB)/4, $216
DATA sgq40<>+16(SB)/4, $18
DATA sgq40<>+20(SB)/4, $90
DATA sgq40<>+24(SB)/4, $162
DATA sgq40<>+28(SB)/4, $234
DATA sgq40<>+32(SB)/4, $36
DATA sgq40<>+36(SB)/4, $108
DATA sgq40<>+40(SB)/4, $180
DATA sgq40<>+44(SB)/4, $252
DATA sgq40<>+48(SB)/4, $54
DATA sgq40<>+52(SB)/4, $126
DATA sgq40<>+56(SB)/4, $198
DATA sgq40<>+60(SB)/4, $270
GLOBL sgq40<>(SB), RODATA|NOPTR, $64

// -8 over the lanes: Q4_0's x = d·(q - 8) is Q4_1's form with m = -8·d.
DATA minus8<>+0(SB)/4, $-8.0
DATA minus8<>+4(SB)/4, $-8.0
DATA minus8<>+8(SB)/4, $-8.0
DATA minus8<>+12(SB)/4, $-8.0
DATA minus8<>+16(SB)/4, $-8.0
DATA minus8<>+20(SB)/4, $-8.0
DATA minus8<>+24(SB)/4, $-8.0
DATA minus8<>+28(SB)/4, $-8.0
DATA minus8<>+32(SB)/4, $-8.0
DATA minus8<>+36(SB)/4, $-8.0
DATA minus8<>+40(SB)/4, $-8.0
DATA minus8<>+44(SB)/4, $-8.0
DATA minus8<>+48(SB)/4, $-8.0
DATA minus8<>+52(SB)/4, $-8.0
DATA minus8<>+56(SB)/4, $-8.0
DATA minus8<>+60(SB)/4, $-8.0
GLOBL minus8<>(SB), RODATA|NOPTR, $64

// A Q4_1 super-group (16 blocks, 320 bytes): d_w of each block in Z30 and m_w in Z29 (lane
// p·4+g: block 4g+p, gathered), the quants' dword j of every block in Z16+j (low nibbles,
// elements 4j..4j+3) and Z22+j (high: 16+4j..), from the 4 groups' registers by a 4×4 dword
// transposition within each 128-bit lane (SG_Q4_SPLIT).
#define SG_Q4_1 \
	VMOVDQU32 sgq41<>(SB), Z31 \
	KXNORW K1, K1, K1 \
	VPGATHERDD (SI)(Z31*1), K1, Z26 \
	VPMOVDW Z26, Y30 \
	VCVTPH2PS Y30, Z30 \
	VPSRLD $16, Z26, Z26 \
	VPMOVDW Z26, Y29 \
	VCVTPH2PS Y29, Z29 \
	VMOVDQU32 4(SI), X16 \
	VINSERTI32X4 $1, 24(SI), Z16, Z16 \
	VINSERTI32X4 $2, 44(SI), Z16, Z16 \
	VINSERTI32X4 $3, 64(SI), Z16, Z16 \
	VMOVDQU32 84(SI), X17 \
	VINSERTI32X4 $1, 104(SI), Z17, Z17 \
	VINSERTI32X4 $2, 124(SI), Z17, Z17 \
	VINSERTI32X4 $3, 144(SI), Z17, Z17 \
	VMOVDQU32 164(SI), X18 \
	VINSERTI32X4 $1, 184(SI), Z18, Z18 \
	VINSERTI32X4 $2, 204(SI), Z18, Z18 \
	VINSERTI32X4 $3, 224(SI), Z18, Z18 \
	VMOVDQU32 244(SI), X19 \
	VINSERTI32X4 $1, 264(SI), Z19, Z19 \
	VINSERTI32X4 $2, 284(SI), Z19, Z19 \
	VINSERTI32X4 $3, 304(SI), Z19, Z19 \
	SG_Q4_SPLIT

// A Q4_0 super-group (16 blocks, 288 bytes): as Q4_1's, with m_w = -8·d_w.
#define SG_Q4_0 \
	VMOVDQU32 sgq40<>(SB), Z31 \
	KXNORW K1, K1, K1 \
	VPGATHERDD (SI)(Z31*1), K1, Z26 \
	VPMOVDW Z26, Y30 \
	VCVTPH2PS Y30, Z30 \
	VMULPS minus8<>(SB), Z30, Z29 \
	VMOVDQU32 2(SI), X16 \
	VINSERTI32X4 $1, 20(SI), Z16, Z16 \
	VINSERTI32X4 $2, 38(SI), Z16, Z16 \
	VINSERTI32X4 $3, 56(SI), Z16, Z16 \
	VMOVDQU32 74(SI), X17 \
	VINSERTI32X4 $1, 92(SI), Z17, Z17 \
	VINSERTI32X4 $2, 110(SI), Z17, Z17 \
	VINSERTI32X4 $3, 128(SI), Z17, Z17 \
	VMOVDQU32 146(SI), X18 \
	VINSERTI32X4 $1, 164(SI), Z18, Z18 \
	VINSERTI32X4 $2, 182(SI), Z18, Z18 \
	VINSERTI32X4 $3, 200(SI), Z18, Z18 \
	VMOVDQU32 218(SI), X19 \
	VINSERTI32X4 $1, 236(SI), Z19, Z19 \
	VINSERTI32X4 $2, 254(SI), Z19, Z19 \
	VINSERTI32X4 $3, 272(SI), Z19, Z19 \
	SG_Q4_SPLIT

// The 4 groups' quant registers Z16-Z19 (128-bit lane p of Z16+g: block 4g+p) to dword j of
// every block in Z16+j, low nibbles, and Z22+j, high nibbles.
#define SG_Q4_SPLIT \
	VPUNPCKLDQ Z17, Z16, Z26 \
	VPUNPCKHDQ Z17, Z16, Z27 \
	VPUNPCKLDQ Z19, Z18, Z28 \
	VPUNPCKHDQ Z19, Z18, Z22 \
	VPUNPCKLQDQ Z28, Z26, Z16 \
	VPUNPCKHQDQ Z28, Z26, Z17 \
	VPUNPCKLQDQ Z22, Z27, Z18 \
	VPUNPCKHQDQ Z22, Z27, Z19 \
	VPSRLW $4, Z16, Z22 \
	VPSRLW $4, Z17, Z23 \
	VPSRLW $4, Z18, Z24 \
	VPSRLW $4, Z19, Z25 \
	VPANDD Z20, Z16, Z16 \
	VPANDD Z20, Z17, Z17 \
	VPANDD Z20, Z18, Z18 \
	VPANDD Z20, Z19, Z19 \
	VPANDD Z20, Z22, Z22 \
	VPANDD Z20, Z23, Z23 \
	VPANDD Z20, Z24, Z24 \
	VPANDD Z20, Z25, Z25

// One activation row of a super-group: its quants at q (512 bytes: low then high dwords j of
// every block for j = 0..3, in the weight registers' lane order), d_a of each block at d and
// s_a at d+64. The low and high halves sum in two chains (t, u) and the block sums are scaled
// by d_a·d_w into the row's accumulator, which takes the m_w·s_a terms too.
#define SGROW(q, d, acc, t, u) \
	VPXORD t, t, t \
	VPXORD u, u, u \
	VPDPBUSD 0 q, Z16, t \
	VPDPBUSD 64 q, Z22, u \
	VPDPBUSD 128 q, Z17, t \
	VPDPBUSD 192 q, Z23, u \
	VPDPBUSD 256 q, Z18, t \
	VPDPBUSD 320 q, Z24, u \
	VPDPBUSD 384 q, Z19, t \
	VPDPBUSD 448 q, Z25, u \
	VPADDD u, t, t \
	VCVTDQ2PS t, t \
	VMULPS 0 d, t, t \
	VFMADD231PS Z30, t, acc \
	VFMADD231PS 64 d, Z29, acc

#define SGROWS1 \
	SGROW((DI), (R8), Z0, Z27, Z26)

#define SGROWS4 \
	SGROWS1 \
	SGROW((DI)(R10*1), (R8)(R12*1), Z1, Z28, Z31) \
	SGROW((DI)(R10*2), (R8)(R12*2), Z2, Z27, Z26) \
	SGROW((DI)(R11*1), (R8)(R13*1), Z3, Z28, Z31)

#define SGROWS8 \
	SGROWS4 \
	SGROW((BX), (R9), Z4, Z27, Z26) \
	SGROW((BX)(R10*1), (R9)(R12*1), Z5, Z28, Z31) \
	SGROW((BX)(R10*2), (R9)(R12*2), Z6, Z27, Z26) \
	SGROW((BX)(R11*1), (R9)(R13*1), Z7, Z28, Z31)

// The weight bytes 2 KiB ahead, a super-group's worth: the 8-row super-group loop consumes
// weight bytes faster than the group loop, and 512 bytes ahead left the 8-sequence step of the
// packaged model waiting on memory (docs/performance.md).
#define SG_PREFETCH \
	PREFETCHT0 2048(SI) \
	PREFETCHT0 2112(SI) \
	PREFETCHT0 2176(SI) \
	PREFETCHT0 2240(SI) \
	PREFETCHT0 2304(SI)

// The next super-group: 16 weight blocks of bs bytes, 512 activation bytes, 32 scales.
#define SGNEXT(bs) \
	ADDQ $(16*bs), SI \
	ADDQ $512, DI \
	ADDQ $512, BX \
	ADDQ $128, R8 \
	ADDQ $128, R9 \
	SUBQ $16, CX

// Q4_0's (d, d) pairs from the dwords (f16 d, two quant bytes) in X24: its x = d·(q - 8) is
// Q4_1's form with m = d, the -8 applied to the m·s sum at the end.
#define Q4_0_PAIRS \
	VPSLLD $16, X24, X25 \
	VPSRLD $16, X25, X24 \
	VPORD X25, X24, X24

// A whole Q4_0 group (4 blocks of 18 bytes: f16 d, 16 bytes of nibbles).
#define Q4_0_GROUP \
	VMOVD (SI), X24 \
	VPINSRD $1, 18(SI), X24, X24 \
	VPINSRD $2, 36(SI), X24, X24 \
	VPINSRD $3, 54(SI), X24, X24 \
	Q4_0_PAIRS \
	VMOVDQU32 2(SI), X16 \
	VINSERTI32X4 $1, 20(SI), Z16, Z16 \
	VINSERTI32X4 $2, 38(SI), Z16, Z16 \
	VINSERTI32X4 $3, 56(SI), Z16, Z16 \
	Q4_SPLIT

// The next group: 4 weight blocks of bs bytes, 128 activation bytes, 24 scales.
#define NEXT(bs) \
	ADDQ $(4*bs), SI \
	ADDQ $128, DI \
	ADDQ $128, BX \
	ADDQ $96, R8 \
	ADDQ $96, R9 \
	SUBQ $4, CX

// The tail group of 1-3 blocks (CX): the missing blocks' quants and scales stay zero (the
// activations are zero there too).
#define Q4_1_TAIL(split) \
	VMOVD (SI), X24 \
	VMOVDQU32 4(SI), X16 \
	CMPQ CX, $2 \
	JLT split \
	VPINSRD $1, 20(SI), X24, X24 \
	VINSERTI32X4 $1, 24(SI), Z16, Z16 \
	CMPQ CX, $3 \
	JLT split \
	VPINSRD $2, 40(SI), X24, X24 \
	VINSERTI32X4 $2, 44(SI), Z16, Z16

#define Q4_0_TAIL(split) \
	VMOVD (SI), X24 \
	VMOVDQU32 2(SI), X16 \
	CMPQ CX, $2 \
	JLT split \
	VPINSRD $1, 18(SI), X24, X24 \
	VINSERTI32X4 $1, 20(SI), Z16, Z16 \
	CMPQ CX, $3 \
	JLT split \
	VPINSRD $2, 36(SI), X24, X24 \
	VINSERTI32X4 $2, 38(SI), Z16, Z16

// A whole Q8_0 group (4 blocks of 34 bytes: f16 d, 32 int8): the quants made unsigned (+128,
// the activation side's correction puts -128·Σq_a back) into Z16 (low 16 of each block) and
// Z17 (high 16); d with zero m into Y19, and over the lanes into Z18.
#define Q8_0_GROUP \
	VMOVD (SI), X24 \
	VPINSRD $1, 34(SI), X24, X24 \
	VPINSRD $2, 68(SI), X24, X24 \
	VPINSRD $3, 102(SI), X24, X24 \
	VMOVDQU32 2(SI), X16 \
	VINSERTI32X4 $1, 36(SI), Z16, Z16 \
	VINSERTI32X4 $2, 70(SI), Z16, Z16 \
	VINSERTI32X4 $3, 104(SI), Z16, Z16 \
	VMOVDQU32 18(SI), X17 \
	VINSERTI32X4 $1, 52(SI), Z17, Z17 \
	VINSERTI32X4 $2, 86(SI), Z17, Z17 \
	VINSERTI32X4 $3, 120(SI), Z17, Z17 \
	Q8_SPLIT

#define Q8_SPLIT \
	VPSLLD $16, X24, X24 \
	VPSRLD $16, X24, X24 \
	VPXORD Z20, Z16, Z16 \
	VPXORD Z20, Z17, Z17 \
	VCVTPH2PS X24, Y19 \
	VPERMPS Z19, Z21, Z18

#define Q8_0_TAIL(split) \
	VMOVD (SI), X24 \
	VMOVDQU32 2(SI), X16 \
	VMOVDQU32 18(SI), X17 \
	CMPQ CX, $2 \
	JLT split \
	VPINSRD $1, 34(SI), X24, X24 \
	VINSERTI32X4 $1, 36(SI), Z16, Z16 \
	VINSERTI32X4 $1, 52(SI), Z17, Z17 \
	CMPQ CX, $3 \
	JLT split \
	VPINSRD $2, 68(SI), X24, X24 \
	VINSERTI32X4 $2, 70(SI), Z16, Z16 \
	VINSERTI32X4 $2, 86(SI), Z17, Z17

// One activation row of a Q8_0 group: the int32 sums start at the row's correction (at
// ds+64: -128 times the sum of each lane's 8 activations), so they end exact.
// Lane p·4+g of a super-group register holds block 4g+p: the byte offsets of the Q8_0 blocks'
// d (in the low half of the dword) in that order.
DATA sgq80<>+0(SB)/4, $0
DATA sgq80<>+4(SB)/4, $136
DATA sgq80<>+8(SB)/4, $272
DATA sgq80<>+12(SB)/4, $408
DATA sgq80<>+16(SB)/4, $34
DATA sgq80<>+20(SB)/4, $170
DATA sgq80<>+24(SB)/4, $306
DATA sgq80<>+28(SB)/4, $442
DATA sgq80<>+32(SB)/4, $68
DATA sgq80<>+36(SB)/4, $204
DATA sgq80<>+40(SB)/4, $340
DATA sgq80<>+44(SB)/4, $476
DATA sgq80<>+48(SB)/4, $102
DATA sgq80<>+52(SB)/4, $238
DATA sgq80<>+56(SB)/4, $374
DATA sgq80<>+60(SB)/4, $510
GLOBL sgq80<>(SB), RODATA|NOPTR, $64

// A Q8_0 super-group (16 blocks, 544 bytes): d_w of each block in Z30 (lane p·4+g: block
// 4g+p), the quants' dword j of every block, made unsigned (+128), in Z18, Z19, Z26, Z16 (j =
// 0..3, elements 4j..4j+3) and Z24, Z25, Z17, Z22 (j = 4..7), by the 4×4 dword transposition
// of the low halves' and of the high halves' group registers.
#define SG_Q8_0 \
	VMOVDQU32 sgq80<>(SB), Z31 \
	KXNORW K1, K1, K1 \
	VPGATHERDD (SI)(Z31*1), K1, Z26 \
	VPMOVDW Z26, Y30 \
	VCVTPH2PS Y30, Z30 \
	VMOVDQU32 2(SI), X16 \
	VINSERTI32X4 $1, 36(SI), Z16, Z16 \
	VINSERTI32X4 $2, 70(SI), Z16, Z16 \
	VINSERTI32X4 $3, 104(SI), Z16, Z16 \
	VMOVDQU32 138(SI), X17 \
	VINSERTI32X4 $1, 172(SI), Z17, Z17 \
	VINSERTI32X4 $2, 206(SI), Z17, Z17 \
	VINSERTI32X4 $3, 240(SI), Z17, Z17 \
	VMOVDQU32 274(SI), X18 \
	VINSERTI32X4 $1, 308(SI), Z18, Z18 \
	VINSERTI32X4 $2, 342(SI), Z18, Z18 \
	VINSERTI32X4 $3, 376(SI), Z18, Z18 \
	VMOVDQU32 410(SI), X19 \
	VINSERTI32X4 $1, 444(SI), Z19, Z19 \
	VINSERTI32X4 $2, 478(SI), Z19, Z19 \
	VINSERTI32X4 $3, 512(SI), Z19, Z19 \
	VMOVDQU32 18(SI), X22 \
	VINSERTI32X4 $1, 52(SI), Z22, Z22 \
	VINSERTI32X4 $2, 86(SI), Z22, Z22 \
	VINSERTI32X4 $3, 120(SI), Z22, Z22 \
	VMOVDQU32 154(SI), X23 \
	VINSERTI32X4 $1, 188(SI), Z23, Z23 \
	VINSERTI32X4 $2, 222(SI), Z23, Z23 \
	VINSERTI32X4 $3, 256(SI), Z23, Z23 \
	VMOVDQU32 290(SI), X24 \
	VINSERTI32X4 $1, 324(SI), Z24, Z24 \
	VINSERTI32X4 $2, 358(SI), Z24, Z24 \
	VINSERTI32X4 $3, 392(SI), Z24, Z24 \
	VMOVDQU32 426(SI), X25 \
	VINSERTI32X4 $1, 460(SI), Z25, Z25 \
	VINSERTI32X4 $2, 494(SI), Z25, Z25 \
	VINSERTI32X4 $3, 528(SI), Z25, Z25 \
	SGT4(Z16, Z17, Z18, Z19, Z26, Z27) \
	SGT4(Z22, Z23, Z24, Z25, Z17, Z27) \
	VPXORD Z20, Z18, Z18 \
	VPXORD Z20, Z19, Z19 \
	VPXORD Z20, Z26, Z26 \
	VPXORD Z20, Z16, Z16 \
	VPXORD Z20, Z24, Z24 \
	VPXORD Z20, Z25, Z25 \
	VPXORD Z20, Z17, Z17 \
	VPXORD Z20, Z22, Z22

// The 4×4 dword transposition within each 128-bit lane of a0..a3 with the temporaries x and y:
// dword j of every lane's 4 inputs ends in a2, a3, x, a0 (j = 0..3); a1 and y are left free.
#define SGT4(a0, a1, a2, a3, x, y) \
	VPUNPCKLDQ a1, a0, x \
	VPUNPCKHDQ a1, a0, y \
	VPUNPCKLDQ a3, a2, a0 \
	VPUNPCKHDQ a3, a2, a1 \
	VPUNPCKLQDQ a0, x, a2 \
	VPUNPCKHQDQ a0, x, a3 \
	VPUNPCKLQDQ a1, y, x \
	VPUNPCKHQDQ a1, y, a0

// One activation row of a Q8_0 super-group: quants at q as in SGROW, d_a of each block at d and
// its -128·Σq_a at d+64 (int32), where the block sum starts.
#define SGROW8(q, d, acc, t, u) \
	VMOVDQU32 64 d, t \
	VPXORD u, u, u \
	VPDPBUSD 0 q, Z18, t \
	VPDPBUSD 64 q, Z24, u \
	VPDPBUSD 128 q, Z19, t \
	VPDPBUSD 192 q, Z25, u \
	VPDPBUSD 256 q, Z26, t \
	VPDPBUSD 320 q, Z17, u \
	VPDPBUSD 384 q, Z16, t \
	VPDPBUSD 448 q, Z22, u \
	VPADDD u, t, t \
	VCVTDQ2PS t, t \
	VMULPS 0 d, t, t \
	VFMADD231PS Z30, t, acc

#define SGROWS1_8 \
	SGROW8((DI), (R8), Z0, Z23, Z27)

#define SGROWS4_8 \
	SGROWS1_8 \
	SGROW8((DI)(R10*1), (R8)(R12*1), Z1, Z28, Z29) \
	SGROW8((DI)(R10*2), (R8)(R12*2), Z2, Z23, Z27) \
	SGROW8((DI)(R11*1), (R8)(R13*1), Z3, Z28, Z29)

#define SGROWS8_8 \
	SGROWS4_8 \
	SGROW8((BX), (R9), Z4, Z23, Z27) \
	SGROW8((BX)(R10*1), (R9)(R12*1), Z5, Z28, Z29) \
	SGROW8((BX)(R10*2), (R9)(R12*2), Z6, Z23, Z27) \
	SGROW8((BX)(R11*1), (R9)(R13*1), Z7, Z28, Z29)

// The weight bytes 2 KiB ahead, a Q8_0 super-group's worth (SG_PREFETCH).
#define SG_PREFETCH8 \
	PREFETCHT0 2048(SI) \
	PREFETCHT0 2112(SI) \
	PREFETCHT0 2176(SI) \
	PREFETCHT0 2240(SI) \
	PREFETCHT0 2304(SI) \
	PREFETCHT0 2368(SI) \
	PREFETCHT0 2432(SI) \
	PREFETCHT0 2496(SI) \
	PREFETCHT0 2560(SI)

#define ROW8(lo, hi, ds, corr, acc, t) \
	VMOVDQU32 corr, t \
	VPDPBUSD lo, Z16, t \
	VPDPBUSD hi, Z17, t \
	VCVTDQ2PS t, t \
	VMULPS ds, t, t \
	VFMADD231PS Z18, t, acc

#define ROWS1_8 \
	ROW8((DI), 64(DI), (R8), 64(R8), Z0, Z22)

#define ROWS4_8 \
	ROW8((DI), 64(DI), (R8), 64(R8), Z0, Z22) \
	ROW8((DI)(R10*1), 64(DI)(R10*1), (R8)(R12*1), 64(R8)(R12*1), Z1, Z23) \
	ROW8((DI)(R10*2), 64(DI)(R10*2), (R8)(R12*2), 64(R8)(R12*2), Z2, Z22) \
	ROW8((DI)(R11*1), 64(DI)(R11*1), (R8)(R13*1), 64(R8)(R13*1), Z3, Z23)

#define ROWS8_8 \
	ROWS4_8 \
	ROW8((BX), 64(BX), (R9), 64(R9), Z4, Z22) \
	ROW8((BX)(R10*1), 64(BX)(R10*1), (R9)(R12*1), 64(R9)(R12*1), Z5, Z23) \
	ROW8((BX)(R10*2), 64(BX)(R10*2), (R9)(R12*2), 64(R9)(R12*2), Z6, Z22) \
	ROW8((BX)(R11*1), 64(BX)(R11*1), (R9)(R13*1), 64(R9)(R13*1), Z7, Z23)

// The next Q8_0 group: 4 weight blocks, 128 activation bytes, 32 scales.
#define NEXT8 \
	ADDQ $136, SI \
	ADDQ $128, DI \
	ADDQ $128, BX \
	ADDQ $128, R8 \
	ADDQ $128, R9 \
	SUBQ $4, CX

// Q5_0 and Q5_1: Q4_0's and Q4_1's groups with fifth bits. A block's 32 bits qh (bit j for
// element j) go, the low 16 of the group's 4 blocks and then the high 16, into a 64-bit mask
// of the bytes of Z16 and of Z17, whose bit 4 they set (Z31 = 0x10 bytes).
#define Q5_BITS \
	VPMOVDW X26, X27 \
	VMOVQ X27, AX \
	KMOVQ AX, K1 \
	VPMOVM2B K1, Z27 \
	VPANDD Z31, Z27, Z27 \
	VPORD Z27, Z16, Z16 \
	VPSRLD $16, X26, X26 \
	VPMOVDW X26, X27 \
	VMOVQ X27, AX \
	KMOVQ AX, K1 \
	VPMOVM2B K1, Z27 \
	VPANDD Z31, Z27, Z27 \
	VPORD Z27, Z17, Z17

// A whole Q5_0 group (4 blocks of 22 bytes: f16 d, 32 bits qh, 16 bytes of nibbles).
#define Q5_0_GROUP \
	VMOVD (SI), X24 \
	VPINSRD $1, 22(SI), X24, X24 \
	VPINSRD $2, 44(SI), X24, X24 \
	VPINSRD $3, 66(SI), X24, X24 \
	Q4_0_PAIRS \
	VMOVD 2(SI), X26 \
	VPINSRD $1, 24(SI), X26, X26 \
	VPINSRD $2, 46(SI), X26, X26 \
	VPINSRD $3, 68(SI), X26, X26 \
	VMOVDQU32 6(SI), X16 \
	VINSERTI32X4 $1, 28(SI), Z16, Z16 \
	VINSERTI32X4 $2, 50(SI), Z16, Z16 \
	VINSERTI32X4 $3, 72(SI), Z16, Z16 \
	Q4_SPLIT \
	Q5_BITS

#define Q5_0_TAIL(split) \
	VMOVD (SI), X24 \
	VMOVD 2(SI), X26 \
	VMOVDQU32 6(SI), X16 \
	CMPQ CX, $2 \
	JLT split \
	VPINSRD $1, 22(SI), X24, X24 \
	VPINSRD $1, 24(SI), X26, X26 \
	VINSERTI32X4 $1, 28(SI), Z16, Z16 \
	CMPQ CX, $3 \
	JLT split \
	VPINSRD $2, 44(SI), X24, X24 \
	VPINSRD $2, 46(SI), X26, X26 \
	VINSERTI32X4 $2, 50(SI), Z16, Z16

// A whole Q5_1 group (4 blocks of 24 bytes: f16 d, f16 m, 32 bits qh, 16 bytes of nibbles).
#define Q5_1_GROUP \
	VMOVD (SI), X24 \
	VPINSRD $1, 24(SI), X24, X24 \
	VPINSRD $2, 48(SI), X24, X24 \
	VPINSRD $3, 72(SI), X24, X24 \
	VMOVD 4(SI), X26 \
	VPINSRD $1, 28(SI), X26, X26 \
	VPINSRD $2, 52(SI), X26, X26 \
	VPINSRD $3, 76(SI), X26, X26 \
	VMOVDQU32 8(SI), X16 \
	VINSERTI32X4 $1, 32(SI), Z16, Z16 \
	VINSERTI32X4 $2, 56(SI), Z16, Z16 \
	VINSERTI32X4 $3, 80(SI), Z16, Z16 \
	Q4_SPLIT \
	Q5_BITS

#define Q5_1_TAIL(split) \
	VMOVD (SI), X24 \
	VMOVD 4(SI), X26 \
	VMOVDQU32 8(SI), X16 \
	CMPQ CX, $2 \
	JLT split \
	VPINSRD $1, 24(SI), X24, X24 \
	VPINSRD $1, 28(SI), X26, X26 \
	VINSERTI32X4 $1, 32(SI), Z16, Z16 \
	CMPQ CX, $3 \
	JLT split \
	VPINSRD $2, 48(SI), X24, X24 \
	VPINSRD $2, 52(SI), X26, X26 \
	VINSERTI32X4 $2, 56(SI), Z16, Z16

#define FOLDS(z, y, ms) \
	FOLD(z, y) \
	VFMADD231PS Y26, ms, y

// REDUCE_S*: Y26 = -scale (8 for Q4_0, 16 for Q5_0) over the lanes, from the float32 bits in AX.
#define REDUCE_S8 \
	VPBROADCASTD AX, Y26 \
	FOLDS(Z0, Y0, Y8) \
	FOLDS(Z1, Y1, Y9) \
	FOLDS(Z2, Y2, Y10) \
	FOLDS(Z3, Y3, Y11) \
	FOLDS(Z4, Y4, Y12) \
	FOLDS(Z5, Y5, Y13) \
	FOLDS(Z6, Y6, Y14) \
	FOLDS(Z7, Y7, Y15) \
	TREE8

#define REDUCE_S4 \
	VPBROADCASTD AX, Y26 \
	FOLDS(Z0, Y0, Y8) \
	FOLDS(Z1, Y1, Y9) \
	FOLDS(Z2, Y2, Y10) \
	FOLDS(Z3, Y3, Y11) \
	TREE4

#define REDUCE_S1 \
	VPBROADCASTD AX, Y26 \
	FOLDS(Z0, Y0, Y8) \
	TREE1

#define OUT4_41 \
	REDUCE_M4 \
	STORE4

#define OUT1_41 \
	REDUCE_M1 \
	STORE1

#define OUT4_40 \
	MOVL $0xc1000000, AX \
	REDUCE_S4 \
	STORE4

#define OUT1_40 \
	MOVL $0xc1000000, AX \
	REDUCE_S1 \
	STORE1

#define OUT4_50 \
	MOVL $0xc1800000, AX \
	REDUCE_S4 \
	STORE4

#define OUT1_50 \
	MOVL $0xc1800000, AX \
	REDUCE_S1 \
	STORE1

#define OUT4_80 \
	REDUCE4 \
	STORE4

#define OUT1_80 \
	REDUCE1 \
	STORE1


// func dotQ4_1x4AVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)
TEXT ·dotQ4_1x4AVX512(SB), NOSPLIT, $0-56
	PROLOGUE
q41x4sg:
	CMPQ CX, $16
	JLT q41x4loop
	SG_PREFETCH
	SG_Q4_1
	SGROWS4
	SGNEXT(20)
	JMP q41x4sg
q41x4loop:
	CMPQ CX, $4
	JLT q41x4tail
	PREFETCHT0 512(SI)
	Q4_1_GROUP
	ROWS4
	NEXT(20)
	JMP q41x4loop
q41x4tail:
	TESTQ CX, CX
	JZ q41x4done
	Q4_1_TAIL(q41x4split)
q41x4split:
	Q4_SPLIT
	ROWS4
q41x4done:
	OUT4_41
	VZEROUPPER
	RET

// func dotQ4_1x1AVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)
TEXT ·dotQ4_1x1AVX512(SB), NOSPLIT, $0-56
	PROLOGUE
q41x1sg:
	CMPQ CX, $16
	JLT q41x1loop
	SG_PREFETCH
	SG_Q4_1
	SGROWS1
	SGNEXT(20)
	JMP q41x1sg
q41x1loop:
	CMPQ CX, $4
	JLT q41x1tail
	PREFETCHT0 512(SI)
	Q4_1_GROUP
	ROWS1
	NEXT(20)
	JMP q41x1loop
q41x1tail:
	TESTQ CX, CX
	JZ q41x1done
	Q4_1_TAIL(q41x1split)
q41x1split:
	Q4_SPLIT
	ROWS1
q41x1done:
	OUT1_41
	VZEROUPPER
	RET


// func dotQ4_0x4AVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)
TEXT ·dotQ4_0x4AVX512(SB), NOSPLIT, $0-56
	PROLOGUE
q40x4sg:
	CMPQ CX, $16
	JLT q40x4loop
	SG_PREFETCH
	SG_Q4_0
	SGROWS4
	SGNEXT(18)
	JMP q40x4sg
q40x4loop:
	CMPQ CX, $4
	JLT q40x4tail
	PREFETCHT0 512(SI)
	Q4_0_GROUP
	ROWS4
	NEXT(18)
	JMP q40x4loop
q40x4tail:
	TESTQ CX, CX
	JZ q40x4done
	Q4_0_TAIL(q40x4split)
q40x4split:
	Q4_0_PAIRS
	Q4_SPLIT
	ROWS4
q40x4done:
	OUT4_40
	VZEROUPPER
	RET

// func dotQ4_0x1AVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)
TEXT ·dotQ4_0x1AVX512(SB), NOSPLIT, $0-56
	PROLOGUE
q40x1sg:
	CMPQ CX, $16
	JLT q40x1loop
	SG_PREFETCH
	SG_Q4_0
	SGROWS1
	SGNEXT(18)
	JMP q40x1sg
q40x1loop:
	CMPQ CX, $4
	JLT q40x1tail
	PREFETCHT0 512(SI)
	Q4_0_GROUP
	ROWS1
	NEXT(18)
	JMP q40x1loop
q40x1tail:
	TESTQ CX, CX
	JZ q40x1done
	Q4_0_TAIL(q40x1split)
q40x1split:
	Q4_0_PAIRS
	Q4_SPLIT
	ROWS1
q40x1done:
	OUT1_40
	VZEROUPPER
	RET


// func dotQ8_0x4AVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)
TEXT ·dotQ8_0x4AVX512(SB), NOSPLIT, $0-56
	PROLOGUE
	MOVL $0x80808080, AX
	VPBROADCASTD AX, Z20
q80x4sg:
	CMPQ CX, $16
	JLT q80x4loop
	SG_PREFETCH8
	SG_Q8_0
	SGROWS4_8
	SGNEXT(34)
	JMP q80x4sg
q80x4loop:
	CMPQ CX, $4
	JLT q80x4tail
	PREFETCHT0 512(SI)
	Q8_0_GROUP
	ROWS4_8
	NEXT8
	JMP q80x4loop
q80x4tail:
	TESTQ CX, CX
	JZ q80x4done
	Q8_0_TAIL(q80x4split)
q80x4split:
	Q8_SPLIT
	ROWS4_8
q80x4done:
	OUT4_80
	VZEROUPPER
	RET

// func dotQ8_0x1AVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)
TEXT ·dotQ8_0x1AVX512(SB), NOSPLIT, $0-56
	PROLOGUE
	MOVL $0x80808080, AX
	VPBROADCASTD AX, Z20
q80x1sg:
	CMPQ CX, $16
	JLT q80x1loop
	SG_PREFETCH8
	SG_Q8_0
	SGROWS1_8
	SGNEXT(34)
	JMP q80x1sg
q80x1loop:
	CMPQ CX, $4
	JLT q80x1tail
	PREFETCHT0 512(SI)
	Q8_0_GROUP
	ROWS1_8
	NEXT8
	JMP q80x1loop
q80x1tail:
	TESTQ CX, CX
	JZ q80x1done
	Q8_0_TAIL(q80x1split)
q80x1split:
	Q8_SPLIT
	ROWS1_8
q80x1done:
	OUT1_80
	VZEROUPPER
	RET


// func dotQ5_0x4AVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)
TEXT ·dotQ5_0x4AVX512(SB), NOSPLIT, $0-56
	PROLOGUE
	MOVL $0x10101010, AX
	VPBROADCASTD AX, Z31
q50x4loop:
	CMPQ CX, $4
	JLT q50x4tail
	PREFETCHT0 512(SI)
	Q5_0_GROUP
	ROWS4
	NEXT(22)
	JMP q50x4loop
q50x4tail:
	TESTQ CX, CX
	JZ q50x4done
	Q5_0_TAIL(q50x4split)
q50x4split:
	Q4_0_PAIRS
	Q4_SPLIT
	Q5_BITS
	ROWS4
q50x4done:
	OUT4_50
	VZEROUPPER
	RET

// func dotQ5_0x1AVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)
TEXT ·dotQ5_0x1AVX512(SB), NOSPLIT, $0-56
	PROLOGUE
	MOVL $0x10101010, AX
	VPBROADCASTD AX, Z31
q50x1loop:
	CMPQ CX, $4
	JLT q50x1tail
	PREFETCHT0 512(SI)
	Q5_0_GROUP
	ROWS1
	NEXT(22)
	JMP q50x1loop
q50x1tail:
	TESTQ CX, CX
	JZ q50x1done
	Q5_0_TAIL(q50x1split)
q50x1split:
	Q4_0_PAIRS
	Q4_SPLIT
	Q5_BITS
	ROWS1
q50x1done:
	OUT1_50
	VZEROUPPER
	RET


// func dotQ5_1x4AVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)
TEXT ·dotQ5_1x4AVX512(SB), NOSPLIT, $0-56
	PROLOGUE
	MOVL $0x10101010, AX
	VPBROADCASTD AX, Z31
q51x4loop:
	CMPQ CX, $4
	JLT q51x4tail
	PREFETCHT0 512(SI)
	Q5_1_GROUP
	ROWS4
	NEXT(24)
	JMP q51x4loop
q51x4tail:
	TESTQ CX, CX
	JZ q51x4done
	Q5_1_TAIL(q51x4split)
q51x4split:
	Q4_SPLIT
	Q5_BITS
	ROWS4
q51x4done:
	OUT4_41
	VZEROUPPER
	RET

// func dotQ5_1x1AVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)
TEXT ·dotQ5_1x1AVX512(SB), NOSPLIT, $0-56
	PROLOGUE
	MOVL $0x10101010, AX
	VPBROADCASTD AX, Z31
q51x1loop:
	CMPQ CX, $4
	JLT q51x1tail
	PREFETCHT0 512(SI)
	Q5_1_GROUP
	ROWS1
	NEXT(24)
	JMP q51x1loop
q51x1tail:
	TESTQ CX, CX
	JZ q51x1done
	Q5_1_TAIL(q51x1split)
q51x1split:
	Q4_SPLIT
	Q5_BITS
	ROWS1
q51x1done:
	OUT1_41
	VZEROUPPER
	RET

// func dotQ4_1x8rAVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32, cnt, ostride, wstride int)
TEXT ·dotQ4_1x8rAVX512(SB), NOSPLIT, $24-80
	PROLOGUE
	RSAVE
q41x8rrow:
	RSTART
q41x8rsg:
	CMPQ CX, $16
	JLT q41x8rloop
	SG_PREFETCH
	SG_Q4_1
	SGROWS8
	SGNEXT(20)
	JMP q41x8rsg
q41x8rloop:
	CMPQ CX, $4
	JLT q41x8rtail
	PREFETCHT0 512(SI)
	Q4_1_GROUP
	ROWS8
	NEXT(20)
	JMP q41x8rloop
q41x8rtail:
	TESTQ CX, CX
	JZ q41x8rdone
	Q4_1_TAIL(q41x8rsplit)
q41x8rsplit:
	Q4_SPLIT
	ROWS8
q41x8rdone:
	REDUCE_M8
	RSTORE
	DECQ left-24(SP)
	JNZ q41x8rrow
	VZEROUPPER
	RET

// func dotQ4_0x8rAVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32, cnt, ostride, wstride int)
TEXT ·dotQ4_0x8rAVX512(SB), NOSPLIT, $24-80
	PROLOGUE
	RSAVE
q40x8rrow:
	RSTART
q40x8rsg:
	CMPQ CX, $16
	JLT q40x8rloop
	SG_PREFETCH
	SG_Q4_0
	SGROWS8
	SGNEXT(18)
	JMP q40x8rsg
q40x8rloop:
	CMPQ CX, $4
	JLT q40x8rtail
	PREFETCHT0 512(SI)
	Q4_0_GROUP
	ROWS8
	NEXT(18)
	JMP q40x8rloop
q40x8rtail:
	TESTQ CX, CX
	JZ q40x8rdone
	Q4_0_TAIL(q40x8rsplit)
q40x8rsplit:
	Q4_0_PAIRS
	Q4_SPLIT
	ROWS8
q40x8rdone:
	MOVL $0xc1000000, AX
	REDUCE_S8
	RSTORE
	DECQ left-24(SP)
	JNZ q40x8rrow
	VZEROUPPER
	RET

// func dotQ8_0x8rAVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32, cnt, ostride, wstride int)
TEXT ·dotQ8_0x8rAVX512(SB), NOSPLIT, $24-80
	PROLOGUE
	MOVL $0x80808080, AX
	VPBROADCASTD AX, Z20
	RSAVE
q80x8rrow:
	RSTART
q80x8rsg:
	CMPQ CX, $16
	JLT q80x8rloop
	SG_PREFETCH8
	SG_Q8_0
	SGROWS8_8
	SGNEXT(34)
	JMP q80x8rsg
q80x8rloop:
	CMPQ CX, $4
	JLT q80x8rtail
	PREFETCHT0 512(SI)
	Q8_0_GROUP
	ROWS8_8
	NEXT8
	JMP q80x8rloop
q80x8rtail:
	TESTQ CX, CX
	JZ q80x8rdone
	Q8_0_TAIL(q80x8rsplit)
q80x8rsplit:
	Q8_SPLIT
	ROWS8_8
q80x8rdone:
	REDUCE8
	RSTORE
	DECQ left-24(SP)
	JNZ q80x8rrow
	VZEROUPPER
	RET

// func dotQ5_0x8rAVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32, cnt, ostride, wstride int)
TEXT ·dotQ5_0x8rAVX512(SB), NOSPLIT, $24-80
	PROLOGUE
	MOVL $0x10101010, AX
	VPBROADCASTD AX, Z31
	RSAVE
q50x8rrow:
	RSTART
q50x8rloop:
	CMPQ CX, $4
	JLT q50x8rtail
	PREFETCHT0 512(SI)
	Q5_0_GROUP
	ROWS8
	NEXT(22)
	JMP q50x8rloop
q50x8rtail:
	TESTQ CX, CX
	JZ q50x8rdone
	Q5_0_TAIL(q50x8rsplit)
q50x8rsplit:
	Q4_0_PAIRS
	Q4_SPLIT
	Q5_BITS
	ROWS8
q50x8rdone:
	MOVL $0xc1800000, AX
	REDUCE_S8
	RSTORE
	DECQ left-24(SP)
	JNZ q50x8rrow
	VZEROUPPER
	RET

// func dotQ5_1x8rAVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32, cnt, ostride, wstride int)
TEXT ·dotQ5_1x8rAVX512(SB), NOSPLIT, $24-80
	PROLOGUE
	MOVL $0x10101010, AX
	VPBROADCASTD AX, Z31
	RSAVE
q51x8rrow:
	RSTART
q51x8rloop:
	CMPQ CX, $4
	JLT q51x8rtail
	PREFETCHT0 512(SI)
	Q5_1_GROUP
	ROWS8
	NEXT(24)
	JMP q51x8rloop
q51x8rtail:
	TESTQ CX, CX
	JZ q51x8rdone
	Q5_1_TAIL(q51x8rsplit)
q51x8rsplit:
	Q4_SPLIT
	Q5_BITS
	ROWS8
q51x8rdone:
	REDUCE_M8
	RSTORE
	DECQ left-24(SP)
	JNZ q51x8rrow
	VZEROUPPER
	RET
