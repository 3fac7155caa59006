#include "textflag.h"
#include "qdot512_amd64.h"

// The AVX-512 VNNI kernels of Q4_K, Q5_K and Q6_K blocks, in the registers and with the row macros of
// qdot512_amd64.s (shared through qdot512_amd64.h). A Q4_K block of 256 (f16 d, f16
// dmin, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles) is two groups of 4 sub-blocks
// of 32; a group's 64 bytes of nibbles hold sub-blocks 0 and 2 in their low nibbles and 1 and 3
// in their high ones, which two 128-bit lane shuffles turn into the layout of a Q4 group with
// its blocks in the order 0, 2, 1, 3 (the activations' grouped layout takes that order).

DATA lane2blockk<>+0(SB)/4, $0
DATA lane2blockk<>+4(SB)/4, $0
DATA lane2blockk<>+8(SB)/4, $0
DATA lane2blockk<>+12(SB)/4, $0
DATA lane2blockk<>+16(SB)/4, $2
DATA lane2blockk<>+20(SB)/4, $2
DATA lane2blockk<>+24(SB)/4, $2
DATA lane2blockk<>+28(SB)/4, $2
DATA lane2blockk<>+32(SB)/4, $4
DATA lane2blockk<>+36(SB)/4, $4
DATA lane2blockk<>+40(SB)/4, $4
DATA lane2blockk<>+44(SB)/4, $4
DATA lane2blockk<>+48(SB)/4, $6
DATA lane2blockk<>+52(SB)/4, $6
DATA lane2blockk<>+56(SB)/4, $6
DATA lane2blockk<>+60(SB)/4, $6
GLOBL lane2blockk<>(SB), RODATA|NOPTR, $64

#define KPROLOGUE \
	MOVQ w+0(FP), SI \
	MOVQ a+8(FP), DI \
	MOVQ ds+16(FP), R8 \
	MOVQ nb+24(FP), CX \
	MOVQ astride+32(FP), R10 \
	MOVQ dstride+40(FP), R12 \
	LEAQ (R10)(R10*2), R11 \
	LEAQ (R12)(R12*2), R13 \
	LEAQ (DI)(R10*4), BX \
	LEAQ (R8)(R12*4), R9 \
	MOVL $0x0f0f0f0f, AX \
	VPBROADCASTD AX, Z20 \
	VMOVDQU32 lane2blockk<>(SB), Z21 \
	ZERO16

// A block's d (X28, all lanes) and -dmin (X29), and its scale dwords: AX = bytes 0-3 (the
// low 6 bits: sub-blocks 0-3's scales; the high 2: 4-7's), DX = bytes 4-7 (the mins alike);
// bytes 8-11 (sub-blocks 4-7's low 4 bits of scale and of min) are read where needed.
#define KBLOCK \
	VCVTPH2PS (SI), X28 \
	VPSHUFD $0x55, X28, X29 \
	VBROADCASTSS X28, X28 \
	VXORPS X30, X30, X30 \
	VSUBPS X29, X30, X29 \
	MOVL 4(SI), AX \
	MOVL 8(SI), DX

// The group's (d·sc, -dmin·m) pairs from its scale bytes (sc in X24, m in X25, as KSCALES0
// and KSCALES1 leave them) into Y19 in the block order 0, 2, 1, 3, and d·sc over the lanes in
// Z18.
#define KSCALEVEC \
	VPMOVZXBD X24, X24 \
	VPMOVZXBD X25, X25 \
	VCVTDQ2PS X24, X24 \
	VCVTDQ2PS X25, X25 \
	VMULPS X28, X24, X24 \
	VMULPS X29, X25, X25 \
	VUNPCKLPS X25, X24, X26 \
	VUNPCKHPS X25, X24, X27 \
	VINSERTF32X4 $1, X27, Y26, Y26 \
	VPERMQ $0xD8, Y26, Y19 \
	VPERMPS Z19, Z21, Z18

// The nibbles at qoff(SI): sub-blocks 0 and 2 (low) into Z16, 1 and 3 (high) into Z17.
#define KNIBBLES(qoff) \
	VMOVDQU64 qoff(SI), Z16 \
	VPSRLW $4, Z16, Z17 \
	VPANDD Z20, Z16, Z16 \
	VPANDD Z20, Z17, Z17

