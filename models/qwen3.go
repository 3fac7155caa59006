package models

// Qwen3 is the Llama decoder with an RMSNorm over each query and key head before RoPE and an
// explicit head_dim that need not equal hidden_size / num_attention_heads.
func init() { registerDecoder("Qwen3ForCausalLM", decoderOptions{qkNorm: true}) }
