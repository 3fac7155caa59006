// attention_prefill.cu: causal attention of a varlen batch holding prefill chunks, on tensor
// cores (FlashAttention-2 style), over the paged KV cache.
//
// The query heads of one GQA group share a KV head, so they are packed into the M dimension of
// the matrix products: sequence s with qlen query tokens and G = num_heads / num_kv_heads heads
// per group has qlen*G "packed rows", row r = (token r / G, head r % G of the group). A block
// takes one tile of kBM consecutive packed rows of one sequence and one KV head, and streams the
// sequence's K/V through shared memory kBN positions at a time: each K/V tile is read once per
// group, and a single-token decode (G rows) costs one pass over its context, like the decode
// kernel, whatever else is in the batch.
//
// Per K/V tile, warp w (packed rows w*16 .. w*16+15 of the tile) computes S = Q·Kᵀ with
// mma.sync m16n8k16 (16-bit inputs, fp32 accumulate), masks the positions past each row's own
// position (only tiles crossing the diagonal need it), updates the online softmax in fp32 (base
// 2: scores are pre-multiplied by scale·log2 e), rounds P to the input type and accumulates
// O += P·V with a second mma. Operands reach the registers through ldmatrix from XOR-swizzled
// shared memory (no bank conflicts), filled with cp.async: V of tile j loads while S_j is
// computed, K of tile j+1 while P_j·V_j is.
//
// A sliding window (window > 0: the row at position p attends to max(0, p-window+1)..p) starts
// the tile loop at the tile holding the first row's first position, skips loading positions
// before it, and masks the positions before each row's own start in the tiles that cross one,
// so a long context costs only the window. Sinks (one raw logit per query head, NULL: none) join
// each row's denominator once, in the epilogue.
//
// CUDA only (mma.sync, ldmatrix, cp.async need sm_80 or later); the HIP build, f32 and head
// dims other than 64 and 128 answer ATOMK_ERR_UNSUPPORTED and the caller uses
// atomk_paged_attention.
#include <math.h>
#include <stdint.h>

#include "atomk_internal.h"

namespace {

constexpr int kWarpsPrefill = 4;         // warps per block, 16 packed rows each
constexpr int kBM = 16 * kWarpsPrefill;  // packed rows per tile

// The kernel supports this head dim, dtype and build.
bool prefill_supported(int dtype, int head_dim) {
#if defined(ATOMK_CUDA)
    return (dtype == ATOMK_BF16 || dtype == ATOMK_F16) && (head_dim == 64 || head_dim == 128);
#else
    (void)dtype;
    (void)head_dim;
    return false;
#endif
}

}  // namespace

#if defined(ATOMK_CUDA)
#include "atomk_mma.h"

