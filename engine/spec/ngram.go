package spec

import "slices"

// Propose appends to dst the n-gram drafts for a sequence whose tokens are toks, and returns
// dst: the tokens that followed an earlier occurrence of the longest suffix of toks whose
// length lies in [PromptLookupMin, PromptLookupMax], at most k of them (fewer when the match
// is close to the end). As vLLM's ngram proposer: the longest n-gram wins, and among
// occurrences of that length the earliest in the sequence, not the most recent. No match
// appends nothing. It allocates only when dst must grow.
func (c *Config) Propose(dst []int32, toks []int32, k int) []int32 {
	total := len(toks)
	if k <= 0 || total < c.PromptLookupMin {
		return dst
	}
	// An occurrence must end before the suffix's last token, so n <= total-1.
	for n := min(c.PromptLookupMax, total-1); n >= c.PromptLookupMin; n-- {
		suffix := toks[total-n:]
		for s := 0; s+n <= total-1; s++ {
			if toks[s] != suffix[0] || !slices.Equal(toks[s:s+n], suffix) {
				continue
			}
			from := s + n
			return append(dst, toks[from:min(total, from+k)]...)
		}
	}
	return dst
}
