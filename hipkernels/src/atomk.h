/* atomk.h: the C ABI of libatomk.so, the one library atom-go calls on a GPU.
 *
 * Plain C types only. Every function returns an int status: ATOMK_OK (0) on success, else one of
 * the ATOMK_ERR_* codes, with a message for the calling thread in atomk_last_error(). Results
 * come back through pointer arguments. Pointers named dev/out/x/... are device pointers; stream
 * arguments are the opaque handles from atomk_stream_create (NULL: the legacy default stream).
 * Kernel launches and copies are asynchronous on their stream; a launch error is reported at
 * once, an execution error at the next synchronising call.
 *
 * Matrices are row-major and contiguous. dtype is one of ATOMK_F32, ATOMK_F16, ATOMK_BF16 and
 * names the element type of every tensor argument of the call (kernels compute in float), except
 * the weight w of a GEMM, whose element type wdtype is passed beside it: quantized weight
 * formats (FP8, MXFP4) are new wdtype values with their scales, not new entry points. This
 * build multiplies weights of the activations' dtype only (wdtype == dtype); another wdtype is
 * ATOMK_ERR_UNSUPPORTED, with nothing launched.
 */
#ifndef ATOMK_H
#define ATOMK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ATOMK_ABI_VERSION 7

/* Element types; the numbers match ops.DType in Go. */
enum { ATOMK_F32 = 0, ATOMK_F16 = 1, ATOMK_BF16 = 2 };

/* Status codes. */
enum {
    ATOMK_OK = 0,
    ATOMK_ERR_INVALID = 1,     /* a bad argument: nothing was launched */
    ATOMK_ERR_RUNTIME = 2,     /* the CUDA/HIP runtime failed */
    ATOMK_ERR_BLAS = 3,        /* cuBLASLt/hipBLASLt failed or has no algorithm */
    ATOMK_ERR_NCCL = 4,        /* NCCL/RCCL failed or could not be loaded */
    ATOMK_ERR_UNSUPPORTED = 5  /* a dtype or shape this build has no kernel for */
};

/* The message of the calling thread's last failure (empty when none). Valid until its next call. */
const char* atomk_last_error(void);
/* *version = ATOMK_ABI_VERSION of the library; *warp_size = the kernels' warp width (32 or 64). */
int atomk_abi_version(int* version, int* warp_size);

/* ---- runtime: devices, memory, copies, streams, events, graphs ---- */
int atomk_device_count(int* count);
/* Makes device current for the calling thread. */
int atomk_set_device(int device);
/* name: NUL-terminated into name[name_len]; sm_count: multiprocessors; cc: major*10+minor. */
int atomk_device_info(int device, char* name, int name_len, int* sm_count, int* cc, size_t* total_bytes);
int atomk_mem_info(size_t* free_bytes, size_t* total_bytes);
int atomk_malloc(void** dev, size_t bytes);
int atomk_free(void* dev);
/* Page-locked host memory, for asynchronous copies. */
int atomk_host_alloc(void** host, size_t bytes);
int atomk_host_free(void* host);
int atomk_memcpy_h2d(void* dst, const void* src, size_t bytes, void* stream);
int atomk_memcpy_d2h(void* dst, const void* src, size_t bytes, void* stream);
int atomk_memcpy_d2d(void* dst, const void* src, size_t bytes, void* stream);
/* Sets bytes bytes of dst to the byte value. */
int atomk_memset(void* dst, int value, size_t bytes, void* stream);
/* A non-blocking stream (it does not synchronise with the legacy default stream). */
int atomk_stream_create(void** stream);
int atomk_stream_destroy(void* stream);
int atomk_stream_sync(void* stream);
/* Work queued on stream after this call waits for event. */
int atomk_stream_wait_event(void* stream, void* event);
int atomk_device_sync(void);
int atomk_event_create(void** event);
int atomk_event_destroy(void* event);
int atomk_event_record(void* event, void* stream);
int atomk_event_sync(void* event);
/* Milliseconds between two recorded, completed events. */
int atomk_event_elapsed(float* ms, void* start, void* end);
/* Graphs: capture the work queued on stream between begin and end, then replay it. */
int atomk_graph_capture_begin(void* stream);
int atomk_graph_capture_end(void* stream, void** graph_exec);
int atomk_graph_launch(void* graph_exec, void* stream);
int atomk_graph_destroy(void* graph_exec);

