package models

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"os"
	"sort"
	"syscall"
)

// GGUF is llama.cpp's single-file model format: a header, typed key/value metadata, a table of
// tensor infos and an aligned data section. Versions 2 and 3 share one little-endian layout
// (version 1 used 32-bit counts and is not read; version 3 only added big-endian files, which
// are refused). Every count, length and offset is checked against the file before use, so a
// truncated or lying file yields an error naming the file (and tensor), never a panic or an
// allocation larger than the file justifies.

const (
	ggufMagic            = "GGUF"
	ggufDefaultAlignment = 32
	ggufMaxDims          = 4 // GGML_MAX_DIMS
	ggufMaxArrayDepth    = 8 // nested arrays deeper than this are refused
	ggufMaxNameLen       = 1 << 16
)

// GGUF metadata value types.
const (
	ggufUint8 uint32 = iota
	ggufInt8
	ggufUint16
	ggufInt16
	ggufUint32
	ggufInt32
	ggufFloat32
	ggufBool
	ggufString
	ggufArray
	ggufUint64
	ggufInt64
	ggufFloat64
)

// ggufMinSize is the fewest bytes a value of each type occupies; it bounds array lengths.
var ggufMinSize = [...]uint64{1, 1, 2, 2, 4, 4, 4, 1, 8, 12, 8, 8, 8}

// ggufTensor is one validated entry of the tensor-info table.
type ggufTensor struct {
	name string
	dims []uint64 // innermost first, as stored
	typ  ggmlType
	data []byte // the tensor's bytes inside the mapping
}

// ggufFile is a parsed GGUF file.
type ggufFile struct {
	path    string
	version uint32
	meta    map[string]any
	tensors []*ggufTensor
}

// ggufReader is a bounds-checked little-endian cursor over the mapping.
type ggufReader struct {
	path string
	b    []byte
	off  uint64
}

func (r *ggufReader) errorf(format string, args ...any) error {
	return fmt.Errorf("%s: "+format, append([]any{r.path}, args...)...)
}

func (r *ggufReader) take(n uint64, what string) ([]byte, error) {
	if rest := uint64(len(r.b)) - r.off; n > rest {
		return nil, r.errorf("%s at offset %d needs %d bytes but only %d remain: file truncated or corrupt", what, r.off, n, rest)
	}
	p := r.b[r.off : r.off+n]
	r.off += n
	return p, nil
}

