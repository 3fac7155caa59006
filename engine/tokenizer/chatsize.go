package tokenizer

import (
	"reflect"
	"unsafe"

	"github.com/nikolalohinski/gonja/v2/exec"
)

var (
	valuePtrType = reflect.TypeFor[*exec.Value]()
	dictType     = reflect.TypeFor[exec.Dict]()
	pairType     = reflect.TypeFor[exec.Pair]()
)

// valueSize is an upper bound of the bytes v takes when printed (or held
// as a list of references), counting a shared element at each place it
// appears. It stops once the count passes limit, so its cost is bounded by
// limit, and reports false when v nests deeper than depth (a value that
// contains itself nests for ever).
func valueSize(v any, limit int64, depth int) (int64, bool) {
	s := sizer{limit: limit}
	ok := s.size(reflect.ValueOf(v), depth)
	return s.n, ok
}

type sizer struct {
	n, limit int64
}

func (s *sizer) size(rv reflect.Value, depth int) bool {
	if s.n > s.limit {
		return true
	}
	if depth < 0 {
		return false
	}
	if rv.IsValid() && rv.Type() == valuePtrType {
		if rv.IsNil() || !rv.CanInterface() {
			s.n += 4
			return true
		}
		return s.size(rv.Interface().(*exec.Value).Val, depth)
	}
	switch rv.Kind() {
	case reflect.Invalid:
		s.n += 4
	case reflect.String:
		s.n += int64(rv.Len()) + 2
	case reflect.Interface, reflect.Pointer:
		if rv.IsNil() {
			s.n += 4
			return true
		}
		return s.size(rv.Elem(), depth-1)
	case reflect.Slice, reflect.Array:
		s.n += 2
		for i := 0; i < rv.Len() && s.n <= s.limit; i++ {
			s.n += listElementBytes / 2
			if !s.size(rv.Index(i), depth-1) {
				return false
			}
		}
	case reflect.Map:
		s.n += 2
		iter := rv.MapRange()
		for iter.Next() && s.n <= s.limit {
			s.n += listElementBytes / 2
			if !s.size(iter.Key(), depth-1) || !s.size(iter.Value(), depth-1) {
				return false
			}
		}
	case reflect.Struct:
		if rv.Type() != dictType && rv.Type() != pairType {
			s.n += 32
			return true
		}
		for i := 0; i < rv.NumField(); i++ {
			if !s.size(rv.Field(i), depth-1) {
				return false
			}
		}
	default:
		s.n += 24
	}
	return true
}

// reserveValue checks that printing v stays within the budget.
func reserveValue(b *budget, line int, v *exec.Value, what string) error {
	if v.IsString() {
		return b.reserve(line, int64(len(v.String())), what)
	}
	n, ok := valueSize(v, b.remaining(), b.lim.MaxExprDepth)
	if !ok {
		return b.fail(limitError(line, "%s of a value nested deeper than %d", what, b.lim.MaxExprDepth))
	}
	return b.reserve(line, n, what)
}

// reaches reports whether target's map or list is reachable from v (or v
// is too deep to tell).
func reaches(v any, target *exec.Value) bool {
	t := reflect.ValueOf(target.Interface())
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Interface {
		if t.IsNil() {
			return false
		}
		t = t.Elem()
	}
	if t.Kind() != reflect.Map {
		return false // only maps (namespaces, dicts) can be set into
	}
	want := t.UnsafePointer()
	type ref struct {
		p   unsafe.Pointer
		len int
	}
	seen := map[ref]bool{}
	var walk func(rv reflect.Value, depth int) bool
	walk = func(rv reflect.Value, depth int) bool {
		if depth > 10000 {
			return true
		}
		if rv.IsValid() && rv.Type() == valuePtrType {
			if rv.IsNil() || !rv.CanInterface() {
				return false
			}
			return walk(rv.Interface().(*exec.Value).Val, depth+1)
		}
		switch rv.Kind() {
		case reflect.Interface, reflect.Pointer:
			return !rv.IsNil() && walk(rv.Elem(), depth+1)
		case reflect.Map, reflect.Slice:
			p := rv.UnsafePointer()
			if p == want {
				return true
			}
			key := ref{p, rv.Len()}
			if p == nil || seen[key] {
				return false
			}
			seen[key] = true
			if rv.Kind() == reflect.Slice {
				for i := range rv.Len() {
					if walk(rv.Index(i), depth+1) {
						return true
					}
				}
				return false
			}
			iter := rv.MapRange()
			for iter.Next() {
				if walk(iter.Value(), depth+1) {
					return true
				}
			}
		case reflect.Array:
			for i := range rv.Len() {
				if walk(rv.Index(i), depth+1) {
					return true
				}
			}
		case reflect.Struct:
			if rv.Type() != dictType && rv.Type() != pairType {
				return false
			}
			for i := range rv.NumField() {
				if walk(rv.Field(i), depth+1) {
					return true
				}
			}
		}
		return false
	}
	return walk(reflect.ValueOf(v), 0)
}
