// qdot512_amd64.h: the row, reduction and x8r macros shared by the AVX-512 VNNI block kernels
// (qdot512_amd64.s, qdot512k_amd64.s), in the registers described at the top of
// qdot512_amd64.s.

// One activation row of a Q4 group: the 64 low and 64 high quants at lo and hi, the 16 lane
// scales d_a at ds and the (0, s_a) pairs at ds+64 (sds).
#define ROW(lo, hi, ds, sds, acc, ms, t) \
	VPXORD t, t, t \
	VPDPBUSD lo, Z16, t \
	VPDPBUSD hi, Z17, t \
	VCVTDQ2PS t, t \
	VMULPS ds, t, t \
	VFMADD231PS Z18, t, acc \
	VFMADD231PS sds, Y19, ms

#define ROWS1 \
	ROW((DI), 64(DI), (R8), 64(R8), Z0, Y8, Z22)

#define ROWS4 \
	ROW((DI), 64(DI), (R8), 64(R8), Z0, Y8, Z22) \
	ROW((DI)(R10*1), 64(DI)(R10*1), (R8)(R12*1), 64(R8)(R12*1), Z1, Y9, Z23) \
	ROW((DI)(R10*2), 64(DI)(R10*2), (R8)(R12*2), 64(R8)(R12*2), Z2, Y10, Z22) \
	ROW((DI)(R11*1), 64(DI)(R11*1), (R8)(R13*1), 64(R8)(R13*1), Z3, Y11, Z23)

#define ROWS8 \
	ROWS4 \
	ROW((BX), 64(BX), (R9), 64(R9), Z4, Y12, Z22) \
	ROW((BX)(R10*1), 64(BX)(R10*1), (R9)(R12*1), 64(R9)(R12*1), Z5, Y13, Z23) \
	ROW((BX)(R10*2), 64(BX)(R10*2), (R9)(R12*2), 64(R9)(R12*2), Z6, Y14, Z22) \
	ROW((BX)(R11*1), 64(BX)(R11*1), (R9)(R13*1), 64(R9)(R13*1), Z7, Y15, Z23)

// The rows' results. Each row's accumulator is folded to 8 lanes and its m·s sums added lane by
// lane (scaled by sc: FOLDS; FOLDM adds them as they are; FOLD has none), then three levels of
// pairwise sums over the rows together leave row r's result, ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+
// l7)) of its lanes, in lane r%4 of X0 (rows 0-3) and X4 (rows 4-7); the 4- and 1-row kernels
// take the same pairs of their rows' lanes (TREE4, TREE1), so that every row's sums are the
// same instructions in the 8-, 4- and 1-row kernels.
#define FOLD(z, y) \
	VEXTRACTF64X4 $1, z, Y24 \
	VADDPS Y24, y, y

#define FOLDM(z, y, ms) \
	FOLD(z, y) \
	VADDPS ms, y, y

#define TREE8 \
	VHADDPS Y1, Y0, Y0 \
	VHADDPS Y3, Y2, Y2 \
	VHADDPS Y5, Y4, Y4 \
	VHADDPS Y7, Y6, Y6 \
	VHADDPS Y2, Y0, Y0 \
	VHADDPS Y6, Y4, Y4 \
	VEXTRACTF128 $1, Y0, X1 \
	VADDPS X1, X0, X0 \
	VEXTRACTF128 $1, Y4, X5 \
	VADDPS X5, X4, X4

// TREE8's sums of rows 0-3 alone, and of row 0 alone (the pairs of its own lanes).
#define TREE4 \
	VHADDPS Y1, Y0, Y0 \
	VHADDPS Y3, Y2, Y2 \
	VHADDPS Y2, Y0, Y0 \
	VEXTRACTF128 $1, Y0, X1 \
	VADDPS X1, X0, X0

#define TREE1 \
	VHADDPS Y0, Y0, Y0 \
	VHADDPS Y0, Y0, Y0 \
	VEXTRACTF128 $1, Y0, X1 \
	VADDPS X1, X0, X0

