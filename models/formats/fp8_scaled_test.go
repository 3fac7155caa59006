package formats

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// scalar is a float32 scale tensor of the given shape holding v (every element).
func scalar(name string, v float32, shape ...int) *TensorInfo {
	n := 1
	for _, d := range shape {
		n *= d
	}
	data := make([]byte, 4*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
	}
	return &TensorInfo{Name: name, File: "mem", DType: ops.F32, Shape: shape, Data: data}
}

// scaledSource: per-tensor q [2, 4] (scale 2, shape [1]), k [2, 4] (scale 3, shape [] as
// AutoFP8 writes it), both with input_scale; per-channel ch [3, 4] with scales 1, 2, 3 ([3, 1])
// in bfloat16; a 16-bit lm_head; damaged variants.
func scaledSource() memSource {
	bf := &TensorInfo{Name: "ch.weight_scale", File: "mem", DType: ops.BF16, Shape: []int{3, 1},
		Data: []byte{0x80, 0x3f, 0x00, 0x40, 0x40, 0x40}}
	src := memSource{
		"q.weight": fp8Tensor("q.weight", 2, 4), "q.weight_scale": scalar("q.weight_scale", 2, 1), "q.input_scale": scalar("q.input_scale", 0.5, 1),
		"k.weight": fp8Tensor("k.weight", 2, 4), "k.weight_scale": scalar("k.weight_scale", 3), "k.input_scale": scalar("k.input_scale", 0.5),
		"ch.weight": fp8Tensor("ch.weight", 3, 4), "ch.weight_scale": bf,
		"lm_head.weight": f32Tensor("lm_head.weight", 2, 4),
		"lm_fp8.weight":  fp8Tensor("lm_fp8.weight", 2, 4),
	}
	for _, bad := range []struct {
		name string
		s    *TensorInfo
		in   *TensorInfo
	}{
		{"nan", scalar("", float32(math.NaN()), 1), scalar("", 1, 1)},
		{"inf", scalar("", float32(math.Inf(1)), 1), scalar("", 1, 1)},
		{"zero", scalar("", 0, 1), scalar("", 1, 1)},
		{"neg", scalar("", -1, 1), scalar("", 1, 1)},
		{"wide", scalar("", 1, 2), scalar("", 1, 1)},
		{"badin", scalar("", 1, 1), scalar("", float32(math.NaN()), 1)},
		{"zeroin", scalar("", 1, 1), scalar("", 0)},
		{"noin", scalar("", 1, 1), nil},
		{"nos", nil, scalar("", 1, 1)},
		{"i8", &TensorInfo{File: "mem", DType: ops.F8E4M3, Shape: []int{1}, Data: []byte{0x38}}, scalar("", 1, 1)},
	} {
		src[bad.name+".weight"] = fp8Tensor(bad.name+".weight", 2, 4)
		if bad.s != nil {
			bad.s.Name = bad.name + ".weight_scale"
			src[bad.s.Name] = bad.s
		}
		if bad.in != nil {
			bad.in.Name = bad.name + ".input_scale"
			src[bad.in.Name] = bad.in
		}
	}
	return src
}

