package models

// Qwen2 is the Llama decoder with biases on the q, k and v projections.
func init() { registerDecoder("Qwen2ForCausalLM", decoderOptions{qkvBias: true}) }