// Z16/Z17 into the Q4 group layout, blocks in the order 0, 2, 1, 3.
#define KSHUFFLE \
	VSHUFI64X2 $0x88, Z17, Z16, Z26 \
	VSHUFI64X2 $0xDD, Z17, Z16, Z17 \
	VMOVDQA64 Z26, Z16

#define KGROUP(qoff) \
	KSCALEVEC \
	KNIBBLES(qoff) \
	KSHUFFLE

// Q5_K's fifth bits: Z30 = its 32 qh bytes, then the same shifted right by 2 (bit 2c of qh[l]
// goes to sub-block 2c, 2c+1 to 2c+1); for a group's Z16/Z17 as KNIBBLES leaves them, the bits
// of group 0 (sub-blocks 0-3) or 1 (4-7) at bit 4 of each byte, Z31 the 0x10 mask.
#define K5QH \
	VMOVDQU64 16(SI), Y30 \
	VPSRLW $2, Y30, Y24 \
	VINSERTI64X4 $1, Y24, Z30, Z30

#define K5BITS0 \
	VPSLLW $4, Z30, Z24 \
	VPANDD Z31, Z24, Z24 \
	VPSLLW $3, Z30, Z25 \
	VPANDD Z31, Z25, Z25 \
	VPORD Z24, Z16, Z16 \
	VPORD Z25, Z17, Z17

#define K5BITS1 \
	VPANDD Z31, Z30, Z24 \
	VPSRLW $1, Z30, Z25 \
	VPANDD Z31, Z25, Z25 \
	VPORD Z24, Z16, Z16 \
	VPORD Z25, Z17, Z17

// Sub-blocks 0-3: scale = bytes 0-3 & 63, min = bytes 4-7 & 63.
#define KSCALES0 \
	MOVL AX, R14 \
	ANDL $0x3f3f3f3f, R14 \
	VMOVD R14, X24 \
	MOVL DX, R14 \
	ANDL $0x3f3f3f3f, R14 \
	VMOVD R14, X25

// Sub-blocks 4-7: scale = bytes 8-11 & 15 | (bytes 0-3 >> 6) << 4, min = bytes 8-11 >> 4 |
// (bytes 4-7 >> 6) << 4.
#define KSCALES1 \
	MOVL 12(SI), R14 \
	ANDL $0x0f0f0f0f, R14 \
	SHRL $2, AX \
	ANDL $0x30303030, AX \
	ORL AX, R14 \
	VMOVD R14, X24 \
	MOVL 12(SI), R14 \
	SHRL $4, R14 \
	ANDL $0x0f0f0f0f, R14 \
	SHRL $2, DX \
	ANDL $0x30303030, DX \
	ORL DX, R14 \
	VMOVD R14, X25

// The activations' next group: 128 bytes, 24 scales.
#define KNEXTACT \
	ADDQ $128, DI \
	ADDQ $128, BX \
	ADDQ $96, R8 \
	ADDQ $96, R9

#define OUT4 \
	REDUCE_M4 \
	STORE4

#define OUT1 \
	REDUCE_M1 \
	STORE1

#define OUTA4 \
	REDUCE4 \
	STORE4

#define OUTA1 \
	REDUCE1 \
	STORE1


// func dotQ4Kx4AVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)
//
// nb counts blocks of 32 (8 a Q4_K block).
TEXT ·dotQ4Kx4AVX512(SB), NOSPLIT, $0-56
	KPROLOGUE
q4kx4loop:
	CMPQ CX, $8
	JLT q4kx4done
	KBLOCK
	KSCALES0
	KGROUP(16)
	ROWS4
	KNEXTACT
	KSCALES1
	KGROUP(80)
	ROWS4
	KNEXTACT
	ADDQ $144, SI
	SUBQ $8, CX
	JMP q4kx4loop
q4kx4done:
	OUT4
	VZEROUPPER
	RET

// func dotQ4Kx1AVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)
//
// nb counts blocks of 32 (8 a Q4_K block).
TEXT ·dotQ4Kx1AVX512(SB), NOSPLIT, $0-56
	KPROLOGUE
q4kx1loop:
	CMPQ CX, $8
	JLT q4kx1done
	KBLOCK
	KSCALES0
	KGROUP(16)
	ROWS1
	KNEXTACT
	KSCALES1
	KGROUP(80)
	ROWS1
	KNEXTACT
	ADDQ $144, SI
	SUBQ $8, CX
	JMP q4kx1loop
q4kx1done:
	OUT1
	VZEROUPPER
	RET

