package bridge

import (
	"encoding/binary"
	"fmt"
)

// MaxMsgpackDepth bounds the nesting of arrays and maps in a payload.
const MaxMsgpackDepth = 16

// CheckMsgpack walks one msgpack object that must span all of b and checks every length it
// declares against the bytes left, the nesting against MaxMsgpackDepth, and refuses extension
// types and the reserved byte 0xc1. A payload that passes cannot make a decoder allocate more
// elements than it has bytes: the msgpack library trusts declared lengths and would otherwise
// allocate whatever a 5-byte array header asks for.
func CheckMsgpack(b []byte) error {
	// pending[i] is the number of objects still to read at depth i.
	pending := make([]uint64, 1, 8)
	pending[0] = 1
	pos := 0
	for len(pending) > 0 {
		top := len(pending) - 1
		if pending[top] == 0 {
			pending = pending[:top]
			continue
		}
		pending[top]--
		if pos >= len(b) {
			return fmt.Errorf("msgpack: truncated at byte %d", pos)
		}
		c := b[pos]
		pos++
		var skip, count uint64 // bytes to skip, child objects to read
		var err error
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3: // fixint, nil, bool
		case c >= 0x80 && c <= 0x8f: // fixmap
			count = 2 * uint64(c&0x0f)
		case c >= 0x90 && c <= 0x9f: // fixarray
			count = uint64(c & 0x0f)
		case c >= 0xa0 && c <= 0xbf: // fixstr
			skip = uint64(c & 0x1f)
		case c == 0xc4 || c == 0xd9: // bin8, str8
			skip, pos, err = length(b, pos, 1)
		case c == 0xc5 || c == 0xda: // bin16, str16
			skip, pos, err = length(b, pos, 2)
		case c == 0xc6 || c == 0xdb: // bin32, str32
			skip, pos, err = length(b, pos, 4)
		case c == 0xca: // float32
			skip = 4
		case c == 0xcb: // float64
			skip = 8
		case c == 0xcc || c == 0xd0: // uint8, int8
			skip = 1
		case c == 0xcd || c == 0xd1:
			skip = 2
		case c == 0xce || c == 0xd2:
			skip = 4
		case c == 0xcf || c == 0xd3:
			skip = 8
		case c == 0xdc: // array16
			count, pos, err = length(b, pos, 2)
		case c == 0xdd: // array32
			count, pos, err = length(b, pos, 4)
		case c == 0xde: // map16
			count, pos, err = length(b, pos, 2)
			count *= 2
		case c == 0xdf: // map32
			count, pos, err = length(b, pos, 4)
			count *= 2
		case c == 0xc1:
			return fmt.Errorf("msgpack: reserved byte 0xc1 at byte %d", pos-1)
		default: // 0xc7-0xc9, 0xd4-0xd8: extensions
			return fmt.Errorf("msgpack: extension type 0x%02x at byte %d is not accepted", c, pos-1)
		}
		if err != nil {
			return err
		}
		left := uint64(len(b) - pos)
		if skip > left {
			return fmt.Errorf("msgpack: object at byte %d needs %d bytes, %d left", pos, skip, left)
		}
		pos += int(skip)
		if count > 0 {
			// Every object takes at least one byte.
			if count > uint64(len(b)-pos) {
				return fmt.Errorf("msgpack: container at byte %d declares %d objects, %d bytes left", pos, count, len(b)-pos)
			}
			if len(pending) > MaxMsgpackDepth {
				return fmt.Errorf("msgpack: nested deeper than %d", MaxMsgpackDepth)
			}
			pending = append(pending, count)
		}
	}
	if pos != len(b) {
		return fmt.Errorf("msgpack: %d trailing bytes after the object", len(b)-pos)
	}
	return nil
}

// length reads a big-endian length of n bytes at pos.
func length(b []byte, pos, n int) (uint64, int, error) {
	if len(b)-pos < n {
		return 0, pos, fmt.Errorf("msgpack: truncated length at byte %d", pos)
	}
	switch n {
	case 1:
		return uint64(b[pos]), pos + 1, nil
	case 2:
		return uint64(binary.BigEndian.Uint16(b[pos:])), pos + 2, nil
	default:
		return uint64(binary.BigEndian.Uint32(b[pos:])), pos + 4, nil
	}
}
