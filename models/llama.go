package models

// Llama and Mistral share one architecture: a pre-norm GQA decoder without biases. Mistral's
// sliding window is honoured by capping the model length at the window (Config.MaxModelLen).
func init() {
	registerDecoder("LlamaForCausalLM", decoderOptions{})
	registerDecoder("MistralForCausalLM", decoderOptions{})
}
