package hipkernels

// MoEArgs are the operands of one mixture-of-experts pass over Slots (token, expert) slots
// (see the atomk_moe_* functions in src/atomk.h): the routing of MoERoute, the grouping of
// MoEAlign and the expert weights.
type MoEArgs struct {
	IDs      Ptr // int32 [tokens, TopK]: the experts chosen for each token
	Weights  Ptr // float32 [tokens, TopK]: their routing weights
	Sorted   Ptr // int32: the slots grouped by expert (MoEAlign's output)
	Tiles    Ptr // int32: the expert of each tile
	NumTiles Ptr // int32 [1], on the device
	TileRows int // from MoETileRows
	Slots    int // tokens * TopK
	Experts  int
	TopK     int
	Hidden   int
	Inter    int
	// The experts' biases and activation (gpt-oss; zero for the others): B13 [E, 2I] and B2
	// [E, H] (0: none), and the clamped SwiGLU with its Alpha and Limit.
	B13, B2      Ptr
	Clamped      bool
	Alpha, Limit float32
	// W13Scales and W2Scales, when not 0, make the weights MXFP4: the weight pointers hold the
	// packed codes, these the E8M0 scales (64-row tiles: scales that keep the scaled values
	// normal in the dtype, see atomk.h).
	W13Scales, W2Scales Ptr
}

// MoERoute queues ids and weights [rows, topk] = the topk largest of softmax(logits [rows,
// experts]) in float32, in descending probability (ties: the lower id first), divided by
// their sum when renormalize.
func (l *Lib) MoERoute(dt DType, logits, ids, weights Ptr, rows, experts, topk int, renormalize bool, s Stream) error {
	rn := int32(0)
	if renormalize {
		rn = 1
	}
	return l.call("atomk_moe_route", func() int32 {
		return l.f.moeRoute(int32(dt), uintptr(logits), uintptr(ids), uintptr(weights), int32(rows), int32(experts), int32(topk), rn, uintptr(s))
	})
}

// MoERouteAlign queues MoERoute of rows tokens (into a.IDs and a.Weights) then MoEAlign of
// their slots (a.Slots = rows * a.TopK), in one launch for decode-sized batches.
func (l *Lib) MoERouteAlign(dt DType, logits Ptr, rows int, renormalize bool, a *MoEArgs, s Stream) error {
	rn := int32(0)
	if renormalize {
		rn = 1
	}
	return l.call("atomk_moe_route_align", func() int32 {
		return l.f.moeRouteAlign(int32(dt), uintptr(logits), uintptr(a.IDs), uintptr(a.Weights), int32(rows), int32(a.Experts),
			int32(a.TopK), rn, int32(a.TileRows), uintptr(a.Sorted), uintptr(a.Tiles), uintptr(a.NumTiles), uintptr(s))
	})
}

// MoETileRows returns the tile rows (4 or 64) that a pass of slots slots over experts experts
// in dt groups them by, or 1 where the slots go one by one with no grouping.
func (l *Lib) MoETileRows(dt DType, slots, experts int) (int, error) {
	o := getOuts()
	defer outPool.Put(o)
	err := l.call("atomk_moe_tile_rows", func() int32 { return l.f.moeTileRows(int32(dt), int32(slots), int32(experts), &o.a) })
	return int(o.a), err
}

// MoEWorkspace returns the int32 elements of MoEArgs.Sorted and MoEArgs.Tiles that passes of up
// to maxSlots slots need.
func (l *Lib) MoEWorkspace(maxSlots, experts int) (sorted, tiles int, err error) {
	o := getOuts()
	defer outPool.Put(o)
	err = l.call("atomk_moe_workspace", func() int32 { return l.f.moeWorkspace(int32(maxSlots), int32(experts), &o.a, &o.b) })
	return int(o.a), int(o.b), err
}

// MoEAlign queues the grouping of a's slots by expert into a.Sorted, a.Tiles and a.NumTiles.
func (l *Lib) MoEAlign(a *MoEArgs, s Stream) error {
	return l.call("atomk_moe_align", func() int32 {
		return l.f.moeAlign(uintptr(a.IDs), int32(a.Slots), int32(a.Experts), int32(a.TileRows), uintptr(a.Sorted),
			uintptr(a.Tiles), uintptr(a.NumTiles), uintptr(s))
	})
}

