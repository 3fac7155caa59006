package models

import (
	"fmt"
	"math"
	"strconv"
)

// jsonNum is a config.json value kept as its JSON text; null and absent both leave it unset.
// Converting it names the field in every error, so "hidden_size": 4096.5, -1, 1e300 or "big"
// is reported as that field's problem instead of failing inside encoding/json.
type jsonNum []byte

// UnmarshalJSON keeps the raw value (encoding/json has already checked it is valid JSON).
func (n *jsonNum) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*n = nil
		return nil
	}
	*n = append((*n)[:0], b...)
	return nil
}

// maxExactInt is the largest integer a float64 holds exactly; integral floats up to it are
// accepted where integers belong ("hidden_size": 4096.0), larger ones are refused.
const maxExactInt = 1 << 53

// intInto stores the value in *dst when it is set. The value must be an integer (or an
// integral float) of magnitude at most 2^53; the range a field allows is checked later.
func (n jsonNum) intInto(dst *int, field string) (bool, error) {
	if n == nil {
		return false, nil
	}
	s := string(n)
	if v, err := strconv.ParseInt(s, 10, 64); err == nil && v >= -maxExactInt && v <= maxExactInt {
		*dst = int(v)
		return true, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	switch {
	case err != nil && !isRangeErr(err):
		return false, fmt.Errorf("%s = %.40s: want an integer", field, s)
	case err != nil || math.Abs(f) > maxExactInt:
		return false, fmt.Errorf("%s = %.40s: out of range", field, s)
	case f != math.Trunc(f):
		return false, fmt.Errorf("%s = %.40s: want an integer", field, s)
	}
	*dst = int(f)
	return true, nil
}

// floatInto stores the value in *dst when it is set; it must be a finite number.
func (n jsonNum) floatInto(dst *float64, field string) (bool, error) {
	if n == nil {
		return false, nil
	}
	f, err := strconv.ParseFloat(string(n), 64)
	switch {
	case err != nil && isRangeErr(err):
		return false, fmt.Errorf("%s = %.40s: out of range", field, n)
	case err != nil:
		return false, fmt.Errorf("%s = %.40s: want a number", field, n)
	}
	*dst = f
	return true, nil
}

// setFloat is floatInto for callers that only need the error.
func (n jsonNum) setFloat(dst *float64, field string) error {
	_, err := n.floatInto(dst, field)
	return err
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}
