package models

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"syscall"

	"github.com/atom-go/atom/models/formats"
	"github.com/atom-go/atom/ops"
)

// maxHeaderBytes bounds the JSON header of one safetensors file; real headers are a few MB.
const maxHeaderBytes = 100 << 20

// ErrMissingTensor is returned when a checkpoint lacks a tensor the model needs.
var ErrMissingTensor = errors.New("missing tensor")

// TensorInfo locates one tensor inside a memory-mapped checkpoint file (its Data is a slice of
// the mapping, valid until the Checkpoint is closed). It is the loader's type, so a Checkpoint
// is a formats.Source.
type TensorInfo = formats.TensorInfo

// safetensorsFile is one mapped file and its validated tensor table.
type safetensorsFile struct {
	path    string
	mapping []byte
	tensors map[string]*TensorInfo
}

type stEntry struct {
	DType   string  `json:"dtype"`
	Shape   []int   `json:"shape"`
	Offsets []int64 `json:"data_offsets"`
}

// openSafetensors maps path and checks every header entry against the file: offsets inside the
// data section, sizes equal to shape × dtype, no overlaps. Nothing is read until used.
func openSafetensors(path string) (*safetensorsFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	if size < 8 {
		return nil, fmt.Errorf("%s: file is %d bytes, too short for a safetensors header", path, size)
	}
	m, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("%s: mmap: %w", path, err)
	}
	sf := &safetensorsFile{path: path, mapping: m}
	if err := sf.parse(); err != nil {
		sf.close()
		return nil, err
	}
	return sf, nil
}

func (sf *safetensorsFile) parse() error {
	m := sf.mapping
	hlen := binary.LittleEndian.Uint64(m[:8])
	if hlen > maxHeaderBytes || hlen > uint64(len(m)-8) {
		return fmt.Errorf("%s: header length %d exceeds the file (%d bytes): truncated or not safetensors", sf.path, hlen, len(m))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(m[8:8+hlen], &raw); err != nil {
		return fmt.Errorf("%s: header: %w", sf.path, err)
	}
	data := m[8+hlen:]
	sf.tensors = make(map[string]*TensorInfo, len(raw))
	type span struct {
		lo, hi int64
		name   string
	}
	var spans []span
	for name, msg := range raw {
		if name == "__metadata__" {
			continue
		}
		var e stEntry
		if err := json.Unmarshal(msg, &e); err != nil {
			return fmt.Errorf("%s: tensor %s: header entry: %w", sf.path, name, err)
		}
		dt, err := tensorDType(e.DType)
		if err != nil {
			return fmt.Errorf("%s: tensor %s: %w", sf.path, name, err)
		}
		n := int64(1)
		for _, d := range e.Shape {
			if d < 0 || (d > 0 && n > (1<<50)/int64(d)) {
				return fmt.Errorf("%s: tensor %s: invalid shape %v", sf.path, name, e.Shape)
			}
			n *= int64(d)
		}
		if len(e.Offsets) != 2 || e.Offsets[0] < 0 || e.Offsets[1] < e.Offsets[0] {
			return fmt.Errorf("%s: tensor %s: invalid data_offsets %v", sf.path, name, e.Offsets)
		}
		if e.Offsets[1] > int64(len(data)) {
			return fmt.Errorf("%s: tensor %s: data_offsets %v run past the end of the data (%d bytes): file truncated?",
				sf.path, name, e.Offsets, len(data))
		}
		if want := n * int64(dt.Size()); e.Offsets[1]-e.Offsets[0] != want {
			return fmt.Errorf("%s: tensor %s: shape %v of %s needs %d bytes but data_offsets %v span %d",
				sf.path, name, e.Shape, dt, want, e.Offsets, e.Offsets[1]-e.Offsets[0])
		}
		spans = append(spans, span{e.Offsets[0], e.Offsets[1], name})
		sf.tensors[name] = &TensorInfo{Name: name, File: sf.path, DType: dt, Shape: e.Shape,
			Data: data[e.Offsets[0]:e.Offsets[1]:e.Offsets[1]]}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].lo < spans[j].lo })
	for i := 1; i < len(spans); i++ {
		if spans[i].lo < spans[i-1].hi {
			return fmt.Errorf("%s: tensors %s and %s overlap in the data section", sf.path, spans[i-1].name, spans[i].name)
		}
	}
	return nil
}

func (sf *safetensorsFile) close() {
	if sf.mapping != nil {
		_ = syscall.Munmap(sf.mapping)
		sf.mapping = nil
	}
}

// tensorDType is a safetensors dtype: the 16- and 32-bit floats, and F8_E4M3 (float8_e4m3fn)
// and U8 (MXFP4's codes and scales), which only a quantized format's weights use (the
// unquantized format refuses them).
func tensorDType(s string) (ops.DType, error) {
	switch s {
	case "F8_E4M3":
		return ops.F8E4M3, nil
	case "U8":
		return ops.U8, nil
	}
	return ops.ParseDType(s)
}