/* ---- BLAS (cuBLASLt / hipBLASLt) ---- */
/* A handle owns a 32 MiB workspace and a cache of matmul plans keyed by dtype and shape; use it
 * from one thread. */
int atomk_blas_create(void** handle);
int atomk_blas_destroy(void* handle);
/* out[m,n] = x[m,k] · w[n,k]ᵀ, w of wdtype and the others of dtype, float accumulation (w is
 * PyTorch's [out, in]). */
int atomk_gemm(void* handle, void* stream, int dtype, int wdtype, void* out, const void* x, const void* w,
               int m, int n, int k);

/* ---- collectives (NCCL / RCCL, loaded with dlopen on first use: libnccl.so.2 / librccl.so.1,
 * or the path in ATOM_GO_NCCL) ---- */
/* Fills id[128] with a fresh unique id (rank 0 makes it and shares it with the others). */
int atomk_nccl_unique_id(void* id);
int atomk_nccl_init(void** comm, int nranks, const void* id, int rank);
/* recv[i] = sum over ranks of send[i], count elements of dtype; send may equal recv. */
int atomk_nccl_all_reduce_sum(void* comm, int dtype, const void* send, void* recv, size_t count, void* stream);
int atomk_nccl_destroy(void* comm);

/* ---- kernels ---- */
/* dst[0:bytes) = src[0:bytes) by one small kernel, for bytes <= ATOMK_COPY_SMALL_MAX; either
 * side may be pinned host memory from atomk_host_alloc (read or written by the device directly),
 * so per-step uploads and readbacks need no copy-engine operation in the stream. */
#define ATOMK_COPY_SMALL_MAX (64 << 10)
int atomk_copy_small(void* dst, const void* src, size_t bytes, void* stream);
/* A decode step's inputs, compact in src (pinned host or device memory): `regions` arrays of n
 * int32 words, then `tail` words, then `extra` words; written into dst as `regions` arrays of
 * m >= n words each (the first n written), then the tail, and the extra words at word offset
 * extra_at (past the tail's end). With feed (device memory; NULL: none) the first feed_n words
 * of region 0 take feed's tokens instead, a negative token (a draw with no finite logit)
 * becoming 0.
 * One kernel: src in host memory is read over the bus, so a large input is better copied to the
 * device first. */
int atomk_load_step_inputs(int32_t* dst, const int32_t* src, int regions, int n, int m, int tail, int extra,
                           int extra_at, const int32_t* feed, int feed_n, void* stream);
/* dst[0:n] = value. */
int atomk_fill(int dtype, void* dst, size_t n, float value, void* stream);
/* out[i,:] = src[rows[i],:] for i < n (rows on the device; src has src_rows rows of cols).
 * Serves both the embedding lookup and the selection of rows for the logits. */
int atomk_gather_rows(int dtype, void* out, const void* src, const int32_t* rows, int n, int cols,
                      int src_rows, void* stream);
/* Per row: when residual is NULL, out = x * rsqrt(mean(x²) + eps) * w; else residual += x first
 * and out = norm(residual) * w. */
int atomk_rms_norm(int dtype, void* out, const void* x, void* residual, const void* w, int rows,
                   int cols, float eps, void* stream);
/* In place, each head_dim-wide head of x[rows, heads*head_dim]: x = norm(x) * w[head_dim]. */
int atomk_head_rms_norm(int dtype, void* x, const void* w, int rows, int heads, int head_dim,
                        float eps, void* stream);
