package ops

import (
	"errors"
	"fmt"
)

// ErrUnsupportedMoE is returned by Backend.NewMoE where the backend has no mixture-of-experts
// kernels (or none for the spec), so that loading a MoE checkpoint fails before any expert
// weight is uploaded.
var ErrUnsupportedMoE = errors.New("unsupported mixture-of-experts layer")

// Limits of a MoESpec: the largest published routers (DeepSeek-V3 256 experts top-8, Qwen3-235B
// 128 top-8, Llama 4 Maverick 128 top-1, Kimi K2 384 top-8) with room to spare; a GPU router
// kernel holds a row's E probabilities and k winners in registers.
const (
	MaxExperts = 512
	MaxTopK    = 16
)

// MoESpec describes one kind of sparse MoE block on one rank: what a backend sizes its routing
// and expert workspaces from, once at load.
type MoESpec struct {
	Experts int // E, the router's outputs
	TopK    int // k experts per token
	Hidden  int // H, the block's input and output width
	Inter   int // this rank's expert width I (moe_intermediate_size / ranks)
	// MaxTokens is the most rows one call routes.
	MaxTokens int
	// Renormalize divides the k chosen probabilities by their sum (norm_topk_prob; Mixtral always).
	Renormalize bool
}

// Check refuses a spec outside the limits or with k > E.
func (s MoESpec) Check() error {
	switch {
	case s.Experts < 1 || s.Experts > MaxExperts:
		return fmt.Errorf("%w: %d experts (want 1 to %d)", ErrUnsupportedMoE, s.Experts, MaxExperts)
	case s.TopK < 1 || s.TopK > MaxTopK || s.TopK > s.Experts:
		return fmt.Errorf("%w: top-%d of %d experts (want 1 to min(%d, experts))", ErrUnsupportedMoE, s.TopK, s.Experts, MaxTopK)
	case s.Hidden < 1 || s.Inter < 1 || s.MaxTokens < 1:
		return fmt.Errorf("%w: hidden %d, expert width %d, %d tokens", ErrUnsupportedMoE, s.Hidden, s.Inter, s.MaxTokens)
	}
	return nil
}

// MoERouting is a backend's workspace for one MoESpec: the routing of the last MoERoute call
// (per token, k expert ids and weights, and whatever grouping of tokens by expert the backend's
// expert GEMMs read) and the scratch of MoEExperts. Layers of one spec share one, since they
// run one after the other.
type MoERouting interface {
	// Spec is the spec it was made for.
	Spec() MoESpec
	// Read copies the last routing of rows tokens to the host (waiting for queued work): ids and
	// weights [rows, k], row-major, each row's experts in descending weight (ties: lower id first).
	Read(rows int, ids []int32, weights []float32)
}

// MoEBackend is the mixture-of-experts part of Backend: vLLM's fused_moe, split at the points
// a family composes (the router's logits come from a replicated Linear; the shared expert, when
// the family has one, from the plain linear ops).
type MoEBackend interface {
	// NewMoE allocates the routing and expert workspaces of spec, or returns an error wrapping
	// ErrUnsupportedMoE.
	NewMoE(spec MoESpec) (MoERouting, error)
	// MoERoute routes each row of logits [rows, E]: softmax in float32 over all E experts, the
	// k largest probabilities (ties: the lower expert id first, as vLLM's topk_softmax kernel
	// breaks them), divided by their sum when spec.Renormalize.
	MoERoute(r MoERouting, logits Tensor)
	// MoEExperts writes out[t] = Σ_j w[t,j] · down_e((silu(gate_e(x[t])) * up_e(x[t]))) over the
	// k experts e = id[t,j] that the last MoERoute on r chose for row t, with w13 [E, 2I, H]
	// (each expert's gate rows, then its up rows) and w2 [E, H, I]; then, when shared is not
	// nil, adds sigmoid(sharedGate[t, 0]) · shared[t] (Qwen2-MoE's gated shared expert). Under
	// tensor parallelism I is the rank's slice and out is a partial sum for the caller to reduce.
	MoEExperts(out, x Tensor, r MoERouting, w13, w2, shared, sharedGate Tensor)
}
