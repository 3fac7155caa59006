package models

import (
	"fmt"

	"github.com/atom-go/atom/ops"
)

// RankedModel is a model split across the ranks of a tensor-parallel group (LoadParallel
// with several backends, or LoadParallelForced). It exposes what a caller needs to drive each
// rank on its own, as the engine does to capture and replay one decode graph per rank with
// the rank's all-reduces inside, without exporting the model's internals.
type RankedModel interface {
	Model
	// Ranks is the number of ranks.
	Ranks() int
	// OnRanks runs fn for every rank concurrently, each on the rank's own OS thread (rank 0 on
	// the caller's), and waits; a rank's panic is raised again. fn gets the rank's backend,
	// the rank's part of the model and the rank's shard of cache (made by this model's
	// NewKVCache). The rank model's Forward sums its row-parallel layers over the group, so
	// every rank must run it together; its Logits return the rank's slice of the vocabulary
	// ([rows, the slice's width], see VocabSlice), valid until the rank's next Logits.
	OnRanks(cache ops.KVCache, fn func(rank int, be ops.Backend, m Model, shard ops.KVCache))
	// VocabSlice returns the vocabulary columns [lo, hi) whose logits rank computes.
	VocabSlice(rank int) (lo, hi int)
	// GatherLogits calls slice for every rank concurrently, on the rank's thread; slice
	// returns that rank's logits of the first rows rows, [rows, the rank's vocabulary slice].
	// The slices are gathered through the host into rank 0's logits buffer, which is returned
	// as [rows, vocab] (valid until the next Logits or GatherLogits), as Logits does.
	GatherLogits(rows int, slice func(rank int) ops.Tensor) ops.Tensor
}

var _ RankedModel = (*parallelModel)(nil)

// LoadParallelForced is LoadParallel without the single-backend shortcut: even one backend
// gets the tensor-parallel wrapper, whose every row-parallel layer all-reduces through
// group. It exists for tests (a one-rank group on a one-GPU machine exercises the
// tensor-parallel paths, NCCL included); serving uses LoadParallel.
func LoadParallelForced(ck *Checkpoint, backends []ops.Backend, group ops.Group, opt Options) (Model, error) {
	m, err := loadParallel(ck, backends, group, opt)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Ranks is the number of tensor-parallel ranks.
func (m *parallelModel) Ranks() int { return len(m.ranks) }

// OnRanks runs fn on every rank with its backend, part of the model and cache shard (see RankedModel).
func (m *parallelModel) OnRanks(cache ops.KVCache, fn func(rank int, be ops.Backend, rm Model, shard ops.KVCache)) {
	pc, ok := cache.(*parallelCache)
	if !ok || len(pc.shards) != len(m.ranks) {
		panic(fmt.Sprintf("tensor-parallel OnRanks: a cache of type %T, not one of this model's", cache))
	}
	m.each(func(r int) { fn(r, m.ranks[r].base().c.Backend(), m.ranks[r], pc.shards[r]) })
}

// VocabSlice returns the vocabulary columns [lo, hi) of rank's logits.
func (m *parallelModel) VocabSlice(rank int) (lo, hi int) {
	h := m.ranks[rank].base().head
	return h.Lo, h.Hi
}

// GatherLogits reads each rank's vocabulary slice to the host (every rank concurrently, each
// waiting only for its own device), assembles the full rows and writes them to rank 0.
func (m *parallelModel) GatherLogits(rows int, slice func(rank int) ops.Tensor) ops.Tensor {
	vocab := m.ranks[0].Config().VocabSize
	n := rows * vocab
	if cap(m.full) < n {
		m.full, m.partial = make([]float32, n), make([]float32, n)
	}
	full, partial := m.full[:n], m.partial[:n]
	m.each(func(r int) {
		lo, hi := m.VocabSlice(r)
		w := hi - lo
		mine := partial[rows*lo : rows*hi]
		m.ranks[r].base().c.Backend().ReadRows(slice(r), mine)
		for i := 0; i < rows; i++ {
			copy(full[i*vocab+lo:i*vocab+hi], mine[i*w:(i+1)*w])
		}
	})
	be := m.ranks[0].base().c.Backend()
	out := be.View(m.logits, rows)
	be.WriteRows(out, full)
	return out
}
