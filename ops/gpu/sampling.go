package gpu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/atom-go/atom/hipkernels"
	"github.com/atom-go/atom/ops"
)

var _ ops.QueuedSampler = (*Backend)(nil)

// drawQueue holds the draws queued on the stream, oldest first: each slot has its device
// buffer (the rows' params, then their tokens and logprobs) and the pinned memory its results
// are copied back into, with the event recorded after that copy.
type drawQueue struct {
	slots       [ops.MaxQueuedDraws]drawSlot
	head, count int
	last        *drawSlot // the slot of the latest draw queued, whose tokens FeedDecodeIDs copies
}

type drawSlot struct {
	dev  devBuf
	host pinnedSlot
	rows int
	toks hipkernels.Ptr
}

// errDrawQueue reports a misuse of the draw queue: full, empty, or busy for SampleRows.
var errDrawQueue = errors.New("gpu draw queue")

// SampleRows draws a token for each of the first len(params) rows of logits on the device
// (see ops.DeviceSampler and ops.SampleRow): the params go up through the staging ring, one
// kernel samples every row, and one copy of 8 bytes per row comes back. It waits for the
// queued work; no QueueSample draw may be outstanding.
func (b *Backend) SampleRows(logits ops.Tensor, params []ops.RowSampling, out []ops.SampledToken) {
	if len(params) == 0 {
		return
	}
	if b.draws.count > 0 {
		panic(fmt.Sprintf("gpu SampleRows: %d queued draws not collected", b.draws.count))
	}
	b.must("SampleRows", b.QueueSample(logits, params))
	_, err := b.CollectSample(out)
	b.must("SampleRows", err)
}

// QueueSample queues SampleRows' work (params upload, kernel, readback of 8 bytes per row)
// without waiting; see ops.QueuedSampler.
func (b *Backend) QueueSample(logits ops.Tensor, params []ops.RowSampling) error {
	x := logits.(*Tensor)
	rows, vocab := len(params), x.cols()
	q := &b.draws
	switch {
	case rows == 0 || rows > x.rows():
		return fmt.Errorf("gpu QueueSample: %d rows of params for %d rows of logits", rows, x.rows())
	case q.count == len(q.slots):
		return fmt.Errorf("%w: %d draws queued already", errDrawQueue, q.count)
	}
	s := &q.slots[(q.head+q.count)%len(q.slots)]
	pb := rows * hipkernels.SamplingParamsBytes
	if err := b.ensure(&s.dev, pb+8*rows); err != nil {
		return err
	}
	if err := b.growPinned(&s.host, 8*rows); err != nil {
		return err
	}
	err := b.stage(s.dev.ptr, pb, func(buf []byte) {
		for i, p := range params {
			kp := hipkernels.SamplingParams{Temperature: p.Temperature, TopK: p.TopK, TopP: p.TopP, MinP: p.MinP, Seed: p.Seed, Offset: p.Offset}
			kp.Put(buf[i*hipkernels.SamplingParamsBytes:])
		}
	})
	if err != nil {
		return err
	}
	s.rows, s.toks = rows, s.dev.ptr+hipkernels.Ptr(pb)
	lps := s.toks + hipkernels.Ptr(4*rows)
	if err := b.lib.SampleRows(hipkernels.DType(x.dt), s.toks, lps, x.ptr, s.dev.ptr, rows, vocab, b.stream); err != nil {
		return err
	}
	if err := b.copyOut(s.host.ptr, s.toks, 8*rows); err != nil {
		return err
	}
	if err := b.lib.EventRecord(s.host.ev, b.stream); err != nil {
		return err
	}
	q.count++
	q.last = s
	return nil
}

// CollectSample waits for the oldest queued draw and writes its results into out; see
// ops.QueuedSampler.
func (b *Backend) CollectSample(out []ops.SampledToken) (int, error) {
	q := &b.draws
	if q.count == 0 {
		return 0, fmt.Errorf("%w: nothing queued to collect", errDrawQueue)
	}
	s := &q.slots[q.head]
	if len(out) < s.rows {
		return 0, fmt.Errorf("gpu CollectSample: %d outputs for %d rows", len(out), s.rows)
	}
	if err := b.lib.EventSync(s.host.ev); err != nil {
		return 0, err
	}
	q.head, q.count = (q.head+1)%len(q.slots), q.count-1
	host := hipkernels.HostBytes(s.host.ptr, 8*s.rows)
	for i := range s.rows {
		out[i].Token = int32(binary.LittleEndian.Uint32(host[4*i:]))
		out[i].Logprob = math.Float32frombits(binary.LittleEndian.Uint32(host[4*(s.rows+i):]))
	}
	return s.rows, nil
}

// FeedDecodeIDs queues a copy of the latest queued draw's first n tokens into in's token ids:
// the decode step replayed next takes as input, row for row, the tokens that draw produces,
// without the host seeing them. A row whose draw found no finite logit (token -1) feeds token
// 0, as the host path does.
func (b *Backend) FeedDecodeIDs(in *StepInputs, n int) error {
	s := b.draws.last
	if s == nil || n <= 0 || n > s.rows || n > in.loaded {
		return fmt.Errorf("gpu FeedDecodeIDs: %d rows from the last draw (%v) into inputs of %d rows", n, s != nil, in.loaded)
	}
	return b.lib.FeedTokens(in.region(regIDs), s.toks, n, b.stream)
}

// copyOut queues a copy of n bytes from device src to pinned host dst, by a kernel when small
// (see copyIn).
func (b *Backend) copyOut(dst, src hipkernels.Ptr, n int) error {
	if n <= hipkernels.CopySmallMax {
		return b.lib.CopySmall(dst, src, n, b.stream)
	}
	return b.lib.MemcpyD2H(dst, src, n, b.stream)
}

// DropDraws forgets every queued draw after waiting for the stream: after a failed step whose
// draws nobody will collect.
func (b *Backend) DropDraws() error {
	b.draws.head, b.draws.count = 0, 0
	return b.lib.StreamSync(b.stream)
}
