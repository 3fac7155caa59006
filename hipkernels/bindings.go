package hipkernels

import "unsafe"

// fns holds one Go function per atomk_* symbol, with the C signature spelt in Go types:
// int -> int32, size_t -> uint64, int64_t -> int64, float -> float32, pointers -> uintptr
// (device or C memory) or unsafe.Pointer (Go memory written by the call).
type fns struct {
	abiVersion func(version, warp *int32) int32

	deviceCount func(count *int32) int32
	setDevice   func(dev int32) int32
	deviceInfo  func(dev int32, name unsafe.Pointer, nameLen int32, sms, cc *int32, total *uint64) int32
	memInfo     func(free, total *uint64) int32
	malloc      func(p *uintptr, bytes uint64) int32
	free        func(p uintptr) int32
	hostAlloc   func(p *uintptr, bytes uint64) int32
	hostFree    func(p uintptr) int32
	memcpyH2D   func(dst, src uintptr, bytes uint64, s uintptr) int32
	memcpyD2H   func(dst, src uintptr, bytes uint64, s uintptr) int32
	memcpyD2D   func(dst, src uintptr, bytes uint64, s uintptr) int32
	memset      func(dst uintptr, value int32, bytes uint64, s uintptr) int32
	streamNew   func(s *uintptr) int32
	streamDel   func(s uintptr) int32
	streamSync  func(s uintptr) int32
	streamWait  func(s, e uintptr) int32
	deviceSync  func() int32
	eventNew    func(e *uintptr) int32
	eventDel    func(e uintptr) int32
	eventRecord func(e, s uintptr) int32
	eventSync   func(e uintptr) int32
	eventMs     func(ms *float32, start, end uintptr) int32
	graphBegin  func(s uintptr) int32
	graphEnd    func(s uintptr, exec *uintptr) int32
	graphLaunch func(exec, s uintptr) int32
	graphDel    func(exec uintptr) int32

	blasNew func(h *uintptr) int32
	blasDel func(h uintptr) int32
	gemm    func(h, s uintptr, dt, wdt int32, out, x, w uintptr, m, n, k int32) int32
	// skinny GEMM and fused projections (gemv.cu, activation.cu)
	gemmBias     func(h, s uintptr, dt, wdt int32, out, x, w, bias uintptr, m, n, k int32) int32
	setGemvMaxM  func(h uintptr, maxM int32) int32
	siluMulFused func(dt int32, out, gateUp uintptr, rows, cols int32, s uintptr) int32
	splitCols    func(dt int32, a, b, c, src uintptr, rows, ca, cb, cc int32, s uintptr) int32

	ncclID        func(id unsafe.Pointer) int32
	ncclInit      func(comm *uintptr, nranks int32, id unsafe.Pointer, rank int32) int32
	ncclAllReduce func(comm uintptr, dt int32, send, recv uintptr, count uint64, s uintptr) int32
	ncclDel       func(comm uintptr) int32

	fill        func(dt int32, dst uintptr, n uint64, value float32, s uintptr) int32
	copySmall   func(dst, src uintptr, bytes uint64, s uintptr) int32
	loadStep    func(dst, src uintptr, regions, n, m, tail, extra, extraAt int32, feed uintptr, feedN int32, s uintptr) int32
	gatherRows  func(dt int32, out, src, rows uintptr, n, cols, srcRows int32, s uintptr) int32
	rmsNorm     func(dt int32, out, x, residual, w uintptr, rows, cols int32, eps float32, s uintptr) int32
	headRMSNorm func(dt int32, x, w uintptr, rows, heads, headDim int32, eps float32, s uintptr) int32
	siluMul     func(dt int32, out, gate, up uintptr, rows, cols int32, s uintptr) int32
	addBias     func(dt int32, out, bias uintptr, rows, cols int32, s uintptr) int32
	ropeWriteKV func(dt int32, q, k, v, kCache, vCache, positions, slots, invFreq uintptr, attnFactor float32,
		tokens, qHeads, kvHeads, headDim, rotaryDim int32, numSlots int64, s uintptr) int32
	gemmSwiGLU   func(h, s uintptr, dt, wdt int32, out, gateUp, w, act uintptr, m, n, k int32) int32
	gemmResidual func(h, s uintptr, dt, wdt int32, res, scaled, normW, x, w uintptr, m, n, k, swiglu int32, sums uintptr,
		maxSums int32, count, fused *int32) int32
	gemmSummed func(h, s uintptr, dt, wdt int32, out, scaled, sums uintptr, count int32, eps float32, w, bias uintptr,
		m, n, k int32, fused *int32) int32
	// batch-1 decode fusions (rope_kv.cu, gemv.cu)
	ropeWriteKVFused func(dt int32, qOut, qkv, kCache, vCache, positions, slots, invFreq uintptr, attnFactor float32,
		qNorm, kNorm uintptr, normEps float32, tokens, qHeads, kvHeads, headDim, rotaryDim int32, numSlots int64,
		s uintptr) int32
	attnWorkspace  func(tokens, numHeads, numKVHeads, headDim, maxCtx, window int32, bytes *uint64) int32
	pagedAttention func(dt int32, out, q, kCache, vCache, tokenSeq, positions, blockTables uintptr,
		btStride, tokens, numHeads, numKVHeads, headDim, blockSize int32, scale float32, maxCtx, window int32,
		sinks, workspace uintptr, workspaceSize uint64, s uintptr) int32
	argmaxRows func(dt int32, out, x uintptr, rows, cols int32, s uintptr) int32
	sampleRows func(dt int32, tokens, logprobs, host, logits, params uintptr, rows, vocab int32, work, s uintptr) int32
	sampleWork func(bytes *uint64) int32

	prefillTileRows  func(dt, numHeads, numKVHeads, headDim int32, rows *int32) int32
	prefillAttention func(dt int32, out, q, kCache, vCache, queryStart, seqLens, blockTables uintptr, btStride int32,
		tiles uintptr, numTiles, numHeads, numKVHeads, headDim, blockSize int32, scale float32, window int32,
		sinks, s uintptr) int32

	// block-scaled FP8 weights (fp8.cu)
	gemvFP8 func(dt int32, out, x, w, scales, bias uintptr, m, n, k, stride, blockN, blockK, scaleStride int32,
		s uintptr) int32
	dequantFP8 func(dt int32, out, w, scales uintptr, n, k, stride, blockN, blockK, scaleStride int32, s uintptr) int32
	quantFP8   func(dt int32, codes, scales, x uintptr, m, k, stride int32, s uintptr) int32
	gemmFP8    func(h, s uintptr, dt int32, out, x, act, w, scales, bias uintptr, m, n, k, stride, blockN, blockK,
		scaleStride int32) int32

	// mixture of experts (moe.cu)
	moeRoute      func(dt int32, logits, ids, weights uintptr, rows, experts, topk, renormalize int32, s uintptr) int32
	moeRouteAlign func(dt int32, logits, ids, weights uintptr, rows, experts, topk, renormalize, tileRows int32, sorted,
		tiles, numTiles, s uintptr) int32
	moeTileRows  func(dt, slots, experts int32, rows *int32) int32
	moeWorkspace func(maxSlots, experts int32, sorted, tiles *int32) int32
	moeAlign     func(ids uintptr, slots, experts, tileRows int32, sorted, tiles, numTiles, s uintptr) int32
	moeGateUp    func(dt int32, act, x, w13, w13Scales, ids, sorted, tiles, numTiles uintptr, tileRows, slots, experts, topk, hidden,
		inter int32, b13 uintptr, clamped int32, alpha, limit float32, s uintptr) int32
	moeDown func(dt int32, y, act, w2, w2Scales, weights, ids, sorted, tiles, numTiles uintptr, tileRows, slots, experts, topk,
		hidden, inter int32, b2 uintptr, s uintptr) int32
	moeSum func(dt int32, out, y, ids uintptr, rows, topk, hidden int32, shared, sharedGate uintptr, gateStride int32,
		s uintptr) int32
	dequantMXFP4    func(dt int32, out, codes, scales uintptr, n int64, s uintptr) int32
	moeRouteGrouped func(dt int32, logits, bias, ids, weights uintptr, rows, experts, topk, scoring, groups,
		topkGroups, renormalize int32, scale float32, s uintptr) int32

	mlaWriteKV func(dt int32, q, kv, normW, cache, positions, slots, invFreq uintptr, attnFactor float32, tokens,
		heads, kvRank, nope, ropeDim, interleaved int32, eps float32, numSlots int64, s uintptr) int32
	mlaWorkspace func(dt, tokens, heads, kvRank, ropeDim, maxCtx int32, bytes *uint64) int32
	mlaAttention func(dt int32, out, q, kvb, cache, tokenSeq, positions, tables uintptr, stride, tokens, heads,
		kvRank, nope, ropeDim, vdim, blockSize int32, scale float32, maxCtx int32, work uintptr, workBytes uint64,
		s uintptr) int32
}

