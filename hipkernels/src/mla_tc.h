// mla_tc.h: the tensor-core MLA attention kernel (CUDA, 16-bit types), included by mla.cu after
// its kMaxRank, kMaxLatent and mla_split_range; its tile constants and width rules are read by
// the launch code on both vendors (mla_splits, mla_use_tc).
//
// A block of eight warps takes up to 16 query heads of one token (rows of the m16n8k16 A
// operand; rows past the token's heads are zeros) over one split of its context, walking it in
// tiles of kTcTile positions; one block fills a multiprocessor. The latent cache rows of a tile
// ([kv_c, k_pe], dim = kv_rank + rope_dim values) go global -> shared with cp.async through a
// ring of kTcStages tiles: kTcStages - 1 tiles are in flight while one is computed (a decode
// step is a stream of the cache at the memory's rate only with that many bytes outstanding),
// and the cache slots of a tile's positions are looked up one tile before its copies are issued,
// so no table read stands between a barrier and the copies. Q's A fragments are loaded once into
// registers. Per tile:
//   1. S = Q_lat · Kᵀ: warp w scores positions 8(w%4)..8(w%4)+7 of the tile for all 16 rows over
//      half of the latent columns (w/4: the first or the second half of the 32-column steps;
//      K = dim, zero-padded to a multiple of 32), one m16n8k16 per 16 columns, and writes its
//      partial scores to shared memory.
//   2. Every warp reads the tile's 16 x kTcTile scores (the two halves added, scaled into base 2,
//      masked to -inf past the split's end) in the A-fragment layout and runs the same online
//      softmax (fp32, base 2; identical inputs give identical maxima in every warp), then
//      O += P · V for its own kv_rank/8 columns: V is the tile's first kv_rank columns, read by
//      ldmatrix.trans straight from the K tile (the latent is both).
// Two barriers a tile: after the tile lands (every warp is also done with the stage the next
// copies overwrite and with the previous scores), and after the scores are written.
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

constexpr int kTcWarps = 8;
constexpr int kTcPosGroups = 4;               // warps along the tile's positions (the rest split K)
constexpr int kTcTile = 8 * kTcPosGroups;     // positions of one tile: 8 (one n tile of S) per group
constexpr int kTcHeads = 16;                  // query heads of a block: the M of the MMA
constexpr int kTcStages = 4;                  // tiles of the shared ring
constexpr int kTcScoreLd = kTcTile + 8;       // score row stride (floats): float2 reads in 2 wavefronts
// Each context split of the tensor-core kernel holds at least this many positions of the
// context bound (two tiles, both in flight at once).
constexpr int kTcMinSplit = 2 * kTcTile;

// Latent columns held per shared row: dim rounded up to whole 32-column ldmatrix steps; the
// row stride adds one 16-byte unit.
__host__ __device__ __forceinline__ int mla_tc_width(int dim) { return (dim + 31) / 32 * 32; }
__host__ __device__ __forceinline__ int mla_tc_ld(int dim) { return mla_tc_width(dim) + 8; }

// Dynamic shared memory of the kernel: Q (16 rows), the ring of tiles, the two halves' scores.
inline size_t mla_tc_smem(int dim) {
    return (size_t)(kTcHeads + kTcStages * kTcTile) * mla_tc_ld(dim) * 2 +
           (size_t)2 * kTcHeads * kTcScoreLd * sizeof(float);
}

// Whether the tensor-core kernel takes a latent of width dim: whole 16-byte pieces per cache
// row (cp.async copies them). kv_rank is a multiple of 32 (check_mla): whole 8-column n tiles.
inline bool mla_tc_fits(int dim) { return dim % 8 == 0; }

}  // namespace

#if defined(ATOMK_CUDA)

#include "atomk_mma.h"

namespace {

// Waits until at most the newest n committed cp.async groups are still in flight.
template <int n> __device__ __forceinline__ void cp_async_wait_newest() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(n) : "memory");
}

