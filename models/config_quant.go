package models

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/atom-go/atom/models/formats"
	"github.com/atom-go/atom/ops"
)

// rawQuant is config.json's quantization_config as far as the served formats read it: the
// fields of quant_method "fp8" and of "compressed-tensors" (config_groups, ignore, format).
type rawQuant struct {
	QuantMethod         string                  `json:"quant_method"`
	Fmt                 string                  `json:"fmt"`
	WeightBlockSize     []int                   `json:"weight_block_size"`
	ActivationScheme    string                  `json:"activation_scheme"`
	ModulesToNotConvert []string                `json:"modules_to_not_convert"`
	IgnoredLayers       []string                `json:"ignored_layers"`
	ConfigGroups        map[string]*rawQuantGrp `json:"config_groups"`
	Ignore              []string                `json:"ignore"`
	Format              string                  `json:"format"`
	KVCacheScheme       *rawQuantArgs           `json:"kv_cache_scheme"`
}

// rawQuantGrp is one compressed-tensors config group.
type rawQuantGrp struct {
	Targets           []string      `json:"targets"`
	Weights           *rawQuantArgs `json:"weights"`
	InputActivations  *rawQuantArgs `json:"input_activations"`
	OutputActivations *rawQuantArgs `json:"output_activations"`
	Format            string        `json:"format"`
}

// rawQuantArgs is compressed-tensors' QuantizationArgs.
type rawQuantArgs struct {
	NumBits   *int   `json:"num_bits"`
	Type      string `json:"type"`
	Symmetric *bool  `json:"symmetric"`
	Strategy  string `json:"strategy"`
	Dynamic   any    `json:"dynamic"` // true, false or "local"
	GroupSize *int   `json:"group_size"`
}

// maxBlock bounds weight_block_size: real checkpoints use 128; anything past this is hostile.
const maxBlock = 1 << 16

// maxIgnored bounds the ignored-module list and each entry's length.
const maxIgnored, maxIgnoredLen = 1 << 16, 1 << 10

// maxGroups bounds config_groups (real checkpoints have one or two).
const maxGroups = 64

// spec validates the fields of the method it names; other methods pass through by name (For
// refuses those it does not serve).
func (q *rawQuant) spec() (formats.Spec, error) {
	switch q.QuantMethod {
	case "fp8":
		return q.fp8Spec()
	case "compressed-tensors":
		return q.compressedSpec()
	case "mxfp4":
		// gpt-oss: the experts' *_blocks and *_scales say what is quantized; the list of
		// modules left in 16 bits is only bounded.
		ignored, err := checkIgnored(q.ModulesToNotConvert)
		return formats.Spec{Method: q.QuantMethod, Ignore: ignored}, err
	}
	return formats.Spec{Method: q.QuantMethod}, nil
}

// fp8Spec reads quant_method "fp8": block-scaled with a weight_block_size (dynamic activations
// only, as vLLM), per-tensor without one (activation_scheme static: an input_scale per layer).
func (q *rawQuant) fp8Spec() (formats.Spec, error) {
	s := formats.Spec{Method: q.QuantMethod}
	if q.Fmt != "" && q.Fmt != "e4m3" {
		return s, fmt.Errorf("fp8 fmt %q: only e4m3 is supported", q.Fmt)
	}
	static := false
	switch q.ActivationScheme {
	case "", "dynamic":
	case "static":
		static = true
	default:
		return s, fmt.Errorf("fp8 activation_scheme %q: want \"dynamic\" or \"static\"", q.ActivationScheme)
	}
	ignored, err := checkIgnored(append(append([]string(nil), q.ModulesToNotConvert...), q.IgnoredLayers...))
	if err != nil {
		return s, err
	}
	s.Ignore = ignored
	if q.WeightBlockSize == nil {
		// Per-tensor fp8 (AutoFP8, llm-compressor's older output): a scalar weight_scale.
		s.Groups = []formats.FP8Group{{Name: "fp8", Targets: []string{"Linear"}, StaticInput: static}}
		return s, nil
	}
	if static {
		return s, fmt.Errorf("fp8 activation_scheme \"static\" with a weight_block_size: block-scaled fp8 takes dynamic activations only")
	}
	if len(q.WeightBlockSize) != 2 {
		return s, fmt.Errorf("fp8 weight_block_size %v: want two sizes", q.WeightBlockSize)
	}
	for _, b := range q.WeightBlockSize {
		if b <= 0 || b > maxBlock {
			return s, fmt.Errorf("fp8 weight_block_size %v: sizes must be in [1, %d]", q.WeightBlockSize, maxBlock)
		}
	}
	s.Block = [2]int{q.WeightBlockSize[0], q.WeightBlockSize[1]}
	return s, nil
}

// compressedSpec reads a compressed-tensors config whose groups are all FP8 W8A8 (or W8A16)
// with per-tensor or per-channel weight scales, as vLLM's CompressedTensorsW8A8Fp8 and
// W8A16Fp8 schemes serve them; anything else (int8, 4-bit, block or group strategies, the
// sparse formats) is refused by name.
func (q *rawQuant) compressedSpec() (formats.Spec, error) {
	s, err := q.compressedGroups()
	if err != nil {
		// A scheme atom-go has no kernels for, like an unknown quant_method (formats.For).
		return s, fmt.Errorf("%w compressed-tensors: %w", ops.ErrUnsupportedWeight, err)
	}
	return s, nil
}