namespace {

constexpr int kBN = 64;  // context positions per K/V tile
constexpr int kThreadsPrefill = 32 * kWarpsPrefill;
// Blocks per SM the registers must allow (168 per thread; 3 x 48 KiB of shared memory fits too):
// with 2 (240 registers, Q kept in registers) too few warps hide the copies' latency.
constexpr int kMinBlocksPrefill = 3;

// One block per (tile, kv head): blockIdx.x = tile * num_kv_heads + kv head. tiles[2*i] is the
// sequence of tile i, tiles[2*i+1] its first packed row (a multiple of kBM).
template <typename T, int D>
__global__ void __launch_bounds__(kThreadsPrefill, kMinBlocksPrefill)
prefill_attention_kernel(T* __restrict__ out, const T* __restrict__ q, const T* __restrict__ k_cache,
                         const T* __restrict__ v_cache, const int32_t* __restrict__ query_start,
                         const int32_t* __restrict__ seq_lens, const int32_t* __restrict__ block_tables,
                         int bt_stride, const int32_t* __restrict__ tiles, int num_heads, int num_kv_heads,
                         int block_size, float scale_log2, int window, const float* __restrict__ sinks) {
    ATOMK_PDL_ENTER();
    constexpr int CH = D / 8;                     // 16-byte chunks per row
    constexpr int RPP = kThreadsPrefill / CH;     // rows the block fills per pass (thread: one chunk)
    constexpr int KV_ROWS = kBN / RPP;            // K (or V) rows each thread copies per tile
    constexpr int Q_ROWS = kBM / RPP;             // Q rows each thread copies
    constexpr int KS = D / 16;                    // k-steps of Q·Kᵀ
    constexpr int NT = kBN / 8;                   // 8-wide column tiles of S
    constexpr int DT = D / 8;                     // 8-wide column tiles of O
    static_assert(kThreadsPrefill % CH == 0 && kBN % RPP == 0 && kBM % RPP == 0, "copy layout");

    __shared__ __align__(128) T sQ[kBM * D];
    __shared__ __align__(128) T sK[kBN * D];
    __shared__ __align__(128) T sV[kBN * D];

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int tile = blockIdx.x / num_kv_heads, kvh = blockIdx.x % num_kv_heads;
    const int seq = tiles[2 * tile], row0 = tiles[2 * tile + 1];
    const int group = num_heads / num_kv_heads;
    const int q0 = query_start[seq], qlen = query_start[seq + 1] - q0, ctx = seq_lens[seq];
    const int rows = qlen * group;  // packed rows of the sequence
    if (row0 >= rows) return;       // uniform: the host never makes such a tile
    const int first = ctx - qlen;   // position of the sequence's first query token
    // Positions kv_begin..kv_end-1 are seen by some row of the tile, kv_lo..kv_all-1 by every
    // row (rows are in position order, so the first row starts first and ends first, the last
    // row last): K/V tiles before kv_begin / kBN are skipped, tiles from kv_end on too, and only
    // tiles holding positions before kv_lo (a window's start) or from kv_all on need a mask.
    const int pos_last = first + (min(row0 + kBM, rows) - 1) / group, pos_first = first + row0 / group;
    const int kv_end = pos_last + 1, kv_all = pos_first + 1;
    const int kv_begin = window > 0 ? max(0, pos_first - window + 1) : 0;
    const int kv_lo = window > 0 ? max(0, pos_last - window + 1) : 0;
    const int j_begin = kv_begin / kBN;
    const int n_tiles = (kv_end + kBN - 1) / kBN, n_unmasked = kv_all / kBN;
    const int32_t* table = block_tables + (size_t)seq * bt_stride;
    const size_t kv_stride = (size_t)num_kv_heads * D;  // elements per cache slot

    // Copy layout: thread tid copies chunk tid % CH of rows tid / CH + i * RPP.
    const int cchunk = tid % CH, crow = tid / CH;

    // Q rows of the tile (zero past the sequence's packed rows).
#pragma unroll
    for (int i = 0; i < Q_ROWS; ++i) {
        const int r = crow + i * RPP, pr = row0 + r;
        const bool in = pr < rows;
        const T* src = in ? q + ((size_t)(q0 + pr / group) * num_heads + kvh * group + pr % group) * D + cchunk * 8 : q;
        cp_async16(&sQ[swz<D>(r, cchunk)], src, in ? 16 : 0);
    }

    // Cache slots of the K/V rows this thread copies for the current tile (-1 past the context
    // and before the window of the tile's first row: a sliding-window cache may have dropped
    // those blocks; their rows are zero-filled and masked).
    int slot[KV_ROWS];
    auto find_slots = [&](int j) {
#pragma unroll
        for (int i = 0; i < KV_ROWS; ++i) {
            const int p = j * kBN + crow + i * RPP;
            slot[i] = p >= kv_begin && p < ctx ? table[p / block_size] * block_size + p % block_size : -1;
        }
    };
    auto load_kv = [&](T* dst, const T* cache) {
#pragma unroll
        for (int i = 0; i < KV_ROWS; ++i) {
            const T* src = slot[i] >= 0 ? cache + (size_t)slot[i] * kv_stride + (size_t)kvh * D + cchunk * 8 : cache;
            cp_async16(&dst[swz<D>(crow + i * RPP, cchunk)], src, slot[i] >= 0 ? 16 : 0);
        }
    };
    find_slots(j_begin);
    load_kv(sK, k_cache);
    cp_async_commit();

    // This lane's two rows of the warp's 16 (the mma accumulator layout): g and g + 8, and the
    // positions they sit at. A row past the sequence gets a position past the context; it is
    // never written (its softmax may see no position at all under a window: see the guard below).
    // from_a and from_b are the rows' first positions (a window's start, else 0).
    const int g = lane / 4, tq = lane % 4;
    const int wrow = warp * 16;
    const int pr_a = row0 + wrow + g, pr_b = pr_a + 8;
    const int pos_a = first + pr_a / group, pos_b = first + pr_b / group;
    const int from_a = window > 0 ? max(0, pos_a - window + 1) : 0;
    const int from_b = window > 0 ? max(0, pos_b - window + 1) : 0;
    // Warps whose 16 rows are all past the sequence (a decode's tile) skip the math.
    const bool active = row0 + wrow < rows;

    float o[DT][4];
#pragma unroll
    for (int d = 0; d < DT; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
    float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.f, l_b = 0.f;  // l: this lane's columns only

    for (int j = j_begin; j < n_tiles; ++j) {
        cp_async_wait_all();
        __syncthreads();  // K_j (and Q) landed; every warp is past P·V_{j-1}, so sV is free
        load_kv(sV, v_cache);
        cp_async_commit();

        float s[NT][4];
        if (active) {
            // S = Q·Kᵀ, 16 head dims at a time. The Q fragment is re-read from shared memory
            // (one ldmatrix per k-step) rather than kept in registers: that frees 32 registers
            // per thread for D = 128, enough for 3 blocks per SM instead of 2. Its matrices are
            // (rows 0-7, k lo), (rows 8-15, k lo), (rows 0-7, k hi), (rows 8-15, k hi). One
            // ldmatrix of K gives the B fragments of two column tiles: matrices (cols nt, k lo),
            // (nt, k hi), (nt+1, k lo), (nt+1, k hi); K rows are S's columns.
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
            const int mi = lane / 8;
#pragma unroll
            for (int ks = 0; ks < KS; ++ks) {
                uint32_t qf[4];
                ldmatrix_x4(qf, &sQ[swz<D>(wrow + (mi & 1) * 8 + lane % 8, ks * 2 + (mi >> 1))]);
#pragma unroll
                for (int nt = 0; nt < NT; nt += 2) {
                    uint32_t b[4];
                    ldmatrix_x4(b, &sK[swz<D>((nt + (mi >> 1)) * 8 + lane % 8, ks * 2 + (mi & 1))]);
                    Mma<T>::run(s[nt], qf, b[0], b[1]);
                    Mma<T>::run(s[nt + 1], qf, b[2], b[3]);
                }
            }
            // Scale to base 2 and mask the positions after each row's own and before its first.
            const bool masked = j >= n_unmasked || j * kBN < kv_lo;
            float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int col = j * kBN + nt * 8 + tq * 2 + (e & 1);
                    float v = s[nt][e] * scale_log2;
                    if (masked && (col > (e < 2 ? pos_a : pos_b) || col < (e < 2 ? from_a : from_b))) v = -INFINITY;
                    s[nt][e] = v;
                }
                mx_a = fmaxf(mx_a, fmaxf(s[nt][0], s[nt][1]));
                mx_b = fmaxf(mx_b, fmaxf(s[nt][2], s[nt][3]));
            }
            // A row is spread over the 4 lanes of a quad.
            mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 1));
            mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 2));
            mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 1));
            mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 2));
            // Online softmax. Without a window every row sees position 0 in tile 0, so m is finite
            // from then on; the guard keeps a fully masked row (a window starting past this
            // tile, a row past the sequence) from computing inf - inf: its P is 0, m stays -inf.
            const float mn_a = fmaxf(m_a, mx_a), mn_b = fmaxf(m_b, mx_b);
            const float ref_a = mn_a == -INFINITY ? 0.f : mn_a, ref_b = mn_b == -INFINITY ? 0.f : mn_b;
            const float corr_a = exp2f(m_a - ref_a), corr_b = exp2f(m_b - ref_b);  // 0 while m = -inf
            m_a = mn_a;
            m_b = mn_b;
            float sum_a = 0.f, sum_b = 0.f;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                s[nt][0] = exp2f(s[nt][0] - ref_a);
                s[nt][1] = exp2f(s[nt][1] - ref_a);
                s[nt][2] = exp2f(s[nt][2] - ref_b);
                s[nt][3] = exp2f(s[nt][3] - ref_b);
                sum_a += s[nt][0] + s[nt][1];
                sum_b += s[nt][2] + s[nt][3];
            }
            l_a = l_a * corr_a + sum_a;
            l_b = l_b * corr_b + sum_b;
