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
// SamplingParams (rows of them at params, SamplingParamsBytes each): the token into
// tokens[r] (int32) and its raw logprob into logprobs[r] (float32), all device memory.
// See atomk_sample_rows in atomk.h for the algorithm; it needs no workspace.
func (l *Lib) SampleRows(dt DType, tokens, logprobs, logits, params Ptr, rows, vocab int, s Stream) error {
	return l.call("atomk_sample_rows", func() int32 {
		return l.f.sampleRows(int32(dt), uintptr(tokens), uintptr(logprobs), uintptr(logits), uintptr(params),
			int32(rows), int32(vocab), uintptr(s))
	})
}
