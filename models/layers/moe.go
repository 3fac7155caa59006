package layers

import (
	"fmt"

	"github.com/atom-go/atom/models/formats"
	"github.com/atom-go/atom/ops"
)

// FeedForward is a decoder layer's feed-forward sublayer: the dense MLP or a sparse MoE block.
type FeedForward interface {
	// Forward adds the sublayer's output on norm(stream) into the stream; next is the norm
	// that follows it.
	Forward(s *Stream, norm, next *RMSNorm)
}

// ExpertNames are the checkpoint module names of one expert's projections, which FusedMoE
// stacks into w13 (Gate then Up: PackedModules["w13"]) and w2 (Down): vLLM's
// make_expert_params_mapping.
type ExpertNames struct{ Gate, Up, Down string }

// of is the checkpoint name of the canonical module mod (PackedModules' gate_proj, up_proj).
func (n ExpertNames) of(mod string) string {
	switch mod {
	case "gate_proj":
		return n.Gate
	case "up_proj":
		return n.Up
	}
	return n.Down
}

// The expert naming schemes: Qwen's (and DeepSeek's) and Mixtral's.
var (
	QwenExperts    = ExpertNames{Gate: "gate_proj", Up: "up_proj", Down: "down_proj"}
	MixtralExperts = ExpertNames{Gate: "w1", Up: "w3", Down: "w2"}
)

// MoEConfig describes a sparse MoE block: Experts experts of width Inter, TopK routed per
// token, and optionally a shared expert of width SharedInter behind a sigmoid gate.
type MoEConfig struct {
	Hidden, Inter, Experts, TopK int
	// Renormalize divides the chosen experts' probabilities by their sum (norm_topk_prob).
	Renormalize bool
	Names       ExpertNames // the experts' checkpoint modules (zero: QwenExperts)
	// InterField names Inter in errors (the config's field: moe_intermediate_size).
	InterField string
	// SharedInter > 0 adds Qwen2-MoE's shared expert ("shared_expert", a SwiGLU MLP) scaled by
	// sigmoid(shared_expert_gate(x)), or with SharedPlain DeepSeek's shared experts
	// ("shared_experts", one MLP of SharedInter = n_shared_experts × moe_intermediate_size)
	// added as they are.
	SharedInter int
	SharedPlain bool
	// DeepSeek's routing (ops.MoESpec's fields of the same names): sigmoid scores, group-limited
	// choice, e_score_correction_bias ("gate.e_score_correction_bias") and routed_scaling_factor.
	Scoring            ops.MoEScoring
	Groups, TopKGroups int
	Bias               bool
	Scale              float32
	// gpt-oss's block: the router module's name ("gate" when empty; gpt-oss "router") and
	// whether it has a bias; Packed experts (PackedExperts: "experts.gate_up_proj", gate and up
	// interleaved, and "experts.down_proj", each holding every expert) with ExpertBias
	// ("_bias" beside each), and the experts' Activation (ops.MoESpec's Alpha and Limit).
	Router     string
	RouterBias bool
	Packed     bool
	ExpertBias bool
	Activation ops.MoEActivation
	Alpha      float32
	Limit      float32
}

// FusedMoE is the sparse MoE block of vLLM's and ATOM's FusedMoE: a replicated router
// ("gate", [E, H]), the experts stacked at load into w13 [E, 2I, H] and w2 [E, H, I], split
// along I on every rank under tensor parallelism, and one all-reduce after the experts and
// the shared expert. The expert weights are read through the context's format (LoadExperts),
// so a quantized format brings its own experts without a change here.
type FusedMoE struct {
	Router   *Linear    // [E, H], replicated
	W13, W2  ops.Tensor // this rank's stacked experts
	Shared   *MLP       // nil without a shared expert; its down projection is not reduced alone
	SharedGt *Linear    // [1, H], replicated; nil for DeepSeek's ungated shared experts
	Bias     ops.Tensor // [E], DeepSeek-V3's selection bias; nil without
	B13, B2  ops.Tensor // the experts' biases (gpt-oss); nil without, B2 nil on ranks past the first
	biasR    ops.MoEBiasRouter
	cfg      MoEConfig
	c        *Context
	route    ops.MoERouting
	reduce   bool
	logits   *Buf
	sharedGt *Buf
	sharedY  *Buf
}

