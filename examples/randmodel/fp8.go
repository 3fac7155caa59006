package main

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"

	"github.com/atom-go/atom/ops"
)

// FP8 checkpoints (--dtype fp8-block, fp8-tensor): the decoder's linear weights (attention
// projections, MLPs, experts) are float8_e4m3fn beside their scales, everything else (the
// embedding, norms, LM head, MoE routers) bfloat16, as the published FP8 checkpoints are:
//
//   - fp8-block: quant_method "fp8", weight_block_size [128, 128] (DeepSeek-V3, Qwen3-*-FP8):
//     weight_scale_inv float32 [ceil(N/128), ceil(K/128)], each block's amax / 448.
//   - fp8-tensor: compressed-tensors per-tensor weights with static per-tensor activations
//     (llm-compressor's FP8 scheme): weight_scale and input_scale float32 [1]; lm_head and the
//     MoE routers ignored.
//
// The weights are the bf16 path's random values quantized with those scales, so they keep its
// distribution (and no block saturates).

// fp8Role is what an fp8 checkpoint's tensor holds.
type fp8Role uint8

const (
	// fp8Weight: float8_e4m3fn codes of a linear weight, one scale per 128x128 block.
	fp8Weight fp8Role = iota + 1
	// fp8TensorWeight: float8_e4m3fn codes of a linear weight, one scale for the tensor.
	fp8TensorWeight
	// fp8Scale: the float32 scales of the weight before it (weight_scale_inv or weight_scale).
	fp8Scale
	// fp8Input: a static input_scale (float32, one value).
	fp8Input
)

// fp8Block is the weight block size of --dtype fp8-block.
const fp8Block = 128

// startsShard reports whether a tensor of this role may begin a shard: scales stay beside
// their weight.
func (r fp8Role) startsShard() bool { return r != fp8Scale && r != fp8Input && r != mxfp4Scales }

// size is the bytes of one element of a tensor of this role (size: the checkpoint dtype's).
func (r fp8Role) size(size int) int {
	switch r {
	case fp8Weight, fp8TensorWeight, mxfp4Codes, mxfp4Scales:
		return 1
	case fp8Scale, fp8Input:
		return 4
	}
	return size
}

// dtype is the safetensors dtype of the role's tensors.
func (r fp8Role) dtype() string {
	if r == mxfp4Codes || r == mxfp4Scales {
		return "U8"
	}
	if r == fp8Weight || r == fp8TensorWeight {
		return "F8_E4M3"
	}
	return "F32"
}

// fp8Mode splits --dtype into the checkpoint's 16-bit dtype and the fp8 mode ("" for none).
func fp8Mode(dtype string) (string, string) {
	if mode, ok := strings.CutPrefix(dtype, "fp8-"); ok {
		return "bfloat16", mode
	}
	if dtype == "mxfp4" {
		return "bfloat16", dtype
	}
	return dtype, ""
}

// fp8Tensors adds each linear weight's scales right after it and returns the roles of the fp8
// checkpoint's tensors (none: stored in the checkpoint's dtype).
func fp8Tensors(ts []tensor, mode string) ([]tensor, map[string]fp8Role, error) {
	roles := map[string]fp8Role{}
	switch mode {
	case "":
		return ts, roles, nil
	case "block":
	case "tensor":
	default:
		return nil, nil, fmt.Errorf("unsupported dtype fp8-%s (fp8-block or fp8-tensor)", mode)
	}
	out := make([]tensor, 0, 2*len(ts))
	for _, t := range ts {
		if !quantized(t) {
			out = append(out, t)
			continue
		}
		prefix := strings.TrimSuffix(t.name, "weight")
		if mode == "block" {
			sc := tensor{name: prefix + "weight_scale_inv", shape: []int{(t.shape[0] + fp8Block - 1) / fp8Block, (t.shape[1] + fp8Block - 1) / fp8Block}}
			roles[t.name], roles[sc.name] = fp8Weight, fp8Scale
			out = append(out, t, sc)
			continue
		}
		sc, in := tensor{name: prefix + "weight_scale", shape: []int{1}}, tensor{name: prefix + "input_scale", shape: []int{1}}
		roles[t.name], roles[sc.name], roles[in.name] = fp8TensorWeight, fp8Scale, fp8Input
		out = append(out, t, sc, in)
	}
	return out, roles, nil
}