// compressedGroups reads compressed-tensors' format, ignore list and config groups.
func (q *rawQuant) compressedGroups() (formats.Spec, error) {
	s := formats.Spec{Method: q.QuantMethod}
	if err := checkFormat("format", q.Format, true); err != nil {
		return s, err
	}
	if len(q.ConfigGroups) == 0 {
		return s, fmt.Errorf("compressed-tensors without config_groups: nothing says how the weights are quantized")
	}
	if len(q.ConfigGroups) > maxGroups {
		return s, fmt.Errorf("compressed-tensors: %d config_groups (at most %d)", len(q.ConfigGroups), maxGroups)
	}
	ignored, err := checkIgnored(q.Ignore)
	if err != nil {
		return s, err
	}
	s.Ignore = ignored
	names := make([]string, 0, len(q.ConfigGroups))
	for name := range q.ConfigGroups {
		names = append(names, name)
	}
	sort.Strings(names) // a fixed order: the first group whose targets match wins
	for _, name := range names {
		g, err := compressedGroup(name, q.ConfigGroups[name])
		if err != nil {
			return s, fmt.Errorf("config_groups.%.40s: %w", name, err)
		}
		s.Groups = append(s.Groups, g)
	}
	if kv := q.KVCacheScheme; kv != nil {
		if kv.NumBits == nil || *kv.NumBits != 8 || kv.Type != "float" {
			return s, fmt.Errorf("kv_cache_scheme: only 8-bit float (fp8 e4m3) is supported")
		}
	}
	return s, nil
}

// compressedGroup validates one config group.
func compressedGroup(name string, g *rawQuantGrp) (formats.FP8Group, error) {
	out := formats.FP8Group{Name: name}
	if g == nil || g.Weights == nil {
		return out, fmt.Errorf("no weights scheme")
	}
	if err := checkFormat("format", g.Format, true); err != nil {
		return out, err
	}
	if len(g.Targets) == 0 || len(g.Targets) > maxIgnored {
		return out, fmt.Errorf("%d targets", len(g.Targets))
	}
	for _, t := range g.Targets {
		if err := checkModule("target", t); err != nil {
			return out, err
		}
	}
	out.Targets = g.Targets
	w := g.Weights
	if w.NumBits == nil || *w.NumBits != 8 || w.Type != "float" {
		return out, fmt.Errorf("weights %s: only 8-bit float (fp8 e4m3) is supported", describeArgs(w))
	}
	if w.Symmetric != nil && !*w.Symmetric {
		return out, fmt.Errorf("weights: asymmetric fp8 is not supported")
	}
	if w.Dynamic != nil && w.Dynamic != false {
		return out, fmt.Errorf("weights: dynamic %v: fp8 weights are quantized ahead of time", w.Dynamic)
	}
	switch w.Strategy {
	case "tensor":
	case "channel":
		out.Channel = true
	default:
		return out, fmt.Errorf("weights strategy %.40q: only \"tensor\" and \"channel\" are supported", w.Strategy)
	}
	if a := g.InputActivations; a != nil {
		if a.NumBits == nil || *a.NumBits != 8 || a.Type != "float" {
			return out, fmt.Errorf("input_activations %s: only 8-bit float is supported", describeArgs(a))
		}
		if a.Symmetric != nil && !*a.Symmetric {
			return out, fmt.Errorf("input_activations: asymmetric fp8 is not supported")
		}
		switch {
		case a.Dynamic == true && a.Strategy == "token":
		case (a.Dynamic == nil || a.Dynamic == false) && a.Strategy == "tensor":
			out.StaticInput = true
		default:
			return out, fmt.Errorf("input_activations strategy %.40q dynamic %v: want dynamic per token or static per tensor", a.Strategy, a.Dynamic)
		}
	}
	if g.OutputActivations != nil {
		return out, fmt.Errorf("output_activations are not supported")
	}
	return out, nil
}

// describeArgs names a scheme's type and bits in an error.
func describeArgs(a *rawQuantArgs) string {
	bits := "?"
	if a.NumBits != nil {
		bits = fmt.Sprint(*a.NumBits)
	}
	return fmt.Sprintf("%.20s/%s bits", a.Type, bits)
}

// checkFormat accepts the compressed-tensors formats that store fp8 weights as they are
// (vLLM's "float-quantized" and "naive-quantized"); "" is allowed where a group inherits
// the top-level one.
func checkFormat(field, f string, emptyOK bool) error {
	switch {
	case f == "float-quantized", f == "naive-quantized", f == "" && emptyOK:
		return nil
	}
	return fmt.Errorf("compressed-tensors %s %.40q: only float-quantized and naive-quantized fp8 are supported", field, f)
}

// checkIgnored bounds an exclusion list and compiles its "re:" entries.
func checkIgnored(ignored []string) ([]string, error) {
	if len(ignored) > maxIgnored {
		return nil, fmt.Errorf("fp8: %d ignored modules (at most %d)", len(ignored), maxIgnored)
	}
	for _, m := range ignored {
		if err := checkModule("ignored module", m); err != nil {
			return nil, err
		}
	}
	return ignored, nil
}

// checkModule refuses an empty or huge module name or a "re:" pattern that does not compile.
func checkModule(what, m string) error {
	if m == "" || len(m) > maxIgnoredLen {
		return fmt.Errorf("fp8 %s %.40q: empty or too long", what, m)
	}
	if p, ok := strings.CutPrefix(m, "re:"); ok {
		if _, err := regexp.Compile(p); err != nil {
			return fmt.Errorf("fp8 %s %.40q: %w", what, m, err)
		}
	}
	return nil
}
