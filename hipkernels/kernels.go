package hipkernels

import (
	"sync"
	"unsafe"
)

// outs holds the int32 out-parameters of one library call. A local variable whose address
// goes to the library escapes to the heap, which is an allocation per call of the eager
// decode path; pooled ones are reused (a Lib is shared by the backends of all devices, so
// one per Lib would race).
type outs struct {
	a, b int32
	n    uint64
}

var outPool = sync.Pool{New: func() any { return new(outs) }}

func getOuts() *outs {
	o := outPool.Get().(*outs)
	*o = outs{}
	return o
}

// BlasCreate makes a BLAS handle (with a 32 MiB workspace) for the current device.
func (l *Lib) BlasCreate() (Blas, error) {
	var h uintptr
	err := l.call("atomk_blas_create", func() int32 { return l.f.blasNew(&h) })
	return Blas(h), err
}

// BlasDestroy releases a BLAS handle.
func (l *Lib) BlasDestroy(h Blas) error {
	return l.call("atomk_blas_destroy", func() int32 { return l.f.blasDel(uintptr(h)) })
}

// Gemm queues out[m,n] = x[m,k] · w[n,k]ᵀ, w of dtype wdt and the other operands of dt, float
// accumulation. The library multiplies weights of the activations' dtype only (wdt == dt);
// another wdt is StatusUnsupported.
func (l *Lib) Gemm(h Blas, s Stream, dt, wdt DType, out, x, w Ptr, m, n, k int) error {
	return l.call("atomk_gemm", func() int32 {
		return l.f.gemm(uintptr(h), uintptr(s), int32(dt), int32(wdt), uintptr(out), uintptr(x), uintptr(w), int32(m), int32(n), int32(k))
	})
}

// GemmBias queues out[m,n] = x[m,k] · w[n,k]ᵀ + bias[n] (bias 0: none). Small m of a 16-bit dtype
// runs on the skinny kernel (see SetGemvMaxM), the rest through the BLAS.
func (l *Lib) GemmBias(h Blas, s Stream, dt, wdt DType, out, x, w, bias Ptr, m, n, k int) error {
	return l.call("atomk_gemm_bias", func() int32 {
		return l.f.gemmBias(uintptr(h), uintptr(s), int32(dt), int32(wdt), uintptr(out), uintptr(x), uintptr(w), uintptr(bias),
			int32(m), int32(n), int32(k))
	})
}

// GemmSwiGLU queues out[m,n] = (silu(gateUp[:, :k])·gateUp[:, k:]) · w[n,k]ᵀ, gateUp [m, 2k]: one
// skinny kernel where it serves the shape, else SiLU-and-multiply into act [m, k] then the GEMM.
func (l *Lib) GemmSwiGLU(h Blas, s Stream, dt, wdt DType, out, gateUp, w, act Ptr, m, n, k int) error {
	return l.call("atomk_gemm_swiglu", func() int32 {
		return l.f.gemmSwiGLU(uintptr(h), uintptr(s), int32(dt), int32(wdt), uintptr(out), uintptr(gateUp), uintptr(w), uintptr(act),
			int32(m), int32(n), int32(k))
	})
}

// GemmResidual queues res[1,n] += x · w[n,k]ᵀ in one skinny kernel (swiglu: x is the fused
// gate|up output [1, 2k], the input silu(gate)·up), each sum r rounded as RMSNorm's residual add
// stores it, scaled = r·normW (the next RMSNorm's weight), and the row's sum of r² left in sums
// (float32, 16-byte aligned, room for maxSums) as count partial sums for GemmNormSummed;
// reports true. Where the kernel does not serve it (see atomk_gemm_residual in src/atomk.h) it
// queues nothing and reports false.
func (l *Lib) GemmResidual(h Blas, s Stream, dt, wdt DType, res, scaled, normW, x, w Ptr, m, n, k int, swiglu bool, sums Ptr,
	maxSums int) (count int, fused bool, err error) {
	o := getOuts()
	defer outPool.Put(o)
	sw := int32(0)
	if swiglu {
		sw = 1
	}
	err = l.call("atomk_gemm_residual", func() int32 {
		return l.f.gemmResidual(uintptr(h), uintptr(s), int32(dt), int32(wdt), uintptr(res), uintptr(scaled), uintptr(normW), uintptr(x),
			uintptr(w), int32(m), int32(n), int32(k), sw, uintptr(sums), int32(maxSums), &o.a, &o.b)
	})
	return int(o.a), o.b == 1, err
}

