// mla.cu: Multi-head Latent Attention (DeepSeek V2/V3) over the latent cache, in the absorbed
// form that vLLM's, SGLang's and ATOM's MLA backends run. The cache holds one vector per token
// and layer, [kv_c, k_pe] (kv_rank + rope_dim values), shared by every query head:
//   1. write:  per token, kv_c (the first kv_rank values of kv_a_proj_with_mqa's output)
//              RMS-normalised with kv_a_layernorm, k_pe (the rest) and every head's rope part of
//              q rotated at the token's position, [kv_c, k_pe] stored at the token's slot;
//   2. absorb: q_lat[t, h] = [W_UK_hᵀ · q_nope[t, h], q_pe[t, h]], W_UK_h being head h's first
//              nope rows of kv_b_proj [heads * (nope + v_dim), kv_rank];
//   3. attend: scores q_lat · latent (one "KV head" of width kv_rank + rope_dim for all query
//              heads), o_lat = softmax · kv_c; a block takes several heads of one token so that
//              each latent it loads serves all of them, and the context is split into
//              partitions merged by a second kernel when the batch is too small to fill the GPU;
//   4. up:     out[t, h] = W_UV_h · o_lat[t, h], W_UV_h being head h's last v_dim rows.
// Steps 2-4 run over chunks of tokens whose q_lat and o_lat fit the workspace bound, so a long
// prefill needs no more scratch than a short one. Every launch's shape depends on the batch
// size and the context bound alone, so decode steps capture into CUDA graphs.
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "atomk_internal.h"
#include "gemv_input.h"

namespace {

constexpr int kWriteThreads = 128;
constexpr int kAbsorbRows = 8;       // token rows of one absorb or up block (RB; 1 for a lone token)
constexpr int kAbsorbCols = 64;      // W_UK columns of one absorb block
constexpr int kAbsorbThreads = 256;
constexpr int kUpWarps = 8;          // W_UV rows (output columns) of one up block, a warp each
constexpr int kTile = 16;            // context positions an attention block loads at once
constexpr int kMaxRank = 512;        // kv_rank: an attention thread keeps kv_rank/16 accumulators
constexpr int kMaxLatent = 640;      // kv_rank + rope_dim: q and a tile of latents in shared memory
constexpr int kMaxNope = 256;
constexpr int kMaxSplits = 64;
constexpr int kMergeCols = 64;    // o_lat columns of one merge block, a thread each
constexpr int kMergeUnroll = 16;  // split partitions a merge thread loads at once
constexpr size_t kChunkBytes = 64u << 20;  // q_lat and o_lat of one chunk of tokens

// Heads per attention block: 16 (each of 16 threads of a head scores one position of a tile),
// 8 for float32 so that q and the tile stay within 48 KB of shared memory.
template <typename T> constexpr int heads_per_block() { return sizeof(T) == 4 ? 8 : 16; }

// Rotates the pair (x[i], x[j]) by angle pos * freq, times attn_factor.
template <typename T>
__device__ __forceinline__ void rotate_pair(const T* in, T* out, int i, int j, float pos, float freq, float af) {
    float s, c;
    sincosf(pos * freq, &s, &c);
    c *= af;
    s *= af;
    const float x1 = atomk_to_float(in[i]), x2 = atomk_to_float(in[j]);
    out[i] = atomk_from_float<T>(x1 * c - x2 * s);
    out[j] = atomk_from_float<T>(x2 * c + x1 * s);
}

// Rotates rope_dim values: pairs (2i, 2i+1) by frequency i when interleaved (DeepSeek's GPT-J
// layout), else i and i + rope_dim/2 (neox).
template <typename T>
__device__ __forceinline__ void rotate_rope(const T* in, T* out, int rope_dim, int interleaved, float pos,
                                            const float* inv_freq, float af) {
    const int half = rope_dim / 2;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        if (interleaved)
            rotate_pair(in, out, 2 * i, 2 * i + 1, pos, inv_freq[i], af);
        else
            rotate_pair(in, out, i, i + half, pos, inv_freq[i], af);
    }
}

