package hipkernels

// FP8Weight is a block-scaled FP8 weight on the device (see atomk_gemv_fp8 in src/atomk.h):
// float8_e4m3fn codes [N, K] in rows Stride bytes apart (K rounded up to 16, zero-padded) and
// float32 scales [ceil(N/BlockN), ceil(K/BlockK)].
type FP8Weight struct {
	Codes, Scales  Ptr
	N, K, Stride   int
	BlockN, BlockK int
}

// scaleCols is the scales' row length.
func (w *FP8Weight) scaleCols() int { return (w.K + w.BlockK - 1) / w.BlockK }

// GemvFP8 queues out[m, N] = x[m, K] · wᵀ (+ bias[N]; 0: none), the weight read at one byte an
// element.
func (l *Lib) GemvFP8(dt DType, out, x Ptr, w *FP8Weight, bias Ptr, m int, s Stream) error {
	return l.call("atomk_gemv_fp8", func() int32 {
		return l.f.gemvFP8(int32(dt), uintptr(out), uintptr(x), uintptr(w.Codes), uintptr(w.Scales), uintptr(bias), int32(m),
			int32(w.N), int32(w.K), int32(w.Stride), int32(w.BlockN), int32(w.BlockK), int32(w.scaleCols()), uintptr(s))
	})
}

// DequantFP8 queues out[N, K] (dt) = the dequantized weight.
func (l *Lib) DequantFP8(dt DType, out Ptr, w *FP8Weight, s Stream) error {
	return l.call("atomk_dequant_fp8", func() int32 {
		return l.f.dequantFP8(int32(dt), uintptr(out), uintptr(w.Codes), uintptr(w.Scales), int32(w.N), int32(w.K),
			int32(w.Stride), int32(w.BlockN), int32(w.BlockK), int32(w.scaleCols()), uintptr(s))
	})
}
