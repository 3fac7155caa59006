package formats

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/atom-go/atom/ops"
)

// ScaledFP8 is per-tensor and per-channel FP8: compressed-tensors checkpoints (llm-compressor's
// FP8 and FP8_DYNAMIC schemes: config_groups whose weights are 8-bit float with strategy
// "tensor" or "channel") and quant_method "fp8" without a weight_block_size (AutoFP8). Each
// quantized linear weight [N, K] is F8E4M3 beside weight_scale (one value, or [N, 1] per
// channel) and, for static activations, input_scale (one value); element (n, k) is
// float(q) · scale[n]. Modules the config ignores (ignore, ignored_layers,
// modules_to_not_convert) or no group targets stay in their 16-bit dtype.
//
// Every weight goes to the backend as ops.ChannelFP8, one scale per row: a per-tensor scale is
// repeated over the part's rows, so a fused q|k|v or gate|up whose parts have different scales
// dequantizes each part exactly with its own (vLLM requantizes the parts to the largest one).
// input_scale is read and checked (finite, positive) but not handed on: the cpu reference does
// not quantize activations, and the GPU kernels that do are not written yet.
type ScaledFP8 struct {
	Groups []FP8Group
	Ignore []string
	// Compressed: compressed-tensors' matching rules (an ignore entry is the module, a dotted
	// suffix of its name or a "re:" pattern, never a parent; a target is the module, a "re:"
	// pattern or the class "Linear"); otherwise quant_method fp8's (matchAny).
	Compressed bool
}

// Name returns "fp8-scaled".
func (ScaledFP8) Name() string { return "fp8-scaled" }

// Load reads the weight's parts and their scales, cut as the layout says.
func (f ScaledFP8) Load(l *Loader, w LinearWeight) (ops.Tensor, error) {
	g, err := f.gather(l, w)
	if err != nil {
		return nil, err
	}
	if g == nil {
		return Unquantized{}.Load(l, w)
	}
	d := ops.WeightDesc{Format: ops.ChannelFP8, DType: ops.F8E4M3, Scales: &ops.WeightScales{
		DType: ops.F32, Shape: []int{g.shape[0]}, Block: []int{1, g.shape[1]}, Raw: g.s}}
	info := &TensorInfo{Name: w.Name, File: g.info.File, DType: ops.F8E4M3, Shape: g.shape}
	return l.Upload(info, g.shape, d, g.q...)
}

// gather cuts the weight's parts as the layout says, with one float32 scale per row of the
// result; nil (and no error) when every part is stored unquantized.
func (f ScaledFP8) gather(l *Loader, w LinearWeight) (*gathered, error) {
	quantized, err := countFP8(l, w, f.ignored)
	if err != nil || quantized == 0 {
		return nil, err
	}
	var first *TensorInfo
	var q, s [][]byte
	rows, k := 0, 0
	for _, p := range w.Parts {
		wi, err := l.Info(p.Name, p.Shape...)
		if err != nil {
			return nil, err
		}
		if len(wi.Shape) != 2 {
			return nil, fmt.Errorf("%s: fp8 tensor %s has shape %v, want 2 dimensions", wi.File, p.Name, wi.Shape)
		}
		n, cols := wi.Shape[0], wi.Shape[1]
		g, ok := f.group(p.Name)
		if !ok {
			return nil, fmt.Errorf("%s: tensor %s is %v but no quantization_config group targets it", wi.File, p.Name, wi.DType)
		}
		perRow, err := f.scales(l, wi, g)
		if err != nil {
			return nil, err
		}
		lo, hi := p.Lo, p.Hi
		switch w.Layout {
		case Whole:
			lo, hi = 0, n
		case Cols:
			if lo < 0 || lo > hi || hi > cols {
				return nil, fmt.Errorf("%s: columns [%d, %d) of %s %v", w.Name, lo, hi, p.Name, wi.Shape)
			}
			q = append(q, cutCols(wi.Data, n, cols, lo, hi, 1))
			s = append(s, f32Bytes(perRow))
			first, rows, k = wi, n, hi-lo
			continue
		}
		if lo < 0 || lo > hi || hi > n {
			return nil, fmt.Errorf("%s: rows [%d, %d) of %s %v", w.Name, lo, hi, p.Name, wi.Shape)
		}
		if first == nil {
			first, k = wi, cols
		} else if cols != k {
			return nil, fmt.Errorf("%s: cannot fuse %s %v with %s %v", w.Name, p.Name, wi.Shape, first.Name, first.Shape)
		}
		q = append(q, wi.Data[lo*cols:hi*cols])
		s = append(s, f32Bytes(perRow[lo:hi]))
		rows += hi - lo
	}
	return &gathered{info: first, shape: []int{rows, k}, q: q, s: s}, nil
}

// ignored reports whether the config leaves the tensor's module unquantized.
func (f ScaledFP8) ignored(tensor string) bool {
	if !f.Compressed {
		return matchAny(f.Ignore, tensor)
	}
	mod := strings.TrimSuffix(tensor, ".weight")
	for _, m := range f.Ignore {
		if p, ok := strings.CutPrefix(m, "re:"); ok {
			if reMatch(p, mod) {
				return true
			}
		} else if mod == m || strings.HasSuffix(mod, "."+m) {
			return true
		}
	}
	return false
}