// One block per (token, y): y == 0 normalises kv_c, rotates k_pe and stores them at the token's
// slot (skipped when the slot is outside the cache); y = 1 + h rotates head h's rope part of q
// in place.
template <typename T>
__global__ void __launch_bounds__(kWriteThreads)
    mla_write_kernel(T* q, const T* kv, const T* norm_w, T* cache, const int32_t* positions, const int32_t* slots,
                     const float* inv_freq, float attn_factor, int heads, int kv_rank, int nope, int rope_dim,
                     int interleaved, float eps, int64_t num_slots) {
    ATOMK_PDL_ENTER();
    const int t = blockIdx.x, y = blockIdx.y, dim = kv_rank + rope_dim;
    const float pos = (float)positions[t];
    if (y > 0) {
        T* qh = q + ((int64_t)t * heads + (y - 1)) * (nope + rope_dim) + nope;
        rotate_rope(qh, qh, rope_dim, interleaved, pos, inv_freq, attn_factor);
        return;
    }
    const int64_t slot = slots[t];
    if (slot < 0 || slot >= num_slots) return;
    const T* in = kv + (int64_t)t * dim;
    T* out = cache + slot * dim;
    __shared__ float scratch[1024 / ATOMK_WARP_SIZE];
    float ss = 0.f;
    for (int i = threadIdx.x; i < kv_rank; i += blockDim.x) {
        const float v = atomk_to_float(in[i]);
        ss += v * v;
    }
    const float inv = rsqrtf(atomk_block_sum(ss, scratch) / (float)kv_rank + eps);
    for (int i = threadIdx.x; i < kv_rank; i += blockDim.x)
        out[i] = atomk_from_float<T>(atomk_to_float(in[i]) * inv * atomk_to_float(norm_w[i]));
    rotate_rope(in + kv_rank, out + kv_rank, rope_dim, interleaved, pos, inv_freq, attn_factor);
}

// Fetches into L2 the `bytes` bytes from p on of each of `rows` rows `stride` elements apart, a
// 128-byte line per thread of the block: a weight slice, before ATOMK_PDL_ENTER (no kernel of
// the step writes kv_b_proj, or the FP8 expansion writes it through L2, where a prefetch can not
// make a later load stale), so that its stream overlaps the kernels before.
template <typename T>
__device__ __forceinline__ void prefetch_rows(const T* p, int rows, int64_t stride, int bytes) {
    const int lines = (bytes + 127) / 128;
    for (int i = threadIdx.x; i < rows * lines; i += blockDim.x)
        atomk_prefetch_l2(reinterpret_cast<const char*>(p + (i / lines) * stride) + 128 * (i % lines));
}

// q_lat[t, h, :kv_rank] = Σ_j q[t, h, j] · W_UK_h[j, :] and q_lat[t, h, kv_rank:] = q_pe[t, h]:
// one block per (head, kAbsorbCols columns of W_UK_h, RB tokens). Thread tid reads
// 16-byte piece tid % P of the block's columns (P pieces) in rows tid / P + R·i (R row groups),
// all its loads issued before the first is used; the row groups' partial sums
// are added by shuffles within a warp, then through shared memory. At decode batches the grid
// is heads x kv_rank/64 blocks streaming W_UK once, its slices fetched into L2 first.
template <typename T, int RB>
__global__ void __launch_bounds__(kAbsorbThreads)
    mla_absorb_kernel(const T* q, const T* kvb, T* qlat, int tokens, int heads, int kv_rank, int nope, int rope_dim,
                      int vdim) {
    constexpr int CE = 16 / sizeof(T), P = kAbsorbCols / CE, R = kAbsorbThreads / P, J = kMaxNope / R;
    constexpr int W = kAbsorbThreads / ATOMK_WARP_SIZE;
    const int h = blockIdx.x, c0 = blockIdx.y * kAbsorbCols, t0 = blockIdx.z * RB;
    const T* wk = kvb + (int64_t)h * (nope + vdim) * kv_rank + c0;
    prefetch_rows(wk, nope, kv_rank, min(kAbsorbCols, kv_rank - c0) * (int)sizeof(T));
    ATOMK_PDL_ENTER();
    __shared__ float qs[RB][kMaxNope];
    __shared__ float part[W][RB][kAbsorbCols];
    const int rows = min(RB, tokens - t0), qk = nope + rope_dim, dim = kv_rank + rope_dim;
    const int pc = threadIdx.x % P, rg = threadIdx.x / P;
    const bool col_ok = c0 + pc * CE < kv_rank;  // kv_rank is a multiple of 32: whole pieces
    uint4 w[J];
#pragma unroll
    for (int i = 0; i < J; ++i) {
        const int j = rg + R * i;
        w[i] = col_ok && j < nope ? load_stream(reinterpret_cast<const uint4*>(wk + (int64_t)j * kv_rank + pc * CE))
                                  : make_uint4(0, 0, 0, 0);
    }
    for (int i = threadIdx.x; i < RB * nope; i += blockDim.x) {
        const int r = i / nope;
        qs[r][i % nope] = r < rows ? atomk_to_float(q[((int64_t)(t0 + r) * heads + h) * qk + i % nope]) : 0.f;
    }
    if (blockIdx.y == 0)
        for (int i = threadIdx.x; i < rows * rope_dim; i += blockDim.x) {
            const int r = i / rope_dim, d = i % rope_dim;
            qlat[((int64_t)(t0 + r) * heads + h) * dim + kv_rank + d] = q[((int64_t)(t0 + r) * heads + h) * qk + nope + d];
        }
    __syncthreads();
    float acc[RB][CE] = {};
#pragma unroll
    for (int i = 0; i < J; ++i) {
        const int j = rg + R * i;
        if (j >= nope) break;
        float wf[CE];
        Chunk<T>::unpack(w[i], wf);
#pragma unroll
        for (int r = 0; r < RB; ++r) {
            const float qv = qs[r][j];
#pragma unroll
            for (int e = 0; e < CE; ++e) acc[r][e] = fmaf(qv, wf[e], acc[r][e]);
        }
    }
    const int lane = threadIdx.x % ATOMK_WARP_SIZE, warp = threadIdx.x / ATOMK_WARP_SIZE;
#pragma unroll
    for (int r = 0; r < RB; ++r)
#pragma unroll
        for (int e = 0; e < CE; ++e) {
#pragma unroll
            for (int o = P; o < ATOMK_WARP_SIZE; o *= 2) acc[r][e] += ATOMK_SHFL_XOR(acc[r][e], o);
            if (lane < P) part[warp][r][pc * CE + e] = acc[r][e];
        }
    __syncthreads();
    for (int i = threadIdx.x; i < RB * kAbsorbCols; i += blockDim.x) {
        const int r = i / kAbsorbCols, cc = c0 + i % kAbsorbCols;
        if (r >= rows || cc >= kv_rank) continue;
        float sum = 0.f;
#pragma unroll
        for (int g = 0; g < W; ++g) sum += part[g][r][i % kAbsorbCols];
        qlat[((int64_t)(t0 + r) * heads + h) * dim + cc] = atomk_from_float<T>(sum);
    }
}

