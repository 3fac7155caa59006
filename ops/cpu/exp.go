package cpu

import "math"

// The exp kernels of the vector float32 path (Options.VectorFloat32): the portable loops
// below, replaced at start by vector ones (exp_amd64.go) that compute exp within 2 ulp instead
// of rounding float64's. The exact reference keeps math.Exp.
var (
	expShift = expShiftGo
	siluMul  = siluMulGo
)

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
