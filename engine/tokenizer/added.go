package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedToken is an entry of tokenizer.json's "added_tokens": a token that
// is matched literally in the input before any model runs.
type addedToken struct {
	id         int32
	content    string
	singleWord bool
	lstrip     bool
	rstrip     bool
	normalized bool
	special    bool
	// decodeAs is the string Decode uses: the content, normalized when the
	// token is normalized (as Hugging Face's simple_id_to_token).
	decodeAs string
}

// trieNode is a byte trie node; tok is the index of the added token that
// ends here, or -1.
type trieNode struct {
	children map[byte]*trieNode
	tok      int
}

// matcher finds added tokens in text, leftmost first and longest among
// those that start at the same position (Aho-Corasick LeftmostLongest).
type matcher struct {
	root  *trieNode
	first [256]bool
	empty bool
}

// newMatcher indexes patterns[i] -> token index idx[i].
func newMatcher(patterns []string, idx []int) *matcher {
	m := &matcher{root: &trieNode{tok: -1}, empty: true}
	for i, p := range patterns {
		if p == "" {
			continue
		}
		m.empty = false
		m.first[p[0]] = true
		n := m.root
		for j := 0; j < len(p); j++ {
			if n.children == nil {
				n.children = map[byte]*trieNode{}
			}
			c, ok := n.children[p[j]]
			if !ok {
				c = &trieNode{tok: -1}
				n.children[p[j]] = c
			}
			n = c
		}
		n.tok = idx[i]
	}
	return m
}

// longestAt returns the token index and end of the longest pattern that
// starts at s[i:], or -1.
func (m *matcher) longestAt(s string, i int) (tok, end int) {
	tok, end = -1, -1
	n := m.root
	for j := i; j < len(s); j++ {
		n = n.children[s[j]]
		if n == nil {
			break
		}
		if n.tok >= 0 {
			tok, end = n.tok, j+1
		}
	}
	return tok, end
}

// addedVocab holds the added tokens and the two matchers Hugging Face
// uses: one on raw text (normalized=false tokens) and one on normalized
// text (normalized=true tokens, themselves normalized).
type addedVocab struct {
	tokens    []addedToken
	byContent map[string]int32
	byID      map[int32]*addedToken
	// special holds the content of special tokens; Decode skips a token
	// whose string is in it.
	special map[string]bool
	raw     *matcher
	norm    *matcher
}

// newAddedVocab builds the vocabulary; norm normalizes the content of
// normalized tokens (may be nil).
func newAddedVocab(tokens []addedToken, norm normalizer) (*addedVocab, error) {
	v := &addedVocab{tokens: tokens, byContent: map[string]int32{}, byID: map[int32]*addedToken{}, special: map[string]bool{}}
	var rawPats, normPats []string
	var rawIdx, normIdx []int
	for i := range tokens {
		t := &v.tokens[i]
		if t.content == "" {
			continue
		}
		v.byContent[t.content] = t.id
		v.byID[t.id] = t
		t.decodeAs = t.content
		if t.special {
			v.special[t.content] = true
		}
		if !t.normalized {
			rawPats, rawIdx = append(rawPats, t.content), append(rawIdx, i)
			continue
		}
		content := t.content
		if norm != nil {
			var err error
			if content, err = norm.normalize(content); err != nil {
				return nil, err
			}
		}
		t.decodeAs = content
		normPats, normIdx = append(normPats, content), append(normIdx, i)
	}
	v.raw = newMatcher(rawPats, rawIdx)
	v.norm = newMatcher(normPats, normIdx)
	return v, nil
}

// textPiece is a stretch of input that is either an added token (id >= 0)
// or text still to be tokenized (id == -1).
type textPiece struct {
	text    string
	id      int32
	atStart bool
}

// split cuts s around the added tokens m finds, honouring single_word,
// lstrip and rstrip like AddedVocabulary::find_matches. Empty pieces are
// dropped. atStart says whether s itself begins the original input.
func (v *addedVocab) split(out []textPiece, s string, m *matcher, atStart bool) []textPiece {
	if s == "" {
		return out
	}
	if m.empty {
		return append(out, textPiece{text: s, id: -1, atStart: atStart})
	}
	startOffset := 0
	for i := 0; i < len(s); {
		if !m.first[s[i]] {
			i++
			continue
		}
		ti, stop := m.longestAt(s, i)
		if ti < 0 {
			i++
			continue
		}
		start, next := i, stop
		i = next
		tok := &v.tokens[ti]
		if tok.singleWord {
			startSpace := start == 0 || !endsWithWord(s[:start])
			stopSpace := stop == len(s) || !startsWithWord(s[stop:])
			if !startSpace || !stopSpace {
				continue
			}
		}
		if tok.lstrip {
			newStart := len(strings.TrimRightFunc(s[:start], unicode.IsSpace))
			start = max(newStart, startOffset)
		}
		if tok.rstrip {
			rest := s[stop:]
			stop += len(rest) - len(strings.TrimLeftFunc(rest, unicode.IsSpace))
		}
		if startOffset < start {
			out = append(out, textPiece{text: s[startOffset:start], id: -1, atStart: atStart && startOffset == 0})
		}
		out = append(out, textPiece{text: s[start:stop], id: tok.id})
		startOffset = stop
		i = max(i, stop)
	}
	if startOffset < len(s) {
		out = append(out, textPiece{text: s[startOffset:], id: -1, atStart: atStart && startOffset == 0})
	}
	return out
}

// isWordChar is Rust regex's Unicode \w.
func isWordChar(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r) || unicode.Is(unicode.Pc, r) || r == 0x200C || r == 0x200D
}

func endsWithWord(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return s != "" && isWordChar(r)
}

func startsWithWord(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return s != "" && isWordChar(r)
}