#pragma unroll
            for (int d = 0; d < DT; ++d) {
                o[d][0] *= corr_a;
                o[d][1] *= corr_a;
                o[d][2] *= corr_b;
                o[d][3] *= corr_b;
            }
        }

        cp_async_wait_all();
        __syncthreads();  // V_j landed; every warp is done with sK
        if (j + 1 < n_tiles) {
            find_slots(j + 1);
            load_kv(sK, k_cache);
            cp_async_commit();
        }

        if (active) {
            // O += P·V over the tile's 64 positions, 16 at a time. P's accumulator layout is
            // already the A fragment layout: columns 16kk.. of S are tiles 2kk and 2kk+1.
            // V rows are the k dimension, so the B fragments come transposed: matrices
            // (k lo, cols d), (k hi, d), (k lo, d+1), (k hi, d+1).
#pragma unroll
            for (int kk = 0; kk < kBN / 16; ++kk) {
                uint32_t a[4];
                a[0] = Mma<T>::pack(s[2 * kk][0], s[2 * kk][1]);
                a[1] = Mma<T>::pack(s[2 * kk][2], s[2 * kk][3]);
                a[2] = Mma<T>::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
                a[3] = Mma<T>::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
                for (int d = 0; d < DT; d += 2) {
                    const int mi = lane / 8;
                    uint32_t b[4];
                    ldmatrix_x4_trans(b, &sV[swz<D>(kk * 16 + (mi & 1) * 8 + lane % 8, d + (mi >> 1))]);
                    Mma<T>::run(o[d], a, b[0], b[1]);
                    Mma<T>::run(o[d + 1], a, b[2], b[3]);
                }
            }
        }
    }
    if (!active) return;

    // out = O / l, l summed over the quad; two adjacent head dims per 32-bit store.
    l_a += __shfl_xor_sync(0xffffffffu, l_a, 1);
    l_a += __shfl_xor_sync(0xffffffffu, l_a, 2);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, 1);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, 2);
    // A sink (a raw logit: base 2 is logit·log2 e, no softmax scale) joins the denominator with
    // a common maximum, M = max(m, sink): out = O·2^(m-M) / (l·2^(m-M) + 2^(sink-M)).
    float inv_a = 1.f / l_a, inv_b = 1.f / l_b;
    if (sinks) {
        const int h_a = kvh * group + pr_a % group, h_b = kvh * group + pr_b % group;
        const float sk_a = sinks[h_a] * 1.4426950408889634f, sk_b = sinks[h_b] * 1.4426950408889634f;
        const float top_a = fmaxf(m_a, sk_a), top_b = fmaxf(m_b, sk_b);
        const float c_a = m_a == -INFINITY ? 0.f : exp2f(m_a - top_a);
        const float c_b = m_b == -INFINITY ? 0.f : exp2f(m_b - top_b);
        inv_a = c_a / (l_a * c_a + exp2f(sk_a - top_a));
        inv_b = c_b / (l_b * c_b + exp2f(sk_b - top_b));
    }
    T* out_a = out + ((size_t)(q0 + pr_a / group) * num_heads + kvh * group + pr_a % group) * D + tq * 2;
    T* out_b = out + ((size_t)(q0 + pr_b / group) * num_heads + kvh * group + pr_b % group) * D + tq * 2;
