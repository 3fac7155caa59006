package models

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/atom-go/atom/models/layers"
	"github.com/atom-go/atom/ops"
)

// parallelModel runs a model of any family split across the ranks of a tensor-parallel group
// (each rank's layers hold their shard, see layers.Shard): one goroutine per rank, each locked to its OS thread (a GPU context is current per thread), each
// with its own backend, weights shard and KV-cache shard. Rank 0 runs on the caller's
// goroutine, so a single-device caller keeps its thread.
type parallelModel struct {
	ranks   []rankModel
	work    []chan func() // ranks 1..n-1
	hidden  []ops.Tensor  // each rank's output of the last Forward
	partial []float32     // host scratch for gathering vocab-parallel logits
	full    []float32
	logits  ops.Tensor // rank 0 buffer [MaxSeqs, vocab]
	wg      sync.WaitGroup
	panics  []any
}

// parallelCache holds each rank's shard of the KV cache.
type parallelCache struct{ shards []ops.KVCache }

func (c *parallelCache) Geometry() (int, int, int, int) {
	n, b, h, d := c.shards[0].Geometry()
	return n, b, h * len(c.shards), d
}

// LoadParallel builds the checkpoint's model split across len(backends) ranks joined by group.
// With one backend it is Load. Each rank's weights are sliced while loading: a rank reads only
// its shard of every column- or row-parallel tensor.
func LoadParallel(ck *Checkpoint, backends []ops.Backend, group ops.Group, opt Options) (Model, error) {
	if len(backends) == 1 {
		return Load(ck, backends[0], opt)
	}
	m, err := loadParallel(ck, backends, group, opt)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return m, nil
}

// loadParallel builds the tensor-parallel model of len(backends) ranks, however few.
func loadParallel(ck *Checkpoint, backends []ops.Backend, group ops.Group, opt Options) (*parallelModel, error) {
	build, ok := registry[ck.Config.Architecture]
	if !ok {
		return nil, fmt.Errorf("load %s: %w %q for tensor parallelism (supported: %v)", ck.Dir, ErrUnknownArchitecture, ck.Config.Architecture, Architectures())
	}
	if len(backends) == 0 || group == nil || group.Size() != len(backends) {
		return nil, fmt.Errorf("load %s: a group of %d ranks is needed", ck.Dir, len(backends))
	}
	n := len(backends)
	m := &parallelModel{ranks: make([]rankModel, n), hidden: make([]ops.Tensor, n), panics: make([]any, n)}
	for r := 1; r < n; r++ {
		ch := make(chan func())
		m.work = append(m.work, ch)
		go rankLoop(backends[r], ch)
	}
	errs := make([]error, n)
	m.each(func(r int) {
		ropt := opt
		if r != 0 {
			ropt.Progress = nil
		}
		m.ranks[r], errs[r] = buildRank(ck, backends[r], ropt, layers.Shard{Rank: r, Size: n, Group: group}, build)
	})
	for r, err := range errs {
		if err != nil {
			m.Close()
			return nil, fmt.Errorf("load %s: rank %d: %w", ck.Dir, r, err)
		}
	}
	m.logits = backends[0].Buffer(opt.MaxSeqs, ck.Config.VocabSize)
	return m, nil
}

// rankLoop runs a rank's work on one locked OS thread, bound to the rank's device.
func rankLoop(be ops.Backend, work chan func()) {
	runtime.LockOSThread()
	if b, ok := be.(interface{ BindThread() error }); ok {
		if err := b.BindThread(); err != nil {
			panic(fmt.Sprintf("bind rank thread: %v", err))
		}
	}
	for fn := range work {
		fn()
	}
}

// each runs fn for every rank concurrently and waits; a rank's panic is raised again here.
func (m *parallelModel) each(fn func(rank int)) {
	m.wg.Add(len(m.work))
	for i, ch := range m.work {
		r := i + 1
		ch <- func() {
			defer m.wg.Done()
			defer func() { m.panics[r] = recover() }()
			fn(r)
		}
	}
	fn(0)
	m.wg.Wait()
	for r, p := range m.panics {
		if p != nil {
			m.panics[r] = nil
			panic(fmt.Sprintf("tensor-parallel rank %d: %v", r, p))
		}
	}
}

// Close stops the rank goroutines.
func (m *parallelModel) Close() {
	for _, ch := range m.work {
		close(ch)
	}
	m.work = nil
}

func (m *parallelModel) Config() *Config { return m.ranks[0].Config() }

// KVCacheSpec is one rank's spec; every rank holds a cache of it.
func (m *parallelModel) KVCacheSpec() ops.KVCacheSpec { return m.ranks[0].KVCacheSpec() }

func (m *parallelModel) SetLayerHook(fn func(int, []float32, int)) { m.ranks[0].SetLayerHook(fn) }

func (m *parallelModel) NewKVCache(numBlocks, blockSize int) (ops.KVCache, error) {
	c := &parallelCache{shards: make([]ops.KVCache, len(m.ranks))}
	errs := make([]error, len(m.ranks))
	m.each(func(r int) { c.shards[r], errs[r] = m.ranks[r].NewKVCache(numBlocks, blockSize) })
	for r, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("rank %d: %w", r, err)
		}
	}
	return c, nil
}

func (m *parallelModel) Forward(ids []int32, meta *ops.AttnMetadata, cache ops.KVCache) ops.Tensor {
	pc := cache.(*parallelCache)
	m.each(func(r int) { m.hidden[r] = m.ranks[r].Forward(ids, meta, pc.shards[r]) })
	return m.hidden[0]
}

// Logits computes each rank's vocabulary slice and gathers them on rank 0's backend. The
// hidden states are replicated after the last all-reduce, so every rank uses its own copy.
func (m *parallelModel) Logits(_ ops.Tensor, rows []int32) ops.Tensor {
	return m.GatherLogits(len(rows), func(r int) ops.Tensor { return m.ranks[r].Logits(m.hidden[r], rows) })
}