// GemmNormSummed queues out[1,n] = (scaled·rsqrt(Σ sums/k + eps)) · w[n,k]ᵀ (+ bias), scaled,
// sums and count as GemmResidual left them, and reports true; where the kernel does not serve
// it, nothing is queued and it reports false (the caller runs RMSNorm and GemmBias).
func (l *Lib) GemmNormSummed(h Blas, s Stream, dt, wdt DType, out, scaled, sums Ptr, count int, eps float32, w, bias Ptr,
	m, n, k int) (bool, error) {
	o := getOuts()
	defer outPool.Put(o)
	err := l.call("atomk_gemm_norm_summed", func() int32 {
		return l.f.gemmSummed(uintptr(h), uintptr(s), int32(dt), int32(wdt), uintptr(out), uintptr(scaled), uintptr(sums), int32(count),
			eps, uintptr(w), uintptr(bias), int32(m), int32(n), int32(k), &o.a)
	})
	return o.a == 1, err
}

// SetGemvMaxM sets the largest m that h's GEMMs send to the skinny kernel (0: never; negative:
// the default rule, m <= 2, or m <= 4 where n <= k).
func (l *Lib) SetGemvMaxM(h Blas, maxM int) error {
	return l.call("atomk_blas_set_gemv_max_m", func() int32 { return l.f.setGemvMaxM(uintptr(h), int32(maxM)) })
}

// NcclUniqueID makes the id that every rank of a new communicator passes to NcclInit.
func (l *Lib) NcclUniqueID() ([128]byte, error) {
	var id [128]byte
	err := l.call("atomk_nccl_unique_id", func() int32 { return l.f.ncclID(unsafe.Pointer(&id[0])) })
	return id, err
}

// NcclInit joins communicator id as rank of nranks, on the current device.
func (l *Lib) NcclInit(nranks int, id [128]byte, rank int) (Comm, error) {
	var c uintptr
	err := l.call("atomk_nccl_init", func() int32 { return l.f.ncclInit(&c, int32(nranks), unsafe.Pointer(&id[0]), int32(rank)) })
	return Comm(c), err
}

// NcclAllReduceSum queues recv = Σ_ranks send over count elements of dt (send may equal recv).
func (l *Lib) NcclAllReduceSum(c Comm, dt DType, send, recv Ptr, count int, s Stream) error {
	return l.call("atomk_nccl_all_reduce_sum", func() int32 {
		return l.f.ncclAllReduce(uintptr(c), int32(dt), uintptr(send), uintptr(recv), uint64(count), uintptr(s))
	})
}

// NcclDestroy releases a communicator.
func (l *Lib) NcclDestroy(c Comm) error {
	return l.call("atomk_nccl_destroy", func() int32 { return l.f.ncclDel(uintptr(c)) })
}

// CopySmallMax is the most bytes CopySmall moves.
const CopySmallMax = 64 << 10

// CopySmall queues a copy of bytes (at most CopySmallMax) from src to dst by a kernel; either
// may be pinned host memory from HostAlloc, so per-step uploads and readbacks put no
// copy-engine operation between the step's kernels.
func (l *Lib) CopySmall(dst, src Ptr, bytes int, s Stream) error {
	return l.call("atomk_copy_small", func() int32 { return l.f.copySmall(uintptr(dst), uintptr(src), uint64(bytes), uintptr(s)) })
}

// StepLayout places a decode step's compact inputs (LoadStepInputs): Regions arrays of N int32
// words, then Tail words, then Extra words; on the device the regions are M words apart, the
// tail follows them, and the extra words start at word ExtraAt.
type StepLayout struct {
	Regions, N, M, Tail, Extra, ExtraAt int
}

// LoadStepInputs queues one kernel that writes a decode step's inputs, compact at src (pinned
// host or device memory), into dst as l places them. With feedN > 0 the first feedN words of
// region 0 take the int32 tokens at feed (device memory) instead, a negative token becoming 0.
// The kernel reads host memory over the bus: for a large input, copy it to the device first.
func (l *Lib) LoadStepInputs(dst, src Ptr, sl StepLayout, feed Ptr, feedN int, s Stream) error {
	return l.call("atomk_load_step_inputs", func() int32 {
		return l.f.loadStep(uintptr(dst), uintptr(src), int32(sl.Regions), int32(sl.N), int32(sl.M), int32(sl.Tail),
			int32(sl.Extra), int32(sl.ExtraAt), uintptr(feed), int32(feedN), uintptr(s))
	})
}

