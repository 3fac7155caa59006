package models

import "github.com/atom-go/atom/ops"

// Llama and Mistral share one architecture: a pre-norm GQA decoder without biases. Mistral's
// sliding window is honoured by capping the model length at the window (see EffectiveMaxLen).
func init() {
	load := func(ck *Checkpoint, be ops.Backend, opt Options) (Model, error) {
		return loadDecoder(ck, be, opt, decoderOptions{})
	}
	register("LlamaForCausalLM", family{load: load})
	register("MistralForCausalLM", family{load: load})
}