/* out = silu(gate) * up, all [rows, cols]. */
int atomk_silu_mul(int dtype, void* out, const void* gate, const void* up, int rows, int cols,
                   void* stream);
/* out[r,:] += bias[:], out [rows, cols]. */
int atomk_add_bias(int dtype, void* out, const void* bias, int rows, int cols, void* stream);
/* Neox (rotate-half) RoPE of q [tokens, q_heads*head_dim] and k [tokens, kv_heads*head_dim] in
 * place at positions, over the first rotary_dim dims of each head with inv_freq[rotary_dim/2]
 * (float) and cos/sin scaled by attn_factor; then k and v [tokens, kv_heads*head_dim] are
 * stored in the caches [num_slots, kv_heads, head_dim] at slots (a negative slot skips). */
int atomk_rope_write_kv(int dtype, void* q, void* k, const void* v, void* k_cache, void* v_cache,
                        const int32_t* positions, const int32_t* slots, const float* inv_freq,
                        float attn_factor, int tokens, int q_heads, int kv_heads, int head_dim,
                        int rotary_dim, int64_t num_slots, void* stream);
/* Causal attention over the paged cache for a varlen batch. Query token t (row of q and out,
 * [tokens, num_heads*head_dim]) belongs to sequence token_seq[t] and sits at positions[t]; it
 * attends to positions 0..positions[t] of its sequence, whose position p lives in cache block
 * block_tables[seq*block_table_stride + p/block_size] at offset p%block_size. Caches are
 * [blocks, block_size, num_kv_heads, head_dim]; query head h reads kv head h/(num_heads/num_kv_heads).
 * max_ctx bounds positions[t]+1 over the batch. window > 0 is a sliding window: the token at
 * position p attends to positions max(0, p-window+1)..p only, and no position before that is
 * read (their block table entries may be stale); 0 is none. sinks (NULL: none) is float32
 * device memory [num_heads], one raw logit per query head that joins the softmax's denominator:
 * p_j = e^{s_j} / (sum_k e^{s_k} + e^{sinks[h]}) (not multiplied by scale; it has no value).
 * When the batch is too small to fill the GPU the attended positions are split into partitions
 * merged by a second kernel; that needs workspace_size >= the bytes
 * atomk_paged_attention_workspace returns for the same shape and window (0 when no split). */
int atomk_paged_attention_workspace(int tokens, int num_heads, int num_kv_heads, int head_dim, int max_ctx,
                                    int window, size_t* bytes);
int atomk_paged_attention(int dtype, void* out, const void* q, const void* k_cache,
                          const void* v_cache, const int32_t* token_seq, const int32_t* positions,
                          const int32_t* block_tables, int block_table_stride, int tokens,
                          int num_heads, int num_kv_heads, int head_dim, int block_size,
                          float scale, int max_ctx, int window, const float* sinks, void* workspace,
                          size_t workspace_size, void* stream);
/* out[r] = index of the largest element of row r of x [rows, cols] (the first on ties; NaN
 * never wins) – greedy sampling on the device. */
int atomk_argmax_rows(int dtype, int32_t* out, const void* x, int rows, int cols, void* stream);

/* ---- Sampling on the device (sampling.cu) ----
 * Per-row sampling controls, 32 bytes, in device memory (one per row). temperature <= 0 is
 * greedy; top_k 0 keeps every token; top_p 1 and min_p 0 filter nothing. seed and offset (the
 * number of tokens the sequence generated so far) key the counter-based random numbers, so a
 * draw depends only on (logits row, params), never on the rest of the batch. */