// Fill queues dst[0:n] = value.
func (l *Lib) Fill(dt DType, dst Ptr, n int, value float32, s Stream) error {
	return l.call("atomk_fill", func() int32 { return l.f.fill(int32(dt), uintptr(dst), uint64(n), value, uintptr(s)) })
}

// GatherRows queues out[i,:] = src[rows[i],:] for i < n; rows is an int32 device array and src
// has srcRows rows of cols elements.
func (l *Lib) GatherRows(dt DType, out, src, rows Ptr, n, cols, srcRows int, s Stream) error {
	return l.call("atomk_gather_rows", func() int32 {
		return l.f.gatherRows(int32(dt), uintptr(out), uintptr(src), uintptr(rows), int32(n), int32(cols), int32(srcRows), uintptr(s))
	})
}

// RMSNorm queues out = norm(x)·w per row, or with residual != 0: residual += x, out = norm(residual)·w.
func (l *Lib) RMSNorm(dt DType, out, x, residual, w Ptr, rows, cols int, eps float32, s Stream) error {
	return l.call("atomk_rms_norm", func() int32 {
		return l.f.rmsNorm(int32(dt), uintptr(out), uintptr(x), uintptr(residual), uintptr(w), int32(rows), int32(cols), eps, uintptr(s))
	})
}

// HeadRMSNorm queues the in-place norm of each headDim-wide head of x [rows, heads*headDim].
func (l *Lib) HeadRMSNorm(dt DType, x, w Ptr, rows, heads, headDim int, eps float32, s Stream) error {
	return l.call("atomk_head_rms_norm", func() int32 {
		return l.f.headRMSNorm(int32(dt), uintptr(x), uintptr(w), int32(rows), int32(heads), int32(headDim), eps, uintptr(s))
	})
}

// SiluMul queues out = silu(gate)·up over [rows, cols].
func (l *Lib) SiluMul(dt DType, out, gate, up Ptr, rows, cols int, s Stream) error {
	return l.call("atomk_silu_mul", func() int32 {
		return l.f.siluMul(int32(dt), uintptr(out), uintptr(gate), uintptr(up), int32(rows), int32(cols), uintptr(s))
	})
}

// SiluMulFused queues out[r,c] = silu(gateUp[r,c])·gateUp[r,cols+c], out [rows, cols].
func (l *Lib) SiluMulFused(dt DType, out, gateUp Ptr, rows, cols int, s Stream) error {
	return l.call("atomk_silu_mul_fused", func() int32 {
		return l.f.siluMulFused(int32(dt), uintptr(out), uintptr(gateUp), int32(rows), int32(cols), uintptr(s))
	})
}

// SplitCols queues the split of each row of src [rows, ca+cb+cc] into a, b and c (cc may be 0,
// c then 0).
func (l *Lib) SplitCols(dt DType, a, b, c, src Ptr, rows, ca, cb, cc int, s Stream) error {
	return l.call("atomk_split_cols", func() int32 {
		return l.f.splitCols(int32(dt), uintptr(a), uintptr(b), uintptr(c), uintptr(src), int32(rows), int32(ca),
			int32(cb), int32(cc), uintptr(s))
	})
}

// AddBias queues out[r,:] += bias over [rows, cols].
func (l *Lib) AddBias(dt DType, out, bias Ptr, rows, cols int, s Stream) error {
	return l.call("atomk_add_bias", func() int32 {
		return l.f.addBias(int32(dt), uintptr(out), uintptr(bias), int32(rows), int32(cols), uintptr(s))
	})
}

// RopeArgs are the operands of RopeWriteKV (see atomk_rope_write_kv in src/atomk.h).
type RopeArgs struct {
	Q, K, V, KCache, VCache Ptr
	Positions, Slots        Ptr // int32 [Tokens]
	InvFreq                 Ptr // float32 [RotaryDim/2]
	AttnFactor              float32
	Tokens, QHeads, KVHeads int
	HeadDim, RotaryDim      int
	NumSlots                int64 // cache rows: blocks * block size
	// QNorm and KNorm (RopeWriteKVFused only; 0: none) are [HeadDim] weights of an RMSNorm of
	// every q and k head before the rotation (Qwen3), with NormEps.
	QNorm, KNorm Ptr
	NormEps      float32
}

