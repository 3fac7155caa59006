// Package ops holds the tensor operations the models call and the contract every backend
// implements: the cpu backend (package ops/cpu, pure Go, the reference) and the gpu backend
// (package ops/gpu, which calls hipkernels). A model is written once against Backend, which
// has only what models call (a backend may keep more ops for its own tests), and describes
// what it asks a backend to hold: weights by a WeightDesc (format, dtype, scales), the KV cache
// by a KVCacheSpec (per layer: kind, heads, head size, dtype, window).
//
// ops imports only the standard library; backends import ops.
package ops

import (
	"errors"
	"fmt"
)

// DType is the element type of a tensor.
type DType uint8

// The element types a checkpoint may store and a backend may hold.
const (
	F32 DType = iota
	F16
	BF16
	// F8E4M3 is float8_e4m3fn (safetensors F8_E4M3): a checkpoint's quantized weights only,
	// never an activation or compute dtype (ParseDType does not accept it).
	F8E4M3
	// U8 is raw bytes (safetensors U8): the packed codes and scales of a quantized format
	// (MXFP4), never an activation or compute dtype (ParseDType does not accept it).
	U8
)

// Size returns the bytes of one element.
func (d DType) Size() int {
	switch d {
	case F32:
		return 4
	case F8E4M3, U8:
		return 1
	}
	return 2
}

