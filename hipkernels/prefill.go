package hipkernels

// PrefillArgs are the operands of PrefillAttention (see atomk_prefill_attention in src/atomk.h).
type PrefillArgs struct {
	Out, Q, KCache, VCache Ptr
	QueryStart             Ptr // int32 [seqs+1]: the first query row of each sequence, then the row count
	SeqLens                Ptr // int32 [seqs]: context positions of each sequence, its query rows the last ones
	BlockTables            Ptr // int32 [seqs * BlockTableStride]
	BlockTableStride       int
	Tiles                  Ptr // int32 [NumTiles][2]: sequence, first packed row (query token x head of a group)
	NumTiles               int
	NumHeads, NumKVHeads   int
	HeadDim, BlockSize     int
	Scale                  float32
	Window                 int // sliding window: a row at p attends to max(0, p-Window+1)..p; 0: none
	Sinks                  Ptr // float32 [NumHeads] sink logits in the softmax's denominator; 0: none
}

// PrefillAttentionTileRows returns the packed rows per tile of the tensor-core prefill kernel
// (the step of the tiles' first rows), or an error with StatusUnsupported when this build has
// no such kernel for dt and headDim.
func (l *Lib) PrefillAttentionTileRows(dt DType, numHeads, numKVHeads, headDim int) (int, error) {
	o := getOuts()
	defer outPool.Put(o)
	err := l.call("atomk_prefill_attention_tile_rows", func() int32 {
		return l.f.prefillTileRows(int32(dt), int32(numHeads), int32(numKVHeads), int32(headDim), &o.a)
	})
	return int(o.a), err
}

// PrefillAttention queues causal attention of every query row over its sequence's context on
// tensor cores (StatusUnsupported where PrefillAttentionTileRows is).
func (l *Lib) PrefillAttention(dt DType, a *PrefillArgs, s Stream) error {
	return l.call("atomk_prefill_attention", func() int32 {
		return l.f.prefillAttention(int32(dt), uintptr(a.Out), uintptr(a.Q), uintptr(a.KCache), uintptr(a.VCache),
			uintptr(a.QueryStart), uintptr(a.SeqLens), uintptr(a.BlockTables), int32(a.BlockTableStride),
			uintptr(a.Tiles), int32(a.NumTiles), int32(a.NumHeads), int32(a.NumKVHeads), int32(a.HeadDim),
			int32(a.BlockSize), a.Scale, int32(a.Window), uintptr(a.Sinks), uintptr(s))
	})
}