#define REDUCE_M8 \
	FOLDM(Z0, Y0, Y8) \
	FOLDM(Z1, Y1, Y9) \
	FOLDM(Z2, Y2, Y10) \
	FOLDM(Z3, Y3, Y11) \
	FOLDM(Z4, Y4, Y12) \
	FOLDM(Z5, Y5, Y13) \
	FOLDM(Z6, Y6, Y14) \
	FOLDM(Z7, Y7, Y15) \
	TREE8

#define REDUCE_M4 \
	FOLDM(Z0, Y0, Y8) \
	FOLDM(Z1, Y1, Y9) \
	FOLDM(Z2, Y2, Y10) \
	FOLDM(Z3, Y3, Y11) \
	TREE4

#define REDUCE_M1 \
	FOLDM(Z0, Y0, Y8) \
	TREE1

#define REDUCE8 \
	FOLD(Z0, Y0) \
	FOLD(Z1, Y1) \
	FOLD(Z2, Y2) \
	FOLD(Z3, Y3) \
	FOLD(Z4, Y4) \
	FOLD(Z5, Y5) \
	FOLD(Z6, Y6) \
	FOLD(Z7, Y7) \
	TREE8

#define REDUCE4 \
	FOLD(Z0, Y0) \
	FOLD(Z1, Y1) \
	FOLD(Z2, Y2) \
	FOLD(Z3, Y3) \
	TREE4

#define REDUCE1 \
	FOLD(Z0, Y0) \
	TREE1

#define STORE4 \
	MOVQ out+48(FP), DX \
	VMOVUPS X0, (DX)

#define STORE1 \
	MOVQ out+48(FP), DX \
	VMOVSS X0, (DX)

// The x8r kernels: an x8 kernel over cnt weight rows wstride bytes apart, row j's 8 results
// stored at out + 4·j + i·ostride (i < 8), the constants set once.
#define ZERO16 \
	VPXORD Z0, Z0, Z0 \
	VPXORD Z1, Z1, Z1 \
	VPXORD Z2, Z2, Z2 \
	VPXORD Z3, Z3, Z3 \
	VPXORD Z4, Z4, Z4 \
	VPXORD Z5, Z5, Z5 \
	VPXORD Z6, Z6, Z6 \
	VPXORD Z7, Z7, Z7 \
	VPXORD Z8, Z8, Z8 \
	VPXORD Z9, Z9, Z9 \
	VPXORD Z10, Z10, Z10 \
	VPXORD Z11, Z11, Z11 \
	VPXORD Z12, Z12, Z12 \
	VPXORD Z13, Z13, Z13 \
	VPXORD Z14, Z14, Z14 \
	VPXORD Z15, Z15, Z15

#define RSAVE \
	MOVQ w+0(FP), AX \
	MOVQ AX, wcur-8(SP) \
	MOVQ out+48(FP), AX \
	MOVQ AX, ocur-16(SP) \
	MOVQ cnt+56(FP), AX \
	MOVQ AX, left-24(SP)

#define RSTART \
	MOVQ wcur-8(SP), SI \
	MOVQ a+8(FP), DI \
	MOVQ ds+16(FP), R8 \
	MOVQ nb+24(FP), CX \
	LEAQ (R10)(R10*2), R11 \
	LEAQ (R12)(R12*2), R13 \
	LEAQ (DI)(R10*4), BX \
	LEAQ (R8)(R12*4), R9 \
	ZERO16

#define RSTORE \
	MOVQ ocur-16(SP), DX \
	MOVQ ostride+64(FP), R11 \
	LEAQ (R11)(R11*2), R13 \
	VMOVSS X0, (DX) \
	VEXTRACTPS $1, X0, (DX)(R11*1) \
	VEXTRACTPS $2, X0, (DX)(R11*2) \
	VEXTRACTPS $3, X0, (DX)(R13*1) \
	LEAQ (DX)(R11*4), DX \
	VMOVSS X4, (DX) \
	VEXTRACTPS $1, X4, (DX)(R11*1) \
	VEXTRACTPS $2, X4, (DX)(R11*2) \
	VEXTRACTPS $3, X4, (DX)(R13*1) \
	MOVQ wstride+72(FP), AX \
	ADDQ AX, wcur-8(SP) \
	ADDQ $4, ocur-16(SP)