// NewFusedMoE loads the MoE block under prefix ("model.layers.1.mlp"): prefix.gate, the
// experts prefix.experts.{e}.{gate,up,down} (as cfg.Names says) and, with a shared expert,
// prefix.shared_expert and prefix.shared_expert_gate.
func NewFusedMoE(c *Context, prefix string, cfg MoEConfig) *FusedMoE {
	if cfg.Names == (ExpertNames{}) {
		cfg.Names = QwenExperts
	}
	if cfg.InterField == "" {
		cfg.InterField = "moe_intermediate_size"
	}
	m := &FusedMoE{cfg: cfg, c: c, reduce: c.shard.Group != nil}
	lo, hi := c.split(cfg.Inter, cfg.InterField)
	if cfg.SharedInter > 0 {
		c.split(cfg.SharedInter, "shared_expert_intermediate_size")
	}
	// The routing workspace first: a backend without MoE kernels refuses here, before any
	// expert weight is read.
	m.route = c.moeRouting(ops.MoESpec{Experts: cfg.Experts, TopK: cfg.TopK, Hidden: cfg.Hidden, Inter: hi - lo,
		MaxTokens: c.arena.rows, Renormalize: cfg.Renormalize, Scoring: cfg.Scoring, Groups: cfg.Groups,
		TopKGroups: cfg.TopKGroups, Bias: cfg.Bias, Scale: cfg.Scale, SharedPlain: cfg.SharedPlain && cfg.SharedInter > 0,
		Activation: cfg.Activation, Alpha: cfg.Alpha, Limit: cfg.Limit, ExpertBias: cfg.ExpertBias})
	if cfg.Bias && c.err == nil {
		var ok bool
		if m.biasR, ok = c.be.(ops.MoEBiasRouter); !ok {
			c.fail(fmt.Errorf("mixture of experts: %w: no biased router on the %s backend", ops.ErrUnsupportedMoE, c.be.Name()))
		}
		m.Bias = c.getExact(prefix+".gate.e_score_correction_bias", cfg.Experts)
	}
	router := cfg.Router
	if router == "" {
		router = "gate"
	}
	m.Router = NewReplicated(c, prefix+"."+router, cfg.Hidden, cfg.Experts, cfg.RouterBias)
	if cfg.Packed {
		m.W13, m.W2, m.B13, m.B2 = c.packedExperts(prefix+".experts", cfg, lo, hi)
	} else {
		m.W13, m.W2 = c.experts(prefix+".experts", cfg, lo, hi)
	}
	switch {
	case cfg.SharedInter > 0 && cfg.SharedPlain:
		m.Shared = NewMLP(c, prefix+".shared_experts", cfg.Hidden, cfg.SharedInter)
		m.Shared.Down.reduce = false
		m.sharedY = c.workspace("moe.shared_out", cfg.Hidden)
	case cfg.SharedInter > 0:
		m.Shared = NewMLP(c, prefix+".shared_expert", cfg.Hidden, cfg.SharedInter)
		m.Shared.Down.reduce = false // summed with the experts' partial sums, in one all-reduce
		m.SharedGt = NewReplicated(c, prefix+".shared_expert_gate", cfg.Hidden, 1, false)
		m.sharedGt, m.sharedY = c.workspace("moe.shared_gate", 1), c.workspace("moe.shared_out", cfg.Hidden)
	}
	m.logits = c.workspace("moe.router", cfg.Experts)
	return m
}

// moeRouting returns the backend's MoE workspace for spec, shared by the layers of one spec.
func (c *Context) moeRouting(spec ops.MoESpec) ops.MoERouting {
	if c.err != nil {
		return nil
	}
	if r, ok := c.moe[spec]; ok {
		return r
	}
	r, err := c.be.NewMoE(spec)
	if err != nil {
		c.fail(fmt.Errorf("mixture of experts: %w", err))
		return nil
	}
	if c.moe == nil {
		c.moe = map[ops.MoESpec]ops.MoERouting{}
	}
	c.moe[spec] = r
	return r
}

// experts loads w13 (each expert's gate rows [lo, hi), then its up rows) and w2 (each
// expert's down columns [lo, hi)) through the context's format.
func (c *Context) experts(prefix string, cfg MoEConfig, lo, hi int) (w13, w2 ops.Tensor) {
	if c.err != nil {
		return nil, nil
	}
	n := cfg.Names
	up := formats.ExpertWeight{Name: prefix + ".w13", Layout: formats.Stacked, Experts: make([][]formats.Part, cfg.Experts)}
	down := formats.ExpertWeight{Name: prefix + ".w2", Layout: formats.Cols, Experts: make([][]formats.Part, cfg.Experts)}
	for e := range cfg.Experts {
		p := fmt.Sprintf("%s.%d.", prefix, e)
		for _, mod := range PackedModules["w13"] {
			up.Experts[e] = append(up.Experts[e],
				formats.Part{Name: p + n.of(mod) + ".weight", Lo: lo, Hi: hi, Shape: []int{cfg.Inter, cfg.Hidden}})
		}
		down.Experts[e] = []formats.Part{{Name: p + n.Down + ".weight", Lo: lo, Hi: hi, Shape: []int{cfg.Hidden, cfg.Inter}}}
	}
	var err error
	if w13, err = c.format.LoadExperts(c.load, up); err != nil {
		c.fail(err)
		return nil, nil
	}
	if w2, err = c.format.LoadExperts(c.load, down); err != nil {
		c.fail(err)
	}
	return w13, w2
}

// Forward adds the block's output on norm(stream) into the stream: route, run the k chosen
// experts (and the shared expert), all-reduce once.
func (m *FusedMoE) Forward(s *Stream, norm, _ *RMSNorm) {
	be := m.c.be
	x := s.Norm(norm)
	logits := m.logits.View()
	be.Linear(logits, x, m.Router.W, m.Router.Bias)
	if m.Bias != nil {
		m.biasR.MoERouteBias(m.route, logits, m.Bias)
	} else {
		be.MoERoute(m.route, logits)
	}
	var shared, gate ops.Tensor
	if m.Shared != nil {
		gateUp, act := m.Shared.gateUp.View(), m.Shared.act.View()
		shared = m.sharedY.View()
		be.Linear(gateUp, x, m.Shared.GateUp.W, nil)
		be.LinearSwiGLU(shared, gateUp, act, m.Shared.Down.W)
		if m.SharedGt != nil {
			gate = m.sharedGt.View()
			be.Linear(gate, x, m.SharedGt.W, nil)
		}
	}
	be.MoEExperts(s.x, x, m.route, ops.ExpertWeights{W13: m.W13, W2: m.W2, B13: m.B13, B2: m.B2}, shared, gate)
	if m.reduce {
		m.c.shard.allReduce(s.x)
	}
	s.pre = ops.PreNorm{X: s.x}
}
