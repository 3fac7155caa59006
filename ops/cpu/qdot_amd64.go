package cpu

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

//go:noescape
func dotQ4_1AVX2(w *byte, a *int8, ds *float32, nb int) float32

//go:noescape
func dotQ4_0AVX2(w *byte, a *int8, ds *float32, nb int) float32

//go:noescape
func dotQ8_0AVX2(w *byte, a *int8, ds *float32, nb int) float32

//go:noescape
func dotF32AVX2(a, b *float32, n int) float32

//go:noescape
func axpyF32AVX2(dst, src *float32, a float32, n int)

// cpuidF16C reports CPUID leaf 1's F16C bit (half-float conversion), which x/sys/cpu does not
// expose; every AVX2 cpu has it in practice, but the kernels convert f16 scales with it.
func cpuidF16C() bool

// hasAVX2 is whether the vector kernels can run here: AVX2 and FMA with the OS saving the
// YMM registers (x/sys/cpu checks that), and F16C.
var hasAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpuidF16C()

func init() {
	if hasAVX2 {
		useAVX2()
	}
	if hasAVX512 {
		useAVX512()
	}
}

// useAVX2 installs the AVX2 kernels.
func useAVX2() {
	dotQ4_1, dotQ4_0, dotQ8_0 = dotQ4_1Vec, dotQ4_0Vec, dotQ8_0Vec
	dotQ4_1x4, dotQ8_0x4 = dotQ4_1x4Vec, dotQ8_0x4Vec
	quantizeRow = quantizeRowVec
	attnScores16, attnAccum16, putF16 = attnScores16Vec, attnAccum16Vec, putF16Vec
	dotF32, axpyF32, attnScores, attnAccum = dotF32Vec, axpyF32Vec, attnScoresVec, attnAccumVec
	expShift, siluMul, expSum = expShiftVec, siluMulVec, expSumVec
	useDot16AVX2()
	kernelSet = "avx2+fma+f16c"
}

// The wrappers check what the kernels would otherwise read past: the weight row must hold the
// activation's blocks.
func dotQ4_1Vec(w []byte, a []int8, ds []float32) float32 {
	nb := len(a) / qBlock
	if nb == 0 {
		return 0
	}
	_, _ = w[nb*20-1], ds[2*nb-1]
	return dotQ4_1AVX2(unsafe.SliceData(w), unsafe.SliceData(a), unsafe.SliceData(ds), nb)
}

func dotQ4_0Vec(w []byte, a []int8, ds []float32) float32 {
	nb := len(a) / qBlock
	if nb == 0 {
		return 0
	}
	_, _ = w[nb*18-1], ds[2*nb-1]
	return dotQ4_0AVX2(unsafe.SliceData(w), unsafe.SliceData(a), unsafe.SliceData(ds), nb)
}

func dotQ8_0Vec(w []byte, a []int8, ds []float32) float32 {
	nb := len(a) / qBlock
	if nb == 0 {
		return 0
	}
	_, _ = w[nb*34-1], ds[2*nb-1]
	return dotQ8_0AVX2(unsafe.SliceData(w), unsafe.SliceData(a), unsafe.SliceData(ds), nb)
}

func dotF32Vec(a, b []float32) float32 {
	if len(a) == 0 {
		return 0
	}
	_ = b[len(a)-1]
	return dotF32AVX2(unsafe.SliceData(a), unsafe.SliceData(b), len(a))
}

func axpyF32Vec(dst []float32, a float32, src []float32) {
	if len(dst) == 0 {
		return
	}
	_ = src[len(dst)-1]
	axpyF32AVX2(unsafe.SliceData(dst), unsafe.SliceData(src), a, len(dst))
}

//go:noescape
func dotQ4_1x4AVX2(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)

// dotQ4_1x4Vec is dotQ4_1x4 with the vector kernel: four rows of a (k values each, the next
// row k further) and of ds (2·k/32 each).
func dotQ4_1x4Vec(w []byte, a []int8, ds []float32, k int, out *[4]float32) {
	nb := k / qBlock
	if nb == 0 {
		*out = [4]float32{}
		return
	}
	_, _, _ = w[nb*20-1], a[3*k+k-1], ds[3*2*nb+2*nb-1]
	dotQ4_1x4AVX2(unsafe.SliceData(w), unsafe.SliceData(a), unsafe.SliceData(ds), nb, k, 2*nb*4, &out[0])
}

//go:noescape
func attnScoresAVX2(q, k *float32, kstride, n, hd, heads int, scale float32, out *float32, ostride int)