// TestScaledFP8Load: per-tensor scales repeat over their part's rows (a fused weight keeps
// each part's own scale), per-channel ones follow the rows, columns keep every row's scale;
// ignored and untargeted 16-bit modules load unquantized.
func TestScaledFP8Load(t *testing.T) {
	f := ScaledFP8{Ignore: []string{"re:.*lm_head"}, Groups: []FP8Group{
		{Name: "group_0", Targets: []string{"re:^ch$"}, Channel: true},
		{Name: "group_1", Targets: []string{"Linear"}, StaticInput: true},
	}}
	part := func(name string, lo, hi int, shape ...int) Part {
		return Part{Name: name, Lo: lo, Hi: hi, Shape: shape}
	}
	for _, tc := range []struct {
		name    string
		w       LinearWeight
		shape   []int
		q       []byte
		scales  []float32
		unquant bool
	}{
		{"fused parts of different per-tensor scales", LinearWeight{"qk", Stacked, []Part{part("q.weight", 0, 2, 2, 4), part("k.weight", 1, 2, 2, 4)}},
			[]int{3, 4}, append(rowsOf(4, 0, 2), rowsOf(4, 1, 2)...), []float32{2, 2, 3}, false},
		{"per-channel bf16 scales, rows of rank 1", LinearWeight{"ch", Rows, []Part{part("ch.weight", 1, 3, 3, 4)}},
			[]int{2, 4}, rowsOf(4, 1, 3), []float32{2, 3}, false},
		{"per-channel columns", LinearWeight{"ch", Cols, []Part{part("ch.weight", 2, 4, 3, 4)}},
			[]int{3, 2}, cols(rowsOf(4, 0, 3), 4, 2, 4), []float32{1, 2, 3}, false},
		{"whole per-tensor", LinearWeight{"k", Whole, []Part{part("k.weight", 0, 0, 2, 4)}},
			[]int{2, 4}, rowsOf(4, 0, 2), []float32{3, 3}, false},
		{"ignored lm_head", LinearWeight{"lm_head", Rows, []Part{part("lm_head.weight", 0, 2, 2, 4)}}, []int{2, 4}, nil, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := &captureBackend{}
			_, err := f.Load(NewLoader(scaledSource(), be, 0, nil), tc.w)
			require.NoError(t, err)
			require.Len(t, be.calls, 1)
			c := be.calls[0]
			require.Equal(t, tc.shape, c.shape)
			if tc.unquant {
				require.Equal(t, ops.Plain(ops.F32), c.d)
				return
			}
			require.Equal(t, ops.ChannelFP8, c.d.Format)
			require.Equal(t, ops.F8E4M3, c.d.DType)
			var q []byte
			for _, p := range c.raw {
				q = append(q, p...)
			}
			require.Equal(t, tc.q, q)
			require.Equal(t, []int{tc.shape[0]}, c.d.Scales.Shape)
			require.Equal(t, []int{1, tc.shape[1]}, c.d.Scales.Block)
			require.Equal(t, tc.scales, values(c.d.Scales.Raw...))
		})
	}
}

