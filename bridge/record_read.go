package bridge

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/vmihailenco/msgpack/v5"
)

// RecordingReader reads a recording frame by frame. It treats its input as hostile: every
// declared length is checked against its bound and buffers grow only with the bytes that
// actually arrive, so a lying length costs no memory; every frame passes CheckMsgpack before
// it is decoded. Errors wrap ErrInvalidRecording and give the byte offset.
type RecordingReader struct {
	r      *bufio.Reader
	off    int64
	seq    int64
	ended  bool
	Header RecordingHeader
}

// NewRecordingReader reads and checks the magic and the header.
func NewRecordingReader(r io.Reader) (*RecordingReader, error) {
	rr := &RecordingReader{r: bufio.NewReader(r)}
	magic := make([]byte, len(RecordingMagic))
	if n, err := io.ReadFull(rr.r, magic); err != nil || string(magic) != RecordingMagic {
		return nil, fmt.Errorf("%w: the file does not start with the atom-go recording magic (%d bytes read)", ErrInvalidRecording, n)
	}
	rr.off = int64(len(magic))
	body, err := rr.frame(MaxRecordingHeaderBytes, "header")
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: no header after the magic", ErrInvalidRecording)
	}
	if err != nil {
		return nil, err
	}
	if err := msgpack.Unmarshal(body, &rr.Header); err != nil {
		return nil, fmt.Errorf("%w: decode the header: %v", ErrInvalidRecording, err)
	}
	h := &rr.Header
	switch {
	case h.FormatVersion != RecordingFormatVersion:
		return nil, fmt.Errorf("%w: format version %d, this atom-plugin reads %d", ErrInvalidRecording, h.FormatVersion, RecordingFormatVersion)
	case h.WireVersion != WireVersion:
		return nil, fmt.Errorf("%w: recorded with wire version %d, this atom-plugin speaks %d", ErrInvalidRecording, h.WireVersion, WireVersion)
	case len(h.LoadModelRequest) == 0:
		return nil, fmt.Errorf("%w: the header has no LoadModel request", ErrInvalidRecording)
	}
	return rr, nil
}

// Next returns the next call; io.EOF after the last whole frame or after an end record.
func (rr *RecordingReader) Next() (*CallRecord, error) {
	if rr.ended {
		return nil, io.EOF
	}
	at := rr.off
	body, err := rr.frame(MaxCallRecordBytes, "call record")
	if err != nil {
		return nil, err
	}
	var rec CallRecord
	if err := msgpack.Unmarshal(body, &rec); err != nil {
		return nil, fmt.Errorf("%w: decode the call record at byte %d: %v", ErrInvalidRecording, at, err)
	}
	if err := rr.check(&rec); err != nil {
		return nil, fmt.Errorf("%w: call record at byte %d: %v", ErrInvalidRecording, at, err)
	}
	rr.seq = rec.Seq
	rr.ended = rec.Call == CallEnd
	return &rec, nil
}

func (rr *RecordingReader) check(rec *CallRecord) error {
	if rec.Seq != rr.seq+1 {
		return fmt.Errorf("numbered %d after %d", rec.Seq, rr.seq)
	}
	if rec.Code < 0 || rec.Code > 16 {
		return fmt.Errorf("call %d: gRPC code %d", rec.Seq, rec.Code)
	}
	switch rec.Call {
	case CallInitKVCache, CallEnd:
	case CallAbort:
		if len(rec.RequestID) > MaxRequestIDBytes {
			return fmt.Errorf("call %d: abort of a %d-byte request id", rec.Seq, len(rec.RequestID))
		}
	case CallExecuteModel:
		if len(rec.Payload) > MaxMessageBytes || len(rec.Result) > MaxMessageBytes {
			return fmt.Errorf("call %d: payload of %d or result of %d bytes, more than %d", rec.Seq, len(rec.Payload), len(rec.Result), MaxMessageBytes)
		}
		if rec.Code == 0 && len(rec.Result) == 0 {
			return fmt.Errorf("call %d: a successful ExecuteModel without its result", rec.Seq)
		}
	default:
		return fmt.Errorf("call %d: unknown call %q", rec.Seq, rec.Call)
	}
	return nil
}

// frame reads one length-prefixed msgpack frame of at most max bytes; io.EOF only when the
// input ends exactly before it.
func (rr *RecordingReader) frame(max int, what string) ([]byte, error) {
	at := rr.off
	var hdr [4]byte
	n, err := io.ReadFull(rr.r, hdr[:])
	switch {
	case n == 0 && errors.Is(err, io.EOF):
		return nil, io.EOF
	case err != nil:
		return nil, fmt.Errorf("%w: %s at byte %d: truncated length (%d of 4 bytes)", ErrInvalidRecording, what, at, n)
	}
	size := binary.BigEndian.Uint32(hdr[:])
	if size == 0 || uint64(size) > uint64(max) {
		return nil, fmt.Errorf("%w: %s at byte %d declares %d bytes, want 1..%d", ErrInvalidRecording, what, at, size, max)
	}
	var buf bytes.Buffer
	got, err := io.CopyN(&buf, rr.r, int64(size))
	if err != nil {
		return nil, fmt.Errorf("%w: %s at byte %d: truncated (%d of %d bytes)", ErrInvalidRecording, what, at, got, size)
	}
	rr.off += 4 + int64(size)
	body := buf.Bytes()
	if err := CheckMsgpack(body); err != nil {
		return nil, fmt.Errorf("%w: %s at byte %d: %v", ErrInvalidRecording, what, at, err)
	}
	return body, nil
}

func marshalRecord(v any) ([]byte, error) {
	return msgpack.Marshal(v)
}