func (r *ggufReader) u32(what string) (uint32, error) {
	p, err := r.take(4, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(p), nil
}

func (r *ggufReader) u64(what string) (uint64, error) {
	p, err := r.take(8, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(p), nil
}

func (r *ggufReader) str(what string) (string, error) {
	n, err := r.u64(what) // the length
	if err != nil {
		return "", err
	}
	p, err := r.take(n, what)
	if err != nil {
		return "", err
	}
	return string(p), nil // copied: metadata outlives the mapping
}

// count reads an element count and checks that n elements of at least minSize bytes fit in
// the rest of the file, so no allocation exceeds what the file could hold.
func (r *ggufReader) count(what string, minSize uint64) (uint64, error) {
	n, err := r.u64(what)
	if err != nil {
		return 0, err
	}
	rest := uint64(len(r.b)) - r.off
	if hi, lo := bits.Mul64(n, minSize); hi != 0 || lo > rest {
		return 0, r.errorf("%s %d at offset %d cannot fit in the %d bytes left: file truncated or corrupt", what, n, r.off-8, rest)
	}
	return n, nil
}

func (r *ggufReader) scalar(t uint32, key string) (any, error) {
	if t == ggufString {
		return r.str("value of " + key)
	}
	if t >= uint32(len(ggufMinSize)) || t == ggufArray {
		return nil, r.errorf("metadata %s: unknown value type %d", key, t)
	}
	p, err := r.take(ggufMinSize[t], "value of "+key)
	if err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	switch t {
	case ggufUint8:
		return p[0], nil
	case ggufInt8:
		return int8(p[0]), nil
	case ggufUint16:
		return le.Uint16(p), nil
	case ggufInt16:
		return int16(le.Uint16(p)), nil
	case ggufUint32:
		return le.Uint32(p), nil
	case ggufInt32:
		return int32(le.Uint32(p)), nil
	case ggufFloat32:
		return math.Float32frombits(le.Uint32(p)), nil
	case ggufBool:
		return p[0] != 0, nil
	case ggufUint64:
		return le.Uint64(p), nil
	case ggufInt64:
		return int64(le.Uint64(p)), nil
	default: // ggufFloat64
		return math.Float64frombits(le.Uint64(p)), nil
	}
}

// value reads one metadata value of type t. Arrays become typed slices ([]string, []int32,
// []float32, ...); arrays of arrays become []any.
func (r *ggufReader) value(t uint32, key string, depth int) (any, error) {
	if t != ggufArray {
		return r.scalar(t, key)
	}
	if depth >= ggufMaxArrayDepth {
		return nil, r.errorf("metadata %s: arrays nested deeper than %d", key, ggufMaxArrayDepth)
	}
	et, err := r.u32("array type of " + key)
	if err != nil {
		return nil, err
	}
	if et >= uint32(len(ggufMinSize)) {
		return nil, r.errorf("metadata %s: unknown array element type %d", key, et)
	}
	n, err := r.count("array length of "+key, ggufMinSize[et])
	if err != nil {
		return nil, err
	}
	switch et {
	case ggufString:
		out, what := make([]string, n), "element of "+key
		for i := range out {
			if out[i], err = r.str(what); err != nil {
				return nil, err
			}
		}
		return out, nil
	case ggufArray:
		out := make([]any, n)
		for i := range out {
			if out[i], err = r.value(ggufArray, key, depth+1); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	p, err := r.take(n*ggufMinSize[et], "array "+key)
	if err != nil {
		return nil, err
	}
	return decodeArray(et, p, int(n)), nil
}

func decodeArray(et uint32, p []byte, n int) any {
	le := binary.LittleEndian
	switch et {
	case ggufUint8:
		return append([]uint8(nil), p...)
	case ggufInt8:
		return fill(n, func(i int) int8 { return int8(p[i]) })
	case ggufUint16:
		return fill(n, func(i int) uint16 { return le.Uint16(p[2*i:]) })
	case ggufInt16:
		return fill(n, func(i int) int16 { return int16(le.Uint16(p[2*i:])) })
	case ggufUint32:
		return fill(n, func(i int) uint32 { return le.Uint32(p[4*i:]) })
	case ggufInt32:
		return fill(n, func(i int) int32 { return int32(le.Uint32(p[4*i:])) })
	case ggufFloat32:
		return fill(n, func(i int) float32 { return math.Float32frombits(le.Uint32(p[4*i:])) })
	case ggufBool:
		return fill(n, func(i int) bool { return p[i] != 0 })
	case ggufUint64:
		return fill(n, func(i int) uint64 { return le.Uint64(p[8*i:]) })
	case ggufInt64:
		return fill(n, func(i int) int64 { return int64(le.Uint64(p[8*i:])) })
	default: // ggufFloat64
		return fill(n, func(i int) float64 { return math.Float64frombits(le.Uint64(p[8*i:])) })
	}
}

func fill[T any](n int, at func(int) T) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = at(i)
	}
	return out
}

// mapGGUF memory-maps path read-only.
func mapGGUF(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() < 24 {
		return nil, fmt.Errorf("%s: file is %d bytes, too short for a GGUF header", path, st.Size())
	}
	if st.Size() > math.MaxInt {
		return nil, fmt.Errorf("%s: file too large to map", path)
	}
	m, err := syscall.Mmap(int(f.Fd()), 0, int(st.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("%s: mmap: %w", path, err)
	}
	return m, nil
}

// parseGGUF validates the header, metadata and tensor table of a mapped GGUF file.
func parseGGUF(path string, m []byte) (*ggufFile, error) {
	r := &ggufReader{path: path, b: m}
	magic, err := r.take(4, "magic")
	if err != nil {
		return nil, err
	}
	if string(magic) != ggufMagic {
		return nil, r.errorf("bad magic %q: not a GGUF file", magic)
	}
	g := &ggufFile{path: path, meta: map[string]any{}}
	if g.version, err = r.u32("version"); err != nil {
		return nil, err
	}
	switch {
	case g.version == 2 || g.version == 3:
	case g.version != 0 && g.version&0xffff == 0 && bits.ReverseBytes32(g.version) <= 3:
		return nil, r.errorf("big-endian GGUF (version %d byte-swapped) is not supported", bits.ReverseBytes32(g.version))
	default:
		return nil, r.errorf("unsupported GGUF version %d (want 2 or 3)", g.version)
	}
	nTensors, err := r.u64("tensor count")
	if err != nil {
		return nil, err
	}
	nKV, err := r.count("metadata count", 8+4+1)
	if err != nil {
		return nil, err
	}
	for i := uint64(0); i < nKV; i++ {
		key, err := r.str(fmt.Sprintf("metadata key %d", i))
		if err != nil {
			return nil, err
		}
		t, err := r.u32("value type of " + key)
		if err != nil {
			return nil, err
		}
		v, err := r.value(t, key, 0)
		if err != nil {
			return nil, err
		}
		if _, dup := g.meta[key]; dup {
			return nil, r.errorf("metadata key %s appears twice", key)
		}
		g.meta[key] = v
	}
	align := uint64(ggufDefaultAlignment)
	if v, ok := g.meta["general.alignment"]; ok {
		a, ok := v.(uint32)
		if !ok || a == 0 || a&(a-1) != 0 {
			return nil, r.errorf("general.alignment %v is not a power of two (uint32)", v)
		}
		align = uint64(a)
	}
	// A tensor info is at least 8 (name length) + 4 (dims) + 8 (one dim) + 4 (type) + 8 (offset).
	if rest := uint64(len(m)) - r.off; nTensors > rest/32 {
		return nil, r.errorf("tensor count %d cannot fit in the %d bytes left: file truncated or corrupt", nTensors, rest)
	}
	type info struct {
		t        *ggufTensor
		off, len uint64
	}
	infos := make([]info, 0, nTensors)
	seen := map[string]bool{}
	for i := uint64(0); i < nTensors; i++ {
		t, off, size, err := r.tensorInfo(i, align)
		if err != nil {
			return nil, err
		}
		if seen[t.name] {
			return nil, r.errorf("tensor %s appears twice in the tensor table", t.name)
		}
		seen[t.name] = true
		infos = append(infos, info{t, off, size})
	}
	dataStart := (r.off + align - 1) / align * align
	if nTensors > 0 && dataStart > uint64(len(m)) {
		return nil, r.errorf("data section at offset %d starts past the end of the file (%d bytes): file truncated", dataStart, len(m))
	}
	var dataLen uint64
	if dataStart < uint64(len(m)) {
		dataLen = uint64(len(m)) - dataStart
	}
	for _, in := range infos {
		if in.off > dataLen || in.len > dataLen-in.off {
			return nil, r.errorf("tensor %s: data at offset %d (+%d bytes) runs past the end of the data section (%d bytes): file truncated or offsets corrupt",
				in.t.name, in.off, in.len, dataLen)
		}
		lo := dataStart + in.off
		in.t.data = m[lo : lo+in.len : lo+in.len]
		g.tensors = append(g.tensors, in.t)
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].off < infos[j].off })
	for i := 1; i < len(infos); i++ {
		if prev := infos[i-1]; infos[i].off < prev.off+prev.len {
			return nil, r.errorf("tensors %s and %s overlap in the data section", prev.t.name, infos[i].t.name)
		}
	}
	return g, nil
}

// tensorInfo reads and checks entry i of the tensor table: its dims, type, byte size and
// aligned offset (relative to the data section).
func (r *ggufReader) tensorInfo(i, align uint64) (t *ggufTensor, off, size uint64, err error) {
	name, err := r.str(fmt.Sprintf("name of tensor %d", i))
	if err != nil {
		return nil, 0, 0, err
	}
	if len(name) == 0 || len(name) > ggufMaxNameLen {
		return nil, 0, 0, r.errorf("tensor %d: invalid name length %d", i, len(name))
	}
	nd, err := r.u32("dimension count of tensor " + name)
	if err != nil {
		return nil, 0, 0, err
	}
	if nd == 0 || nd > ggufMaxDims {
		return nil, 0, 0, r.errorf("tensor %s: %d dimensions (want 1 to %d)", name, nd, ggufMaxDims)
	}
	t = &ggufTensor{name: name, dims: make([]uint64, nd)}
	elems := uint64(1)
	for d := range t.dims {
		if t.dims[d], err = r.u64("dimensions of tensor " + name); err != nil {
			return nil, 0, 0, err
		}
		hi, lo := bits.Mul64(elems, t.dims[d])
		if hi != 0 || lo > 1<<50 {
			return nil, 0, 0, r.errorf("tensor %s: dimensions %v are implausibly large", name, t.dims[:d+1])
		}
		elems = lo
	}
	typ, err := r.u32("type of tensor " + name)
	if err != nil {
		return nil, 0, 0, err
	}
	t.typ = ggmlType(typ)
	ti, ok := ggmlTypes[t.typ]
	if !ok {
		return nil, 0, 0, r.errorf("tensor %s: unknown tensor type %d", name, typ)
	}
	if t.dims[0]%uint64(ti.block) != 0 {
		return nil, 0, 0, r.errorf("tensor %s: innermost dimension %d is not a multiple of the %s block size %d",
			name, t.dims[0], ti.name, ti.block)
	}
	size = elems / uint64(ti.block) * uint64(ti.size)
	if off, err = r.u64("data offset of tensor " + name); err != nil {
		return nil, 0, 0, err
	}
	if off%align != 0 {
		return nil, 0, 0, r.errorf("tensor %s: data offset %d is not a multiple of the alignment %d", name, off, align)
	}
	return t, off, size, nil
}