type binding struct {
	fptr any
	name string
}

// table lists every symbol the bindings need; load fails if the library lacks one.
func (f *fns) table() []binding {
	return []binding{
		{&f.abiVersion, "atomk_abi_version"},
		{&f.deviceCount, "atomk_device_count"},
		{&f.setDevice, "atomk_set_device"},
		{&f.deviceInfo, "atomk_device_info"},
		{&f.memInfo, "atomk_mem_info"},
		{&f.malloc, "atomk_malloc"},
		{&f.free, "atomk_free"},
		{&f.hostAlloc, "atomk_host_alloc"},
		{&f.hostFree, "atomk_host_free"},
		{&f.memcpyH2D, "atomk_memcpy_h2d"},
		{&f.memcpyD2H, "atomk_memcpy_d2h"},
		{&f.memcpyD2D, "atomk_memcpy_d2d"},
		{&f.memset, "atomk_memset"},
		{&f.streamNew, "atomk_stream_create"},
		{&f.streamDel, "atomk_stream_destroy"},
		{&f.streamSync, "atomk_stream_sync"},
		{&f.streamWait, "atomk_stream_wait_event"},
		{&f.deviceSync, "atomk_device_sync"},
		{&f.eventNew, "atomk_event_create"},
		{&f.eventDel, "atomk_event_destroy"},
		{&f.eventRecord, "atomk_event_record"},
		{&f.eventSync, "atomk_event_sync"},
		{&f.eventMs, "atomk_event_elapsed"},
		{&f.graphBegin, "atomk_graph_capture_begin"},
		{&f.graphEnd, "atomk_graph_capture_end"},
		{&f.graphLaunch, "atomk_graph_launch"},
		{&f.graphDel, "atomk_graph_destroy"},
		{&f.blasNew, "atomk_blas_create"},
		{&f.blasDel, "atomk_blas_destroy"},
		{&f.gemm, "atomk_gemm"},
		{&f.gemmBias, "atomk_gemm_bias"},
		{&f.setGemvMaxM, "atomk_blas_set_gemv_max_m"},
		{&f.siluMulFused, "atomk_silu_mul_fused"},
		{&f.splitCols, "atomk_split_cols"},
		{&f.ncclID, "atomk_nccl_unique_id"},
		{&f.ncclInit, "atomk_nccl_init"},
		{&f.ncclAllReduce, "atomk_nccl_all_reduce_sum"},
		{&f.ncclDel, "atomk_nccl_destroy"},
		{&f.fill, "atomk_fill"},
		{&f.copySmall, "atomk_copy_small"},
		{&f.loadStep, "atomk_load_step_inputs"},
		{&f.gatherRows, "atomk_gather_rows"},
		{&f.rmsNorm, "atomk_rms_norm"},
		{&f.headRMSNorm, "atomk_head_rms_norm"},
		{&f.siluMul, "atomk_silu_mul"},
		{&f.addBias, "atomk_add_bias"},
		{&f.ropeWriteKV, "atomk_rope_write_kv"},
		{&f.ropeWriteKVFused, "atomk_rope_write_kv_fused"},
		{&f.gemmSwiGLU, "atomk_gemm_swiglu"},
		{&f.gemmResidual, "atomk_gemm_residual"},
		{&f.gemmSummed, "atomk_gemm_norm_summed"},
		{&f.attnWorkspace, "atomk_paged_attention_workspace"},
		{&f.pagedAttention, "atomk_paged_attention"},
		{&f.argmaxRows, "atomk_argmax_rows"},
		{&f.sampleRows, "atomk_sample_rows"},
		{&f.sampleWork, "atomk_sample_work_bytes"},
		{&f.prefillTileRows, "atomk_prefill_attention_tile_rows"},
		{&f.prefillAttention, "atomk_prefill_attention"},
		{&f.gemvFP8, "atomk_gemv_fp8"},
		{&f.dequantFP8, "atomk_dequant_fp8"},
		{&f.quantFP8, "atomk_quant_fp8"},
		{&f.gemmFP8, "atomk_gemm_fp8"},
		{&f.moeRoute, "atomk_moe_route"},
		{&f.moeRouteAlign, "atomk_moe_route_align"},
		{&f.moeTileRows, "atomk_moe_tile_rows"},
		{&f.moeWorkspace, "atomk_moe_workspace"},
		{&f.moeAlign, "atomk_moe_align"},
		{&f.moeGateUp, "atomk_moe_gate_up"},
		{&f.moeDown, "atomk_moe_down"},
		{&f.moeSum, "atomk_moe_sum"},
		{&f.moeRouteGrouped, "atomk_moe_route_grouped"},
		{&f.dequantMXFP4, "atomk_dequant_mxfp4"},
		{&f.mlaWriteKV, "atomk_mla_write_kv"},
		{&f.mlaWorkspace, "atomk_mla_workspace"},
		{&f.mlaAttention, "atomk_mla_attention"},
	}
}
