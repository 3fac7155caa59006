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

// maxLimit bounds ActSwiGLUClamped's alpha and limit (gpt-oss: 1.702 and 7): finite and far
// from overflowing float32 arithmetic.
const maxLimit = 1e6

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

	// DeepSeek's routing (the zero values are the softmax top-k above; a backend that routes
	// only that refuses the others with ErrUnsupportedMoE).

	// Scoring turns the router's logits into scores: softmax (V2) or sigmoid (V3).
	Scoring MoEScoring
	// Groups > 0 limits the choice to the TopKGroups best of Groups equal groups of experts
	// (n_group, topk_group): a group scores its best expert, or the sum of its best two biased
	// scores when Bias (vLLM's grouped_topk).
	Groups, TopKGroups int
	// Bias: the experts are chosen by score + a per-expert bias (DeepSeek-V3's
	// e_score_correction_bias, passed to MoEBiasRouter.MoERouteBias) and weighted by the
	// unbiased score.
	Bias bool
	// Scale multiplies the final weights (routed_scaling_factor); 0 means 1.
	Scale float32
	// SharedPlain: MoEExperts' shared output is added unscaled (DeepSeek's shared experts take
	// no gate; sharedGate is nil).
	SharedPlain bool

	// gpt-oss's experts (the zero values are the SwiGLU experts without biases).

	// Activation is what the experts apply to their gate and up projections.
	Activation MoEActivation
	// Alpha and Limit are ActSwiGLUClamped's sigmoid gain and clamp (swiglu_alpha 1.702,
	// swiglu_limit 7); 0 under ActSwiGLU.
	Alpha, Limit float32
	// ExpertBias: the experts' projections have biases (ExpertWeights.B13, B2).
	ExpertBias bool
}

// MoEActivation is the activation between an expert's gate|up and down projections.
type MoEActivation uint8

// The expert activations.
const (
	// ActSwiGLU is silu(gate) · up.
	ActSwiGLU MoEActivation = iota
	// ActSwiGLUClamped is gpt-oss's: gate = min(gate, Limit), up = clamp(up, -Limit, Limit),
	// then (up + 1) · gate · sigmoid(Alpha · gate).
	ActSwiGLUClamped
)

// ExpertWeights are a MoE layer's stacked experts on one rank, as MoEExperts applies them.
type ExpertWeights struct {
	// W13 [E, 2I, H]: each expert's gate rows, then its up rows (this rank's slice of I each);
	// W2 [E, H, I]: each expert's down projection (this rank's columns).
	W13, W2 Tensor
	// B13 [E, 2I] (gate then up, as W13's rows) and B2 [E, H] are the projections' biases,
	// given exactly when the spec has ExpertBias; B2 may still be nil on a rank other than the
	// first under tensor parallelism, so that the reduced sum adds it once.
	B13, B2 Tensor
}

// String prints the spec as %+v would, with DeepSeek's options only where it has them (so the
// plain specs of the other families print as they always have).
func (s MoESpec) String() string {
	out := fmt.Sprintf("{Experts:%d TopK:%d Hidden:%d Inter:%d MaxTokens:%d Renormalize:%t",
		s.Experts, s.TopK, s.Hidden, s.Inter, s.MaxTokens, s.Renormalize)
	if !s.Plain() {
		out += fmt.Sprintf(" Scoring:%d Groups:%d TopKGroups:%d Bias:%t Scale:%v SharedPlain:%t",
			s.Scoring, s.Groups, s.TopKGroups, s.Bias, s.Scale, s.SharedPlain)
		if s.Activation != ActSwiGLU || s.ExpertBias {
			out += fmt.Sprintf(" Activation:%d Alpha:%v Limit:%v ExpertBias:%t", s.Activation, s.Alpha, s.Limit, s.ExpertBias)
		}
	}
	return out + "}"
}

// MoEScoring is how a router's logits become expert scores.
type MoEScoring uint8

// The scoring functions.
const (
	// ScoreSoftmax: softmax over all E logits, then the k largest probabilities.
	ScoreSoftmax MoEScoring = iota
	// ScoreSigmoid: sigmoid of each logit (DeepSeek-V3).
	ScoreSigmoid
	// ScoreTopKSoftmax: the k largest logits (ties: the lower id first), then the softmax over
	// those k alone (gpt-oss, whose router Linear has a bias the caller adds). The weights sum
	// to 1 already, so Renormalize changes nothing; Groups, Bias and Scale are refused with it.
	ScoreTopKSoftmax
)