typedef struct atomk_sampling_params {
    float temperature;
    int32_t top_k;
    float top_p;
    float min_p;
    uint64_t seed;
    uint64_t offset;
} atomk_sampling_params;
/* For each row r of logits [rows, vocab]: tokens[r] = the token drawn from softmax(logits/T)
 * restricted by top_k, then top_p (nucleus over the top-k mass), then min_p (ties at every
 * threshold kept), by Gumbel-max with u_i = hash(seed, offset, i); or the argmax (first index on
 * ties, NaN never wins) when temperature <= 0. logprobs[r] = logits[r][tok] - logsumexp of the
 * finite logits of row r (raw logprob); NaN when the row has no finite logit. Non-finite logits
 * are never drawn. The exact algorithm (thresholds by radix select over float keys, fixed-point
 * 2^-40 mass for top_p, the hash) is documented in sampling.cu and mirrored by ops.SampleRow in
 * Go. tokens and logprobs are device memory; host (NULL: none) is pinned host memory that also
 * receives them, written by the kernel (the rows' tokens, then their logprobs: 8 bytes a row), so
 * no copy has to follow. params may be pinned host memory too. work (NULL: none) is device memory
 * of atomk_sample_work_bytes() bytes, zeroed once before its first use (every launch leaves it
 * so): with it a batch of few rows spreads each row's first pass over many blocks; without it
 * one block per row. Launches sharing a workspace must be ordered (one stream). */
int atomk_sample_rows(int dtype, int32_t* tokens, float* logprobs, void* host, const void* logits,
                      const atomk_sampling_params* params, int rows, int vocab, void* work, void* stream);
/* *bytes = the workspace atomk_sample_rows may use on the current device (a few KiB). */
int atomk_sample_work_bytes(size_t* bytes);

/* ---- skinny GEMM and fused projections ---- */
/* atomk_gemm plus an optional bias (NULL: none): out[m,n] = x[m,k] · w[n,k]ᵀ + bias[n]. Up to a
 * threshold of m (2, or 4 where n <= k; or what atomk_blas_set_gemv_max_m set), 16-bit GEMMs with k % 8 == 0 and
 * 16-byte aligned x and w run on a skinny kernel that streams w at close to
 * the copy bandwidth (the bias in its epilogue); others through the BLAS and atomk_add_bias.
 * The skinny kernel may read w before the previous kernel on the stream has finished
 * (programmatic dependent launch): w must not be that kernel's output. */
int atomk_gemm_bias(void* handle, void* stream, int dtype, int wdtype, void* out, const void* x, const void* w,
                    const void* bias, int m, int n, int k);
/* Sets this handle's skinny-kernel threshold of m (0: always the BLAS; negative: the default rule). */
int atomk_blas_set_gemv_max_m(void* handle, int max_m);
/* out[r,c] = silu(gate_up[r,c]) * gate_up[r,cols+c]: out [rows, cols], gate_up [rows, 2*cols]
 * (the output of the fused gate|up projection). */
int atomk_silu_mul_fused(int dtype, void* out, const void* gate_up, int rows, int cols, void* stream);
/* Splits each row of src [rows, ca+cb+cc] into a [rows, ca], b [rows, cb], c [rows, cc] (the
 * fused q|k|v projection; cc may be 0 and c NULL). */
int atomk_split_cols(int dtype, void* a, void* b, void* c, const void* src, int rows, int ca, int cb,
                     int cc, void* stream);

/* ---- tensor-core prefill attention ---- */
/* Causal attention of a varlen batch over the paged cache (the same caches, block tables and
 * GQA rule as atomk_paged_attention), on tensor cores. Sequence s owns query rows
 * query_start[s]..query_start[s+1]-1 of q and out ([tokens, num_heads*head_dim]); its context
 * is seq_lens[s] positions and its qlen = query_start[s+1]-query_start[s] query rows are the
 * LAST qlen of them: row query_start[s]+i sits at position seq_lens[s]-qlen+i and attends to
 * positions 0..that one (max(0, p-window+1)..p under a sliding window, window > 0; sinks as in
 * atomk_paged_attention). The query heads of a GQA group are packed into rows: sequence s has
 * qlen*(num_heads/num_kv_heads) packed rows, row r = (its token r/group, head r%group of the
 * group). tiles[2*i] = a sequence, tiles[2*i+1] = a first packed row, a multiple of the rows
 * atomk_prefill_attention_tile_rows returns and below the sequence's packed rows; the tiles of
 * all sequences must cover every packed row once (list the heaviest first: they start first).
 * Any qlen >= 1 and any block_size work. bf16 and f16 with head_dim 64 or 128, CUDA builds
 * only: otherwise both calls return ATOMK_ERR_UNSUPPORTED (use atomk_paged_attention). No
 * workspace; the launch is asynchronous and performs no host synchronisation. */