// TestScaledFP8Refuses: damaged or missing scales name the tensor; an fp8 tensor that is
// ignored or untargeted, or fused with a 16-bit one, is refused; nothing reaches the backend.
func TestScaledFP8Refuses(t *testing.T) {
	static := ScaledFP8{Ignore: []string{"lm_fp8"}, Groups: []FP8Group{{Name: "g", Targets: []string{"Linear"}, StaticInput: true}}}
	channel := ScaledFP8{Groups: []FP8Group{{Name: "g", Targets: []string{"Linear"}, Channel: true}}}
	none := ScaledFP8{Groups: []FP8Group{{Name: "g", Targets: []string{"re:.*mlp"}}}}
	whole := func(name string) LinearWeight {
		return LinearWeight{name, Whole, []Part{{Name: name + ".weight", Shape: []int{2, 4}}}}
	}
	for _, tc := range []struct {
		f    ScaledFP8
		w    LinearWeight
		want string
	}{
		{static, whole("nan"), "scale tensor nan.weight_scale has NaN at 0"},
		{static, whole("inf"), "scale tensor inf.weight_scale has +Inf at 0"},
		{static, whole("zero"), "scale tensor zero.weight_scale has 0 at 0"},
		{static, whole("neg"), "scale tensor neg.weight_scale has -1 at 0"},
		{static, whole("wide"), "scale tensor wide.weight_scale has shape [2], want one value (per-tensor)"},
		{static, whole("badin"), "scale tensor badin.input_scale has NaN"},
		{static, whole("zeroin"), "scale tensor zeroin.input_scale has 0"},
		{static, whole("noin"), "fp8 tensor noin.weight has no scale tensor noin.input_scale"},
		{static, whole("nos"), "fp8 tensor nos.weight has no scale tensor nos.weight_scale"},
		{static, whole("i8"), "scale tensor i8.weight_scale is float8_e4m3fn"},
		{channel, whole("q"), "scale tensor q.weight_scale has shape [1], want [2, 1] (per-channel)"},
		{static, whole("lm_fp8"), "tensor lm_fp8.weight is float8_e4m3fn but the quantization_config leaves it unquantized"},
		{none, whole("q"), "tensor q.weight is float8_e4m3fn but no quantization_config group targets it"},
		{static, LinearWeight{"ql", Stacked, []Part{{Name: "q.weight", Hi: 2, Shape: []int{2, 4}}, {Name: "lm_head.weight", Hi: 2, Shape: []int{2, 4}}}}, "cannot stack fp8 and unquantized"},
		{static, LinearWeight{"q", Rows, []Part{{Name: "q.weight", Lo: 1, Hi: 3, Shape: []int{2, 4}}}}, "rows [1, 3) of q.weight"},
		{static, LinearWeight{"q", Cols, []Part{{Name: "q.weight", Lo: 3, Hi: 5, Shape: []int{2, 4}}}}, "columns [3, 5) of q.weight"},
	} {
		be := &captureBackend{}
		_, err := tc.f.Load(NewLoader(scaledSource(), be, 0, nil), tc.w)
		require.ErrorContains(t, err, tc.want, tc.w.Name)
		require.Empty(t, be.calls)
	}
	_, err := static.LoadExperts(NewLoader(scaledSource(), &captureBackend{}, 0, nil), ExpertWeight{Name: "w13"})
	require.ErrorContains(t, err, "0 experts")
}

// TestScaledFP8LoadExperts: per-tensor gate and up of different scales stack into w13 with one
// scale per row (each part its own), per-channel downs' columns into w2 with every row's scale;
// 16-bit experts stack as they are; a damaged expert names itself and its tensor.
func TestScaledFP8LoadExperts(t *testing.T) {
	f := ScaledFP8{Groups: []FP8Group{{Name: "g", Targets: []string{"re:^(q|k)$"}}, {Name: "c", Targets: []string{"ch"}, Channel: true}}}
	part := func(name string, lo, hi int, shape ...int) Part {
		return Part{Name: name, Lo: lo, Hi: hi, Shape: shape}
	}
	gu := []Part{part("q.weight", 0, 2, 2, 4), part("k.weight", 1, 2, 2, 4)}
	be := &captureBackend{}
	_, err := f.LoadExperts(NewLoader(scaledSource(), be, 0, nil), ExpertWeight{Name: "w13", Layout: Stacked, Experts: [][]Part{gu, gu}})
	require.NoError(t, err)
	c := be.calls[0]
	require.Equal(t, []int{2, 3, 4}, c.shape)
	require.Equal(t, ops.ChannelFP8, c.d.Format)
	require.Equal(t, []int{2, 3}, c.d.Scales.Shape)
	require.Equal(t, []int{1, 4}, c.d.Scales.Block)
	require.Equal(t, []float32{2, 2, 3, 2, 2, 3}, values(c.d.Scales.Raw...))
	be = &captureBackend{}
	_, err = f.LoadExperts(NewLoader(scaledSource(), be, 0, nil), ExpertWeight{Name: "w2", Layout: Cols, Experts: [][]Part{{part("ch.weight", 0, 2, 3, 4)}}})
	require.NoError(t, err)
	c = be.calls[0]
	require.Equal(t, []int{1, 3, 2}, c.shape)
	require.Equal(t, cols(rowsOf(4, 0, 3), 4, 0, 2), c.raw[0])
	require.Equal(t, []float32{1, 2, 3}, values(c.d.Scales.Raw...))
	be = &captureBackend{}
	_, err = f.LoadExperts(NewLoader(scaledSource(), be, 0, nil), ExpertWeight{Name: "w2", Layout: Cols, Experts: [][]Part{{part("lm_head.weight", 0, 2, 2, 4)}}})
	require.NoError(t, err)
	require.Equal(t, ops.Plain(ops.F32), be.calls[0].d)
	_, err = f.LoadExperts(NewLoader(scaledSource(), &captureBackend{}, 0, nil), ExpertWeight{Name: "w13", Layout: Stacked, Experts: [][]Part{gu, {part("nan.weight", 0, 2, 2, 4)}}})
	require.ErrorContains(t, err, "w13: expert 1: mem: tensor nan.weight is float8_e4m3fn but no quantization_config group targets it")
}

