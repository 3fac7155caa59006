package layers

import (
	"fmt"

	"github.com/atom-go/atom/models/formats"
	"github.com/atom-go/atom/ops"
)

// PackedModules maps a packed module to the checkpoint modules it stacks along the output
// dimension, in order: ATOM's packed_modules_mapping read the other way. One GEMM over the
// packed weight replaces one per module; the layer that owns the packed module knows how to
// slice each part for its rank.
var PackedModules = map[string][]string{
	"qkv_proj":     {"q_proj", "k_proj", "v_proj"},
	"gate_up_proj": {"gate_proj", "up_proj"},
	// A MoE block's stacked experts (FusedMoE): every expert's gate then up rows, under the
	// names its ExpertNames give (Mixtral: w1, w3).
	"w13": {"gate_proj", "up_proj"},
}

// Linear is y = x·Wᵀ (+ b) with W [Out, In] as in PyTorch, on this rank's shard: the kinds
// differ in how they are cut from the checkpoint (New* below) and in whether their outputs are
// partial sums that Forward all-reduces (row-parallel).
type Linear struct {
	W, Bias ops.Tensor // Bias: nil when the layer has none
	In, Out int        // this rank's input and output features
	c       *Context
	reduce  bool // row-parallel over a group: the outputs are partial sums
}

// newLinear loads the weight (and bias parts, when given) in the context's format.
func newLinear(c *Context, w formats.LinearWeight, bias []formats.Part, in, out int) *Linear {
	l := &Linear{In: in, Out: out, c: c}
	if c.err != nil {
		return l
	}
	var err error
	if l.W, err = c.format.Load(c.load, w); err != nil {
		c.fail(err)
		return l
	}
	if len(bias) > 0 {
		name := w.Name[:len(w.Name)-len("weight")] + "bias"
		l.Bias, err = c.load.Stack(name, bias...)
		c.fail(err)
	}
	return l
}

// NewReplicated is a linear layer every rank holds whole (module name, e.g. "lm_head").
func NewReplicated(c *Context, name string, in, out int, bias bool) *Linear {
	w := formats.LinearWeight{Name: name + ".weight", Layout: formats.Whole,
		Parts: []formats.Part{{Name: name + ".weight", Hi: out, Shape: []int{out, in}}}}
	var b []formats.Part
	if bias {
		b = []formats.Part{{Name: name + ".bias", Hi: out, Shape: []int{out}}}
	}
	return newLinear(c, w, b, in, out)
}

// NewColumnParallel keeps this rank's slice of the output features (which must divide evenly).
func NewColumnParallel(c *Context, name string, in, out int, bias bool) *Linear {
	lo, hi := c.split(out, name+" output features")
	w := formats.LinearWeight{Name: name + ".weight", Layout: formats.Rows,
		Parts: []formats.Part{{Name: name + ".weight", Lo: lo, Hi: hi, Shape: []int{out, in}}}}
	var b []formats.Part
	if bias {
		b = []formats.Part{{Name: name + ".bias", Lo: lo, Hi: hi, Shape: []int{out}}}
	}
	return newLinear(c, w, b, in, hi-lo)
}

// NewRowParallel keeps this rank's slice of the input features (which must divide evenly);
// Forward sums the ranks' partial outputs. It has no bias: one would be added once per rank.
func NewRowParallel(c *Context, name string, in, out int) *Linear {
	lo, hi := c.split(in, name+" input features")
	w := formats.LinearWeight{Name: name + ".weight", Layout: formats.Cols,
		Parts: []formats.Part{{Name: name + ".weight", Lo: lo, Hi: hi, Shape: []int{out, in}}}}
	l := newLinear(c, w, nil, hi-lo, out)
	l.reduce = c.shard.Group != nil
	return l
}

// NewRowParallelBias is NewRowParallel with the layer's bias ([out]), which the first rank
// alone adds, so that the reduced sum has it once.
func NewRowParallelBias(c *Context, name string, in, out int) *Linear {
	l := NewRowParallel(c, name, in, out)
	if c.err == nil && c.shard.Rank == 0 {
		var err error
		l.Bias, err = c.load.Get(name+".bias", out)
		c.fail(err)
	}
	return l
}

