package hipkernels

// FP8Weight is a block-scaled FP8 weight on the device (see atomk_gemv_fp8 in src/atomk.h):
// float8_e4m3fn codes [N, K] in rows Stride bytes apart (K rounded up to 16, zero-padded) and
// float32 scales [ceil(N/BlockN), ceil(K/BlockK)] in rows ScaleStride floats apart.
type FP8Weight struct {
	Codes, Scales  Ptr
	N, K, Stride   int
	BlockN, BlockK int
	ScaleStride    int
}

// FP8ScaleStride is the scale row stride the FP8 GEMM takes: ceil(k/blockK) rounded up to 4
// (cuBLASLt's 128x128 block scales come in 16-byte rows).
func FP8ScaleStride(k, blockK int) int { return ((k+blockK-1)/blockK + 3) / 4 * 4 }

// FP8ActBytes is the size of the activation buffer GemmFP8 quantizes m rows of width k into:
// the codes in rows of k rounded up to 16 bytes, then a float32 scale per row and 128 columns.
func FP8ActBytes(m, k int) int { return m*((k+15)/16*16) + 4*m*((k+127)/128) }

// GemvFP8 queues out[m, N] = x[m, K] · wᵀ (+ bias[N]; 0: none), the weight read at one byte an
// element.
func (l *Lib) GemvFP8(dt DType, out, x Ptr, w *FP8Weight, bias Ptr, m int, s Stream) error {
	return l.call("atomk_gemv_fp8", func() int32 {
		return l.f.gemvFP8(int32(dt), uintptr(out), uintptr(x), uintptr(w.Codes), uintptr(w.Scales), uintptr(bias), int32(m),
			int32(w.N), int32(w.K), int32(w.Stride), int32(w.BlockN), int32(w.BlockK), int32(w.ScaleStride), uintptr(s))
	})
}

// DequantFP8 queues out[N, K] (dt) = the dequantized weight.
func (l *Lib) DequantFP8(dt DType, out Ptr, w *FP8Weight, s Stream) error {
	return l.call("atomk_dequant_fp8", func() int32 {
		return l.f.dequantFP8(int32(dt), uintptr(out), uintptr(w.Codes), uintptr(w.Scales), int32(w.N), int32(w.K),
			int32(w.Stride), int32(w.BlockN), int32(w.BlockK), int32(w.ScaleStride), uintptr(s))
	})
}

// QuantFP8 queues the activations' FP8 quantization (atomk_quant_fp8): codes [m, k rounded up to
// 16] and scales [ceil(k/128), m] of x [m, k], one scale a row and 128 columns.
func (l *Lib) QuantFP8(dt DType, codes, scales, x Ptr, m, k int, s Stream) error {
	return l.call("atomk_quant_fp8", func() int32 {
		return l.f.quantFP8(int32(dt), uintptr(codes), uintptr(scales), uintptr(x), int32(m), int32(k), int32((k+15)/16*16),
			uintptr(s))
	})
}

// GemmFP8 queues out[m, N] = x[m, K] · wᵀ (+ bias[N]; 0: none) on the tensor cores in FP8: x
// quantized into act (FP8ActBytes(m, K)), then the block-scaled GEMM. An error with
// StatusUnsupported (nothing queued) means this build, weight or shape has no such GEMM.
func (l *Lib) GemmFP8(h Blas, s Stream, dt DType, out, x, act Ptr, w *FP8Weight, bias Ptr, m int) error {
	return l.call("atomk_gemm_fp8", func() int32 {
		return l.f.gemmFP8(uintptr(h), uintptr(s), int32(dt), uintptr(out), uintptr(x), uintptr(act), uintptr(w.Codes),
			uintptr(w.Scales), uintptr(bias), int32(m), int32(w.N), int32(w.K), int32(w.Stride), int32(w.BlockN),
			int32(w.BlockK), int32(w.ScaleStride))
	})
}
