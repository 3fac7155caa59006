package cpu

//go:noescape
func expShiftAVX2(x *float32, n int, m float32) float32

//go:noescape
func siluMulAVX2(dst, gate, up *float32, n int)

// expShiftVec is expShiftGo with the vector kernel; the last len(x)%8 values go through it
// in a padded buffer.
func expShiftVec(x []float32, m float32) float32 {
	n8 := len(x) &^ 7
	var l float32
	if n8 > 0 {
		l = expShiftAVX2(&x[0], n8, m)
	}
	if t := x[n8:]; len(t) > 0 {
		var buf [8]float32
		copy(buf[:], t)
		expShiftAVX2(&buf[0], 8, m)
		for i := range t {
			t[i] = buf[i]
			l += buf[i]
		}
	}
	return l
}

// siluMulVec is siluMulGo with the vector kernel, the tail as expShiftVec's.
func siluMulVec(dst, gate, up []float32) {
	n8 := len(gate) &^ 7
	_, _ = dst[len(gate)-1], up[len(gate)-1]
	if n8 > 0 {
		siluMulAVX2(&dst[0], &gate[0], &up[0], n8)
	}
	if t := gate[n8:]; len(t) > 0 {
		var d, g, u [8]float32
		copy(g[:], t)
		copy(u[:], up[n8:])
		siluMulAVX2(&d[0], &g[0], &u[0], 8)
		copy(dst[n8:], d[:len(t)])
	}
}

//go:noescape
func expSumAVX2(x *float32, n int, m float32) float64

// expSumVec is expSumGo with the vector kernel for whole groups of 8.
func expSumVec(x []float32, m float32) float64 {
	n8 := len(x) &^ 7
	var s float64
	if n8 > 0 {
		s = expSumAVX2(&x[0], n8, m)
	}
	return s + expSumGo(x[n8:], m)
}
