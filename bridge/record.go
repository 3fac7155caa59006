package bridge

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// A recording (docs/recording.md) is the bridge traffic of one host session, written by
// atom-plugin under ATOM_GO_RECORD and read back by `atom-plugin replay`: RecordingMagic, then
// frames of a 4-byte big-endian length and one msgpack map each. The first frame is the
// RecordingHeader; every later one is a CallRecord, numbered from 1 without gaps. A clean end
// of file after a whole frame ends the recording.

// RecordingMagic opens every recording; the format's version is in the header.
const RecordingMagic = "atom-go recording\n"

// RecordingFormatVersion is the version of the recording format this package writes and
// reads. A reader refuses any other: fields are only ever added within a version (unknown
// keys are ignored), a change of meaning gets a new version.
const RecordingFormatVersion = 1

// Bounds a reader checks before it allocates: a header holds a LoadModelRequest and a few
// strings; a call record at most one payload and one result of MaxMessageBytes each.
const (
	MaxRecordingHeaderBytes = 1 << 20
	MaxCallRecordBytes      = 2*MaxMessageBytes + 1<<20
)

// The calls a CallRecord can hold.
const (
	CallInitKVCache  = "init_kv_cache"
	CallExecuteModel = "execute_model"
	CallAbort        = "abort"
	// CallEnd is written once when the recorder stopped early (Error says why: the size cap,
	// a second LoadModel); nothing follows it.
	CallEnd = "end"
)

// ErrInvalidRecording is wrapped by every error about a malformed recording.
var ErrInvalidRecording = errors.New("invalid recording")

// RecordingHeader is the first frame: what was recorded, by which atom-go, on which model.
type RecordingHeader struct {
	FormatVersion   int64  `msgpack:"format_version"`
	AtomGoVersion   string `msgpack:"atom_go_version"`
	WireVersion     int64  `msgpack:"wire_version"`
	ProtocolVersion int64  `msgpack:"protocol_version"`
	// Created is the time recording started, RFC 3339 in UTC.
	Created string `msgpack:"created"`
	// LoadModelRequest is the host's LoadModel request (protobuf, atom.proto's
	// LoadModelRequest): the model path, device and every engine setting the host gave.
	LoadModelRequest []byte `msgpack:"load_model_request"`
	// Model identifies the checkpoint that was loaded.
	Model ModelIdentity `msgpack:"model"`
}

// ModelIdentity is what a replay checks about the checkpoint it loads.
type ModelIdentity struct {
	Path         string `msgpack:"path" json:"path"`
	Architecture string `msgpack:"architecture" json:"architecture"`
	DType        string `msgpack:"dtype" json:"dtype"`
	Device       string `msgpack:"device" json:"device"`
	VocabSize    int64  `msgpack:"vocab_size" json:"vocab_size"`
	NumLayers    int64  `msgpack:"num_layers" json:"num_layers"`
	HiddenSize   int64  `msgpack:"hidden_size" json:"hidden_size"`
	// ConfigSHA256 is the hex SHA-256 of the checkpoint's config.json (of a GGUF file's first
	// MiB); empty when it could not be read.
	ConfigSHA256 string `msgpack:"config_sha256" json:"config_sha256"`
}

// CallRecord is one bridge call the host made and what the plugin answered, in the order
// the calls completed.
type CallRecord struct {
	Seq  int64  `msgpack:"seq"`
	Call string `msgpack:"call"`
	// InitKVCache's request.
	NumBlocks int64 `msgpack:"num_blocks,omitempty"`
	BlockSize int64 `msgpack:"block_size,omitempty"`
	// Abort's request.
	RequestID string `msgpack:"request_id,omitempty"`
	// ExecuteModel's payload as the host sent it and the result as the plugin returned it
	// (msgpack ExecuteModelPayload and ExecuteModelResult); Result is empty on error.
	Payload []byte `msgpack:"payload,omitempty"`
	Result  []byte `msgpack:"result,omitempty"`
	// Code is the call's gRPC status code (0: OK) and Error its message.
	Code  int64  `msgpack:"code"`
	Error string `msgpack:"error,omitempty"`
}

// RecordingWriter writes a recording to w, one Write call per frame (a process killed
// between calls leaves whole frames), and stops at a size cap.
type RecordingWriter struct {
	w       io.Writer
	max     int64
	written int64
	seq     int64
	ended   bool
}

// endReserve is kept free under the cap for the end record.
const endReserve = 512

// NewRecordingWriter writes the magic and h (its format and versions filled in) to w. max
// bounds the file's size; it must leave room for the header.
func NewRecordingWriter(w io.Writer, h RecordingHeader, max int64) (*RecordingWriter, error) {
	h.FormatVersion, h.WireVersion, h.ProtocolVersion = RecordingFormatVersion, WireVersion, ProtocolVersion
	body, err := marshalRecord(&h)
	if err != nil {
		return nil, fmt.Errorf("encode recording header: %w", err)
	}
	if len(body) > MaxRecordingHeaderBytes {
		return nil, fmt.Errorf("recording header of %d bytes, more than %d", len(body), MaxRecordingHeaderBytes)
	}
	frame := append([]byte(RecordingMagic), frameOf(body)...)
	if int64(len(frame))+endReserve > max {
		return nil, fmt.Errorf("recording cap of %d bytes leaves no room after the %d-byte header", max, len(frame))
	}
	if _, err := w.Write(frame); err != nil {
		return nil, fmt.Errorf("write recording header: %w", err)
	}
	return &RecordingWriter{w: w, max: max, written: int64(len(frame))}, nil
}

// Write appends rec, numbered next. It returns false, having written an end record instead,
// once rec would take the file past the cap; after an end record it writes nothing.
func (rw *RecordingWriter) Write(rec *CallRecord) (bool, error) {
	if rw.ended {
		return false, nil
	}
	rec.Seq = rw.seq + 1
	body, err := marshalRecord(rec)
	if err != nil {
		return false, fmt.Errorf("encode recording frame: %w", err)
	}
	if rw.written+int64(4+len(body))+endReserve > rw.max {
		return false, rw.End(fmt.Sprintf("the recording reached its cap of %d bytes at call %d", rw.max, rec.Seq))
	}
	if err := rw.put(body); err != nil {
		return false, err
	}
	rw.seq = rec.Seq
	return true, nil
}

// End writes the end record saying why recording stopped; later writes do nothing.
func (rw *RecordingWriter) End(reason string) error {
	if rw.ended {
		return nil
	}
	rw.ended = true
	if len(reason) > endReserve/2 {
		reason = reason[:endReserve/2]
	}
	body, err := marshalRecord(&CallRecord{Seq: rw.seq + 1, Call: CallEnd, Error: reason})
	if err != nil {
		return fmt.Errorf("encode recording end: %w", err)
	}
	return rw.put(body)
}

func (rw *RecordingWriter) put(body []byte) error {
	frame := frameOf(body)
	if _, err := rw.w.Write(frame); err != nil {
		rw.ended = true
		return fmt.Errorf("write recording frame: %w", err)
	}
	rw.written += int64(len(frame))
	return nil
}

func frameOf(body []byte) []byte {
	frame := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(frame, uint32(len(body)))
	copy(frame[4:], body)
	return frame
}