int atomk_prefill_attention_tile_rows(int dtype, int num_heads, int num_kv_heads, int head_dim, int* rows);
int atomk_prefill_attention(int dtype, void* out, const void* q, const void* k_cache, const void* v_cache,
                            const int32_t* query_start, const int32_t* seq_lens, const int32_t* block_tables,
                            int block_table_stride, const int32_t* tiles, int num_tiles, int num_heads,
                            int num_kv_heads, int head_dim, int block_size, float scale, int window,
                            const float* sinks, void* stream);

/* ---- batch-1 decode fusions ---- */
/* atomk_rope_write_kv straight from the fused q|k|v projection's output qkv [tokens,
 * (q_heads+2*kv_heads)*head_dim] (each row q, then k, then v): q is rotated into q_out [tokens,
 * q_heads*head_dim] (dims past rotary_dim copied), the rotated k and v are stored in the caches
 * at slots (a negative slot skips); qkv is not written. q_norm and k_norm (head_dim weights, or
 * NULL for none) RMS-normalise every q and k head first with norm_eps (Qwen3), each value rounded
 * to dtype as atomk_head_rms_norm stores it. */
int atomk_rope_write_kv_fused(int dtype, void* q_out, const void* qkv, void* k_cache, void* v_cache,
                              const int32_t* positions, const int32_t* slots, const float* inv_freq,
                              float attn_factor, const void* q_norm, const void* k_norm, float norm_eps,
                              int tokens, int q_heads, int kv_heads, int head_dim, int rotary_dim,
                              int64_t num_slots, void* stream);
/* out[m,n] = (silu(gate_up[:, :k]) * gate_up[:, k:]) · w[n,k]ᵀ, gate_up [m, 2k] (the MLP's down
 * projection of the fused gate|up output). Where the skinny kernel serves the shape (16-bit,
 * m <= 4 and the atomk_gemm_bias rule) the SiLU-and-multiply happens on its input loads and
 * act is not touched; otherwise act [m, k] receives silu(gate)*up and the GEMM reads it. */
int atomk_gemm_swiglu(void* handle, void* stream, int dtype, int wdtype, void* out, const void* gate_up, const void* w,
                      void* act, int m, int n, int k);
/* The residual add of a row-parallel projection done in its epilogue, at decode size: res[1,n] +=
 * x · w[n,k]ᵀ (swiglu != 0: x is the fused gate|up output [1, 2k] and the input silu(gate)·up),
 * each sum r rounded to dtype as atomk_rms_norm's residual add stores it (the projection's output
 * rounded first); scaled[1,n] = r · norm_w (the next RMSNorm's weight; rounded to dtype; scaled
 * must not overlap res), and the row's sum of r² left in sums as *count partial sums (at most
 * max_sums; sums 16-byte aligned) for atomk_gemm_norm_summed. *fused = 1 when queued; 0, with
 * nothing queued, where the skinny kernel does not serve it (m != 1, the atomk_gemm_bias rule,
 * more blocks than max_sums): the caller then runs the
 * projection and passes its output to atomk_rms_norm's residual add. */
int atomk_gemm_residual(void* handle, void* stream, int dtype, int wdtype, void* res, void* scaled, const void* norm_w, const void* x,
                        const void* w, int m, int n, int k, int swiglu, float* sums, int max_sums, int* count,
                        int* fused);
