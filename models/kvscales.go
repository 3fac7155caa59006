package models

import (
	"fmt"

	"github.com/atom-go/atom/models/formats"
	"github.com/atom-go/atom/ops"
)

// kvScaleNames are the checkpoint names of layer i's fp8 KV cache scales, in the order vLLM's
// loaders look for them (maybe_remap_kv_scale_name and compressed-tensors' get_cache_scale):
// self_attn.{k,v}_scale (compressed-tensors' kv_cache_scheme, Quark), the ModelOpt
// self_attn.{k,v}_proj.{k,v}_scale, compressed-tensors' older {k,v}_proj.output_scale, and
// the deprecated single self_attn.kv_scale for both.
func kvScaleNames(layer int, kv string) []string {
	p := fmt.Sprintf("model.layers.%d.self_attn.", layer)
	return []string{p + kv + "_scale", p + kv + "_proj." + kv + "_scale", p + kv + "_proj.output_scale",
		p + "attn." + kv + "_scale", p + "kv_scale"}
}

// applyFP8KV turns a model's KV cache spec into an fp8 (e4m3) one: every layer's K and V
// stored as e4m3 with the checkpoint's per-layer k_scale / v_scale, 1.0 where it has none (as
// vLLM does: uncalibrated scales of 1 quantize values up to ±448 directly). A damaged scale
// is refused by name.
func applyFP8KV(src formats.Source, spec *ops.KVCacheSpec) error {
	for i := range spec.Layers {
		l := &spec.Layers[i]
		l.DType, l.KScale, l.VScale = ops.F8E4M3, 1, 1
		for _, kv := range []string{"k", "v"} {
			for _, name := range kvScaleNames(i, kv) {
				s, ok, err := formats.ScalarScale(src, name)
				if err != nil {
					return err
				}
				if !ok {
					continue
				}
				if kv == "k" {
					l.KScale = s
				} else {
					l.VScale = s
				}
				break
			}
		}
	}
	return nil
}