// Q6_K (blocks of 256: 128 bytes of low 4 bits, 64 of high 2 bits, 16 int8 scales a 16 values,
// f16 d): a group is one half of a block, its 4 sub-blocks of 32 in DequantQ6K's order. Z16
// takes sub-blocks 0 and 1 (the low nibbles of the half's 64 ql bytes with bits 0-1 and 2-3 of
// its 32 qh bytes), Z17 sub-blocks 2 and 3 (the high nibbles with bits 4-5 and 6-7), as
// unsigned q + 32; an int32 lane covers 4 values of one scale, so each register has its own
// sums: Z18 and Z19 hold d·sc of their lanes. The activations' corrections start the sums at
// -32·Σq_a.

DATA q6lo<>+0(SB)/4, $0
DATA q6lo<>+4(SB)/4, $0
DATA q6lo<>+8(SB)/4, $0
DATA q6lo<>+12(SB)/4, $0
DATA q6lo<>+16(SB)/4, $1
DATA q6lo<>+20(SB)/4, $1
DATA q6lo<>+24(SB)/4, $1
DATA q6lo<>+28(SB)/4, $1
DATA q6lo<>+32(SB)/4, $2
DATA q6lo<>+36(SB)/4, $2
DATA q6lo<>+40(SB)/4, $2
DATA q6lo<>+44(SB)/4, $2
DATA q6lo<>+48(SB)/4, $3
DATA q6lo<>+52(SB)/4, $3
DATA q6lo<>+56(SB)/4, $3
DATA q6lo<>+60(SB)/4, $3
GLOBL q6lo<>(SB), RODATA|NOPTR, $64
DATA q6hi<>+0(SB)/4, $4
DATA q6hi<>+4(SB)/4, $4
DATA q6hi<>+8(SB)/4, $4
DATA q6hi<>+12(SB)/4, $4
DATA q6hi<>+16(SB)/4, $5
DATA q6hi<>+20(SB)/4, $5
DATA q6hi<>+24(SB)/4, $5
DATA q6hi<>+28(SB)/4, $5
DATA q6hi<>+32(SB)/4, $6
DATA q6hi<>+36(SB)/4, $6
DATA q6hi<>+40(SB)/4, $6
DATA q6hi<>+44(SB)/4, $6
DATA q6hi<>+48(SB)/4, $7
DATA q6hi<>+52(SB)/4, $7
DATA q6hi<>+56(SB)/4, $7
DATA q6hi<>+60(SB)/4, $7
GLOBL q6hi<>(SB), RODATA|NOPTR, $64

// A Q6_K half at ql qloff(SI), qh qhoff(SI), scales scoff(SI); d over the lanes in Y29.
#define Q6GROUP(qloff, qhoff, scoff) \
	VMOVDQU64 qloff(SI), Z16 \
	VMOVDQU64 qhoff(SI), Y24 \
	VPSRLW $2, Y24, Y25 \
	VINSERTI64X4 $1, Y25, Z24, Z24 \
	VPSLLW $4, Z24, Z25 \
	VPANDD Z26, Z25, Z25 \
	VPANDD Z26, Z24, Z24 \
	VPSRLW $4, Z16, Z17 \
	VPANDD Z20, Z16, Z16 \
	VPANDD Z20, Z17, Z17 \
	VPORD Z25, Z16, Z16 \
	VPORD Z24, Z17, Z17 \
	VPMOVSXBD scoff(SI), Y28 \
	VCVTDQ2PS Y28, Y28 \
	VMULPS Y29, Y28, Y28 \
	VPERMPS Z28, Z21, Z18 \
	VPERMPS Z28, Z27, Z19

// One activation row of a Q6_K group: quants at a (first 64) and 64(a), d_a over the lanes at
// ds and 64(ds), the corrections at 128(ds) and 192(ds).
#define Q6ROW(a0, a1, d0, d1, c0, c1, acc, t1, t2) \
	VMOVDQU32 c0, t1 \
	VMOVDQU32 c1, t2 \
	VPDPBUSD a0, Z16, t1 \
	VPDPBUSD a1, Z17, t2 \
	VCVTDQ2PS t1, t1 \
	VCVTDQ2PS t2, t2 \
	VMULPS d0, t1, t1 \
	VMULPS d1, t2, t2 \
	VFMADD231PS Z18, t1, acc \
	VFMADD231PS Z19, t2, acc