/* The pre-norm and first projection of a sublayer after atomk_gemm_residual: out[1,n] = (scaled *
 * rsqrt(Σ sums / k + eps)) · w[n,k]ᵀ (+ bias), scaled, sums and count as that call left them
 * (so the norm is RMSNorm(res) · norm_w, except that the normalised values are not rounded to
 * dtype: the scale is applied to the float sums). *fused = 0, nothing queued, where the skinny
 * kernel does not serve it: the caller then runs atomk_rms_norm (no residual) and
 * atomk_gemm_bias. */
int atomk_gemm_norm_summed(void* handle, void* stream, int dtype, int wdtype, void* out, const void* scaled, const float* sums,
                           int count, float eps, const void* w, const void* bias, int m, int n, int k, int* fused);

/* Block-scaled FP8 weights (fp8.cu): w float8_e4m3fn [n, k], rows w_stride bytes apart (k rounded up to
 * 16, the padding zero), scales float32 [ceil(n/block_n), ceil(k/block_k)] in rows scale_stride >=
 * ceil(k/block_k) floats apart, element (r, c) = float(w[r, c]) * scales[r/block_n, c/block_k]; k a
 * multiple of 8, block_k of 16. out[m, n] = x[m, k] · wᵀ (+ bias[n]) with the weight read at one byte an
 * element (decode batches; m above 8 takes several passes). */
int atomk_gemv_fp8(int dtype, void* out, const void* x, const uint8_t* w, const float* scales, const void* bias, int m, int n,
                   int k, int w_stride, int block_n, int block_k, int scale_stride, void* stream);
/* out[n, k] (dtype) = the dequantized weight, for a GEMM of a larger batch. */
int atomk_dequant_fp8(int dtype, void* out, const uint8_t* w, const float* scales, int n, int k, int w_stride, int block_n,
                      int block_k, int scale_stride, void* stream);
/* The activations' FP8 quantization (dtype F16 or BF16; CUDA builds): for each row r of x [m, k] and
 * group g of 128 columns, s = max(amax of the group, 1e-10) / 448, scales[g * m + r] = s (so scales is
 * [ceil(k/128), m]) and codes[r, c] = e4m3(x[r, c] / s), rounded to nearest even and saturated; rows
 * stride = k rounded up to 16 bytes apart, the codes past k zero. */
int atomk_quant_fp8(int dtype, uint8_t* codes, float* scales, const void* x, int m, int k, int stride, void* stream);
/* out[m, n] = x[m, k] · wᵀ (+ bias[n]) on the tensor cores in FP8 (CUDA builds, Hopper's cuBLASLt):
 * atomk_quant_fp8 of x into act, then cuBLASLt's block-scaled GEMM of the codes with both operands'
 * scales, accumulated in float. act holds m * w_stride code bytes followed by the ceil(k/128) * m
 * float scales. Needs 128x128 blocks with scale_stride = ceil(k/128) rounded up to 4, dtype F16 or
 * BF16 and 16-byte aligned out, act, w and scales; elsewhere, and where cuBLASLt has no algorithm
 * for the shape (asked once per shape), ATOMK_ERR_UNSUPPORTED with nothing queued: the caller then
 * takes atomk_dequant_fp8 and atomk_gemm. */
int atomk_gemm_fp8(void* handle, void* stream, int dtype, void* out, const void* x, void* act, const uint8_t* w,
                   const float* scales, const void* bias, int m, int n, int k, int w_stride, int block_n, int block_k,
                   int scale_stride);

/* Mixture of experts (moe.cu): vLLM's fused_moe as five launches with no host round trip.
 * A "slot" is one (token, chosen expert) pair, numbered token * topk + j. */
#define ATOMK_MOE_MAX_EXPERTS 512
#define ATOMK_MOE_MAX_TOPK 16
/* ids and weights [rows, topk] = the topk largest of softmax(logits [rows, experts]) in float32,
 * in descending probability (ties: the lower id first), divided by their sum when renormalize. */