func (d DType) String() string {
	switch d {
	case F32:
		return "float32"
	case F16:
		return "float16"
	case BF16:
		return "bfloat16"
	case F8E4M3:
		return "float8_e4m3fn"
	case U8:
		return "uint8"
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// ParseDType accepts safetensors ("BF16"), torch ("bfloat16", "torch.float16") and short ("bf16") spellings.
func ParseDType(s string) (DType, error) {
	switch s {
	case "F32", "float32", "torch.float32", "fp32", "f32", "float":
		return F32, nil
	case "F16", "float16", "torch.float16", "fp16", "f16", "half":
		return F16, nil
	case "BF16", "bfloat16", "torch.bfloat16", "bf16":
		return BF16, nil
	}
	return 0, fmt.Errorf("unsupported dtype %q (want bfloat16, float16 or float32)", s)
}

// Tensor is a backend-owned array. Activations are two-dimensional [rows, cols]; the first
// dimension of an activation buffer is its capacity, and View narrows it to a step's rows.
type Tensor interface {
	Shape() []int
	DType() DType
}

// Backend is what a model needs from a device. Calls are issued in order by one goroutine;
// a backend may queue them (the gpu backend does) and only ReadRows waits for results.
type Backend interface {
	// Name is "cpu" or "gpu".
	Name() string
	// Weight wraps checkpoint bytes (little-endian, encoded as d says) as a parameter: raw's
	// parts one after the other (one part, or the pieces of a fused weight such as q, k and v,
	// so that they need not be joined on the host first). The bytes may be memory-mapped: the
	// backend copies them to the device or keeps referencing them read-only. A format the
	// backend has no kernels for is refused with ErrUnsupportedWeight. The ops that take a
	// weight (Linear, NormLinear, LinearSwiGLU, ...) apply it as its descriptor says.
	Weight(name string, d WeightDesc, shape []int, raw ...[]byte) (Tensor, error)
	// Buffer allocates an activation buffer of capacity [rows, cols].
	Buffer(rows, cols int) Tensor
	// View returns the first rows rows of an activation buffer.
	View(t Tensor, rows int) Tensor
	// NewKVCache allocates the paged cache: per layer, K and V of [numBlocks, blockSize, kvHeads,
	// headDim]. Models call it through NewKVCacheFor, which checks their KVCacheSpec.
	NewKVCache(layers, numBlocks, blockSize, kvHeads, headDim int) (KVCache, error)

	// Embedding writes out[i] = table[ids[i]].
	Embedding(out, table Tensor, ids []int32)
	// RMSNorm: when residual is nil, out = norm(x)*w. Otherwise residual += x first and
	// out = norm(residual)*w (the fused pre-norm residual add of every decoder layer).
	RMSNorm(out, x, residual, w Tensor, eps float32)
	// NormLinear is RMSNorm then Linear: the residual add, pre-norm and first projection of a
	// decoder sublayer, out = (norm(r)*p.Weight)·wᵀ (+ bias) with r = p.Res + p.X (r = p.Res
	// when p.X is nil). It returns the tensor that holds r afterwards, p.Res or p.Spare (see
	// PreNorm); the caller carries the residual stream on in that one and may reuse the other.
	NormLinear(out Tensor, p PreNorm, w, bias Tensor) Tensor
	// Linear writes out = x·wᵀ (+ bias); w is [outFeatures, inFeatures] as in PyTorch.
	Linear(out, x, w, bias Tensor)
	// LinearSwiGLU writes out = (silu(gateUp[:, :c]) * gateUp[:, c:]) · wᵀ, c = w's input width:
	// the SiLU-and-multiply of the fused gate|up projection's output then Linear, which a
	// backend may fuse. act [rows, c] is scratch the backend may write the activation to.
	LinearSwiGLU(out, gateUp, act, w Tensor)
	// RopeWriteKVFused reads q, k and v from the consecutive column ranges of each row of qkv,
	// the fused q|k|v projection's output [rows, q+2*kv], with norm (nil: none) normalises each
	// q and k head (Qwen3's q/k norm), rotates q and k at meta.Positions, writes the rotated q
	// to q (what Attention reads) and stores the rotated k and v into layer's cache at
	// meta.SlotMapping; qkv is left unchanged.
	RopeWriteKVFused(q, qkv Tensor, rope *RoPE, norm *QKNorm, cache KVCache, layer int, meta *AttnMetadata)
	// Attention computes causal attention of q over each sequence's cached context.
	Attention(out, q Tensor, cache KVCache, layer int, meta *AttnMetadata, a AttnShape)
	// GatherRows writes out[i] = x[rows[i]].
	GatherRows(out, x Tensor, rows []int32)
	// ReadRows copies the first len(dst)/cols rows of t to the host as float32, waiting for queued work.
	ReadRows(t Tensor, dst []float32)
	// WriteRows copies host float32 values into the first len(src) elements of t.
	WriteRows(t Tensor, src []float32)

	// The sparse mixture-of-experts blocks (moe.go).
	MoEBackend
}

// PreNorm holds the operands of NormLinear's residual add and RMSNorm.
type PreNorm struct {
	X      Tensor // the previous sublayer's output, added into the residual; nil: nothing to add
	Res    Tensor // the residual stream
	Spare  Tensor // a buffer of Res's shape: the backend writes either norm(r)*Weight into it (and r into Res, as RMSNorm does) or r (leaving Res as it was)
	Weight Tensor // the norm's weight
	Eps    float32
	// Summed says that X is nil and that a ResidualAdder call that reported true last wrote
	// Res, with Spare as its scaled output and Weight as its norm weight: a backend may take
	// Spare and the row's sum of squares that call left instead of computing the norm. The
	// result is the same either way (up to rounding).
	Summed bool
}

// ResidualAdder is a Backend that may add a row-parallel projection's output into the residual
// stream in the projection's own kernel, with the first half of the next RMSNorm: it writes
// scaled = res·normW (normW the next norm's weight) and keeps the row's sum of squares for the
// next NormLinear (called with PreNorm.Summed, Spare = scaled, Weight = normW), so that
// neither the projection's output nor a separate RMSNorm pass goes through memory. Each method
// does what the plain op followed by RMSNorm's residual add (res += out, rounded to the dtype)
// does, where the backend supports the shape, and reports whether it did; when it returns
// false nothing was queued and the caller runs the plain op and passes its output to NormLinear
// as PreNorm.X. The answer depends only on the backend and the shapes, so a captured decode
// step makes the same choice at every replay.
type ResidualAdder interface {
	// LinearResidual: res += x·wᵀ.
	LinearResidual(res, scaled, x, w, normW Tensor) bool
	// LinearSwiGLUResidual: res += (silu(gateUp[:, :c]) * gateUp[:, c:]) · wᵀ, c = w's input width.
	LinearSwiGLUResidual(res, scaled, gateUp, w, normW Tensor) bool
}

// NormThenLinear is NormLinear without a fused kernel: RMSNorm into p.Spare (r into p.Res),
// then Linear from p.Spare. It returns p.Res.
func NormThenLinear(be Backend, out Tensor, p PreNorm, w, bias Tensor) Tensor {
	if p.X != nil {
		be.RMSNorm(p.Spare, p.X, p.Res, p.Weight, p.Eps)
	} else {
		be.RMSNorm(p.Spare, p.Res, nil, p.Weight, p.Eps)
	}
	be.Linear(out, p.Spare, w, bias)
	return p.Res
}

// Group is a tensor-parallel group of ranks, each with its own backend. AllReduce replaces t
// on every rank by the element-wise sum of all ranks' t; every rank must call it, in the same
// order, with tensors of the same shape. The cpu backend's group runs in-process; the gpu
// backend's goes through NCCL/RCCL.
type Group interface {
	Size() int
	AllReduce(rank int, t Tensor)
}

// KVCache is the paged key/value store of all layers, owned by a backend.
type KVCache interface {
	// Geometry returns numBlocks, blockSize, kvHeads, headDim.
	Geometry() (numBlocks, blockSize, kvHeads, headDim int)
}

// AttnShape describes one attention layer's heads and the options of its softmax.
type AttnShape struct {
	NumHeads, NumKVHeads, HeadDim int
	Scale                         float32
	// Window > 0 is a sliding window: the query at position p attends to the keys at
	// positions max(0, p-Window+1)..p, Window positions counting its own (transformers'
	// sliding_window_causal mask, kv > q - window; vLLM's sliding_window). 0: the whole context.
	// A backend whose Attention does not apply it does not report it in AttentionFeatures.
	Window int
	// Sinks, when not nil, are this rank's heads' sink logits [NumHeads], a weight as
	// Backend.Weight holds it (the checkpoint's dtype; read as float32) (gpt-oss's
	// self_attn.sinks, split by heads under tensor parallelism): each head's softmax has one
	// more term in its denominator, p_j = e^{s_j} / (Σ_k e^{s_k} + e^{S_h}), which takes weight
	// from every key and attends to no value. nil: none.
	Sinks Tensor
}

// String prints the shape as %+v would, with Window and Sinks only where the layer has them.
func (a AttnShape) String() string {
	out := fmt.Sprintf("{NumHeads:%d NumKVHeads:%d HeadDim:%d Scale:%v", a.NumHeads, a.NumKVHeads, a.HeadDim, a.Scale)
	if a.Window != 0 {
		out += fmt.Sprintf(" Window:%d", a.Window)
	}
	if a.Sinks != nil {
		out += fmt.Sprintf(" Sinks:%v", a.Sinks.Shape())
	}
	return out + "}"
}

// ErrUnsupportedAttention is returned at load for an attention layer whose options
// (AttnShape.Window, AttnShape.Sinks) the backend's Attention does not apply.
var ErrUnsupportedAttention = errors.New("unsupported attention")

// AttnFeatures are the AttnShape options a backend's Attention applies.
type AttnFeatures struct {
	Window bool // AttnShape.Window > 0
	Sinks  bool // AttnShape.Sinks
}

// AttentionFeatures is a Backend whose Attention applies some of AttnShape's options; a
// backend without it applies none (full causal attention only, no sinks) and must be given
// none: CheckAttention refuses such a layer at load rather than let it compute wrong results.
type AttentionFeatures interface {
	AttentionFeatures() AttnFeatures
}

// CheckAttention returns nil when be's Attention computes a as described, else an error
// wrapping ErrUnsupportedAttention that names what is missing.
func CheckAttention(be Backend, a AttnShape) error {
	var f AttnFeatures
	if af, ok := be.(AttentionFeatures); ok {
		f = af.AttentionFeatures()
	}
	switch {
	case a.Window < 0:
		return fmt.Errorf("%w: sliding window %d", ErrUnsupportedAttention, a.Window)
	case a.Window > 0 && !f.Window:
		return fmt.Errorf("%w on the %s backend: sliding-window attention (window %d)", ErrUnsupportedAttention, be.Name(), a.Window)
	case a.Sinks != nil && !f.Sinks:
		return fmt.Errorf("%w on the %s backend: attention sinks", ErrUnsupportedAttention, be.Name())
	case a.Sinks != nil && (len(a.Sinks.Shape()) != 1 || a.Sinks.Shape()[0] != a.NumHeads):
		return fmt.Errorf("%w: sinks of shape %v for %d heads", ErrUnsupportedAttention, a.Sinks.Shape(), a.NumHeads)
	}
	return nil
}

// AttnMetadata is the flattened varlen batch: prefill chunks and decodes side by side.
// Sequence s owns query rows QueryStart[s]..QueryStart[s+1]; its context is SeqLens[s] tokens
// (cached plus new), stored in blocks BlockTables[s*BlockTableStride:].
type AttnMetadata struct {
	Positions        []int32 // per token
	SlotMapping      []int32 // per token: block*blockSize + offset
	QueryStart       []int32 // per sequence, plus one
	SeqLens          []int32 // per sequence
	BlockTables      []int32 // per sequence, BlockTableStride entries
	BlockTableStride int
}

// NumSeqs returns the number of sequences in the batch.
func (m *AttnMetadata) NumSeqs() int { return len(m.SeqLens) }

// NumTokens returns the number of query tokens in the batch.
func (m *AttnMetadata) NumTokens() int { return len(m.Positions) }
