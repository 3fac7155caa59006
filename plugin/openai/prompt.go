package openai

import (
	"bytes"
	"encoding/json"
	"unicode"
	"unicode/utf8"

	"github.com/atom-go/atom/engine/tokenizer"
)

// model is what request parsing needs to know of the served model; parsing never touches the
// engine, so the fuzz targets run it alone.
type model struct {
	tok    *tokenizer.Tokenizer // nil: token-id prompts only
	maxLen int                  // longest prompt plus output
	vocab  int
}

// Prompts longer than this many bytes per token of the context are first counted chunk by
// chunk (countOver) so that a huge text is refused after tokenizing about one context's worth
// of it; shorter ones are tokenized whole at once.
const (
	directBytesPerToken = 8
	countChunk          = 16 << 10
	// countSlack is how many tokens one chunk boundary may add to a chunked count (a word or
	// an added token cut in two, a prefix the normalizer adds again): a chunked count beyond the
	// limit by more than this per chunk proves the whole text is beyond it.
	countSlack = 64
)

// encodeBounded tokenizes text for a prompt that must stay below limit tokens. over reports
// that it does not; ids is nil when a text far beyond the limit was refused after a bounded
// amount of work (its exact length unknown, at least limit).
func encodeBounded(tok *tokenizer.Tokenizer, text string, addSpecial bool, limit int) (ids []int32, over bool, err error) {
	if len(text) > limit*directBytesPerToken {
		over, err := countOver(tok, text, addSpecial, limit)
		if err != nil || over {
			return nil, over, err
		}
	}
	ids, err = tok.Encode(text, addSpecial)
	return ids, err == nil && len(ids) >= limit, err
}

// countOver tokenizes text in chunks cut between words and reports whether the count, less
// the slack each cut may add, already reaches limit; it stops as soon as it does.
func countOver(tok *tokenizer.Tokenizer, text string, addSpecial bool, limit int) (bool, error) {
	total, cuts := 0, 0
	for first := true; text != ""; first = false {
		n := cutPoint(text, countChunk)
		ids, err := tok.Encode(text[:n], addSpecial && first)
		if err != nil {
			return false, err
		}
		total += len(ids)
		text = text[n:]
		if text != "" {
			cuts++
		}
		if total-cuts*countSlack >= limit {
			return true, nil
		}
	}
	return false, nil
}

// cutPoint returns where to end a chunk of at most about size bytes: before a space that
// follows a non-space (where pre-tokenizers split anyway), else at a rune boundary.
func cutPoint(text string, size int) int {
	if len(text) <= size {
		return len(text)
	}
	for i := size; i > size/2; i-- {
		if text[i] == ' ' && !isSpaceByte(text[i-1]) && i+1 < len(text) && !isSpaceByte(text[i+1]) {
			return i
		}
	}
	i := size
	for i > 0 && !utf8.RuneStart(text[i]) {
		i--
	}
	if i == 0 {
		return size
	}
	return i
}

func isSpaceByte(b byte) bool { return b < utf8.RuneSelf && unicode.IsSpace(rune(b)) }

// contextError is vLLM's wording for a prompt that leaves no room to generate.
func contextError(param string, maxLen, n int, atLeast bool) *apiError {
	more := ""
	if atLeast {
		more = "at least "
	}
	return badRequest(param, "This model's maximum context length is %d tokens. However, your request has %s%d input tokens. Please reduce the length of the input.", maxLen, more, n)
}

// parsePrompt accepts a string, a list of strings, a list of token ids or a list of lists;
// the prompts times n must not exceed maxSeqs.
func (m *model) parsePrompt(raw json.RawMessage, maxSeqs, n int) ([][]int32, *apiError) {
	// Each attempt decodes into a fresh value: a failed Unmarshal may leave partial results.
	var texts []string
	var idLists [][]int32
	var one string
	var ids []int32
	switch {
	case isNull(raw):
		return nil, badRequest("prompt", "prompt is required")
	case json.Unmarshal(raw, &one) == nil:
		texts = []string{one}
	case json.Unmarshal(raw, &ids) == nil:
		idLists = [][]int32{ids}
	default:
		var many []string
		var lists [][]int32
		if json.Unmarshal(raw, &many) == nil {
			texts = many
		} else if json.Unmarshal(raw, &lists) == nil {
			idLists = lists
		} else {
			return nil, badRequest("prompt", "prompt must be a string, a list of strings, a list of token ids (integers in [0, %d)) or a list of such lists", m.vocab)
		}
	}
	if idLists != nil && bytes.Contains(raw, []byte("null")) {
		// A numeric array holds "null" only as a literal, which would decode as token 0.
		return nil, badRequest("prompt", "prompt token ids must be integers, got null")
	}
	if k := len(texts) + len(idLists); k*n > maxSeqs {
		return nil, badRequest("prompt", "%d prompts x n=%d is %d sequences; a request may ask for at most %d (--max-seqs-per-request)", k, n, k*n, maxSeqs)
	}
	if texts != nil {
		if m.tok == nil {
			return nil, badRequest("prompt", "this model has no tokenizer: send the prompt as token ids")
		}
		for _, t := range texts {
			enc, over, err := encodeBounded(m.tok, t, true, m.maxLen)
			if err != nil {
				return nil, badRequest("prompt", "tokenize: %v", err)
			}
			if over && enc == nil {
				return nil, contextError("prompt", m.maxLen, m.maxLen, true)
			}
			idLists = append(idLists, enc)
		}
	}
	if len(idLists) == 0 {
		return nil, badRequest("prompt", "prompt is empty")
	}
	for _, l := range idLists {
		if len(l) == 0 {
			return nil, badRequest("prompt", "prompt is empty")
		}
		if len(l) >= m.maxLen {
			return nil, contextError("prompt", m.maxLen, len(l), false)
		}
		if e := m.checkIDs(l); e != nil {
			return nil, e
		}
	}
	return idLists, nil
}

func (m *model) checkIDs(ids []int32) *apiError {
	for _, id := range ids {
		if id < 0 || int(id) >= m.vocab {
			return badRequest("prompt", "prompt token id %d outside the vocabulary [0, %d)", id, m.vocab)
		}
	}
	return nil
}

// longest returns the length of the longest prompt.
func longest(prompts [][]int32) int {
	n := 0
	for _, p := range prompts {
		n = max(n, len(p))
	}
	return n
}
