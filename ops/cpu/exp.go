package cpu

import "math"

// The exp kernels of the vector float32 path (Options.VectorFloat32): the portable loops
// below, replaced at start by vector ones (exp_amd64.go) that compute exp within 2 ulp instead
// of rounding float64's. The exact reference keeps math.Exp.
var (
	expShift = expShiftGo
	siluMul  = siluMulGo
	expSum   = expSumGo
)

// LogSumExp returns log Σ exp(x[i]) (the normalizer of a row of logits), with the vector exp
// where the cpu has it: within about 1e-6 of float64's.
func LogSumExp(x []float32) float32 {
	m := float32(math.Inf(-1))
	for _, v := range x {
		if v > m {
			m = v
		}
	}
	return m + float32(math.Log(expSum(x, m)))
}

// expSumGo: Σ exp(x[i] - m) in float64.
func expSumGo(x []float32, m float32) float64 {
	var s float64
	for _, v := range x {
		s += math.Exp(float64(v - m))
	}
	return s
}

// expShiftGo: x[i] = exp(x[i] - m); returns Σ x[i] (softmax's weights and their sum).
func expShiftGo(x []float32, m float32) float32 {
	var l float32
	for i, v := range x {
		e := float32(math.Exp(float64(v - m)))
		x[i] = e
		l += e
	}
	return l
}

// siluMulGo: dst[i] = silu(gate[i])·up[i].
func siluMulGo(dst, gate, up []float32) {
	up = up[:len(gate)]
	dst = dst[:len(gate)]
	for i, v := range gate {
		dst[i] = v / (1 + float32(math.Exp(float64(-v)))) * up[i]
	}
}
