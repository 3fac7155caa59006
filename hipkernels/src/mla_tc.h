// mla_tc.h: the tensor-core MLA attention kernel (CUDA, 16-bit types), included by mla.cu after
// its kMaxRank and mla_split_range; its tile constants and width rules are read by the launch
// code on both vendors (mla_splits, mla_use_tc).
//
// A block takes up to 16 query heads of one token (rows of the m16n8k16 A operand; rows past
// the token's heads are zeros) over one split of its context, walking it in tiles of kTcTile
// positions. The latent cache rows of a tile ([kv_c, k_pe], dim = kv_rank + rope_dim values)
// go global -> shared with cp.async, double buffered: the next tile is in flight while the
// current one is computed, and the cache slots of a tile's positions are looked up one tile
// earlier still, so no table read stands between a barrier and the copies. Per tile:
//   1. S = Q_lat · Kᵀ: warp w scores positions 8w..8w+7 of the tile for all 16 rows, one
//      m16n8k16 per 16 latent columns (K = dim, zero-padded to a multiple of 32). Scores are
//      scaled into base 2 and written to shared memory (masked to -inf past the split's end).
//   2. Every warp reads the tile's 16 x kTcTile scores in the A-fragment layout and runs the
//      same online softmax (fp32, base 2; identical inputs give identical maxima in every
//      warp), then O += P · V for its own kv_rank/4 columns: V is the tile's first kv_rank
//      columns, read by ldmatrix.trans straight from the K tile (the latent is both).
// The result is o_lat normalised (one split) or the unnormalised partition with its max (in
// natural-log units) and sum, the layout mla_merge_kernel reads.
//
// Fragment layouts (lane = 4g + c, g = groupID 0..7, c = 0..3), m16n8k16 row.col:
//   A (16x16, row-major): a0 = (row g, k 2c..2c+1), a1 = (row g+8, k 2c..), a2 = (row g,
//     k 2c+8..), a3 = (row g+8, k 2c+8..).
//   B (16x8, "col"): b0 = (k 2c..2c+1, n g), b1 = (k 2c+8.., n g).
//   C (16x8 fp32): c0, c1 = (row g, n 2c, 2c+1), c2, c3 = (row g+8, n 2c, 2c+1).
// Shared rows are padded by 16 bytes (row stride an odd number of 16-byte units), so the 8 rows
// an ldmatrix reads at one column fall on 8 different bank groups, with or without .trans.
#ifndef ATOMK_MLA_TC_H
#define ATOMK_MLA_TC_H

#include <math.h>
#include <stdint.h>

#include "atomk_internal.h"

namespace {

constexpr int kTcWarps = 4;
constexpr int kTcTile = 8 * kTcWarps;  // positions of one tile: 8 (one n tile of S) per warp
constexpr int kTcHeads = 16;           // query heads of a block: the M of the MMA
constexpr int kTcScoreLd = kTcTile + 8;  // score row stride (floats): float2 reads in 2 wavefronts
// Each context split of the tensor-core kernel holds at least this many positions (two tiles,
// both in flight at once).
constexpr int kTcMinSplit = 2 * kTcTile;

// Latent columns held per shared row: dim rounded up to whole 32-column ldmatrix steps; the
// row stride adds one 16-byte unit.
__host__ __device__ __forceinline__ int mla_tc_width(int dim) { return (dim + 31) / 32 * 32; }
__host__ __device__ __forceinline__ int mla_tc_ld(int dim) { return mla_tc_width(dim) + 8; }

// Dynamic shared memory of the kernel: Q (16 rows), two tiles, the scores.
inline size_t mla_tc_smem(int dim) {
    return (size_t)(kTcHeads + 2 * kTcTile) * mla_tc_ld(dim) * 2 + (size_t)kTcHeads * kTcScoreLd * sizeof(float);
}

// Whether the tensor-core kernel takes a latent of width dim: whole 16-byte pieces per cache
// row (cp.async copies them), kv_rank a multiple of 32 (check_mla: whole 8-column n tiles for
// each of the four warps).
inline bool mla_tc_fits(int dim) { return dim % 8 == 0; }

}  // namespace

