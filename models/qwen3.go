package models

import "github.com/atom-go/atom/ops"

// Qwen3 is the Llama decoder with an RMSNorm over each query and key head before RoPE and an
// explicit head_dim that need not equal hidden_size / num_attention_heads.
func init() {
	register("Qwen3ForCausalLM", family{load: func(ck *Checkpoint, be ops.Backend, opt Options) (Model, error) {
		return loadDecoder(ck, be, opt, decoderOptions{qkNorm: true})
	}})
}