// NewMergedColumn stacks the column-parallel slices of the modules packed (a key of
// PackedModules) stacks under prefix, of outs[i] output features each (gate|up: "gate_up_proj").
func NewMergedColumn(c *Context, prefix, packed string, in int, outs ...int) *Linear {
	mods := PackedModules[packed]
	if len(mods) != len(outs) {
		c.fail(fmt.Errorf("%s.%s: %d output sizes for the %d modules %v", prefix, packed, len(outs), len(mods), mods))
		return &Linear{c: c}
	}
	parts, rows := make([]formats.Part, len(mods)), 0
	for i, m := range mods {
		lo, hi := c.split(outs[i], prefix+"."+m+" output features")
		parts[i] = formats.Part{Name: prefix + "." + m + ".weight", Lo: lo, Hi: hi, Shape: []int{outs[i], in}}
		rows += hi - lo
	}
	w := formats.LinearWeight{Name: prefix + "." + packed + ".weight", Layout: formats.Stacked, Parts: parts}
	return newLinear(c, w, nil, in, rows)
}

// Heads are an attention layer's head counts in the checkpoint and on this rank.
type Heads struct {
	Q, KV, Dim int // the checkpoint's query heads, KV heads and head size
	RankQ      int // this rank's query heads
	RankKV     int // this rank's KV heads
	KVFirst    int // the first KV head this rank holds
}

// splitHeads divides the query heads evenly across the ranks. The KV heads are divided the
// same way when there are at least as many as ranks; with fewer, each KV head is replicated
// on the ranks whose query heads use it (as vLLM does).
func (c *Context) splitHeads(q, kv, dim int) Heads {
	h := Heads{Q: q, KV: kv, Dim: dim}
	lo, hi := c.split(q, "num_attention_heads")
	h.RankQ = hi - lo
	s := c.shard
	switch {
	case c.err != nil:
	case kv >= s.Size:
		lo, hi := c.split(kv, "num_key_value_heads")
		h.KVFirst, h.RankKV = lo, hi-lo
	case s.Size%kv != 0:
		c.fail(fmt.Errorf("--tensor-parallel-size %d is not a multiple of num_key_value_heads %d", s.Size, kv))
	default:
		h.KVFirst, h.RankKV = s.Rank/(s.Size/kv), 1
	}
	return h
}

// NewQKVParallel is the packed q|k|v projection ("qkv_proj") of the attention module prefix:
// this rank's query heads, then its KV heads of k and of v (replicated under GQA when the
// ranks outnumber the KV heads), with their biases when bias is set.
func NewQKVParallel(c *Context, prefix string, hidden int, h Heads, bias bool) *Linear {
	d := h.Dim
	qlo, qhi := c.shard.Rank*h.RankQ*d, (c.shard.Rank+1)*h.RankQ*d
	kvlo, kvhi := h.KVFirst*d, (h.KVFirst+h.RankKV)*d
	mods := PackedModules["qkv_proj"]
	rows := [][2]int{{qlo, qhi}, {kvlo, kvhi}, {kvlo, kvhi}}
	full := []int{h.Q * d, h.KV * d, h.KV * d}
	var parts, biases []formats.Part
	for i, m := range mods {
		name := prefix + "." + m
		parts = append(parts, formats.Part{Name: name + ".weight", Lo: rows[i][0], Hi: rows[i][1], Shape: []int{full[i], hidden}})
		if bias {
			biases = append(biases, formats.Part{Name: name + ".bias", Lo: rows[i][0], Hi: rows[i][1], Shape: []int{full[i]}})
		}
	}
	w := formats.LinearWeight{Name: prefix + ".qkv_proj.weight", Layout: formats.Stacked, Parts: parts}
	return newLinear(c, w, biases, hidden, (h.RankQ+2*h.RankKV)*d)
}

// Forward writes out = x·Wᵀ (+ b), summed over the ranks for a row-parallel layer.
func (l *Linear) Forward(out, x ops.Tensor) {
	l.c.be.Linear(out, x, l.W, l.Bias)
	if l.reduce {
		l.c.shard.allReduce(out)
	}
}

// ForwardSwiGLU writes out = (silu(gateUp[:, :In]) * gateUp[:, In:])·Wᵀ: the SwiGLU of a
// merged gate|up output fused into this projection (act [rows, In] is the backend's scratch),
// summed over the ranks for a row-parallel layer.
func (l *Linear) ForwardSwiGLU(out, gateUp, act ops.Tensor) {
	l.c.be.LinearSwiGLU(out, gateUp, act, l.W)
	if l.reduce {
		l.c.shard.allReduce(out)
	}
}