#define Q6ROWS1 \
	Q6ROW((DI), 64(DI), (R8), 64(R8), 128(R8), 192(R8), Z0, Z22, Z23)

#define Q6ROWS4 \
	Q6ROW((DI), 64(DI), (R8), 64(R8), 128(R8), 192(R8), Z0, Z22, Z23) \
	Q6ROW((DI)(R10*1), 64(DI)(R10*1), (R8)(R12*1), 64(R8)(R12*1), 128(R8)(R12*1), 192(R8)(R12*1), Z1, Z30, Z31) \
	Q6ROW((DI)(R10*2), 64(DI)(R10*2), (R8)(R12*2), 64(R8)(R12*2), 128(R8)(R12*2), 192(R8)(R12*2), Z2, Z22, Z23) \
	Q6ROW((DI)(R11*1), 64(DI)(R11*1), (R8)(R13*1), 64(R8)(R13*1), 128(R8)(R13*1), 192(R8)(R13*1), Z3, Z30, Z31)

#define Q6ROWS8 \
	Q6ROWS4 \
	Q6ROW((BX), 64(BX), (R9), 64(R9), 128(R9), 192(R9), Z4, Z22, Z23) \
	Q6ROW((BX)(R10*1), 64(BX)(R10*1), (R9)(R12*1), 64(R9)(R12*1), 128(R9)(R12*1), 192(R9)(R12*1), Z5, Z30, Z31) \
	Q6ROW((BX)(R10*2), 64(BX)(R10*2), (R9)(R12*2), 64(R9)(R12*2), 128(R9)(R12*2), 192(R9)(R12*2), Z6, Z22, Z23) \
	Q6ROW((BX)(R11*1), 64(BX)(R11*1), (R9)(R13*1), 64(R9)(R13*1), 128(R9)(R13*1), 192(R9)(R13*1), Z7, Z30, Z31)

#define Q6NEXTACT \
	ADDQ $128, DI \
	ADDQ $128, BX \
	ADDQ $256, R8 \
	ADDQ $256, R9


// func dotQ6Kx4AVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)
//
// nb counts blocks of 32 (8 a Q6_K block).
TEXT ·dotQ6Kx4AVX512(SB), NOSPLIT, $0-56
	KPROLOGUE
	MOVL $0x30303030, AX
	VPBROADCASTD AX, Z26
	VMOVDQU32 q6lo<>(SB), Z21
	VMOVDQU32 q6hi<>(SB), Z27
q6kx4loop:
	CMPQ CX, $8
	JLT q6kx4done
	VPBROADCASTW 208(SI), X29
	VCVTPH2PS X29, Y29
	Q6GROUP(0, 128, 192)
	Q6ROWS4
	Q6NEXTACT
	Q6GROUP(64, 160, 200)
	Q6ROWS4
	Q6NEXTACT
	ADDQ $210, SI
	SUBQ $8, CX
	JMP q6kx4loop
q6kx4done:
	OUTA4
	VZEROUPPER
	RET

// func dotQ6Kx1AVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)
//
// nb counts blocks of 32 (8 a Q6_K block).
TEXT ·dotQ6Kx1AVX512(SB), NOSPLIT, $0-56
	KPROLOGUE
	MOVL $0x30303030, AX
	VPBROADCASTD AX, Z26
	VMOVDQU32 q6lo<>(SB), Z21
	VMOVDQU32 q6hi<>(SB), Z27
q6kx1loop:
	CMPQ CX, $8
	JLT q6kx1done
	VPBROADCASTW 208(SI), X29
	VCVTPH2PS X29, Y29
	Q6GROUP(0, 128, 192)
	Q6ROWS1
	Q6NEXTACT
	Q6GROUP(64, 160, 200)
	Q6ROWS1
	Q6NEXTACT
	ADDQ $210, SI
	SUBQ $8, CX
	JMP q6kx1loop
q6kx1done:
	OUTA1
	VZEROUPPER
	RET


// func dotQ5Kx4AVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)
//
// Q5_K: Q4_K's kernel with the fifth bits (32 qh bytes after the scales) put on the nibbles.
TEXT ·dotQ5Kx4AVX512(SB), NOSPLIT, $0-56
	KPROLOGUE
	MOVL $0x10101010, AX
	VPBROADCASTD AX, Z31