template <typename T>
__global__ void __launch_bounds__(kTcWarps * 32, 1)
    mla_attend_tc_kernel(const T* qlat, const T* cache, const int32_t* token_seq, const int32_t* positions,
                         const int32_t* block_tables, int table_stride, int heads, int kv_rank, int rope_dim,
                         int block_size, float scale, T* olat, float* part_acc, float* part_m, float* part_l) {
    constexpr int NT = kMaxRank / 8 / kTcWarps;    // n tiles of O per warp, at most
    constexpr int KQ = (kMaxLatent / 32 + 1) / 2 * 2;  // k steps of Q per warp (half the columns), at most
    constexpr int KK = kTcTile / 16;               // k steps of P · V per tile
    constexpr int RW = kTcTile / kTcWarps;         // tile rows a warp copies
    constexpr int LC = (kMaxLatent / 8 + 31) / 32;  // 16-byte pieces of a row per lane, at most
    // With split contexts (small decode batches) the split's first tiles go to L2 while the
    // kernels before finish: the batch metadata is uploaded before the step's kernels, and this
    // step's cache rows are written through L2, where a prefetch can not make a later load stale.
    if (gridDim.z > 1) {
        int b, e;
        mla_split_range(positions[blockIdx.x] + 1, blockIdx.z, gridDim.z, kTcTile, &b, &e);
        const int dim = kv_rank + rope_dim, lines = (dim * (int)sizeof(T) + 127) / 128;
        const int32_t* tb = block_tables + (int64_t)token_seq[blockIdx.x] * table_stride;
        for (int i = threadIdx.x; i < min(e - b, (kTcStages - 1) * kTcTile) * lines; i += blockDim.x) {
            const int p = b + i / lines;
            const T* row = cache + ((int64_t)tb[p / block_size] * block_size + p % block_size) * dim;
            atomk_prefetch_l2(reinterpret_cast<const char*>(row) + 128 * (i % lines));
        }
    }
    ATOMK_PDL_ENTER();
    extern __shared__ __align__(16) unsigned char mla_tc_smem_buf[];
    const int dim = kv_rank + rope_dim, width = mla_tc_width(dim), ld = mla_tc_ld(dim);
    const int chunks = width / 8, data_chunks = dim / 8;  // 16-byte pieces of a shared row, of them holding data
    T* qs = reinterpret_cast<T*>(mla_tc_smem_buf);        // [kTcHeads][ld]
    T* tiles = qs + kTcHeads * ld;                         // [kTcStages][kTcTile][ld]
    float* ss = reinterpret_cast<float*>(tiles + kTcStages * kTcTile * ld);  // [2][kTcHeads][kTcScoreLd]

    const int t = blockIdx.x, h0 = blockIdx.y * kTcHeads, split = blockIdx.z, splits = gridDim.z;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, c = lane % 4;
    // This warp's positions 8pg..8pg+7 of a tile and its half kh of the 32-column steps of S:
    // steps u0..u0+nu-1 (the first half takes the odd one).
    const int pg = warp % kTcPosGroups, kh = warp / kTcPosGroups, units = width / 32;
    const int u0 = kh ? (units + 1) / 2 : 0, nu = kh ? units / 2 : (units + 1) / 2;
    int begin, end;
    mla_split_range(positions[t] + 1, split, splits, kTcTile, &begin, &end);
    const int32_t* table = block_tables + (int64_t)token_seq[t] * table_stride;

    // Q rows h0..h0+15 of the token (zeros past the heads and in the padding columns).
    for (int i = threadIdx.x; i < kTcHeads * chunks; i += blockDim.x) {
        const int r = i / chunks, ch = i % chunks;
        const bool ok = h0 + r < heads && ch < data_chunks;
        cp_async16(qs + r * ld + 8 * ch, ok ? qlat + ((int64_t)t * heads + h0 + r) * dim + 8 * ch : qlat, ok ? 16 : 0);
    }
    cp_async_commit();

    // Warp w copies rows w + 8j (j < RW) of a tile; lane l holds the cache slot of row
    // w + 8(l % RW) of the tile being looked up (-1 past the split), handed out by shuffles.
    auto slot_of = [&](int base) {
        const int p = base + warp + kTcWarps * (lane % RW);
        return p < end ? table[p / block_size] * block_size + p % block_size : -1;
    };
    auto load_tile = [&](T* dst, int slots) {
#pragma unroll
        for (int j = 0; j < RW; ++j) {
            const int slot = __shfl_sync(0xffffffffu, slots, j);
            const T* src = cache + (int64_t)max(slot, 0) * dim;
            T* row = dst + (warp + kTcWarps * j) * ld;
#pragma unroll
            for (int u = 0; u < LC; ++u) {
                const int ch = lane + 32 * u;
                if (ch < chunks) {
                    const bool ok = slot >= 0 && ch < data_chunks;
                    cp_async16(row + 8 * ch, ok ? src + 8 * ch : cache, ok ? 16 : 0);
                }
            }
        }
    };

    // The first kTcStages - 1 tiles, their table reads all issued before the first copy; one
    // commit group per tile, empty past the split.
    {
        int first[kTcStages - 1];
#pragma unroll
        for (int i = 0; i < kTcStages - 1; ++i) first[i] = slot_of(begin + i * kTcTile);
#pragma unroll
        for (int i = 0; i < kTcStages - 1; ++i) {
            if (begin + i * kTcTile < end) load_tile(tiles + i * kTcTile * ld, first[i]);
            cp_async_commit();
        }
    }
    int slots = slot_of(begin + (kTcStages - 1) * kTcTile);

    // Q's A fragments of this warp's k steps: lane l addresses row l%16, columns k + 8(l/16).
    cp_async_wait_newest<kTcStages - 1>();  // Q landed (the tiles may still be in flight)
    __syncthreads();
    uint32_t qa[KQ][4];
    {
        const T* qrow = qs + (lane % 16) * ld + 8 * (lane / 16) + 32 * u0;
#pragma unroll
        for (int i = 0; i < KQ; ++i) {
            if (i < 2 * nu)
                ldmatrix_x4(qa[i], qrow + 16 * i);
            else
                qa[i][0] = qa[i][1] = qa[i][2] = qa[i][3] = 0u;
        }
    }

    const float scale2 = scale * 1.4426950408889634f;  // scores in base 2
    // This warp's n tiles of O: j0..j0+nts-1 of the kv_rank/8 (none for the last warps of a
    // narrow latent).
    const int ntot = kv_rank / 8, per = (ntot + kTcWarps - 1) / kTcWarps, j0 = warp * per;
    const int nts = max(0, min(per, ntot - j0));
    float o[NT][4];  // n tile j: columns 8(j0 + j) + 2c (+1) of rows g (o[j][0..1]) and g+8 (o[j][2..3])
#pragma unroll
    for (int j = 0; j < NT; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;  // rows g, g+8: running max, this lane's sum

#pragma unroll 1
    for (int base = begin, it = 0; base < end; base += kTcTile, ++it) {
        cp_async_wait_newest<kTcStages - 2>();  // tile it landed (this thread's copies)
        __syncthreads();  // ... all of them; every warp is done with tile it-1 and its scores
        {
            const int nb = base + (kTcStages - 1) * kTcTile;
            if (nb < end) load_tile(tiles + ((it + kTcStages - 1) % kTcStages) * kTcTile * ld, slots);
            cp_async_commit();  // possibly empty: the wait above always counts kTcStages - 2 newer groups
            slots = slot_of(nb + kTcTile);
        }
        const T* kt = tiles + (it % kTcStages) * kTcTile * ld;

        // 1. Partial scores of rows 0..15 at positions 8pg + n over this warp's column steps.
        // ldmatrix_x4 of K: lane l addresses position 8pg + l%8, columns k0 + 8(l/8): b[0], b[1]
        // are the B fragment of k step k0, b[2], b[3] of k0 + 16. Two accumulators: two chains
        // of dependent MMAs, not one.
        {
            float s[4] = {0.f, 0.f, 0.f, 0.f}, s2[4] = {0.f, 0.f, 0.f, 0.f};
            const T* krow = kt + (8 * pg + lane % 8) * ld + 8 * (lane / 8) + 32 * u0;
#pragma unroll
            for (int i = 0; i < KQ / 2; ++i) {
                if (i < nu) {
                    uint32_t b[4];
                    ldmatrix_x4(b, krow + 32 * i);
                    Mma<T>::run(s, qa[2 * i], b[0], b[1]);
                    Mma<T>::run(s2, qa[2 * i + 1], b[2], b[3]);
                }
            }
            float* sr = ss + (kh * kTcHeads + g) * kTcScoreLd + 8 * pg + 2 * c;
            *reinterpret_cast<float2*>(sr) = make_float2(s[0] + s2[0], s[1] + s2[1]);
            *reinterpret_cast<float2*>(sr + 8 * kTcScoreLd) = make_float2(s[2] + s2[2], s[3] + s2[3]);
        }
        __syncthreads();  // all partial scores of the tile written

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
                for (int hh = 0; hh < 2; ++hh) {
                    const int off = (g + 8 * r) * kTcScoreLd + 16 * kk + 8 * hh + 2 * c, p = base + 16 * kk + 8 * hh + 2 * c;
                    const float2 x = *reinterpret_cast<const float2*>(ss + off);
                    const float2 y = *reinterpret_cast<const float2*>(ss + kTcHeads * kTcScoreLd + off);
                    v[r][kk][hh] = make_float2(p < end ? (x.x + y.x) * scale2 : -INFINITY,
                                               p + 1 < end ? (x.y + y.y) * scale2 : -INFINITY);
                }
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
        // addresses position 16kk + l%8 + 8((l/8)%2), column 8(j0 + j) + 8(l/16), so b[0], b[1]
        // are the B fragment of n tile j and b[2], b[3] of j + 1. With an odd count of n tiles
        // the last x4 also reads the next 8 columns, in the row (width >= kv_rank + 32), and
        // drops them.
        const T* vrow = kt + (lane % 8 + 8 * ((lane / 8) % 2)) * ld + 8 * j0 + 8 * (lane / 16);
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
    }
    cp_async_wait_all();

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
            uint32_t* dst = reinterpret_cast<uint32_t*>(olat + row * kv_rank + 8 * j0 + 2 * c);
#pragma unroll
            for (int j = 0; j < NT; ++j)
                if (j < nts) dst[4 * j] = Mma<T>::pack(o[j][2 * r] * inv, o[j][2 * r + 1] * inv);
        } else {
            const int64_t pi = row * splits + split;
            float2* dst = reinterpret_cast<float2*>(part_acc + pi * kv_rank + 8 * j0 + 2 * c);
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