// group returns the first group (in config order) whose targets cover the tensor's module:
// the class "Linear" (every linear layer is one), the module's name or a "re:" pattern.
func (f ScaledFP8) group(tensor string) (FP8Group, bool) {
	mod := strings.TrimSuffix(tensor, ".weight")
	for _, g := range f.Groups {
		for _, t := range g.Targets {
			p, re := strings.CutPrefix(t, "re:")
			if strings.EqualFold(t, "Linear") || re && reMatch(p, mod) || !re && (t == mod || !f.Compressed && matchAny([]string{t}, tensor)) {
				return g, true
			}
		}
	}
	return FP8Group{}, false
}

// scales reads a weight's weight_scale (and checks its input_scale for a static group) and
// returns one scale per row of the whole weight.
func (f ScaledFP8) scales(l *Loader, wi *TensorInfo, g FP8Group) ([]float32, error) {
	prefix := strings.TrimSuffix(wi.Name, "weight")
	n := wi.Shape[0]
	want, what := []int{1}, "one value (per-tensor)"
	if g.Channel {
		want, what = []int{n, 1}, fmt.Sprintf("[%d, 1] (per-channel)", n)
	}
	ws, err := scaleValues(l, wi, prefix+"weight_scale", want, what)
	if err != nil {
		return nil, err
	}
	if g.StaticInput {
		if _, err := scaleValues(l, wi, prefix+"input_scale", []int{1}, "one value (static per-tensor activations)"); err != nil {
			return nil, err
		}
	}
	if !g.Channel {
		perRow := make([]float32, n)
		for i := range perRow {
			perRow[i] = ws[0]
		}
		return perRow, nil
	}
	return ws, nil
}

// scaleValues reads a scale tensor of want's elements (trailing and leading 1s optional:
// [], [1], [N], [N, 1] are all written by some quantizer) as float32, refusing a missing
// tensor, another shape or dtype, and a value that is NaN, infinite, zero or negative.
func scaleValues(l *Loader, wi *TensorInfo, name string, want []int, what string) ([]float32, error) {
	if !l.Has(name) {
		return nil, fmt.Errorf("%s: fp8 tensor %s has no scale tensor %s", wi.File, wi.Name, name)
	}
	si, err := l.src.Tensor(name)
	if err != nil {
		return nil, err
	}
	return decodeScales(si, want, what)
}

// decodeScales decodes and checks scaleValues' tensor.
func decodeScales(si *TensorInfo, want []int, what string) ([]float32, error) {
	name := si.Name
	if !sameElems(si.Shape, want) {
		return nil, fmt.Errorf("%s: scale tensor %s has shape %v, want %s", si.File, name, si.Shape, what)
	}
	es := si.DType.Size()
	count := 1
	for _, d := range want {
		count *= d
	}
	if si.DType != ops.F32 && si.DType != ops.BF16 && si.DType != ops.F16 || len(si.Data) != count*es {
		return nil, fmt.Errorf("%s: scale tensor %s is %v (%d bytes), want %d float32, bfloat16 or float16 values", si.File, name, si.DType, len(si.Data), count)
	}
	out := make([]float32, count)
	for i := range out {
		switch si.DType {
		case ops.F32:
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(si.Data[4*i:]))
		case ops.BF16:
			out[i] = ops.BF16ToFloat32(binary.LittleEndian.Uint16(si.Data[2*i:]))
		default:
			out[i] = ops.F16ToFloat32(binary.LittleEndian.Uint16(si.Data[2*i:]))
		}
		if v := float64(out[i]); math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
			return nil, fmt.Errorf("%s: scale tensor %s has %v at %d", si.File, name, out[i], i)
		}
	}
	return out, nil
}

// ScalarScale reads a one-value scale tensor (an fp8 KV cache's k_scale, v_scale): ok is
// false when the checkpoint has no such tensor; a tensor of more values, another dtype, or a
// value that is NaN, infinite, zero or negative is an error naming it.
func ScalarScale(src Source, name string) (float32, bool, error) {
	if !src.Has(name) {
		return 0, false, nil
	}
	si, err := src.Tensor(name)
	if err != nil {
		return 0, false, err
	}
	v, err := decodeScales(si, []int{1}, "one value")
	if err != nil {
		return 0, false, err
	}
	return v[0], true, nil
}

// sameElems reports whether shape is want up to dimensions of size 1.
func sameElems(shape, want []int) bool {
	strip := func(s []int) []int {
		var out []int
		for _, d := range s {
			if d != 1 {
				out = append(out, d)
			}
		}
		return out
	}
	a, b := strip(shape), strip(want)
	if len(a) != len(b) || len(shape) > 2 {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// f32Bytes encodes float32 values little-endian.
func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// LoadExperts stacks every expert's fp8 weight (compressed-tensors FP8 MoE checkpoints such as
// Qwen3-30B-A3B-FP8-dynamic: each expert's gate, up and down with weight_scale) into
// [E, rows, cols] beside one scale per row, [E, rows]: each expert's gate and up keep their own
// per-tensor scales (vLLM requantizes w13 to their larger one). 16-bit experts stack as they are.
func (f ScaledFP8) LoadExperts(l *Loader, w ExpertWeight) (ops.Tensor, error) {
	g, err := stackExperts(l, w, f.gather)
	if err != nil || g == nil {
		if err == nil {
			return l.StackExperts(w)
		}
		return nil, err
	}
	d := ops.WeightDesc{Format: ops.ChannelFP8, DType: ops.F8E4M3, Scales: &ops.WeightScales{DType: ops.F32,
		Shape: []int{g.shape[0], g.shape[1]}, Block: []int{1, g.shape[2]}, Raw: g.s}}
	return l.Upload(g.info, g.shape, d, g.q...)
}