// quantized reports whether a tensor is a decoder linear weight (not a router, norm, bias).
func quantized(t tensor) bool {
	if !strings.HasPrefix(t.name, "model.layers.") || len(t.shape) != 2 || t.std == 0 {
		return false
	}
	for _, w := range []string{"_proj.weight", ".w1.weight", ".w2.weight", ".w3.weight"} {
		if strings.HasSuffix(t.name, w) {
			return true
		}
	}
	return false
}

// fp8Config is the quantization_config of the mode.
func fp8Config(mode string) map[string]any {
	if mode == "block" {
		return map[string]any{"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
			"weight_block_size": []int{fp8Block, fp8Block}}
	}
	args := func(strategy string) map[string]any {
		return map[string]any{"num_bits": 8, "type": "float", "symmetric": true, "dynamic": false, "strategy": strategy,
			"group_size": nil, "block_structure": nil}
	}
	return map[string]any{"quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
		"ignore": []string{"lm_head", `re:.*\.gate$`}, "config_groups": map[string]any{"group_0": map[string]any{"targets": []string{"Linear"},
			"weights": args("tensor"), "input_activations": args("tensor"), "output_activations": nil}}}
}

// fp8Quantizer quantizes each fp8 weight and keeps its scales for the tensor that follows.
type fp8Quantizer struct {
	scales []float32
}

// bytes returns a tensor's bytes: a weight's e4m3 codes (its scales kept for the next call),
// the kept scales, or an input_scale.
func (q *fp8Quantizer) bytes(t tensor, r fp8Role, seed uint64) []byte {
	switch r {
	case fp8Weight, fp8TensorWeight:
		var codes []byte
		codes, q.scales = quantizeFP8(t, r, seed)
		return codes
	case fp8Scale:
		b := make([]byte, 4*len(q.scales))
		for i, v := range q.scales {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
		return b
	}
	// A static activation scale for activations of about unit size (what the cpu ignores).
	return binary.LittleEndian.AppendUint32(nil, math.Float32bits(4.0/448))
}

// quantizeFP8 draws the weight's float32 values as the bf16 path does and quantizes them:
// per 128x128 block (amax / 448 each) or per tensor, as its role says. The values are bounded
// at 3.46 std (fill), so no block saturates.
func quantizeFP8(t tensor, r fp8Role, seed uint64) ([]byte, []float32) {
	n, k := t.shape[0], t.shape[1]
	vals := randomBytes(n*k, t.std, "float32", seed)
	f := func(i int) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(vals[4*i:])) }
	bn, bk := fp8Block, fp8Block
	if r == fp8TensorWeight {
		bn, bk = n, k
	}
	sn, sk := (n+bn-1)/bn, (k+bk-1)/bk
	scales := make([]float32, sn*sk)
	codes := make([]byte, n*k)
	parallel(sn, func(bi int) {
		for bj := 0; bj < sk; bj++ {
			var amax float32
			for r := bi * bn; r < min((bi+1)*bn, n); r++ {
				for c := bj * bk; c < min((bj+1)*bk, k); c++ {
					amax = max(amax, float32(math.Abs(float64(f(r*k+c)))))
				}
			}
			s := max(amax, 1e-12) / 448
			scales[bi*sk+bj] = s
			for r := bi * bn; r < min((bi+1)*bn, n); r++ {
				for c := bj * bk; c < min((bj+1)*bk, k); c++ {
					codes[r*k+c] = ops.Float32ToF8E4M3(f(r*k+c) / s)
				}
			}
		}
	})
	return codes, scales
}

// parallel runs fn(0..n-1) over the cores.
func parallel(n int, fn func(int)) {
	var wg sync.WaitGroup
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	for range min(n, runtime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				fn(i)
			}
		}()
	}
	wg.Wait()
}
