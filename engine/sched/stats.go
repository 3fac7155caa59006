package sched

// Stats is a snapshot of the scheduler for metrics and logs.
type Stats struct {
	// Running and Waiting count the sequences in each queue; Waiting
	// includes preempted sequences.
	Running, Waiting int
	// NumPreemptions is cumulative over the scheduler's life.
	NumPreemptions int64
	// KVBlocksUsed counts blocks referenced by a sequence; cached blocks
	// that no sequence uses count as free, since allocation may evict them.
	KVBlocksUsed, KVBlocksTotal int
	// KVCacheUsage is KVBlocksUsed/KVBlocksTotal.
	KVCacheUsage float64
	// PrefixCacheQueries counts the tokens of admitted sequences looked up
	// in the prefix cache, PrefixCacheHits those it served; both are
	// cumulative and include readmissions after preemption.
	PrefixCacheQueries, PrefixCacheHits int64
	// PrefixCacheHitRate is PrefixCacheHits/PrefixCacheQueries (0 before
	// any query).
	PrefixCacheHitRate float64
}

// Stats returns the current counters.
func (s *Scheduler) Stats() Stats {
	st := Stats{
		Running:            len(s.running),
		Waiting:            len(s.waiting),
		NumPreemptions:     s.numPreemptions,
		KVBlocksUsed:       s.bm.UsedBlocks(),
		KVBlocksTotal:      s.bm.NumBlocks(),
		PrefixCacheQueries: s.bm.PrefixCacheQueries(),
		PrefixCacheHits:    s.bm.PrefixCacheHits(),
	}
	st.KVCacheUsage = float64(st.KVBlocksUsed) / float64(st.KVBlocksTotal)
	if st.PrefixCacheQueries > 0 {
		st.PrefixCacheHitRate = float64(st.PrefixCacheHits) / float64(st.PrefixCacheQueries)
	}
	return st
}