// The context positions [*begin, *end) of split `split` of `splits` over n positions: whole
// tiles of `tile` positions, dealt out evenly (split counts differ by at most one tile; a split
// is empty only when there are fewer tiles than splits).
__device__ __forceinline__ void mla_split_range(int n, int split, int splits, int tile, int* begin, int* end) {
    const int tiles = (n + tile - 1) / tile;
    *begin = min(n, (int)((int64_t)split * tiles / splits) * tile);
    *end = min(n, (int)((int64_t)(split + 1) * tiles / splits) * tile);
}

// Two consecutive elements as floats: one 4-byte load of a 16-bit pair, one 8-byte load of two
// floats.
template <typename T> __device__ __forceinline__ float2 pair_at(const T* p) {
    if constexpr (sizeof(T) == 4)
        return *reinterpret_cast<const float2*>(p);
    else
        return unpack2<T>(*reinterpret_cast<const uint32_t*>(p));
}

// The storage of two consecutive elements, copied whole into shared memory.
template <typename T> using Pair = typename std::conditional<sizeof(T) == 4, float2, uint32_t>::type;

// Shared-memory row strides of the attention kernel, in elements: q rows dim + 2 (consecutive
// heads on different banks), tile rows dim + 4 (for 16-bit T the 16 positions a half-warp scores
// fall on 16 distinct banks: a row is dim/2 + 2 words).
constexpr int kQPad = 2, kTilePad = 4;

