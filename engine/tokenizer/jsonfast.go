package tokenizer

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// The vocab and merges of a tokenizer.json hold hundreds of thousands of
// short strings; encoding/json decodes them several times slower than this
// small scanner, which understands exactly the two shapes involved:
// {"token": id, ...} and ["a b", ...] / [["a", "b"], ...].

// jsonScanner reads JSON values from a byte slice.
type jsonScanner struct {
	data []byte
	pos  int
}

func (s *jsonScanner) errorf(format string, args ...any) error {
	return fmt.Errorf("offset %d: %s", s.pos, fmt.Sprintf(format, args...))
}

func (s *jsonScanner) skipSpace() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// expect consumes byte c after optional whitespace.
func (s *jsonScanner) expect(c byte) error {
	s.skipSpace()
	if s.pos >= len(s.data) || s.data[s.pos] != c {
		return s.errorf("expected %q", c)
	}
	s.pos++
	return nil
}

// peek returns the next non-space byte, or 0 at the end.
func (s *jsonScanner) peek() byte {
	s.skipSpace()
	if s.pos >= len(s.data) {
		return 0
	}
	return s.data[s.pos]
}

// str reads a JSON string literal.
func (s *jsonScanner) str() (string, error) {
	if err := s.expect('"'); err != nil {
		return "", err
	}
	start := s.pos
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		if c == '"' {
			raw := s.data[start:s.pos]
			s.pos++
			if !utf8.Valid(raw) {
				// encoding/json turns each invalid byte into U+FFFD.
				return string([]rune(string(raw))), nil
			}
			return string(raw), nil
		}
		if c == '\\' {
			return s.strEscaped(start)
		}
		if c < 0x20 {
			return "", s.errorf("control character in string")
		}
		s.pos++
	}
	return "", s.errorf("unterminated string")
}

// strEscaped finishes a string that contains escapes, from its start.
func (s *jsonScanner) strEscaped(start int) (string, error) {
	buf := append([]byte(nil), s.data[start:s.pos]...)
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		switch {
		case c == '"':
			s.pos++
			if !utf8.Valid(buf) {
				buf = []byte(string([]rune(string(buf))))
			}
			return string(buf), nil
		case c < 0x20:
			return "", s.errorf("control character in string")
		case c != '\\':
			buf = append(buf, c)
			s.pos++
			continue
		}
		if s.pos+1 >= len(s.data) {
			break
		}
		esc := s.data[s.pos+1]
		s.pos += 2
		switch esc {
		case '"', '\\', '/':
			buf = append(buf, esc)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, err := s.hex4()
			if err != nil {
				return "", err
			}
			if utf16.IsSurrogate(r) {
				r2 := utf8.RuneError
				if s.pos+1 < len(s.data) && s.data[s.pos] == '\\' && s.data[s.pos+1] == 'u' {
					save := s.pos
					s.pos += 2
					low, err := s.hex4()
					if err != nil {
						return "", err
					}
					if r2 = utf16.DecodeRune(r, low); r2 == utf8.RuneError {
						s.pos = save
					}
				}
				r = r2
			}
			buf = utf8.AppendRune(buf, r)
		default:
			return "", s.errorf("bad escape \\%c", esc)
		}
	}
	return "", s.errorf("unterminated string")
}

// hex4 reads the four hex digits of a \u escape.
func (s *jsonScanner) hex4() (rune, error) {
	if s.pos+4 > len(s.data) {
		return 0, s.errorf("short \\u escape")
	}
	v, err := strconv.ParseUint(string(s.data[s.pos:s.pos+4]), 16, 32)
	if err != nil {
		return 0, s.errorf("bad \\u escape")
	}
	s.pos += 4
	return rune(v), nil
}

// int32Value reads a JSON integer that fits in an int32.
func (s *jsonScanner) int32Value() (int32, error) {
	s.skipSpace()
	start := s.pos
	if s.pos < len(s.data) && s.data[s.pos] == '-' {
		s.pos++
	}
	for s.pos < len(s.data) && s.data[s.pos] >= '0' && s.data[s.pos] <= '9' {
		s.pos++
	}
	v, err := strconv.ParseInt(string(s.data[start:s.pos]), 10, 32)
	if err != nil {
		return 0, s.errorf("want an integer id")
	}
	return int32(v), nil
}

// parseVocab decodes a {"token": id, ...} object.
func parseVocab(data []byte) (map[string]int32, error) {
	s := &jsonScanner{data: data}
	if err := s.expect('{'); err != nil {
		return nil, err
	}
	vocab := make(map[string]int32, len(data)/16)
	if s.peek() == '}' {
		s.pos++
		return vocab, nil
	}
	for {
		key, err := s.str()
		if err != nil {
			return nil, err
		}
		if err := s.expect(':'); err != nil {
			return nil, err
		}
		id, err := s.int32Value()
		if err != nil {
			return nil, err
		}
		vocab[key] = id
		switch s.peek() {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return vocab, nil
		default:
			return nil, s.errorf("expected ',' or '}' in vocab")
		}
	}
}

// parseMerges decodes merges in the legacy ["a b", ...] form or the pair
// form [["a", "b"], ...].
func parseMerges(data []byte) ([][2]string, error) {
	if isNull(data) {
		return nil, nil
	}
	s := &jsonScanner{data: data}
	if err := s.expect('['); err != nil {
		return nil, fmt.Errorf("merges: %w", err)
	}
	out := make([][2]string, 0, len(data)/12)
	if s.peek() == ']' {
		s.pos++
		return out, nil
	}
	for i := 0; ; i++ {
		pair, err := s.mergeEntry(i)
		if err != nil {
			return nil, fmt.Errorf("merges: %w", err)
		}
		out = append(out, pair)
		switch s.peek() {
		case ',':
			s.pos++
		case ']':
			s.pos++
			return out, nil
		default:
			return nil, fmt.Errorf("merges: %w", s.errorf("expected ',' or ']'"))
		}
	}
}

// mergeEntry reads one merge, "a b" or ["a", "b"].
func (s *jsonScanner) mergeEntry(i int) ([2]string, error) {
	switch s.peek() {
	case '"':
		line, err := s.str()
		if err != nil {
			return [2]string{}, err
		}
		for j := 0; j < len(line); j++ {
			if line[j] == ' ' {
				a, b := line[:j], line[j+1:]
				for k := 0; k < len(b); k++ {
					if b[k] == ' ' {
						return [2]string{}, fmt.Errorf("entry %d %q is not two tokens separated by one space", i, line)
					}
				}
				return [2]string{a, b}, nil
			}
		}
		return [2]string{}, fmt.Errorf("entry %d %q is not two tokens separated by one space", i, line)
	case '[':
		s.pos++
		a, err := s.str()
		if err != nil {
			return [2]string{}, err
		}
		if err := s.expect(','); err != nil {
			return [2]string{}, err
		}
		b, err := s.str()
		if err != nil {
			return [2]string{}, err
		}
		if err := s.expect(']'); err != nil {
			return [2]string{}, fmt.Errorf("entry %d is not a pair: %w", i, err)
		}
		return [2]string{a, b}, nil
	}
	return [2]string{}, errors.New("entry " + strconv.Itoa(i) + ` is neither "a b" nor ["a", "b"]`)
}
