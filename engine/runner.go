package engine

import (
	"fmt"

	"github.com/atom-go/atom/models"
	"github.com/atom-go/atom/ops"
)

// Work is one sequence's share of a forward pass: compute tokens[Start:Start+NumTokens] whose
// KV goes into the blocks of BlockTable; when Sample is set, the logits of the last of them are
// returned. Both the engine's scheduler and a host's scheduler (vLLM, SGLang) produce Work.
type Work struct {
	Tokens     []int32
	Start      int
	NumTokens  int
	BlockTable []int32
	Sample     bool
	// Drafts, with Sample, asks for the logits of the last Drafts+1 positions instead of the
	// last one: a speculative verify chunk whose last Drafts tokens are drafts.
	Drafts int
}

// Runner executes flattened batches on one model and its KV cache. It owns reusable input
// buffers so a step allocates nothing.
type Runner struct {
	model     models.Model
	be        ops.Backend
	cache     ops.KVCache
	blockSize int
	numBlocks int
	vocab     int
	limits    models.Options
	// decodeSeqs bounds the decode batches graphs are captured for when limits.MaxSeqs counts
	// speculative verify rows too (0: limits.MaxSeqs).
	decodeSeqs int
	// verifyRows is 1+k when the runner verifies k drafts a sequence: graphs are also captured
	// for each decode size times verifyRows (graphs.go), the rows of a verify step.
	verifyRows int

	ids        []int32
	meta       ops.AttnMetadata
	vmeta      ops.AttnMetadata  // meta of a verify batch as one-token sequences (graphs.go)
	gmeta      *ops.AttnMetadata // what the graph graphFor chose reads: &meta or &vmeta
	sampleRows []int32
	logits     []float32
	sampler    ops.DeviceSampler // nil: sampling on the host only
	sampled    []ops.SampledToken

	// hidden is the last eager step's final-normed hidden states, one row per token in the
	// order of meta.QueryStart (an MTP drafter reads them); nil after a graph replay.
	hidden ops.Tensor

	graphs                 *decodeGraphs // nil: every step eager (see graphs.go)
	graphSteps, eagerSteps int64
	verifyGraphSteps       int64 // graph replays of verify batches

	queue      []queuedDraw // queued steps not collected, oldest first (runner_queue.go)
	queueEager bool         // tests: queue eager steps too
	fedSteps   int64        // steps queued fed from the previous draw

	// lost is a simulated lost device (InjectDeviceFault on a backend without a device): every
	// later step fails with it.
	lost error
}

// NewRunner binds a model, whose workspaces were sized by limits, to a freshly allocated KV
// cache of numBlocks blocks.
func NewRunner(m models.Model, be ops.Backend, limits models.Options, numBlocks, blockSize int) (*Runner, error) {
	c := m.Config()
	cache, err := m.NewKVCache(numBlocks, blockSize)
	if err != nil {
		return nil, err
	}
	r := &Runner{model: m, be: be, cache: cache, blockSize: blockSize, numBlocks: numBlocks, vocab: c.VocabSize, limits: limits}
	if ds, ok := be.(ops.DeviceSampler); ok && Env("ATOM_GO_HOST_SAMPLING") == "" {
		r.sampler = ds
	}
	return r, nil
}

// Model returns the runner's model.
func (r *Runner) Model() models.Model { return r.model }

// Run executes one forward pass and returns the logits of every Sample item, in order, as
// rows of width VocabSize in a buffer reused by the next call. A decode-only batch replays a
// captured graph when there is one for its size (CaptureGraphs).
func (r *Runner) Run(work []Work) ([]float32, error) {
	t, err := r.forward(work, -1)
	if t == nil || err != nil {
		return nil, err
	}
	n := len(r.sampleRows) * r.vocab
	if cap(r.logits) < n {
		r.logits = make([]float32, n)
	}
	r.be.ReadRows(t, r.logits[:n])
	return r.logits[:n], nil
}

// DeviceSampling reports whether RunSampled is available: the backend samples on the device
// (ops.DeviceSampler) and ATOM_GO_HOST_SAMPLING is not set.
func (r *Runner) DeviceSampling() bool { return r.sampler != nil }

// RunSampled executes one forward pass like Run, then samples every Sample item's row on the
// device with params (one per Sample item, in order) and returns the tokens with their raw
// logprobs, in a buffer reused by the next call: 8 bytes per row come back instead of the
// logits. It works after a graph replay (reading the graph's logits) and in the eager path.
func (r *Runner) RunSampled(work []Work, params []ops.RowSampling) ([]ops.SampledToken, error) {
	if r.sampler == nil {
		return nil, fmt.Errorf("RunSampled: the %s backend does not sample on the device", r.be.Name())
	}
	t, err := r.forward(work, len(params))
	if t == nil || err != nil {
		return nil, err
	}
	if cap(r.sampled) < len(params) {
		r.sampled = make([]ops.SampledToken, len(params))
	}
	out := r.sampled[:len(params)]
	r.sampler.SampleRows(t, params, out)
	return out, nil
}