// RopeWriteKV queues the neox RoPE of q and k in place and the store of k and v into the caches.
func (l *Lib) RopeWriteKV(dt DType, a *RopeArgs, s Stream) error {
	return l.call("atomk_rope_write_kv", func() int32 {
		return l.f.ropeWriteKV(int32(dt), uintptr(a.Q), uintptr(a.K), uintptr(a.V), uintptr(a.KCache), uintptr(a.VCache),
			uintptr(a.Positions), uintptr(a.Slots), uintptr(a.InvFreq), a.AttnFactor, int32(a.Tokens), int32(a.QHeads),
			int32(a.KVHeads), int32(a.HeadDim), int32(a.RotaryDim), a.NumSlots, uintptr(s))
	})
}

// RopeWriteKVFused queues the neox RoPE of q and k read from the fused q|k|v rows at a.Q
// ([Tokens, (QHeads+2*KVHeads)*HeadDim]; a.K and a.V unused), q written to qOut
// [Tokens, QHeads*HeadDim], k and v stored into the caches; with a.QNorm and a.KNorm the heads
// are RMS-normalised first.
func (l *Lib) RopeWriteKVFused(dt DType, qOut Ptr, a *RopeArgs, s Stream) error {
	return l.call("atomk_rope_write_kv_fused", func() int32 {
		return l.f.ropeWriteKVFused(int32(dt), uintptr(qOut), uintptr(a.Q), uintptr(a.KCache), uintptr(a.VCache),
			uintptr(a.Positions), uintptr(a.Slots), uintptr(a.InvFreq), a.AttnFactor, uintptr(a.QNorm), uintptr(a.KNorm),
			a.NormEps, int32(a.Tokens), int32(a.QHeads), int32(a.KVHeads), int32(a.HeadDim), int32(a.RotaryDim),
			a.NumSlots, uintptr(s))
	})
}

// AttentionArgs are the operands of PagedAttention (see atomk_paged_attention in src/atomk.h).
type AttentionArgs struct {
	Out, Q, KCache, VCache Ptr
	TokenSeq, Positions    Ptr // int32 [Tokens]
	BlockTables            Ptr // int32 [seqs * BlockTableStride]
	BlockTableStride       int
	Tokens                 int
	NumHeads, NumKVHeads   int
	HeadDim, BlockSize     int
	Scale                  float32
	MaxCtx                 int // the largest positions[t]+1 of the batch
	Window                 int // sliding window: a token at p attends to max(0, p-Window+1)..p; 0: none
	Sinks                  Ptr // float32 [NumHeads] sink logits in the softmax's denominator; 0: none
	Workspace              Ptr // float scratch of WorkspaceBytes, at least PagedAttentionWorkspace's size
	WorkspaceBytes         int
}

// PagedAttentionWorkspace returns the scratch bytes PagedAttention needs for this shape and
// sliding window (0: none) (0 bytes when the batch fills the GPU without splitting the context).
func (l *Lib) PagedAttentionWorkspace(tokens, numHeads, numKVHeads, headDim, maxCtx, window int) (int, error) {
	o := getOuts()
	defer outPool.Put(o)
	err := l.call("atomk_paged_attention_workspace", func() int32 {
		return l.f.attnWorkspace(int32(tokens), int32(numHeads), int32(numKVHeads), int32(headDim), int32(maxCtx),
			int32(window), &o.n)
	})
	return int(o.n), err
}

// PagedAttention queues causal attention of every query token over its sequence's cached context.
func (l *Lib) PagedAttention(dt DType, a *AttentionArgs, s Stream) error {
	return l.call("atomk_paged_attention", func() int32 {
		return l.f.pagedAttention(int32(dt), uintptr(a.Out), uintptr(a.Q), uintptr(a.KCache), uintptr(a.VCache),
			uintptr(a.TokenSeq), uintptr(a.Positions), uintptr(a.BlockTables), int32(a.BlockTableStride), int32(a.Tokens),
			int32(a.NumHeads), int32(a.NumKVHeads), int32(a.HeadDim), int32(a.BlockSize), a.Scale, int32(a.MaxCtx),
			int32(a.Window), uintptr(a.Sinks), uintptr(a.Workspace), uint64(a.WorkspaceBytes), uintptr(s))
	})
}

// ArgmaxRows queues out[r] = argmax of row r of x [rows, cols] (int32 device output; first index
// on ties, NaN never wins).
func (l *Lib) ArgmaxRows(dt DType, out, x Ptr, rows, cols int, s Stream) error {
	return l.call("atomk_argmax_rows", func() int32 {
		return l.f.argmaxRows(int32(dt), uintptr(out), uintptr(x), int32(rows), int32(cols), uintptr(s))
	})
}