#pragma unroll
    for (int d = 0; d < DT; ++d) {
        if (pr_a < rows)
            *reinterpret_cast<uint32_t*>(out_a + d * 8) = Mma<T>::pack(o[d][0] * inv_a, o[d][1] * inv_a);
        if (pr_b < rows)
            *reinterpret_cast<uint32_t*>(out_b + d * 8) = Mma<T>::pack(o[d][2] * inv_b, o[d][3] * inv_b);
    }
}

template <typename T>
int launch_prefill(int head_dim, unsigned blocks, gpuStream_t s, void* out, const void* q, const void* kc,
                   const void* vc, const int32_t* query_start, const int32_t* seq_lens, const int32_t* tables,
                   int stride, const int32_t* tiles, int num_heads, int num_kv_heads, int block_size,
                   float scale_log2, int window, const float* sinks) {
#define ATOMK_PREFILL(D)                                                                                         \
    atomk_launch(prefill_attention_kernel<T, D>, blocks, kThreadsPrefill, 0, s,                                            \
        static_cast<T*>(out), static_cast<const T*>(q), static_cast<const T*>(kc), static_cast<const T*>(vc),   \
        query_start, seq_lens, tables, stride, tiles, num_heads, num_kv_heads, block_size, scale_log2, window, sinks)
    if (head_dim == 64) ATOMK_PREFILL(64);
    else ATOMK_PREFILL(128);
#undef ATOMK_PREFILL
    ATOMK_LAUNCHED("prefill_attention");
    return ATOMK_OK;
}

}  // namespace
#endif  // ATOMK_CUDA

