package models

import "github.com/atom-go/atom/ops"

// Qwen2 is the Llama decoder with biases on the q, k and v projections.
func init() {
	register("Qwen2ForCausalLM", family{load: func(ck *Checkpoint, be ops.Backend, opt Options) (Model, error) {
		return loadDecoder(ck, be, opt, decoderOptions{qkvBias: true})
	}})
}
