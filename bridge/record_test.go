package bridge

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

func sampleRecording(t testing.TB, max int64) []byte {
	var buf bytes.Buffer
	w, err := NewRecordingWriter(&buf, RecordingHeader{AtomGoVersion: "test", Created: "2026-01-01T00:00:00Z",
		LoadModelRequest: []byte{0x08, 0x01}, Model: ModelIdentity{Path: "/m", Architecture: "A", VocabSize: 10}}, max)
	require.NoError(t, err)
	p, err := EncodeExecuteModel(&ExecuteModelPayload{WireVersion: WireVersion,
		NewRequests:        []NewRequest{{ReqID: "a", PromptTokenIDs: []int64{1, 2}, BlockIDs: [][]int64{{1}}}},
		NumScheduledTokens: map[string]int64{"a": 2}})
	require.NoError(t, err)
	r, err := EncodeResult(&ExecuteModelResult{WireVersion: WireVersion, ReqIDs: []string{"a"}, SampledTokenIDs: [][]int32{{4}}, Logprobs: []*Logprobs{nil}})
	require.NoError(t, err)
	for _, rec := range []*CallRecord{
		{Call: CallInitKVCache, NumBlocks: 8, BlockSize: 4},
		{Call: CallExecuteModel, Payload: p, Result: r},
		{Call: CallExecuteModel, Payload: []byte{0x80}, Code: 3, Error: "invalid payload"},
		{Call: CallAbort, RequestID: "a", Code: 5},
	} {
		ok, err := w.Write(rec)
		require.NoError(t, err)
		if !ok {
			break
		}
	}
	return buf.Bytes()
}

func readAll(b []byte) (*RecordingReader, []*CallRecord, error) {
	rr, err := NewRecordingReader(bytes.NewReader(b))
	if err != nil {
		return nil, nil, err
	}
	var recs []*CallRecord
	for {
		rec, err := rr.Next()
		if errors.Is(err, io.EOF) {
			return rr, recs, nil
		}
		if err != nil {
			return rr, recs, err
		}
		recs = append(recs, rec)
	}
}

func TestRecordingRoundTrip(t *testing.T) {
	rr, recs, err := readAll(sampleRecording(t, 1<<20))
	require.NoError(t, err)
	require.Equal(t, int64(RecordingFormatVersion), rr.Header.FormatVersion)
	require.Equal(t, int64(WireVersion), rr.Header.WireVersion)
	require.Equal(t, "A", rr.Header.Model.Architecture)
	require.Len(t, recs, 4)
	for i, rec := range recs {
		require.Equal(t, int64(i+1), rec.Seq)
	}
	require.Equal(t, CallAbort, recs[3].Call)
	require.Equal(t, int64(5), recs[3].Code)
	res, err := DecodeResult(recs[1].Result)
	require.NoError(t, err)
	require.Equal(t, [][]int32{{4}}, res.SampledTokenIDs)
}

// TestRecordingCap: the writer stops before the cap with an end record, and the reader
// stops after it.
func TestRecordingCap(t *testing.T) {
	full := sampleRecording(t, 1<<20)
	b := sampleRecording(t, int64(len(full))-1)
	require.Less(t, len(b), len(full))
	_, recs, err := readAll(b)
	require.NoError(t, err)
	require.Equal(t, CallEnd, recs[len(recs)-1].Call)
	require.Contains(t, recs[len(recs)-1].Error, "cap")
	_, err = NewRecordingWriter(io.Discard, RecordingHeader{LoadModelRequest: []byte{1}}, 100)
	require.ErrorContains(t, err, "no room")
}