extern "C" {

int atomk_prefill_attention_tile_rows(int dtype, int num_heads, int num_kv_heads, int head_dim, int* rows) {
    if (!rows || num_heads <= 0 || num_kv_heads <= 0 || num_heads % num_kv_heads != 0)
        return atomk_fail(ATOMK_ERR_INVALID, "atomk_prefill_attention_tile_rows: heads=%d kv_heads=%d", num_heads,
                          num_kv_heads);
    if (!prefill_supported(dtype, head_dim))
        return atomk_fail(ATOMK_ERR_UNSUPPORTED, "atomk_prefill_attention: dtype %d head_dim %d", dtype, head_dim);
    *rows = kBM;
    return ATOMK_OK;
}

int atomk_prefill_attention(int dtype, void* out, const void* q, const void* k_cache, const void* v_cache,
                            const int32_t* query_start, const int32_t* seq_lens, const int32_t* block_tables,
                            int block_table_stride, const int32_t* tiles, int num_tiles, int num_heads,
                            int num_kv_heads, int head_dim, int block_size, float scale, int window,
                            const float* sinks, void* stream) {
    if (num_tiles < 0 || num_heads <= 0 || num_kv_heads <= 0 || num_heads % num_kv_heads != 0 || head_dim <= 0 ||
        block_size <= 0 || block_table_stride <= 0 || window < 0)
        return atomk_fail(ATOMK_ERR_INVALID,
                          "atomk_prefill_attention: tiles=%d heads=%d kv_heads=%d head_dim=%d block_size=%d stride=%d "
                          "window=%d",
                          num_tiles, num_heads, num_kv_heads, head_dim, block_size, block_table_stride, window);
    if (!prefill_supported(dtype, head_dim))
        return atomk_fail(ATOMK_ERR_UNSUPPORTED, "atomk_prefill_attention: dtype %d head_dim %d", dtype, head_dim);
    if (num_tiles == 0) return ATOMK_OK;
    if ((long long)num_tiles * num_kv_heads > 0x7fffffffLL)
        return atomk_fail(ATOMK_ERR_INVALID, "atomk_prefill_attention: %d tiles x %d kv heads", num_tiles,
                          num_kv_heads);
#if defined(ATOMK_CUDA)
    const unsigned blocks = (unsigned)num_tiles * (unsigned)num_kv_heads;
    const float scale_log2 = scale * 1.4426950408889634f;  // exp(x) = exp2(x·log2 e)
    gpuStream_t s = ATOMK_STREAM(stream);
    if (dtype == ATOMK_BF16)
        return launch_prefill<atomk_bf16>(head_dim, blocks, s, out, q, k_cache, v_cache, query_start, seq_lens,
                                          block_tables, block_table_stride, tiles, num_heads, num_kv_heads,
                                          block_size, scale_log2, window, sinks);
    return launch_prefill<atomk_f16>(head_dim, blocks, s, out, q, k_cache, v_cache, query_start, seq_lens,
                                     block_tables, block_table_stride, tiles, num_heads, num_kv_heads, block_size,
                                     scale_log2, window, sinks);
#else
    (void)out, (void)q, (void)k_cache, (void)v_cache, (void)query_start, (void)seq_lens, (void)block_tables;
    (void)tiles, (void)scale, (void)sinks, (void)stream;
    return atomk_fail(ATOMK_ERR_UNSUPPORTED, "atomk_prefill_attention: not built for this platform");
#endif
}

}  // extern "C"