// MoEGateUp queues act[slot] = silu(x[token] · gateᵀ) * (x[token] · upᵀ) of each slot's expert,
// w13 [experts, 2*inter, hidden].
func (l *Lib) MoEGateUp(dt DType, act, x, w13 Ptr, a *MoEArgs, s Stream) error {
	return l.call("atomk_moe_gate_up", func() int32 {
		return l.f.moeGateUp(int32(dt), uintptr(act), uintptr(x), uintptr(w13), uintptr(a.W13Scales), uintptr(a.IDs), uintptr(a.Sorted), uintptr(a.Tiles),
			uintptr(a.NumTiles), int32(a.TileRows), int32(a.Slots), int32(a.Experts), int32(a.TopK), int32(a.Hidden),
			int32(a.Inter), uintptr(a.B13), boolInt(a.Clamped), a.Alpha, a.Limit, uintptr(s))
	})
}

// MoEDown queues y[slot] = weight[slot] · (act[slot] · downᵀ) of each slot's expert, w2
// [experts, hidden, inter].
func (l *Lib) MoEDown(dt DType, y, act, w2 Ptr, a *MoEArgs, s Stream) error {
	return l.call("atomk_moe_down", func() int32 {
		return l.f.moeDown(int32(dt), uintptr(y), uintptr(act), uintptr(w2), uintptr(a.W2Scales), uintptr(a.Weights), uintptr(a.IDs), uintptr(a.Sorted),
			uintptr(a.Tiles), uintptr(a.NumTiles), int32(a.TileRows), int32(a.Slots), int32(a.Experts), int32(a.TopK),
			int32(a.Hidden), int32(a.Inter), uintptr(a.B2), uintptr(s))
	})
}

// MoESum queues out[t] = Σ_j y[t*topk + j] over token t's experts in ascending id, plus
// sigmoid(sharedGate[t*gateStride]) · shared[t] where shared is not 0.
func (l *Lib) MoESum(dt DType, out, y Ptr, a *MoEArgs, rows int, shared, sharedGate Ptr, gateStride int, s Stream) error {
	return l.call("atomk_moe_sum", func() int32 {
		return l.f.moeSum(int32(dt), uintptr(out), uintptr(y), uintptr(a.IDs), int32(rows), int32(a.TopK), int32(a.Hidden),
			uintptr(shared), uintptr(sharedGate), int32(gateStride), uintptr(s))
	})
}

// MoERouteGroupedArgs are DeepSeek's routing options (see atomk_moe_route_grouped).
type MoERouteGroupedArgs struct {
	Bias        Ptr // float32 [experts], or 0 for none
	Sigmoid     bool
	TopKSoftmax bool // gpt-oss: the top-k of the logits, their softmax as the weights
	Groups      int  // 0: no group limit
	TopKGroups  int
	Renormalize bool
	Scale       float32
}

// MoERouteGrouped queues DeepSeek's routing of rows tokens into ids and weights [rows, topk]:
// softmax or sigmoid scores, the choice on score + bias among the best groups, weights the
// unbiased scores (renormalised when asked) times the scale.
func (l *Lib) MoERouteGrouped(dt DType, logits, ids, weights Ptr, rows, experts, topk int, o *MoERouteGroupedArgs, s Stream) error {
	return l.call("atomk_moe_route_grouped", func() int32 {
		return l.f.moeRouteGrouped(int32(dt), uintptr(logits), uintptr(o.Bias), uintptr(ids), uintptr(weights),
			int32(rows), int32(experts), int32(topk), o.scoring(), int32(o.Groups), int32(o.TopKGroups),
			boolInt(o.Renormalize), o.Scale, uintptr(s))
	})
}

// scoring is the C entry point's scoring code.
func (o *MoERouteGroupedArgs) scoring() int32 {
	switch {
	case o.TopKSoftmax:
		return 2
	case o.Sigmoid:
		return 1
	}
	return 0
}

// DequantMXFP4 queues out[n] (dt) = the values of n MXFP4 codes and their scales.
func (l *Lib) DequantMXFP4(dt DType, out, codes, scales Ptr, n int64, s Stream) error {
	return l.call("atomk_dequant_mxfp4", func() int32 {
		return l.f.dequantMXFP4(int32(dt), uintptr(out), uintptr(codes), uintptr(scales), n, uintptr(s))
	})
}
