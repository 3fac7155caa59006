package hipkernels

import (
	"encoding/binary"
	"math"
)

// SamplingParamsBytes is the size of one atomk_sampling_params in device memory.
const SamplingParamsBytes = 32

// SamplingParams mirrors atomk_sampling_params: one row's sampling controls.
type SamplingParams struct {
	Temperature float32 // <= 0: greedy
	TopK        int32   // 0: every token
	TopP        float32 // 1: off
	MinP        float32 // 0: off
	Seed        uint64
	Offset      uint64 // tokens the sequence generated so far
}

// Put writes p into dst[:SamplingParamsBytes] in the C layout (little-endian, no padding).
func (p *SamplingParams) Put(dst []byte) {
	le := binary.LittleEndian
	le.PutUint32(dst[0:], math.Float32bits(p.Temperature))
	le.PutUint32(dst[4:], uint32(p.TopK))
	le.PutUint32(dst[8:], math.Float32bits(p.TopP))
	le.PutUint32(dst[12:], math.Float32bits(p.MinP))
	le.PutUint64(dst[16:], p.Seed)
	le.PutUint64(dst[24:], p.Offset)
}

// SampleRows queues one draw per row of logits [rows, vocab] (dtype dt) with the row's
// SamplingParams (rows of them at params, SamplingParamsBytes each; device or pinned host
// memory): the token into tokens[r] (int32) and its raw logprob into logprobs[r] (float32), both
// device memory, and, when host is not 0, the same into pinned host memory (rows tokens, then
// rows logprobs), written by the kernel. work (0: none) is SampleWorkBytes of zeroed device
// memory that lets a batch of few rows spread over many blocks; calls sharing it must run on one
// stream. See atomk_sample_rows in atomk.h for the algorithm.
func (l *Lib) SampleRows(dt DType, tokens, logprobs, host, logits, params Ptr, rows, vocab int, work Ptr, s Stream) error {
	return l.call("atomk_sample_rows", func() int32 {
		return l.f.sampleRows(int32(dt), uintptr(tokens), uintptr(logprobs), uintptr(host), uintptr(logits), uintptr(params),
			int32(rows), int32(vocab), uintptr(work), uintptr(s))
	})
}

// SampleWorkBytes returns the size of SampleRows' workspace on the current device.
func (l *Lib) SampleWorkBytes() (int, error) {
	var n uint64
	err := l.call("atomk_sample_work_bytes", func() int32 { return l.f.sampleWork(&n) })
	return int(n), err
}