// forward prepares and runs the batch and returns the logits tensor of its Sample items (nil
// when there are none). nSample >= 0 must equal the number of Sample items.
func (r *Runner) forward(work []Work, nSample int) (ops.Tensor, error) {
	if err := r.prepare(work); err != nil {
		return nil, err
	}
	if nSample >= 0 && nSample != len(r.sampleRows) {
		return nil, fmt.Errorf("%w: %d sampling params for %d sampled rows", ErrInvalidRequest, nSample, len(r.sampleRows))
	}
	if len(r.ids) == 0 {
		return nil, nil
	}
	r.hidden = nil
	if g := r.graphFor(work); g != nil {
		return r.runGraph(g)
	}
	r.eagerSteps++
	hidden := r.model.Forward(r.ids, &r.meta, r.cache)
	r.hidden = hidden
	if len(r.sampleRows) == 0 {
		return nil, nil
	}
	return r.model.Logits(hidden, r.sampleRows), nil
}

// prepare flattens the work into the varlen batch, checking every index a kernel will follow.
func (r *Runner) prepare(work []Work) error {
	if r.lost != nil {
		return r.lost
	}
	m := &r.meta
	r.ids, r.sampleRows = r.ids[:0], r.sampleRows[:0]
	m.Positions, m.SlotMapping = m.Positions[:0], m.SlotMapping[:0]
	m.QueryStart, m.SeqLens, m.BlockTables = append(m.QueryStart[:0], 0), m.SeqLens[:0], m.BlockTables[:0]
	stride := 1
	for _, w := range work {
		stride = max(stride, len(w.BlockTable))
	}
	m.BlockTableStride = stride
	for i, w := range work {
		end := w.Start + w.NumTokens
		if w.NumTokens <= 0 || w.Start < 0 || end > len(w.Tokens) {
			return fmt.Errorf("%w: work %d computes tokens [%d, %d) of %d", ErrInvalidRequest, i, w.Start, end, len(w.Tokens))
		}
		if w.Drafts < 0 || w.Drafts >= w.NumTokens || (w.Drafts > 0 && !w.Sample) {
			return fmt.Errorf("%w: work %d verifies %d drafts in a chunk of %d tokens (sampled %v)", ErrInvalidRequest, i, w.Drafts, w.NumTokens, w.Sample)
		}
		if end > len(w.BlockTable)*r.blockSize {
			return fmt.Errorf("%w: work %d needs %d tokens of KV but has %d blocks of %d", ErrInvalidRequest, i, end, len(w.BlockTable), r.blockSize)
		}
		for _, b := range w.BlockTable {
			if b < 0 || int(b) >= r.numBlocks {
				return fmt.Errorf("%w: block id %d outside [0, %d)", ErrInvalidRequest, b, r.numBlocks)
			}
		}
		for p := w.Start; p < end; p++ {
			if t := w.Tokens[p]; t < 0 || int(t) >= r.vocab {
				return fmt.Errorf("%w: token id %d outside the vocabulary [0, %d)", ErrInvalidRequest, t, r.vocab)
			}
			r.ids = append(r.ids, w.Tokens[p])
			m.Positions = append(m.Positions, int32(p))
			m.SlotMapping = append(m.SlotMapping, w.BlockTable[p/r.blockSize]*int32(r.blockSize)+int32(p%r.blockSize))
		}
		m.BlockTables = append(m.BlockTables, w.BlockTable...)
		for j := len(w.BlockTable); j < stride; j++ {
			m.BlockTables = append(m.BlockTables, 0)
		}
		m.QueryStart = append(m.QueryStart, int32(len(r.ids)))
		m.SeqLens = append(m.SeqLens, int32(end))
		if w.Sample {
			for j := w.Drafts; j >= 0; j-- {
				r.sampleRows = append(r.sampleRows, int32(len(r.ids)-1-j))
			}
		}
	}
	if len(r.ids) > r.limits.MaxTokens || len(work) > r.limits.MaxTokens || len(r.sampleRows) > r.limits.MaxSeqs {
		return fmt.Errorf("%w: batch of %d tokens, %d sampled, exceeds the runner's %d tokens, %d sequences",
			ErrInvalidRequest, len(r.ids), len(r.sampleRows), r.limits.MaxTokens, r.limits.MaxSeqs)
	}
	return nil
}