q5kx4loop:
	CMPQ CX, $8
	JLT q5kx4done
	KBLOCK
	K5QH
	KSCALES0
	KSCALEVEC
	KNIBBLES(48)
	K5BITS0
	KSHUFFLE
	ROWS4
	KNEXTACT
	KSCALES1
	KSCALEVEC
	KNIBBLES(112)
	K5BITS1
	KSHUFFLE
	ROWS4
	KNEXTACT
	ADDQ $176, SI
	SUBQ $8, CX
	JMP q5kx4loop
q5kx4done:
	OUT4
	VZEROUPPER
	RET

// func dotQ5Kx1AVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)
//
// Q5_K: Q4_K's kernel with the fifth bits (32 qh bytes after the scales) put on the nibbles.
TEXT ·dotQ5Kx1AVX512(SB), NOSPLIT, $0-56
	KPROLOGUE
	MOVL $0x10101010, AX
	VPBROADCASTD AX, Z31
q5kx1loop:
	CMPQ CX, $8
	JLT q5kx1done
	KBLOCK
	K5QH
	KSCALES0
	KSCALEVEC
	KNIBBLES(48)
	K5BITS0
	KSHUFFLE
	ROWS1
	KNEXTACT
	KSCALES1
	KSCALEVEC
	KNIBBLES(112)
	K5BITS1
	KSHUFFLE
	ROWS1
	KNEXTACT
	ADDQ $176, SI
	SUBQ $8, CX
	JMP q5kx1loop
q5kx1done:
	OUT1
	VZEROUPPER
	RET

// func dotQ4Kx8rAVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32, cnt, ostride, wstride int)
TEXT ·dotQ4Kx8rAVX512(SB), NOSPLIT, $24-80
	KPROLOGUE
	RSAVE
q4kx8rrow:
	RSTART
q4kx8rloop:
	CMPQ CX, $8
	JLT q4kx8rdone
	KBLOCK
	KSCALES0
	KGROUP(16)
	ROWS8
	KNEXTACT
	KSCALES1
	KGROUP(80)
	ROWS8
	KNEXTACT
	ADDQ $144, SI
	SUBQ $8, CX
	JMP q4kx8rloop
q4kx8rdone:
	REDUCE_M8
	RSTORE
	DECQ left-24(SP)
	JNZ q4kx8rrow
	VZEROUPPER
	RET

// func dotQ6Kx8rAVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32, cnt, ostride, wstride int)
TEXT ·dotQ6Kx8rAVX512(SB), NOSPLIT, $24-80
	KPROLOGUE
	MOVL $0x30303030, AX
	VPBROADCASTD AX, Z26
	VMOVDQU32 q6lo<>(SB), Z21
	VMOVDQU32 q6hi<>(SB), Z27
	RSAVE
q6kx8rrow:
	RSTART
q6kx8rloop:
	CMPQ CX, $8
	JLT q6kx8rdone
	VPBROADCASTW 208(SI), X29
	VCVTPH2PS X29, Y29
	Q6GROUP(0, 128, 192)
	Q6ROWS8
	Q6NEXTACT
	Q6GROUP(64, 160, 200)
	Q6ROWS8
	Q6NEXTACT
	ADDQ $210, SI
	SUBQ $8, CX
	JMP q6kx8rloop
q6kx8rdone:
	REDUCE8
	RSTORE
	DECQ left-24(SP)
	JNZ q6kx8rrow
	VZEROUPPER
	RET

// func dotQ5Kx8rAVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32, cnt, ostride, wstride int)
TEXT ·dotQ5Kx8rAVX512(SB), NOSPLIT, $24-80
	KPROLOGUE
	MOVL $0x10101010, AX
	VPBROADCASTD AX, Z31
	RSAVE
q5kx8rrow:
	RSTART
q5kx8rloop:
	CMPQ CX, $8
	JLT q5kx8rdone
	KBLOCK
	K5QH
	KSCALES0
	KSCALEVEC
	KNIBBLES(48)
	K5BITS0
	KSHUFFLE
	ROWS8
	KNEXTACT
	KSCALES1
	KSCALEVEC
	KNIBBLES(112)
	K5BITS1
	KSHUFFLE
	ROWS8
	KNEXTACT
	ADDQ $176, SI
	SUBQ $8, CX
	JMP q5kx8rloop
q5kx8rdone:
	REDUCE_M8
	RSTORE
	DECQ left-24(SP)
	JNZ q5kx8rrow
	VZEROUPPER
	RET
