package formats

import (
	"fmt"

	"github.com/atom-go/atom/ops"
)

// Layout is how a linear layer's weight is cut from the checkpoint for one rank.
type Layout uint8

// The layouts of the linear kinds in package layers.
const (
	// Whole: one tensor, all of it (a replicated layer).
	Whole Layout = iota
	// Rows: one tensor, this rank's rows (output features: a column-parallel layer, the
	// vocab-parallel LM head).
	Rows
	// Cols: one tensor, this rank's columns (input features: a row-parallel layer).
	Cols
	// Stacked: several tensors' rows, one after the other (a merged-column or q|k|v layer).
	Stacked
)

// LinearWeight is what a linear layer asks its format to load: the parameter's name, how it is
// cut and the checkpoint tensors it comes from (Parts' Lo and Hi are rows for Rows and Stacked,
// columns for Cols; Whole takes Parts[0] entire).
type LinearWeight struct {
	Name   string
	Layout Layout
	Parts  []Part
}

// Format is a weight format (vLLM's quantization method): it creates and loads a linear
// layer's parameters from the checkpoint, sharded for the rank, and returns the weight the
// backend's linear ops apply as its descriptor (ops.WeightDesc) says. A quantized format reads
// its scale tensors beside each weight and shards them with it; the family files do not change.
type Format interface {
	// Name is the format's name in errors and logs.
	Name() string
	// Load loads one linear layer's weight.
	Load(l *Loader, w LinearWeight) (ops.Tensor, error)
	// LoadExperts loads a mixture-of-experts layer's stacked experts (w13 or w2), which the
	// backend's MoE ops apply as the descriptor says: an FP8 or MXFP4 format reads each
	// expert's scales beside it and stacks them the same way.
	LoadExperts(l *Loader, w ExpertWeight) (ops.Tensor, error)
}

// Unquantized is the format of bf16, f16 and f32 checkpoints: each weight as it is stored (the
// backend converts to its compute dtype), no scales.
type Unquantized struct{}

// Name returns "unquantized".
func (Unquantized) Name() string { return "unquantized" }

// Load reads the weight's parts as the layout says.
func (Unquantized) Load(l *Loader, w LinearWeight) (ops.Tensor, error) {
	if len(w.Parts) == 0 || w.Layout != Stacked && len(w.Parts) != 1 {
		return nil, fmt.Errorf("%s: %d parts for layout %d", w.Name, len(w.Parts), w.Layout)
	}
	p := w.Parts[0]
	switch w.Layout {
	case Whole:
		return l.Get(p.Name, p.Shape...)
	case Rows:
		return l.Slice(p.Name, 0, p.Lo, p.Hi, p.Shape...)
	case Cols:
		return l.Slice(p.Name, 1, p.Lo, p.Hi, p.Shape...)
	case Stacked:
		return l.Stack(w.Name, w.Parts...)
	}
	return nil, fmt.Errorf("%s: unknown layout %d", w.Name, w.Layout)
}

// LoadExperts stacks the experts' tensors as they are stored.
func (Unquantized) LoadExperts(l *Loader, w ExpertWeight) (ops.Tensor, error) {
	return l.StackExperts(w)
}