// Attention of G heads of one token over one split of its context. Thread (g, p) = (tid / 16,
// tid % 16) scores position p of each tile for head g; for the weighted sum it owns columns
// 2p + 32i (i < kv_rank/32, pairs) of head g's o_lat. The softmax is the online one (running
// max m and sum l per head). With one split the normalised o_lat is written as T; otherwise the
// unnormalised partition with its m and l, for mla_merge_kernel.
template <typename T, int G>
__global__ void __launch_bounds__(G * 16)
    mla_attend_kernel(const T* qlat, const T* cache, const int32_t* token_seq, const int32_t* positions,
                      const int32_t* block_tables, int table_stride, int heads, int kv_rank, int rope_dim,
                      int block_size, float scale, T* olat, float* part_acc, float* part_m, float* part_l) {
    ATOMK_PDL_ENTER();
    extern __shared__ __align__(16) unsigned char mla_smem[];
    const int dim = kv_rank + rope_dim, qs_stride = dim + kQPad, ts = dim + kTilePad, half_dim = dim / 2;
    T* qs = reinterpret_cast<T*>(mla_smem);  // [G][qs_stride]
    T* tile = qs + G * qs_stride;            // [kTile][ts]
    float* probs = reinterpret_cast<float*>(tile + kTile * ts);  // [G][kTile]

    const int t = blockIdx.x, h0 = blockIdx.y * G, split = blockIdx.z, splits = gridDim.z;
    const int g = threadIdx.x / 16, p = threadIdx.x % 16, h = h0 + g;
    const int n = positions[t] + 1;
    const int32_t* table = block_tables + (int64_t)token_seq[t] * table_stride;
    int begin, end;
    mla_split_range(n, split, splits, kTile, &begin, &end);

    for (int gg = 0; gg < G; ++gg) {
        const int hh = h0 + gg;
        Pair<T>* dst = reinterpret_cast<Pair<T>*>(qs + gg * qs_stride);
        const Pair<T>* src = reinterpret_cast<const Pair<T>*>(qlat + ((int64_t)t * heads + hh) * dim);
        for (int i = threadIdx.x; i < half_dim; i += blockDim.x) dst[i] = hh < heads ? src[i] : Pair<T>{};
    }
    const int pairs = kv_rank / 32;
    float acc[2 * (kMaxRank / 32)];
#pragma unroll
    for (int i = 0; i < 2 * (kMaxRank / 32); ++i) acc[i] = 0.f;
    float m = -INFINITY, l = 0.f;

    for (int base = begin; base < end; base += kTile) {
        __syncthreads();  // the previous tile has been read
#pragma unroll 4
        for (int r = 0; r < kTile; ++r) {
            const int pos = base + r;
            const Pair<T>* src = nullptr;
            if (pos < end)
                src = reinterpret_cast<const Pair<T>*>(
                    cache + ((int64_t)table[pos / block_size] * block_size + pos % block_size) * dim);
            Pair<T>* dst = reinterpret_cast<Pair<T>*>(tile + r * ts);
            for (int i = threadIdx.x; i < half_dim; i += blockDim.x) dst[i] = src ? src[i] : Pair<T>{};
        }
        __syncthreads();
        float s = -INFINITY;
        if (base + p < end) {
            const T* qg = qs + g * qs_stride;
            const T* kp = tile + p * ts;
            float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;  // four chains: the FMA latency overlaps
            int i = 0;
            for (; i + 4 <= dim; i += 4) {
                const float2 a = pair_at(qg + i), b = pair_at(kp + i), c = pair_at(qg + i + 2), d = pair_at(kp + i + 2);
                d0 = fmaf(a.x, b.x, d0);
                d1 = fmaf(a.y, b.y, d1);
                d2 = fmaf(c.x, d.x, d2);
                d3 = fmaf(c.y, d.y, d3);
            }
            if (i < dim) {
                const float2 a = pair_at(qg + i), b = pair_at(kp + i);
                d0 = fmaf(a.x, b.x, d0);
                d1 = fmaf(a.y, b.y, d1);
            }
            s = ((d0 + d1) + (d2 + d3)) * scale;
        }
        float mt = s;
#pragma unroll
        for (int o = 8; o > 0; o /= 2) mt = fmaxf(mt, ATOMK_SHFL_XOR(mt, o));
        const float mn = fmaxf(m, mt);  // finite: position base < end is in every tile
        const float alpha = expf(m - mn), e = expf(s - mn);
        float es = e;
#pragma unroll
        for (int o = 8; o > 0; o /= 2) es += ATOMK_SHFL_XOR(es, o);
        l = l * alpha + es;
        m = mn;
        probs[g * kTile + p] = e;
        __syncthreads();
        const float* pg = probs + g * kTile;
#pragma unroll
        for (int i = 0; i < kMaxRank / 32; ++i) {
            if (i < pairs) {
                const int c = 2 * p + 32 * i;
                float a0 = acc[2 * i] * alpha, a1 = acc[2 * i + 1] * alpha;
#pragma unroll
                for (int r = 0; r < kTile; ++r) {
                    const float w = pg[r];
                    const float2 v = pair_at(tile + r * ts + c);
                    a0 = fmaf(w, v.x, a0);
                    a1 = fmaf(w, v.y, a1);
                }
                acc[2 * i] = a0;
                acc[2 * i + 1] = a1;
            }
        }
    }
    if (h >= heads) return;
    const int64_t row = (int64_t)t * heads + h;
    if (splits == 1) {
        const float inv = l > 0.f ? 1.f / l : 0.f;
#pragma unroll
        for (int i = 0; i < kMaxRank / 32; ++i) {
            if (i < pairs) {
                const int c = 2 * p + 32 * i;
                olat[row * kv_rank + c] = atomk_from_float<T>(acc[2 * i] * inv);
                olat[row * kv_rank + c + 1] = atomk_from_float<T>(acc[2 * i + 1] * inv);
            }
        }
        return;
    }
    float* pa = part_acc + (row * splits + split) * kv_rank;
#pragma unroll
    for (int i = 0; i < kMaxRank / 32; ++i) {
        if (i < pairs) {
            const int c = 2 * p + 32 * i;
            *reinterpret_cast<float2*>(pa + c) = make_float2(acc[2 * i], acc[2 * i + 1]);
        }
    }
    if (p == 0) {
        part_m[row * splits + split] = begin < end ? m : -INFINITY;
        part_l[row * splits + split] = l;
    }
}

