#include "textflag.h"

// func putF16F16C(dst *uint16, src *float32, n int): n (a multiple of 8) float32 values rounded
// to binary16, nearest even (F16C).
TEXT ·putF16F16C(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX
loop:
	CMPQ AX, CX
	JGE done
	VMOVUPS (SI)(AX*4), Y0
	VCVTPS2PH $0, Y0, X0
	VMOVDQU X0, (DI)(AX*2)
	ADDQ $8, AX
	JMP loop
done:
	VZEROUPPER
	RET
