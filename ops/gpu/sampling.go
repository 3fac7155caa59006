package gpu

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/atom-go/atom/hipkernels"
	"github.com/atom-go/atom/ops"
)

var _ ops.DeviceSampler = (*Backend)(nil)

// SampleRows draws a token for each of the first len(params) rows of logits on the device
// (see ops.DeviceSampler and ops.SampleRow): the params go up through the staging ring, one
// kernel samples every row, and one copy of 8 bytes per row comes back. It waits for the
// queued work.
func (b *Backend) SampleRows(logits ops.Tensor, params []ops.RowSampling, out []ops.SampledToken) {
	x := logits.(*Tensor)
	rows, vocab := len(params), x.cols()
	if rows > x.rows() || len(out) < rows {
		panic(fmt.Sprintf("gpu SampleRows: %d rows of params for %d rows of logits and %d outputs", rows, x.rows(), len(out)))
	}
	if rows == 0 {
		return
	}
	s := &b.sampling
	pb := rows * hipkernels.SamplingParamsBytes
	b.must("SampleRows", b.ensure(s, pb+8*rows))
	b.must("SampleRows", b.stage(s.ptr, pb, func(buf []byte) {
		for i, p := range params {
			kp := hipkernels.SamplingParams{Temperature: p.Temperature, TopK: p.TopK, TopP: p.TopP, MinP: p.MinP, Seed: p.Seed, Offset: p.Offset}
			kp.Put(buf[i*hipkernels.SamplingParamsBytes:])
		}
	}))
	toks := s.ptr + hipkernels.Ptr(pb)
	lps := toks + hipkernels.Ptr(4*rows)
	b.must("SampleRows", b.lib.SampleRows(hipkernels.DType(x.dt), toks, lps, x.ptr, s.ptr, rows, vocab, b.stream))
	b.must("SampleRows", b.growPinned(&b.readback, 8*rows))
	b.must("SampleRows", b.lib.MemcpyD2H(b.readback.ptr, toks, 8*rows, b.stream))
	b.must("SampleRows", b.lib.StreamSync(b.stream))
	host := hipkernels.HostBytes(b.readback.ptr, 8*rows)
	for i := range rows {
		out[i].Token = int32(binary.LittleEndian.Uint32(host[4*i:]))
		out[i].Logprob = math.Float32frombits(binary.LittleEndian.Uint32(host[4*(rows+i):]))
	}
}