// TestRecordingReaderRefusesDamage: every truncation, a gap in the numbering, a bad version
// and lying lengths are refused with ErrInvalidRecording.
func TestRecordingReaderRefusesDamage(t *testing.T) {
	good := sampleRecording(t, 1<<20)
	_, recs, err := readAll(good)
	require.NoError(t, err)
	ends := map[int]bool{} // offsets where a whole frame ends: a clean, shorter recording
	off := len(RecordingMagic)
	for off < len(good) {
		off += 4 + int(binary.BigEndian.Uint32(good[off:]))
		ends[off] = true
	}
	for n := range len(good) {
		_, got, err := readAll(good[:n])
		if ends[n] {
			require.NoError(t, err, "cut at a frame end (%d)", n)
			require.Less(t, len(got), len(recs))
			continue
		}
		require.ErrorIs(t, err, ErrInvalidRecording, "cut at %d", n)
	}
	var buf bytes.Buffer
	w, err := NewRecordingWriter(&buf, RecordingHeader{LoadModelRequest: []byte{1}}, 1<<20)
	require.NoError(t, err)
	gap := frameOf(mustMarshal(t, &CallRecord{Seq: 2, Call: CallAbort}))
	_, err = w.w.Write(gap)
	require.NoError(t, err)
	_, _, err = readAll(buf.Bytes())
	require.ErrorContains(t, err, "numbered 2 after 0")

	tests := []struct {
		name string
		b    []byte
		msg  string
	}{
		{"no magic", []byte("hello"), "magic"},
		{"header too large", append([]byte(RecordingMagic), 0x00, 0x10, 0x00, 0x01), "declares 1048577 bytes"},
		{"header empty", append([]byte(RecordingMagic), 0, 0, 0, 0), "declares 0 bytes"},
		{"header not msgpack", append([]byte(RecordingMagic), 0, 0, 0, 1, 0xc1), "reserved byte"},
		{"future version", append([]byte(RecordingMagic), frameOf(mustMarshal(t, &RecordingHeader{FormatVersion: 2, WireVersion: WireVersion, LoadModelRequest: []byte{1}}))...), "format version 2"},
		{"no load request", append([]byte(RecordingMagic), frameOf(mustMarshal(t, &RecordingHeader{FormatVersion: 1, WireVersion: WireVersion}))...), "no LoadModel request"},
		{"unknown call", append(bytes.Clone(good), frameOf(mustMarshal(t, &CallRecord{Seq: 5, Call: "generate"}))...), "unknown call"},
		{"execute without result", append(bytes.Clone(good), frameOf(mustMarshal(t, &CallRecord{Seq: 5, Call: CallExecuteModel}))...), "without its result"},
		{"frame of a string", append(bytes.Clone(good), 0, 0, 0, 2, 0xa1, 'x'), "decode the call record"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := readAll(tt.b)
			require.ErrorIs(t, err, ErrInvalidRecording)
			require.ErrorContains(t, err, tt.msg)
		})
	}
}

// TestRecordingReaderAllocatesWhatArrives: a frame declaring half a GiB backed by a few
// bytes costs a few bytes, not the declared length.
func TestRecordingReaderAllocatesWhatArrives(t *testing.T) {
	good := sampleRecording(t, 1<<20)
	lying := append(bytes.Clone(good), 0x20, 0x00, 0x00, 0x00, 0x81, 0xa1, 'x')
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, _, err := readAll(lying)
	runtime.ReadMemStats(&after)
	require.ErrorContains(t, err, "truncated (3 of 536870912 bytes)")
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20))
}

func mustMarshal(t testing.TB, v any) []byte {
	b, err := marshalRecord(v)
	require.NoError(t, err)
	return b
}

// FuzzRecordingReader: whatever the file holds, the reader returns records or an error,
// never panics, and allocates no more than the input's size allows.
func FuzzRecordingReader(f *testing.F) {
	good := sampleRecording(f, 1<<20)
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add(append(bytes.Clone(good), 0xff, 0xff, 0xff, 0xff))
	f.Add([]byte(RecordingMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		rr, recs, err := readAll(b)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidRecording)
			return
		}
		require.NotNil(t, rr)
		for i, rec := range recs {
			require.Equal(t, int64(i+1), rec.Seq)
			if rec.Call == CallExecuteModel && rec.Code == 0 {
				_, _ = DecodeResult(rec.Result)
				_, _ = DecodeExecuteModel(rec.Payload)
			}
		}
	})
}