// Merges the splits of one (token, head) over kMergeCols columns of o_lat:
// o_lat = Σ_s e^{m_s - M} acc_s / Σ_s e^{m_s - M} l_s. Every thread merges its column alone,
// kMergeUnroll splits at a time (their partial, max and sum loads all issued before the first
// is used; the maxima and sums are the same for the block's threads, L1 broadcasts), rescaling
// its running sums to each chunk's new maximum: no barrier, and a batch-1 decode's 32 splits
// are two rounds of loads. A batch-1 decode is heads x kv_rank/kMergeCols blocks.
template <typename T>
__global__ void __launch_bounds__(kMergeCols)
    mla_merge_kernel(const float* part_acc, const float* part_m, const float* part_l, T* olat, int heads, int kv_rank,
                     int splits) {
    ATOMK_PDL_ENTER();
    const int64_t row = (int64_t)blockIdx.x * heads + blockIdx.y;
    const int c = blockIdx.z * kMergeCols + threadIdx.x;
    if (c >= kv_rank) return;
    const float* m = part_m + row * splits;
    const float* l = part_l + row * splits;
    const float* acc = part_acc + row * splits * kv_rank + c;
    float mx = -INFINITY, o = 0.f, sum = 0.f;  // running max of the splits so far, the sums scaled to it
    for (int s = 0; s < splits; s += kMergeUnroll) {
        float a[kMergeUnroll], ms[kMergeUnroll], ls[kMergeUnroll];
#pragma unroll
        for (int u = 0; u < kMergeUnroll; ++u) {
            const bool ok = s + u < splits;
            a[u] = ok ? acc[(int64_t)(s + u) * kv_rank] : 0.f;
            ms[u] = ok ? m[s + u] : -INFINITY;
            ls[u] = ok ? l[s + u] : 0.f;
        }
        float cm = mx;
#pragma unroll
        for (int u = 0; u < kMergeUnroll; ++u) cm = fmaxf(cm, ms[u]);
        if (cm == -INFINITY) continue;  // only empty splits so far
        const float r = expf(mx - cm);  // 0 while mx is still -inf
        o *= r;
        sum *= r;
#pragma unroll
        for (int u = 0; u < kMergeUnroll; ++u) {
            const float w = ms[u] == -INFINITY ? 0.f : expf(ms[u] - cm);
            o = fmaf(w, a[u], o);
            sum = fmaf(w, ls[u], sum);
        }
        mx = cm;
    }
    olat[row * kv_rank + c] = atomk_from_float<T>(sum > 0.f ? o / sum : 0.f);
}

// out[t, h, j] = W_UV_h[j, :] · o_lat[t, h, :]: one block per (head, kUpWarps output columns,
// RB tokens), a warp per column j, its lanes along the W_UV row in 16-byte chunks, all
// loaded (the block's rows first fetched into L2) before o_lat is read.
template <typename T, int RB>
__global__ void __launch_bounds__(kUpWarps * ATOMK_WARP_SIZE)
    mla_up_kernel(const T* olat, const T* kvb, T* out, int tokens, int heads, int kv_rank, int nope, int vdim) {
    constexpr int CE = 16 / sizeof(T), U = kMaxRank / CE / ATOMK_WARP_SIZE;  // chunks of a lane, at most
    const int h = blockIdx.x, t0 = blockIdx.z * RB, rows = min(RB, tokens - t0);
    const int warp = threadIdx.x / ATOMK_WARP_SIZE, lane = threadIdx.x % ATOMK_WARP_SIZE;
    const int j = blockIdx.y * kUpWarps + warp;
    const T* wv = kvb + ((int64_t)h * (nope + vdim) + nope + blockIdx.y * kUpWarps) * kv_rank;
    prefetch_rows(wv, min(kUpWarps, vdim - blockIdx.y * kUpWarps), kv_rank, kv_rank * (int)sizeof(T));
    ATOMK_PDL_ENTER();
    __shared__ float os[RB][kMaxRank];
    const uint4* wr = reinterpret_cast<const uint4*>(wv + (int64_t)warp * kv_rank);
    uint4 w[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const int c = lane + ATOMK_WARP_SIZE * u;
        w[u] = j < vdim && c * CE < kv_rank ? load_stream(wr + c) : make_uint4(0, 0, 0, 0);
    }
    for (int i = threadIdx.x; i < RB * kv_rank; i += blockDim.x) {
        const int r = i / kv_rank;
        os[r][i % kv_rank] = r < rows ? atomk_to_float(olat[((int64_t)(t0 + r) * heads + h) * kv_rank + i % kv_rank]) : 0.f;
    }
    __syncthreads();
    if (j >= vdim) return;
    float acc[RB] = {};
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const int c = lane + ATOMK_WARP_SIZE * u;
        if (c * CE >= kv_rank) break;
        float wf[CE];
        Chunk<T>::unpack(w[u], wf);
#pragma unroll
        for (int r = 0; r < RB; ++r)
#pragma unroll
            for (int q = 0; q < CE; ++q) acc[r] = fmaf(os[r][c * CE + q], wf[q], acc[r]);
    }