// Plain reports whether the spec routes as MoERoute's softmax top-k alone and runs SwiGLU
// experts without biases (no DeepSeek or gpt-oss options): what a backend with only those
// kernels accepts.
func (s MoESpec) Plain() bool {
	return s.Scoring == ScoreSoftmax && s.Groups == 0 && !s.Bias && (s.Scale == 0 || s.Scale == 1) && !s.SharedPlain &&
		s.Activation == ActSwiGLU && !s.ExpertBias
}

// MoEBiasRouter is a backend that can route with a per-expert selection bias (a spec with
// Bias): MoERoute with bias [E] added to the scores for the choice only.
type MoEBiasRouter interface {
	MoERouteBias(r MoERouting, logits, bias Tensor)
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
	case s.Scoring > ScoreTopKSoftmax:
		return fmt.Errorf("%w: scoring %d", ErrUnsupportedMoE, s.Scoring)
	case s.Scoring == ScoreTopKSoftmax && (s.Groups != 0 || s.Bias || s.Scale != 0 && s.Scale != 1):
		return fmt.Errorf("%w: top-k-then-softmax routing with groups, a selection bias or a scale", ErrUnsupportedMoE)
	case s.Activation > ActSwiGLUClamped:
		return fmt.Errorf("%w: activation %d", ErrUnsupportedMoE, s.Activation)
	case s.Activation == ActSwiGLUClamped && !(s.Limit > 0 && s.Limit <= maxLimit && s.Alpha > 0 && s.Alpha <= maxLimit):
		return fmt.Errorf("%w: clamped SwiGLU with alpha %v and limit %v (want both in (0, %g])", ErrUnsupportedMoE, s.Alpha, s.Limit, float32(maxLimit))
	case s.Scale < 0 || s.Scale != s.Scale:
		return fmt.Errorf("%w: routed scaling factor %v", ErrUnsupportedMoE, s.Scale)
	case s.Groups < 0 || s.TopKGroups < 0:
		return fmt.Errorf("%w: %d groups, top-%d groups", ErrUnsupportedMoE, s.Groups, s.TopKGroups)
	}
	if s.Groups > 0 {
		// Every chosen expert must come from a chosen group, and a biased group scores its best two.
		per := s.Experts / max(s.Groups, 1)
		switch {
		case s.Experts%s.Groups != 0:
			return fmt.Errorf("%w: %d experts do not split into %d groups", ErrUnsupportedMoE, s.Experts, s.Groups)
		case s.TopKGroups < 1 || s.TopKGroups > s.Groups:
			return fmt.Errorf("%w: top-%d of %d groups (want 1 to the groups)", ErrUnsupportedMoE, s.TopKGroups, s.Groups)
		case s.TopK > s.TopKGroups*per:
			return fmt.Errorf("%w: top-%d experts from %d groups of %d", ErrUnsupportedMoE, s.TopK, s.TopKGroups, per)
		case s.Bias && per < 2:
			return fmt.Errorf("%w: groups of %d experts (a biased group scores its best two)", ErrUnsupportedMoE, per)
		}
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
	// weights [rows, k], row-major, each row's experts in descending weight (ties: lower id first;
	// with a selection bias, in descending biased score).
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
	// breaks them), divided by their sum when spec.Renormalize. A backend that accepts a spec
	// with DeepSeek's options (Scoring, Groups, Scale) or gpt-oss's (ScoreTopKSoftmax) routes
	// as they say.
	MoERoute(r MoERouting, logits Tensor)
	// MoEExperts writes out[t] = Σ_j w[t,j] · (down_e(act(gate_e(x[t]), up_e(x[t]))) + b2[e])
	// over the k experts e = id[t,j] that the last MoERoute on r chose for row t, with
	// w.W13 [E, 2I, H] (each expert's gate rows, then its up rows), w.W2 [E, H, I], act the
	// spec's Activation (silu(gate) · up) and, under spec.ExpertBias, gate_e and up_e adding
	// w.B13's rows and the down projection w.B2's (when not nil); then, when shared is not
	// nil, adds sigmoid(sharedGate[t, 0]) · shared[t] (Qwen2-MoE's gated shared expert), or
	// shared[t] itself under spec.SharedPlain (DeepSeek's shared experts; sharedGate nil). Under
	// tensor parallelism I is the rank's slice and out is a partial sum for the caller to reduce.
	MoEExperts(out, x Tensor, r MoERouting, w ExpertWeights, shared, sharedGate Tensor)
}
