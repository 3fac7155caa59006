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
 * names the element type of every tensor argument of the call (kernels compute in float).
 */
#ifndef ATOMK_H
#define ATOMK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ATOMK_ABI_VERSION 1

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
/* out[m,n] = x[m,k] · w[n,k]ᵀ, all of dtype, float accumulation (w is PyTorch's [out, in]). */
int atomk_gemm(void* handle, void* stream, int dtype, void* out, const void* x, const void* w,
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
 * max_ctx bounds positions[t]+1 over the batch. When the batch is too small to fill the GPU the
 * context is split into partitions merged by a second kernel; that needs workspace_size >= the
 * bytes atomk_paged_attention_workspace returns for the same shape (0 when no split). */
int atomk_paged_attention_workspace(int tokens, int num_heads, int num_kv_heads, int head_dim, int max_ctx,
                                    size_t* bytes);
int atomk_paged_attention(int dtype, void* out, const void* q, const void* k_cache,
                          const void* v_cache, const int32_t* token_seq, const int32_t* positions,
                          const int32_t* block_tables, int block_table_stride, int tokens,
                          int num_heads, int num_kv_heads, int head_dim, int block_size,
                          float scale, int max_ctx, void* workspace, size_t workspace_size, void* stream);
/* out[r] = index of the largest element of row r of x [rows, cols] (the first on ties; NaN
 * never wins) – greedy sampling on the device. */
int atomk_argmax_rows(int dtype, int32_t* out, const void* x, int rows, int cols, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* ATOMK_H */