#pragma unroll
    for (int r = 0; r < RB; ++r) acc[r] = atomk_warp_sum(acc[r]);
    if (lane == 0) {
#pragma unroll
        for (int r = 0; r < RB; ++r)
            if (r < rows) out[(int64_t)(t0 + r) * heads * vdim + (int64_t)h * vdim + j] = atomk_from_float<T>(acc[r]);
    }
}

int check_mla(const char* name, int tokens, int heads, int kv_rank, int nope, int rope_dim, int vdim) {
    if (tokens < 0 || heads <= 0 || heads > 65535 || kv_rank <= 0 || kv_rank > kMaxRank || kv_rank % 32 != 0 ||
        nope <= 0 || nope > kMaxNope || rope_dim <= 0 || rope_dim % 2 != 0 || kv_rank + rope_dim > kMaxLatent ||
        vdim <= 0)
        return atomk_fail(ATOMK_ERR_INVALID,
                          "%s: tokens=%d heads=%d kv_rank=%d (a multiple of 32, at most %d) nope=%d (at most %d) "
                          "rope_dim=%d (even; kv_rank+rope_dim at most %d) v_dim=%d",
                          name, tokens, heads, kv_rank, kMaxRank, nope, kMaxNope, rope_dim, kMaxLatent, vdim);
    return ATOMK_OK;
}

}  // namespace

#include "mla_tc.h"

