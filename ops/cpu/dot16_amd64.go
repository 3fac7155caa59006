package cpu

//go:noescape
func dotF16x4AVX2(w *uint16, x *float32, n, xstride int, out *float32)

//go:noescape
func dotF16x1AVX2(w *uint16, x *float32, n, xstride int, out *float32)

//go:noescape
func dotBF16x4AVX2(w *uint16, x *float32, n, xstride int, out *float32)

//go:noescape
func dotBF16x1AVX2(w *uint16, x *float32, n, xstride int, out *float32)

var dot16KernelsAVX2 = [2]*dot16Kernels{
	{dotF16x4AVX2, dotF16x1AVX2},
	{dotBF16x4AVX2, dotBF16x1AVX2},
}

// useDot16AVX2 installs the 16-bit weight kernels (with the AVX2 set).
func useDot16AVX2() { dot16 = dot16KernelsAVX2 }