int atomk_moe_route(int dtype, const void* logits, int32_t* ids, float* weights, int rows, int experts, int topk,
                    int renormalize, void* stream);
/* atomk_moe_route then atomk_moe_align of its rows * topk slots, in one launch for decode-sized
 * batches. */
int atomk_moe_route_align(int dtype, const void* logits, int32_t* ids, float* weights, int rows, int experts, int topk,
                          int renormalize, int tile_rows, int32_t* sorted, int32_t* tile_expert, int32_t* num_tiles,
                          void* stream);
/* The tile rows (1, 4 or 64) of a call of `slots` slots over `experts` experts in dtype: what
 * atomk_moe_align pads each expert's run to and the expert GEMMs take per block; 1: no grouping,
 * each slot on its own (host only, nothing queued). */
int atomk_moe_tile_rows(int dtype, int slots, int experts, int* rows);
/* The int32 elements of sorted and tile_expert that calls of up to max_slots slots need. */
int atomk_moe_workspace(int max_slots, int experts, int* sorted_len, int* tiles_len);
/* The token grouping of vLLM's moe_align_block_size: each expert's slots (ids [slots], each
 * < experts) in a run padded to whole tiles of tile_rows, runs in expert order: sorted holds the
 * slot ids (padding: slots), tile_expert the expert of each tile, *num_tiles (device) their count. */
int atomk_moe_align(const int32_t* ids, int slots, int experts, int tile_rows, int32_t* sorted, int32_t* tile_expert,
                    int32_t* num_tiles, void* stream);
/* act[slot, :inter] = silu(x[t] · gate_eᵀ) * (x[t] · up_eᵀ) over the tiles atomk_moe_align left, t = slot /
 * topk, e the tile's expert, w13 [experts, 2*inter, hidden] (each expert's gate rows, then its up rows);
 * with tile_rows 1 over every slot, e = ids[slot]. b13 [experts, 2*inter] (NULL: none) is added to gate
 * and up first; clamped selects gpt-oss's activation: g = min(gate, limit), u = clamp(up, ±limit),
 * act = (u + 1) * g * sigmoid(alpha * g). */
int atomk_moe_gate_up(int dtype, void* act, const void* x, const void* w13, const uint8_t* w13_scales, const int32_t* ids,
                      const int32_t* sorted, const int32_t* tile_expert, const int32_t* num_tiles, int tile_rows, int slots,
                      int experts, int topk, int hidden, int inter, const void* b13, int clamped, float alpha, float limit,
                      void* stream);
/* out[n] (dtype) = the n values of MXFP4 codes [n/2] and E8M0 scales [n/32] (the expert kernels read
 * MXFP4 as stored; this expands a weight for inspection and tests). */
int atomk_dequant_mxfp4(int dtype, void* out, const uint8_t* codes, const uint8_t* scales, int64_t n, void* stream);
/* y[slot, :hidden] = weights[slot] * (act[slot] · down_eᵀ + b2[e]), w2 [experts, hidden, inter], b2
 * [experts, hidden] or NULL.
 * Both: with w*_scales not NULL the weight is MXFP4 (gpt-oss): w13 / w2 hold the packed E2M1 codes
 * [experts, rows, k/2] (low nibble first) and w*_scales the E8M0 scales [experts, rows, k/32];
 * hidden and inter whole blocks of 32. The 64-row tiles (CUDA, bf16/f16) multiply each block's scale
 * into the 16-bit expanded values: exact while every scale byte keeps them normal numbers of dtype
 * (bf16: 2..252, f16: 114..140), which the caller checks; the skinny tiles scale in float32. */
int atomk_moe_down(int dtype, void* y, const void* act, const void* w2, const uint8_t* w2_scales, const float* weights,
                   const int32_t* ids,
                   const int32_t* sorted, const int32_t* tile_expert, const int32_t* num_tiles, int tile_rows, int slots,
                   int experts, int topk, int hidden, int inter, const void* b2, void* stream);