namespace {

// Whether a launch of element size elem over latents of width dim runs the tensor-core kernel
// (mla_tc.h): CUDA, 16-bit types, whole 16-byte pieces per cache row. The others (float32, HIP)
// run mla_attend_kernel.
bool mla_use_tc(int elem, int dim) {
#if defined(ATOMK_CUDA)
    return elem == 2 && mla_tc_fits(dim);
#else
    (void)elem;
    (void)dim;
    return false;
#endif
}

// The splits of the context for a batch of tokens. mla_attend_kernel: enough blocks for about
// two per multiprocessor, each split at least 64 positions of the context bound. The
// tensor-core kernel: as many as keep the grid within one wave of one block per
// multiprocessor (a second, partial wave would double the step), each split at least
// kTcMinSplit positions of the bound.
int mla_splits(int tokens, int heads, bool tc, int g, int max_ctx) {
    const int want = 2 * atomk_sm_count();
    int s;
    if (tc) {
        const int blocks = tokens * ((heads + kTcHeads - 1) / kTcHeads);
        s = atomk_sm_count() / blocks;
        const int by_ctx = (max_ctx + kTcMinSplit - 1) / kTcMinSplit;
        if (s > by_ctx) s = by_ctx;
        if (s < 1) s = 1;
    } else {
        const int blocks = tokens * ((heads + g - 1) / g);
        if (blocks >= want || max_ctx <= 64) return 1;
        s = (want + blocks - 1) / blocks;
        const int by_ctx = (max_ctx + 63) / 64;
        if (s > by_ctx) s = by_ctx;
    }
    return s > kMaxSplits ? kMaxSplits : s;
}

// Tokens per chunk: q_lat and o_lat of a chunk within kChunkBytes.
int mla_chunk(int tokens, int heads, int kv_rank, int rope_dim, int elem) {
    const size_t per = (size_t)heads * (2 * kv_rank + rope_dim) * elem;
    size_t c = kChunkBytes / per;
    if (c < 1) c = 1;
    if (c > 65535u * kAbsorbRows) c = 65535u * kAbsorbRows;  // the absorb and up grids' z
    return (size_t)tokens < c ? tokens : (int)c;
}

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

// The workspace layout of one chunk: q_lat, o_lat, then the partitions of a split attention.
struct MLAWork {
    size_t qlat, olat, acc, m, l, total;
};

MLAWork mla_work(int chunk, int heads, int kv_rank, int rope_dim, int elem, int splits) {
    MLAWork w{};
    w.qlat = 0;
    w.olat = align256((size_t)chunk * heads * (kv_rank + rope_dim) * elem);
    w.acc = w.olat + align256((size_t)chunk * heads * kv_rank * elem);
    w.total = w.acc;
    if (splits > 1) {
        const size_t rows = (size_t)chunk * heads * splits;
        w.m = w.acc + align256(rows * kv_rank * sizeof(float));
        w.l = w.m + align256(rows * sizeof(float));
        w.total = w.l + align256(rows * sizeof(float));
    }
    return w;
}

int elem_size(int dtype) { return dtype == ATOMK_F32 ? 4 : 2; }

template <typename T>
int launch_mla(void* out, const void* q, const void* kvb, const void* cache, const int32_t* token_seq,
               const int32_t* positions, const int32_t* block_tables, int table_stride, int tokens, int heads,
               int kv_rank, int nope, int rope_dim, int vdim, int block_size, float scale, int max_ctx,
               unsigned char* work, size_t work_size, gpuStream_t s) {
    constexpr int G = heads_per_block<T>();
    const int dim = kv_rank + rope_dim;
    const bool tc = mla_use_tc(sizeof(T), dim);
    const int chunk = mla_chunk(tokens, heads, kv_rank, rope_dim, sizeof(T));
    const int splits = mla_splits(chunk, heads, tc, G, max_ctx);
    const MLAWork w = mla_work(chunk, heads, kv_rank, rope_dim, sizeof(T), splits);
    if (work_size < w.total)
        return atomk_fail(ATOMK_ERR_INVALID, "atomk_mla_attention: workspace of %zu bytes, %zu needed", work_size,
                          w.total);
    T* qlat = reinterpret_cast<T*>(work + w.qlat);
    T* olat = reinterpret_cast<T*>(work + w.olat);
    float* pacc = reinterpret_cast<float*>(work + w.acc);
    float* pm = reinterpret_cast<float*>(work + w.m);
    float* pl = reinterpret_cast<float*>(work + w.l);
    const size_t smem = (size_t)G * (dim + kQPad) * sizeof(T) + (size_t)kTile * (dim + kTilePad) * sizeof(T) +
                        (size_t)G * kTile * sizeof(float);
#if defined(ATOMK_CUDA)
    if constexpr (sizeof(T) == 2) {
        if (tc)
            ATOMK_RT(cudaFuncSetAttribute(mla_attend_tc_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          (int)mla_tc_smem(dim)));
    }
    if (!tc && smem > 48 * 1024)
        ATOMK_RT(cudaFuncSetAttribute(mla_attend_kernel<T, G>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
#else
    if (smem > 48 * 1024)
        ATOMK_RT(hipFuncSetAttribute((const void*)mla_attend_kernel<T, G>, hipFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)smem));
#endif
    const T* qt = static_cast<const T*>(q);
    const T* wt = static_cast<const T*>(kvb);
    T* ot = static_cast<T*>(out);
    for (int t0 = 0; t0 < tokens; t0 += chunk) {
        const int n = tokens - t0 < chunk ? tokens - t0 : chunk;
        // A lone token (batch-1 decode) takes the one-row absorb and up kernels: eight rows
        // would be seven of zeros, their FMAs and reductions on the step's critical path.
        const bool one = n == 1;
        const int row_blocks = (n + kAbsorbRows - 1) / kAbsorbRows;
        const dim3 absorb_grid(heads, (kv_rank + kAbsorbCols - 1) / kAbsorbCols, row_blocks);
        const T* qc = qt + (int64_t)t0 * heads * (nope + rope_dim);
        if (one)
            atomk_launch(mla_absorb_kernel<T, 1>, absorb_grid, dim3(kAbsorbThreads), 0, s, qc, wt, qlat, n, heads,
                         kv_rank, nope, rope_dim, vdim);
        else
            atomk_launch(mla_absorb_kernel<T, kAbsorbRows>, absorb_grid, dim3(kAbsorbThreads), 0, s, qc, wt, qlat, n,
                         heads, kv_rank, nope, rope_dim, vdim);
        ATOMK_LAUNCHED("mla_absorb_kernel");
        bool launched = false;
#if defined(ATOMK_CUDA)
        if constexpr (sizeof(T) == 2) {
            if (tc) {
                atomk_launch(mla_attend_tc_kernel<T>, dim3(n, (heads + kTcHeads - 1) / kTcHeads, splits),
                             dim3(kTcWarps * 32), mla_tc_smem(dim), s, (const T*)qlat, static_cast<const T*>(cache),
                             token_seq + t0, positions + t0, block_tables, table_stride, heads, kv_rank, rope_dim,
                             block_size, scale, olat, pacc, pm, pl);
                ATOMK_LAUNCHED("mla_attend_tc_kernel");
                launched = true;
            }
        }
#endif
        if (!launched) {
            atomk_launch(mla_attend_kernel<T, G>, dim3(n, (heads + G - 1) / G, splits), dim3(G * 16), smem, s,
                         (const T*)qlat, static_cast<const T*>(cache), token_seq + t0, positions + t0, block_tables,
                         table_stride, heads, kv_rank, rope_dim, block_size, scale, olat, pacc, pm, pl);
            ATOMK_LAUNCHED("mla_attend_kernel");
        }
        if (splits > 1) {
            atomk_launch(mla_merge_kernel<T>, dim3(n, heads, (kv_rank + kMergeCols - 1) / kMergeCols),
                         dim3(kMergeCols), 0, s, (const float*)pacc, (const float*)pm, (const float*)pl, olat, heads,
                         kv_rank, splits);
            ATOMK_LAUNCHED("mla_merge_kernel");
        }
        const dim3 up_grid(heads, (vdim + kUpWarps - 1) / kUpWarps, row_blocks);
        T* oc = ot + (int64_t)t0 * heads * vdim;
        if (one)
            atomk_launch(mla_up_kernel<T, 1>, up_grid, dim3(kUpWarps * ATOMK_WARP_SIZE), 0, s, (const T*)olat, wt, oc, n,
                         heads, kv_rank, nope, vdim);
        else
            atomk_launch(mla_up_kernel<T, kAbsorbRows>, up_grid, dim3(kUpWarps * ATOMK_WARP_SIZE), 0, s,
                         (const T*)olat, wt, oc, n, heads, kv_rank, nope, vdim);
        ATOMK_LAUNCHED("mla_up_kernel");
    }
    return ATOMK_OK;
}

}  // namespace

extern "C" {

int atomk_mla_write_kv(int dtype, void* q, const void* kv, const void* norm_w, void* cache, const int32_t* positions,
                       const int32_t* slots, const float* inv_freq, float attn_factor, int tokens, int heads,
                       int kv_rank, int nope, int rope_dim, int interleaved, float eps, int64_t num_slots,
                       void* stream) {
    if (int st = check_mla("atomk_mla_write_kv", tokens, heads, kv_rank, nope, rope_dim, 1)) return st;
    if (tokens == 0) return ATOMK_OK;
    ATOMK_DISPATCH(dtype, "atomk_mla_write_kv",
                   atomk_launch(mla_write_kernel<T>, dim3(tokens, heads + 1), dim3(kWriteThreads), 0,
                                ATOMK_STREAM(stream), static_cast<T*>(q), static_cast<const T*>(kv),
                                static_cast<const T*>(norm_w), static_cast<T*>(cache), positions, slots, inv_freq,
                                attn_factor, heads, kv_rank, nope, rope_dim, interleaved, eps, num_slots));
    ATOMK_LAUNCHED("mla_write_kernel");
    return ATOMK_OK;
}

int atomk_mla_workspace(int dtype, int tokens, int heads, int kv_rank, int rope_dim, int max_ctx, size_t* bytes) {
    if (!bytes) return atomk_fail(ATOMK_ERR_INVALID, "atomk_mla_workspace: null output");
    if (int st = check_mla("atomk_mla_workspace", tokens, heads, kv_rank, 1, rope_dim, 1)) return st;
    if (dtype != ATOMK_F32 && dtype != ATOMK_F16 && dtype != ATOMK_BF16)
        return atomk_fail(ATOMK_ERR_UNSUPPORTED, "atomk_mla_workspace: dtype %d", dtype);
    const int elem = elem_size(dtype), g = elem == 4 ? 8 : 16;
    const int chunk = mla_chunk(tokens > 0 ? tokens : 1, heads, kv_rank, rope_dim, elem);
    const int splits = mla_splits(chunk, heads, mla_use_tc(elem, kv_rank + rope_dim), g, max_ctx);
    *bytes = mla_work(chunk, heads, kv_rank, rope_dim, elem, splits).total;
    return ATOMK_OK;
}

int atomk_mla_attention(int dtype, void* out, const void* q, const void* kvb, const void* cache,
                        const int32_t* token_seq, const int32_t* positions, const int32_t* block_tables,
                        int block_table_stride, int tokens, int heads, int kv_rank, int nope, int rope_dim, int vdim,
                        int block_size, float scale, int max_ctx, void* workspace, size_t workspace_size,
                        void* stream) {
    if (int st = check_mla("atomk_mla_attention", tokens, heads, kv_rank, nope, rope_dim, vdim)) return st;
    if (block_size <= 0 || block_table_stride <= 0 || max_ctx <= 0 || !workspace)
        return atomk_fail(ATOMK_ERR_INVALID, "atomk_mla_attention: block_size=%d stride=%d max_ctx=%d workspace=%p",
                          block_size, block_table_stride, max_ctx, workspace);
    if (tokens == 0) return ATOMK_OK;
    ATOMK_DISPATCH(dtype, "atomk_mla_attention",
                   return launch_mla<T>(out, q, kvb, cache, token_seq, positions, block_tables, block_table_stride,
                                        tokens, heads, kv_rank, nope, rope_dim, vdim, block_size, scale, max_ctx,
                                        static_cast<unsigned char*>(workspace), workspace_size, ATOMK_STREAM(stream)));
    return ATOMK_OK;
}

}  // extern "C"