#if defined(ATOMK_CUDA)

#include "atomk_mma.h"

namespace {

template <typename T>
__global__ void __launch_bounds__(kTcWarps * 32, 2)
    mla_attend_tc_kernel(const T* qlat, const T* cache, const int32_t* token_seq, const int32_t* positions,
                         const int32_t* block_tables, int table_stride, int heads, int kv_rank, int rope_dim,
                         int block_size, float scale, T* olat, float* part_acc, float* part_m, float* part_l) {
    // With split contexts (small decode batches) the split's first kTcMinSplit latent rows go
    // to L2 while the kernels before finish: the batch metadata is uploaded before the step's
    // kernels, and this step's cache rows are written through L2, where a prefetch can not make
    // a later load stale.
    if (gridDim.z > 1) {
        int b, e;
        mla_split_range(positions[blockIdx.x] + 1, blockIdx.z, gridDim.z, kTcTile, &b, &e);
        const int dim = kv_rank + rope_dim, lines = (dim * (int)sizeof(T) + 127) / 128;
        const int32_t* tb = block_tables + (int64_t)token_seq[blockIdx.x] * table_stride;
        for (int i = threadIdx.x; i < min(e - b, kTcMinSplit) * lines; i += blockDim.x) {
            const int p = b + i / lines;
            const T* row = cache + ((int64_t)tb[p / block_size] * block_size + p % block_size) * dim;
            atomk_prefetch_l2(reinterpret_cast<const char*>(row) + 128 * (i % lines));
        }
    }
    ATOMK_PDL_ENTER();
    extern __shared__ __align__(16) unsigned char mla_tc_smem_buf[];
    constexpr int NT = kMaxRank / 8 / kTcWarps;  // n tiles of O per warp, at most
    constexpr int KK = kTcTile / 16;             // k steps of P · V per tile
    const int dim = kv_rank + rope_dim, width = mla_tc_width(dim), ld = mla_tc_ld(dim);
    const int chunks = width / 8, data_chunks = dim / 8;  // 16-byte pieces of a shared row, of them holding data
    T* qs = reinterpret_cast<T*>(mla_tc_smem_buf);        // [kTcHeads][ld]
    T* tiles = qs + kTcHeads * ld;                         // [2][kTcTile][ld]
    float* ss = reinterpret_cast<float*>(tiles + 2 * kTcTile * ld);  // [kTcHeads][kTcScoreLd]

    const int t = blockIdx.x, h0 = blockIdx.y * kTcHeads, split = blockIdx.z, splits = gridDim.z;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, c = lane % 4;
    int begin, end;
    mla_split_range(positions[t] + 1, split, splits, kTcTile, &begin, &end);
    const int32_t* table = block_tables + (int64_t)token_seq[t] * table_stride;

    // Q rows h0..h0+15 of the token (zeros past the heads and in the padding columns).
    for (int i = threadIdx.x; i < kTcHeads * chunks; i += blockDim.x) {
        const int r = i / chunks, ch = i % chunks;
        const bool ok = h0 + r < heads && ch < data_chunks;
        cp_async16(qs + r * ld + 8 * ch, ok ? qlat + ((int64_t)t * heads + h0 + r) * dim + 8 * ch : qlat, ok ? 16 : 0);
    }

    // Warp w copies rows w + 4j (j < 8) of a tile; lane l holds the cache slot of row
    // w + 4(l % 8) of the tile being looked up (-1 past the split), handed out by shuffles.
    auto slot_of = [&](int base) {
        const int p = base + warp + kTcWarps * (lane % 8);
        return p < end ? table[p / block_size] * block_size + p % block_size : -1;
    };
    auto load_tile = [&](T* dst, int slots) {
#pragma unroll
        for (int j = 0; j < kTcTile / kTcWarps; ++j) {
            const int slot = __shfl_sync(0xffffffffu, slots, j);
            const T* src = cache + (int64_t)max(slot, 0) * dim;
            T* row = dst + (warp + kTcWarps * j) * ld;
            for (int ch = lane; ch < chunks; ch += 32) {
                const bool ok = slot >= 0 && ch < data_chunks;
                cp_async16(row + 8 * ch, ok ? src + 8 * ch : cache, ok ? 16 : 0);
            }
        }
    };

    const float scale2 = scale * 1.4426950408889634f;  // scores in base 2
    const int cols = kv_rank / kTcWarps, col0 = warp * cols, nts = cols / 8;
    float o[NT][4];  // n tile j: columns col0 + 8j + 2c (+1) of rows g (o[j][0..1]) and g+8 (o[j][2..3])
#pragma unroll
    for (int j = 0; j < NT; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;  // rows g, g+8: running max, this lane's sum

    int slots = slot_of(begin);
    if (begin < end) load_tile(tiles, slots);
    cp_async_commit();  // Q and tile 0
    slots = slot_of(begin + kTcTile);
#pragma unroll 1
    for (int base = begin, it = 0; base < end; base += kTcTile, ++it) {
        if (base + kTcTile < end) load_tile(tiles + ((it + 1) & 1) * kTcTile * ld, slots);
        cp_async_commit();  // possibly empty: the wait below always leaves this one group
        slots = slot_of(base + 2 * kTcTile);
        cp_async_wait_but_one();
        __syncthreads();  // tile it (and Q) visible to all warps
        const T* kt = tiles + (it & 1) * kTcTile * ld;

        // 1. Scores of rows 0..15 at positions 8*warp + n of the tile. ldmatrix_x4 of K: lane l
        // addresses position 8*warp + l%8, columns k0 + 8(l/8): b[0], b[1] are the B fragment
        // of k step k0, b[2], b[3] of k0 + 16. Of Q: row l%16, columns k + 8(l/16) give the A
        // fragment of the k step at k.
        // Two accumulators, one per k step of a pair: two chains of dependent MMAs, not one.
        float s[4] = {0.f, 0.f, 0.f, 0.f}, s2[4] = {0.f, 0.f, 0.f, 0.f};
        const T* krow = kt + (8 * warp + lane % 8) * ld + 8 * (lane / 8);
        const T* qrow = qs + (lane % 16) * ld + 8 * (lane / 16);
#pragma unroll 2
        for (int k0 = 0; k0 < width; k0 += 32) {
            uint32_t b[4], a[4], a2[4];
            ldmatrix_x4(b, krow + k0);
            ldmatrix_x4(a, qrow + k0);
            ldmatrix_x4(a2, qrow + k0 + 16);
            Mma<T>::run(s, a, b[0], b[1]);
            Mma<T>::run(s2, a2, b[2], b[3]);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) s[i] += s2[i];
        {
            const int p = base + 8 * warp + 2 * c;
            float* sr = ss + g * kTcScoreLd + 8 * warp + 2 * c;
            *reinterpret_cast<float2*>(sr) =
                make_float2(p < end ? s[0] * scale2 : -INFINITY, p + 1 < end ? s[1] * scale2 : -INFINITY);
            *reinterpret_cast<float2*>(sr + 8 * kTcScoreLd) =
                make_float2(p < end ? s[2] * scale2 : -INFINITY, p + 1 < end ? s[3] * scale2 : -INFINITY);
        }
        __syncthreads();  // all scores of the tile written

        // 2. Online softmax over the tile: lane (g, c) reads rows g and g+8 at positions
        // 16kk + 2c (+1) and 16kk + 2c + 8 (+1), its A fragments of P for k step kk; the four
        // lanes of a group cover the whole row. Position base < end is scored in every row,
        // so the maxima are finite.
        float2 v[2][KK][2];
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
            for (int kk = 0; kk < KK; ++kk)
#pragma unroll
                for (int hh = 0; hh < 2; ++hh)
                    v[r][kk][hh] = *reinterpret_cast<const float2*>(ss + (g + 8 * r) * kTcScoreLd + 16 * kk + 8 * hh + 2 * c);
        float mx[2] = {m0, m1};
#pragma unroll
        for (int r = 0; r < 2; ++r) {
#pragma unroll
            for (int kk = 0; kk < KK; ++kk)
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) mx[r] = fmaxf(mx[r], fmaxf(v[r][kk][hh].x, v[r][kk][hh].y));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        }
        const float corr0 = exp2f(m0 - mx[0]), corr1 = exp2f(m1 - mx[1]);  // 0 on the first tile
        m0 = mx[0];
        m1 = mx[1];
        uint32_t pa[KK][4];
        float rs[2] = {0.f, 0.f};
#pragma unroll
        for (int kk = 0; kk < KK; ++kk)
#pragma unroll
            for (int r = 0; r < 2; ++r)
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                    const float e0 = exp2f(v[r][kk][hh].x - mx[r]), e1 = exp2f(v[r][kk][hh].y - mx[r]);
                    rs[r] += e0 + e1;
                    pa[kk][2 * hh + r] = Mma<T>::pack(e0, e1);  // a0 (g, lo), a1 (g+8, lo), a2 (g, hi), a3 (g+8, hi)
                }
        l0 = l0 * corr0 + rs[0];
        l1 = l1 * corr1 + rs[1];

        // O = O·corr + P·V over the warp's columns, two n tiles per ldmatrix_x4.trans: lane l
        // addresses position 16kk + l%8 + 8((l/8)%2), column n0 + 8(l/16), so b[0], b[1] are
        // the B fragment of n tile n0 and b[2], b[3] of n0 + 8. With an odd count of n tiles
        // (kv_rank 32) the last x4 also reads the next 8 columns, in the row, and drops them.
        const T* vrow = kt + (lane % 8 + 8 * ((lane / 8) % 2)) * ld + col0 + 8 * (lane / 16);
#pragma unroll
        for (int j = 0; j < NT; j += 2) {
            if (j < nts) {
#pragma unroll
                for (int jj = j; jj < j + 2; ++jj) {
                    o[jj][0] *= corr0;
                    o[jj][1] *= corr0;
                    o[jj][2] *= corr1;
                    o[jj][3] *= corr1;
                }
#pragma unroll
                for (int kk = 0; kk < KK; ++kk) {
                    uint32_t b[4];
                    ldmatrix_x4_trans(b, vrow + 16 * kk * ld + 8 * j);
                    Mma<T>::run(o[j], pa[kk], b[0], b[1]);
                    if (j + 1 < nts) Mma<T>::run(o[j + 1], pa[kk], b[2], b[3]);
                }
            }
        }
        __syncthreads();  // the tile and the scores are read: the next copies may overwrite them
    }
    cp_async_wait_all();  // an empty split leaves its Q copies in flight

    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int h = h0 + g + 8 * r;
        if (h >= heads) continue;
        const int64_t row = (int64_t)t * heads + h;
        const float l = r ? l1 : l0;
        if (splits == 1) {
            const float inv = l > 0.f ? 1.f / l : 0.f;
            uint32_t* dst = reinterpret_cast<uint32_t*>(olat + row * kv_rank + col0 + 2 * c);
#pragma unroll
            for (int j = 0; j < NT; ++j)
                if (j < nts) dst[4 * j] = Mma<T>::pack(o[j][2 * r] * inv, o[j][2 * r + 1] * inv);
        } else {
            const int64_t pi = row * splits + split;
            float2* dst = reinterpret_cast<float2*>(part_acc + pi * kv_rank + col0 + 2 * c);
#pragma unroll
            for (int j = 0; j < NT; ++j)
                if (j < nts) dst[4 * j] = make_float2(o[j][2 * r], o[j][2 * r + 1]);
            if (warp == 0 && c == 0) {
                part_m[pi] = (r ? m1 : m0) * 0.6931471805599453f;  // -inf for an empty split
                part_l[pi] = l;
            }
        }
    }
}

}  // namespace

#endif  // ATOMK_CUDA

#endif  // ATOMK_MLA_TC_H