// TestForFP8: the quantization spec picks the format.
func TestForFP8(t *testing.T) {
	g := []FP8Group{{Name: "g", Targets: []string{"Linear"}}}
	for _, tc := range []struct {
		s    Spec
		want Format
		err  string
	}{
		{Spec{}, Unquantized{}, ""},
		{Spec{Method: "fp8", Block: [2]int{128, 128}}, BlockFP8{Block: [2]int{128, 128}}, ""},
		{Spec{Method: "fp8", Groups: g}, ScaledFP8{Groups: g}, ""},
		{Spec{Method: "compressed-tensors", Groups: g, Ignore: []string{"lm_head"}}, ScaledFP8{Groups: g, Ignore: []string{"lm_head"}, Compressed: true}, ""},
		{Spec{Method: "compressed-tensors"}, nil, "compressed-tensors"},
		{Spec{Method: "fp8"}, nil, "without a weight_block_size"},
		{Spec{Method: "awq"}, nil, `"awq"`},
	} {
		f, err := For(tc.s)
		if tc.err != "" {
			require.ErrorIs(t, err, ops.ErrUnsupportedWeight)
			require.ErrorContains(t, err, tc.err)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, f)
	}
}

// TestScaledFP8Matching: compressed-tensors' ignore entries match the module, a dotted suffix
// or a "re:" pattern from the start, never a parent module (llm-compressor lists parents whose
// children stay quantized); its plain targets match the module exactly, "Linear" every one.
// quant_method fp8's ignored_layers also match a parent (matchAny).
func TestScaledFP8Matching(t *testing.T) {
	const w = "model.layers.0.mlp.experts.0.gate_proj.weight"
	ct := func(ignore ...string) ScaledFP8 {
		return ScaledFP8{Ignore: ignore, Compressed: true}
	}
	for _, tc := range []struct {
		f    ScaledFP8
		want bool
	}{
		{ct("model.layers.0.mlp.experts.0.gate_proj"), true},
		{ct("gate_proj"), true},
		{ct("experts.0.gate_proj"), true},
		{ct("model.layers.0.mlp.experts.0"), false},
		{ct("te_proj"), false},
		{ct("re:.*gate_proj$"), true},
		{ct("re:gate_proj"), false}, // re.match anchors at the start
		{ct("re:model\\.layers\\.0\\."), true},
		{ScaledFP8{Ignore: []string{"model.layers.0.mlp.experts.0"}}, true},
	} {
		require.Equal(t, tc.want, tc.f.ignored(w), "%+v", tc.f.Ignore)
	}
	for _, tc := range []struct {
		targets []string
		compr   bool
		want    bool
	}{
		{[]string{"Linear"}, true, true},
		{[]string{"re:.*experts.*"}, true, true},
		{[]string{"model.layers.0.mlp.experts.0.gate_proj"}, true, true},
		{[]string{"gate_proj"}, true, false},
		{[]string{"gate_proj"}, false, true},
		{[]string{"re:.*self_attn.*"}, true, false},
	} {
		f := ScaledFP8{Groups: []FP8Group{{Name: "g", Targets: tc.targets}}, Compressed: tc.compr}
		_, ok := f.group(w)
		require.Equal(t, tc.want, ok, "%v compressed %v", tc.targets, tc.compr)
	}
}