//go:noescape
func attnAccumAVX2(acc, v *float32, vstride, n, hd, heads int, w *float32, wstride int)

// attnScoresVec is attnScoresGo with the vector kernel where hd is a multiple of 16.
func attnScoresVec(q, k []float32, kstride, n, hd, g int, scale float32, out []float32, ostride int) {
	if hd%16 != 0 || n == 0 || g == 0 {
		attnScoresGo(q, k, kstride, n, hd, g, scale, out, ostride)
		return
	}
	_, _, _ = q[g*hd-1], k[(n-1)*kstride+hd-1], out[(g-1)*ostride+n-1]
	attnScoresAVX2(&q[0], &k[0], kstride, n, hd, g, scale, &out[0], ostride)
}

// attnAccumVec is attnAccumGo with the vector kernel where hd is a multiple of 32.
func attnAccumVec(acc, v []float32, vstride, n, hd, g int, w []float32, wstride int) {
	if hd%32 != 0 || n == 0 || g == 0 {
		attnAccumGo(acc, v, vstride, n, hd, g, w, wstride)
		return
	}
	_, _, _ = acc[g*hd-1], v[(n-1)*vstride+hd-1], w[(g-1)*wstride+n-1]
	attnAccumAVX2(&acc[0], &v[0], vstride, n, hd, g, &w[0], wstride)
}

//go:noescape
func dotQ8_0x4AVX2(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)

// dotQ8_0x4Vec is dotQ8_0x4 with the vector kernel.
func dotQ8_0x4Vec(w []byte, a []int8, ds []float32, k int, out *[4]float32) {
	nb := k / qBlock
	if nb == 0 {
		*out = [4]float32{}
		return
	}
	_, _, _ = w[nb*34-1], a[3*k+k-1], ds[3*2*nb+2*nb-1]
	dotQ8_0x4AVX2(unsafe.SliceData(w), unsafe.SliceData(a), unsafe.SliceData(ds), nb, k, 2*nb*4, &out[0])
}

//go:noescape
func quantizeAVX2(x *float32, qs *int8, ds *float32, nb int)

// quantizeRowVec is quantizeRowGo with the vector kernel, bit for bit.
func quantizeRowVec(qs []int8, ds []float32, x []float32) {
	nb := len(x) / qBlock
	if nb == 0 {
		return
	}
	_, _ = qs[nb*qBlock-1], ds[2*nb-1]
	quantizeAVX2(unsafe.SliceData(x), unsafe.SliceData(qs), unsafe.SliceData(ds), nb)
}

//go:noescape
func attnScores16AVX2(q *float32, k *uint16, kstride, n, hd, heads int, scale float32, out *float32, ostride int)

//go:noescape
func attnAccum16AVX2(acc *float32, v *uint16, vstride, n, hd, heads int, w *float32, wstride int)

// attnScores16Vec is attnScores16Go with the vector kernel where hd is a multiple of 16.
func attnScores16Vec(q []float32, k []uint16, kstride, n, hd, g int, scale float32, out []float32, ostride int) {
	if hd%16 != 0 || n == 0 || g == 0 {
		attnScores16Go(q, k, kstride, n, hd, g, scale, out, ostride)
		return
	}
	_, _, _ = q[g*hd-1], k[(n-1)*kstride+hd-1], out[(g-1)*ostride+n-1]
	attnScores16AVX2(&q[0], &k[0], kstride, n, hd, g, scale, &out[0], ostride)
}

// attnAccum16Vec is attnAccum16Go with the vector kernel where hd is a multiple of 32.
func attnAccum16Vec(acc []float32, v []uint16, vstride, n, hd, g int, w []float32, wstride int) {
	if hd%32 != 0 || n == 0 || g == 0 {
		attnAccum16Go(acc, v, vstride, n, hd, g, w, wstride)
		return
	}
	_, _, _ = acc[g*hd-1], v[(n-1)*vstride+hd-1], w[(g-1)*wstride+n-1]
	attnAccum16AVX2(&acc[0], &v[0], vstride, n, hd, g, &w[0], wstride)
}

//go:noescape
func putF16F16C(dst *uint16, src *float32, n int)

// putF16Vec is putF16Go with vcvtps2ph (round to nearest even) for whole runs of 8 values; a
// NaN stays a NaN (its payload may differ from putF16Go's).
func putF16Vec(dst []uint16, src []float32) {
	n := len(src) &^ 7
	if n > 0 {
		_ = dst[len(src)-1]
		putF16F16C(&dst[0], &src[0], n)
	}
	putF16Go(dst[n:len(src)], src[n:])
}