/* out[t] = Σ_j y[t*topk + j] over the token's experts in ascending id (ids [rows, topk]), plus
 * sigmoid(shared_gate[t * gate_stride]) * shared[t] when shared is not NULL (shared[t] itself
 * when shared_gate is NULL: DeepSeek's ungated shared experts). */
int atomk_moe_sum(int dtype, void* out, const void* y, const int32_t* ids, int rows, int topk, int hidden,
                  const void* shared, const void* shared_gate, int gate_stride, void* stream);

/* DeepSeek's and gpt-oss's routers (vLLM's grouped_topk; moe_route.cu): scores = softmax (scoring
 * 0) or sigmoid (scoring 1) of the logits in float32, or the logits themselves (scoring 2, gpt-oss:
 * the weights are then the softmax of the k chosen logits; no groups, no bias); the choice is made on score + bias[e] (bias:
 * float32 [experts], NULL for none) among the experts of the topk_groups best of `groups` equal
 * groups (groups 0: all experts; a group scores its best choice score, or the sum of its best
 * two with a bias); ties choose the lower id. weights = the chosen experts' unbiased scores in
 * the order chosen, divided by their sum (+1e-20 under sigmoid) when renormalize, times scale.
 * groups at most 32. */
int atomk_moe_route_grouped(int dtype, const void* logits, const float* bias, int32_t* ids, float* weights, int rows,
                            int experts, int topk, int scoring, int groups, int topk_groups, int renormalize,
                            float scale, void* stream);

/* Multi-head Latent Attention (DeepSeek V2/V3; mla.cu) over a latent cache [slots, kv_rank +
 * rope_dim] per layer. q is [tokens, heads * (nope + rope_dim)]; kv_b is kv_b_proj's weight
 * [heads * (nope + v_dim), kv_rank] (each head's W_UK rows, then its W_UV rows).
 * atomk_mla_write_kv: kv [tokens, kv_rank + rope_dim] (kv_a_proj_with_mqa's output): its kv_c part
 * RMS-normalised with norm_w (eps), its k_pe part and each head's rope part of q (in place)
 * rotated at positions[t] (pairs 2i, 2i+1 when interleaved, else i, i + rope_dim/2; angle
 * pos * inv_freq[i], times attn_factor); [kv_c, k_pe] stored at row slots[t] of cache (skipped
 * when outside [0, num_slots)). kv_rank a multiple of 32 up to 512, kv_rank + rope_dim <= 640,
 * nope <= 256. */
int atomk_mla_write_kv(int dtype, void* q, const void* kv, const void* norm_w, void* cache, const int32_t* positions,
                       const int32_t* slots, const float* inv_freq, float attn_factor, int tokens, int heads,
                       int kv_rank, int nope, int rope_dim, int interleaved, float eps, int64_t num_slots,
                       void* stream);
/* The workspace bytes atomk_mla_attention needs for tokens rows and contexts up to max_ctx. */
int atomk_mla_workspace(int dtype, int tokens, int heads, int kv_rank, int rope_dim, int max_ctx, size_t* bytes);
/* out [tokens, heads * v_dim] = causal attention of each token (sequence token_seq[t], at
 * positions[t], its context in block_tables as atomk_paged_attention's) with keys [W_UK_h·kv_c,
 * k_pe] and values W_UV_h·kv_c, computed in the absorbed form; scale multiplies q·k. */
int atomk_mla_attention(int dtype, void* out, const void* q, const void* kvb, const void* cache,
                        const int32_t* token_seq, const int32_t* positions, const int32_t* block_tables,
                        int block_table_stride, int tokens, int heads, int kv_rank, int nope, int rope_dim, int vdim,
                        int block_size, float scale, int max_ctx, void* workspace, size_t workspace_size,
                        void* stream);

#ifdef __cplusplus
}
#endif

#endif /* ATOMK_H */
