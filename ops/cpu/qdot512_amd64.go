package cpu

import "golang.org/x/sys/cpu"

// The AVX-512 VNNI kernels (qdot512_amd64.s, qdot512k_amd64.s), over activations in the grouped
// layout (qgroup.go), astride and dstride the rows' strides in bytes: x8r, cnt weight rows
// wstride bytes apart against 8 activation rows, weight row j's results at out + 4·j +
// i·ostride; x4 and x1, one weight row against 4 or 1 activation rows, a result a row at out.

//go:noescape
func dotQ4_1x4AVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)

//go:noescape
func dotQ4_1x1AVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)

//go:noescape
func dotQ4_0x4AVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)

//go:noescape
func dotQ4_0x1AVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)

//go:noescape
func dotQ8_0x4AVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)

//go:noescape
func dotQ8_0x1AVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)

//go:noescape
func dotQ4Kx4AVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)

//go:noescape
func dotQ4Kx1AVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)

//go:noescape
func dotQ6Kx4AVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)

//go:noescape
func dotQ6Kx1AVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)

//go:noescape
func dotQ5Kx4AVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)

//go:noescape
func dotQ5Kx1AVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)

//go:noescape
func dotQ5_0x4AVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)

//go:noescape
func dotQ5_0x1AVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)

//go:noescape
func dotQ5_1x4AVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)

//go:noescape
func dotQ5_1x1AVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)

//go:noescape
func dotQ4_1x8rAVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32, cnt, ostride, wstride int)

//go:noescape
func dotQ4_0x8rAVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32, cnt, ostride, wstride int)

//go:noescape
func dotQ8_0x8rAVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32, cnt, ostride, wstride int)

//go:noescape
func dotQ5_0x8rAVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32, cnt, ostride, wstride int)

//go:noescape
func dotQ5_1x8rAVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32, cnt, ostride, wstride int)

//go:noescape
func dotQ4Kx8rAVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32, cnt, ostride, wstride int)

//go:noescape
func dotQ6Kx8rAVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32, cnt, ostride, wstride int)

//go:noescape
func dotQ5Kx8rAVX512(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32, cnt, ostride, wstride int)

// hasAVX512 is whether the grouped kernels can run here: AVX-512 F, BW, VL and VNNI with the
// OS saving the ZMM registers (x/sys/cpu checks that), on top of the AVX2 set.
var hasAVX512 = hasAVX2 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL &&
	cpu.X86.HasAVX512VNNI

var groupKernelsAVX512 = groupKernelSet{
	q41: &qGroupKernels{dotQ4_1x8rAVX512, dotQ4_1x4AVX512, dotQ4_1x1AVX512},
	q40: &qGroupKernels{dotQ4_0x8rAVX512, dotQ4_0x4AVX512, dotQ4_0x1AVX512},
	q50: &qGroupKernels{dotQ5_0x8rAVX512, dotQ5_0x4AVX512, dotQ5_0x1AVX512},
	q51: &qGroupKernels{dotQ5_1x8rAVX512, dotQ5_1x4AVX512, dotQ5_1x1AVX512},
	q80: &qGroupKernels{dotQ8_0x8rAVX512, dotQ8_0x4AVX512, dotQ8_0x1AVX512},
	q4k: &qGroupKernels{dotQ4Kx8rAVX512, dotQ4Kx4AVX512, dotQ4Kx1AVX512},
	q5k: &qGroupKernels{dotQ5Kx8rAVX512, dotQ5Kx4AVX512, dotQ5Kx1AVX512},
	q6k: &qGroupKernels{dotQ6Kx8rAVX512, dotQ6Kx4AVX512, dotQ6Kx1AVX512},
}

// useAVX512 installs the grouped kernels, after useAVX2 (the other kernels stay AVX2).
func useAVX512() {
	groupKernels = groupKernelsAVX512
	kernelSet = "avx512+vnni, " + kernelSet
}
