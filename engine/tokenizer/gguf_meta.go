package tokenizer

import (
	"fmt"
	"math"
)

// ggufMeta is GGUF metadata as models.Checkpoint.GGUFMetadata returns it. Its accessors
// accept every integer or float width GGUF writers use and report a wrong type or an
// out-of-range value as an error naming the key, never a panic.
type ggufMeta map[string]any

// str reads a string value; ok is false when the key is absent.
func (m ggufMeta) str(key string) (s string, ok bool, err error) {
	v, present := m[key]
	if !present {
		return "", false, nil
	}
	s, ok = v.(string)
	if !ok {
		return "", false, fmt.Errorf("%s is a %T, want a string", key, v)
	}
	return s, true, nil
}

// boolean reads a bool value (integers 0 and 1 are accepted too); set is false when absent.
func (m ggufMeta) boolean(key string) (b, set bool, err error) {
	v, present := m[key]
	if !present {
		return false, false, nil
	}
	if b, ok := v.(bool); ok {
		return b, true, nil
	}
	if n, ok := toInt64(v); ok && (n == 0 || n == 1) {
		return n == 1, true, nil
	}
	return false, false, fmt.Errorf("%s is %v (%T), want a bool", key, v, v)
}

// strings reads a required non-empty string array.
func (m ggufMeta) strings(key string) ([]string, error) {
	v, present := m[key]
	if !present {
		return nil, fmt.Errorf("%s is missing", key)
	}
	s, ok := v.([]string)
	if !ok {
		if list, isList := v.([]any); isList {
			s = make([]string, len(list))
			for i, item := range list {
				if s[i], ok = item.(string); !ok {
					return nil, fmt.Errorf("%s[%d] is a %T, want a string", key, i, item)
				}
			}
		} else {
			return nil, fmt.Errorf("%s is a %T, want an array of strings", key, v)
		}
	}
	if len(s) == 0 {
		return nil, fmt.Errorf("%s is empty", key)
	}
	if len(s) > maxTokenID {
		return nil, fmt.Errorf("%s has %d entries, more than the %d supported", key, len(s), maxTokenID)
	}
	return s, nil
}

// tokenID reads an optional token id and checks it indexes a vocabulary of n tokens.
func (m ggufMeta) tokenID(key string, n int) (id int32, ok bool, err error) {
	v, present := m[key]
	if !present {
		return 0, false, nil
	}
	x, isInt := toInt64(v)
	if !isInt {
		return 0, false, fmt.Errorf("%s is a %T, want an integer token id", key, v)
	}
	if x < 0 || x >= int64(n) {
		return 0, false, fmt.Errorf("%s %d is outside the vocabulary [0, %d)", key, x, n)
	}
	return int32(x), true, nil
}

// tokenTypes reads tokenizer.ggml.token_type, which must have one entry per token; when
// absent every token is normal.
func (m ggufMeta) tokenTypes(n int) ([]int32, error) {
	const key = "tokenizer.ggml.token_type"
	v, present := m[key]
	out := make([]int32, n)
	if !present {
		for i := range out {
			out[i] = ggufTokenNormal
		}
		return out, nil
	}
	list, ok := intSlice(v)
	if !ok {
		return nil, fmt.Errorf("%s is a %T, want an array of integers", key, v)
	}
	if len(list) != n {
		return nil, fmt.Errorf("%s has %d entries for %d tokens", key, len(list), n)
	}
	for i, x := range list {
		if x < 0 || x > math.MaxInt32 {
			return nil, fmt.Errorf("%s[%d] = %d is not a token type", key, i, x)
		}
		out[i] = int32(x)
	}
	return out, nil
}

// floats reads a required float array with one entry per token.
func (m ggufMeta) floats(key string, n int) ([]float32, error) {
	v, present := m[key]
	if !present {
		return nil, fmt.Errorf("%s is missing", key)
	}
	var out []float32
	switch x := v.(type) {
	case []float32:
		out = x
	case []float64:
		out = make([]float32, len(x))
		for i, f := range x {
			out[i] = float32(f)
		}
	default:
		return nil, fmt.Errorf("%s is a %T, want an array of floats", key, v)
	}
	if len(out) != n {
		return nil, fmt.Errorf("%s has %d entries for %d tokens", key, len(out), n)
	}
	for i, f := range out {
		if math.IsNaN(float64(f)) {
			return nil, fmt.Errorf("%s[%d] is NaN", key, i)
		}
	}
	return out, nil
}

// toInt64 converts any Go integer type to int64; uint64 values past MaxInt64 fail.
func toInt64(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint:
		return int64(x), x <= math.MaxInt64
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint64:
		return int64(x), x <= math.MaxInt64
	}
	return 0, false
}

// intSlice converts an array of any integer type (or []any of integers) to []int64.
func intSlice(v any) ([]int64, bool) {
	switch x := v.(type) {
	case []int32:
		return convertInts(x), true
	case []uint32:
		return convertInts(x), true
	case []int8:
		return convertInts(x), true
	case []uint8:
		return convertInts(x), true
	case []int16:
		return convertInts(x), true
	case []uint16:
		return convertInts(x), true
	case []int64:
		return x, true
	case []uint64:
		out := make([]int64, len(x))
		for i, u := range x {
			if u > math.MaxInt64 {
				return nil, false
			}
			out[i] = int64(u)
		}
		return out, true
	case []any:
		out := make([]int64, len(x))
		for i, item := range x {
			n, ok := toInt64(item)
			if !ok {
				return nil, false
			}
			out[i] = n
		}
		return out, true
	}
	return nil, false
}

func convertInts[T int8 | uint8 | int16 | uint16 | int32 | uint32](in []T) []int64 {
	out := make([]int64, len(in))
	for i, x := range in {
		out[i] = int64(x)
	}
	return out
}
