package openai

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
)

// unsupportedFields are request fields of OpenAI's API or of vLLM's extensions that atom-go
// does not implement. Each is refused with a 400 naming it unless it is null or holds one of
// the values listed in its `accept` tag (the value that means "off"), as the vLLM shim refuses
// the same sampling parameters rather than ignoring them.
type unsupportedFields struct {
	AllowedTokenIDs         json.RawMessage `json:"allowed_token_ids"`
	BadWords                json.RawMessage `json:"bad_words" accept:"[]"`
	PromptLogprobs          json.RawMessage `json:"prompt_logprobs"`
	LogprobTokenIDs         json.RawMessage `json:"logprob_token_ids"`
	StructuredOutputs       json.RawMessage `json:"structured_outputs"`
	GuidedJSON              json.RawMessage `json:"guided_json"`
	GuidedRegex             json.RawMessage `json:"guided_regex"`
	GuidedChoice            json.RawMessage `json:"guided_choice"`
	GuidedGrammar           json.RawMessage `json:"guided_grammar"`
	GuidedDecodingBackend   json.RawMessage `json:"guided_decoding_backend"`
	GuidedWhitespacePattern json.RawMessage `json:"guided_whitespace_pattern"`
	StructuralTag           json.RawMessage `json:"structural_tag"`
	LogitsProcessors        json.RawMessage `json:"logits_processors"`
	VLLMXArgs               json.RawMessage `json:"vllm_xargs"`
	ThinkingTokenBudget     json.RawMessage `json:"thinking_token_budget"`
	RepetitionDetection     json.RawMessage `json:"repetition_detection"`
	TruncatePromptTokens    json.RawMessage `json:"truncate_prompt_tokens"`
	IncludeStopStrInOutput  json.RawMessage `json:"include_stop_str_in_output" accept:"false"`
	SpacesBetweenSpecial    json.RawMessage `json:"spaces_between_special_tokens" accept:"true"`
	UseBeamSearch           json.RawMessage `json:"use_beam_search" accept:"false"`
	LengthPenalty           json.RawMessage `json:"length_penalty" accept:"1|1.0"`
	ReturnTokensAsTokenIDs  json.RawMessage `json:"return_tokens_as_token_ids" accept:"false"`
	KVTransferParams        json.RawMessage `json:"kv_transfer_params"`
	CacheSalt               json.RawMessage `json:"cache_salt"`
	Priority                json.RawMessage `json:"priority" accept:"0"`
	PromptEmbeds            json.RawMessage `json:"prompt_embeds"`
	MMProcessorKwargs       json.RawMessage `json:"mm_processor_kwargs"`
	Functions               json.RawMessage `json:"functions" accept:"[]"`
	FunctionCall            json.RawMessage `json:"function_call" accept:"\"none\"|\"auto\""`
	Audio                   json.RawMessage `json:"audio"`
	Modalities              json.RawMessage `json:"modalities" accept:"[\"text\"]"`
	Prediction              json.RawMessage `json:"prediction"`
	WebSearchOptions        json.RawMessage `json:"web_search_options"`
	ReasoningEffort         json.RawMessage `json:"reasoning_effort"`
}

// chatOnlyUnsupported are vLLM's chat extensions atom-go does not implement.
type chatOnlyUnsupported struct {
	ChatTemplate         json.RawMessage `json:"chat_template"`
	ChatTemplateKwargs   json.RawMessage `json:"chat_template_kwargs" accept:"{}"`
	Documents            json.RawMessage `json:"documents" accept:"[]"`
	ContinueFinalMessage json.RawMessage `json:"continue_final_message" accept:"false"`
	Echo                 json.RawMessage `json:"echo" accept:"false"`
	AddSpecialTokens     json.RawMessage `json:"add_special_tokens" accept:"false"`
}

// completionOnlyUnsupported are vLLM's completion extensions atom-go does not implement.
type completionOnlyUnsupported struct {
	AddSpecialTokens json.RawMessage `json:"add_special_tokens" accept:"true"`
}

// checkUnsupported refuses the first field of the struct v points to that is set to anything
// but null or an accepted value.
func checkUnsupported(v any) *apiError {
	rv := reflect.ValueOf(v).Elem()
	rt := rv.Type()
	for i := 0; i < rt.NumField(); i++ {
		raw := rv.Field(i).Interface().(json.RawMessage)
		if isNull(raw) {
			continue
		}
		f := rt.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		got := compact(raw)
		ok := false
		if acc, has := f.Tag.Lookup("accept"); has {
			for _, a := range strings.Split(acc, "|") {
				ok = ok || got == a
			}
		}
		if !ok {
			return badRequest(name, "%s is not supported by atom-go: remove it from the request (atom-go refuses rather than ignores it)", name)
		}
	}
	return nil
}

// compact returns raw without insignificant whitespace, for comparisons.
func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}
