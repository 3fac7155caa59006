package cpu

import "testing"

// kernelFuncs is the set of kernels in use, for tests that run the portable set where the vector
// one is installed.
type kernelFuncs struct {
	q40, q41, q80 qDotFunc
	q41x4, q80x4  qDot4Func
	quantize      func([]int8, []float32, []float32)
	dotF          func([]float32, []float32) float32
	axpyF         func([]float32, float32, []float32)
	scores        func([]float32, []float32, int, int, int, int, float32, []float32, int)
	scores16      func([]float32, []uint16, int, int, int, int, float32, []float32, int)
	accum         func([]float32, []float32, int, int, int, int, []float32, int)
	accum16       func([]float32, []uint16, int, int, int, int, []float32, int)
	group         groupKernelSet
	expShift      func([]float32, float32) float32
	siluMul       func([]float32, []float32, []float32)
	dot16         [2]*dot16Kernels
}

// install sets the kernels in use to k and returns the previous set.
func (k kernelFuncs) install() kernelFuncs {
	prev := kernelFuncs{dotQ4_0, dotQ4_1, dotQ8_0, dotQ4_1x4, dotQ8_0x4, quantizeRow, dotF32, axpyF32,
		attnScores, attnScores16, attnAccum, attnAccum16, groupKernels, expShift, siluMul, dot16}
	groupKernels, expShift, siluMul, dot16 = k.group, k.expShift, k.siluMul, k.dot16
	dotQ4_0, dotQ4_1, dotQ8_0, dotQ4_1x4, dotQ8_0x4 = k.q40, k.q41, k.q80, k.q41x4, k.q80x4
	quantizeRow, dotF32, axpyF32 = k.quantize, k.dotF, k.axpyF
	attnScores, attnScores16, attnAccum, attnAccum16 = k.scores, k.scores16, k.accum, k.accum16
	return prev
}

var portableKernels = kernelFuncs{dotQ4_0Go, dotQ4_1Go, dotQ8_0Go, dotQ4_1x4Go, dotQ8_0x4Go, quantizeRowGo, dot, axpyGo,
	attnScoresGo, attnScores16Go, attnAccumGo, attnAccum16Go, groupKernelSet{}, expShiftGo, siluMulGo, [2]*dot16Kernels{}}

// forEachKernelSet runs f with the kernels chosen at start and, where those are the vector
// ones, again with the AVX2 set alone where AVX-512 was chosen (what a cpu without AVX-512
// runs) and with the portable Go set (what a cpu without AVX2 runs).
func forEachKernelSet(t *testing.T, f func(t *testing.T)) {
	t.Run("installed", f)
	if groupKernels != (groupKernelSet{}) {
		t.Run("avx2", func(t *testing.T) {
			prev := groupKernels
			groupKernels = groupKernelSet{}
			defer func() { groupKernels = prev }()
			f(t)
		})
	}
	if hasAVX2 {
		t.Run("portable", func(t *testing.T) {
			prev := portableKernels.install()
			defer prev.install()
			f(t)
		})
	}
}
