package hipkernels

// MLAShape is one Multi-head Latent Attention layer's widths (see the atomk_mla_* functions
// in src/atomk.h).
type MLAShape struct {
	Heads, KVRank, NopeDim, RopeDim, VDim int
}

// MLAWriteArgs are the operands of MLAWriteKV.
type MLAWriteArgs struct {
	Q, KV, NormW, Cache, Positions, Slots, InvFreq Ptr
	AttnFactor, Eps                                float32
	Tokens                                         int
	Interleaved                                    bool
	NumSlots                                       int64
}

// MLAWriteKV queues the latent cache write of a batch: kv_c normalised, k_pe and q's rope parts
// rotated, [kv_c, k_pe] stored at each token's slot.
func (l *Lib) MLAWriteKV(dt DType, a *MLAWriteArgs, sh MLAShape, s Stream) error {
	return l.call("atomk_mla_write_kv", func() int32 {
		return l.f.mlaWriteKV(int32(dt), uintptr(a.Q), uintptr(a.KV), uintptr(a.NormW), uintptr(a.Cache),
			uintptr(a.Positions), uintptr(a.Slots), uintptr(a.InvFreq), a.AttnFactor, int32(a.Tokens), int32(sh.Heads),
			int32(sh.KVRank), int32(sh.NopeDim), int32(sh.RopeDim), boolInt(a.Interleaved), a.Eps, a.NumSlots, uintptr(s))
	})
}

// MLAWorkspace returns the workspace bytes MLAAttention needs for tokens rows of contexts up
// to maxCtx positions.
func (l *Lib) MLAWorkspace(dt DType, tokens, maxCtx int, sh MLAShape) (int, error) {
	o := getOuts()
	defer outPool.Put(o)
	err := l.call("atomk_mla_workspace", func() int32 {
		return l.f.mlaWorkspace(int32(dt), int32(tokens), int32(sh.Heads), int32(sh.KVRank), int32(sh.RopeDim),
			int32(maxCtx), &o.n)
	})
	return int(o.n), err
}

// MLAAttentionArgs are the operands of MLAAttention.
type MLAAttentionArgs struct {
	Out, Q, KVB, Cache, TokenSeq, Positions, BlockTables Ptr
	BlockTableStride, Tokens, BlockSize, MaxCtx          int
	Scale                                                float32
	Workspace                                            Ptr
	WorkspaceBytes                                       int
}

// MLAAttention queues causal latent attention of every query token over its sequence's cached
// context, in the absorbed form.
func (l *Lib) MLAAttention(dt DType, a *MLAAttentionArgs, sh MLAShape, s Stream) error {
	return l.call("atomk_mla_attention", func() int32 {
		return l.f.mlaAttention(int32(dt), uintptr(a.Out), uintptr(a.Q), uintptr(a.KVB), uintptr(a.Cache),
			uintptr(a.TokenSeq), uintptr(a.Positions), uintptr(a.BlockTables), int32(a.BlockTableStride),
			int32(a.Tokens), int32(sh.Heads), int32(sh.KVRank), int32(sh.NopeDim), int32(sh.RopeDim), int32(sh.VDim),
			int32(a.BlockSize), a.Scale, int32(a.MaxCtx), uintptr(a.Workspace), uint64(a.WorkspaceBytes), uintptr(s))
	})
}

// boolInt is a C int flag.
func boolInt(b bool) int32 {
	if b {
		return 1
	}
	return 0
}
