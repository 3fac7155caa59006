// attention_decode.h: the pieces of atomk_paged_attention shared by its two kernels (how a
// token's context is split, how a block's warps are merged) and the tensor-core decode kernel.
// Included by attention.cu only (kept apart to keep each file readable).
#ifndef ATOMK_ATTENTION_DECODE_H
#define ATOMK_ATTENTION_DECODE_H

#include <math.h>
#include <stdint.h>

#include "atomk_internal.h"

namespace {

constexpr int kWarps = 4;              // warps per block; each walks its own context positions
constexpr int kMaxGroup = 8;           // query heads per block, at most
// A token's partitions hold at least this many positions (kMinPartition in attention.cu).
constexpr int kMinSplitPositions = 64;
// K/V rows a decode block fetches into L2 before its wait (at most the block's threads).
constexpr int kPrefetchPositions = 64;

// Positions of context partition `split` of a token with ctx positions, as [*begin, *end). With
// S splits each covers P = ceil(ctx/S) positions (at least min(partition, kMinSplitPositions)),
// rounded up to a multiple of `quantum`: the token's own context divided evenly, whatever bound
// on the context chose S (a graph captured for the longest sequence still spreads a short one).
// Trailing partitions may be empty. split_positions is P.
__device__ __forceinline__ int split_positions(int ctx, int splits, int partition, int quantum) {
    if (splits <= 1) return ctx;
    const int part = max((ctx + splits - 1) / splits, min(partition, kMinSplitPositions));
    return (part + quantum - 1) / quantum * quantum;
}

__device__ __forceinline__ void split_range(int ctx, int split, int splits, int partition, int quantum, int* begin,
                                            int* end) {
    const int part = split_positions(ctx, splits, partition, quantum);
    *begin = min(ctx, split * part);
    *end = min(ctx, *begin + part);
}

// The partitions of split_range that hold positions (a prefix; the rest are empty).
__device__ __forceinline__ int split_count(int ctx, int splits, int partition, int quantum) {
    const int part = split_positions(ctx, splits, partition, quantum);
    return min(splits, (ctx + part - 1) / part);
}

// The first context position a query at position pos attends to: pos-window+1 under a sliding
// window (window > 0), else 0.
__device__ __forceinline__ int attn_from(int pos, int window) { return window > 0 ? max(0, pos - window + 1) : 0; }

// The positions a query at position pos attends to, attn_from(pos, window)..pos, as a count
// (what split_range and split_count divide: a windowed token spreads only its window).
__device__ __forceinline__ int attn_len(int pos, int window) { return pos + 1 - attn_from(pos, window); }

// split_range over the positions a query at position pos attends to, as absolute positions.
__device__ __forceinline__ void token_split_range(int pos, int window, int split, int splits, int partition,
                                                  int quantum, int* begin, int* end) {
    const int from = attn_from(pos, window);
    split_range(pos + 1 - from, split, splits, partition, quantum, begin, end);
    *begin += from;
    *end += from;
}

// Fills sink_m[0..G) (shared memory) with the block's heads' sink logits for merge_warps_store:
// sinks[h0 + g] in partition 0, -inf elsewhere (no sink, heads past hpb, other partitions).
// Called by every thread before a barrier that precedes merge_warps_store (the decode kernel: the
// one after its Q load, so that nothing of it stays live in registers across the main loop).
__device__ __forceinline__ void store_sinks(float* sink_m, const float* sinks, int G, int hpb, int h0, int split) {
    const int g = threadIdx.x;
    if (g < G) sink_m[g] = sinks != nullptr && split == 0 && g < hpb ? sinks[h0 + g] : -INFINITY;
}

// The end of both kernels: merges the kWarps warps' results of the block's hpb query heads from
// shared memory (acc [kWarps][G][head_dim], m and l [kWarps][G], G >= hpb the row stride) as
// M = max_w m_w, weight_w = exp(m_w - M), acc = Σ_w acc_w · weight_w, l = Σ_w l_w · weight_w (the
// m in natural-log units, as the merge kernel reads them). With one partition it writes out = acc / l; otherwise
// acc, M and l to the partial buffers, row (token t, head h) partition `split` at
// (row * splits + split). A warp that saw no position has m = -inf and weight 0; a block that saw
// none (a partition past the token's context) writes m = -inf, l = 0 and zeros, so that the
// merge kernel may read every partition without first finding out which hold positions.
// A sink (sink_m[g] > -inf, store_sinks: partition 0 only, so once per (token, head)) is one more
// logit with no value: a state m = sink, l = e^0, acc = 0 merged with the warps' in fp32, which
// the partitions' merge then carries like any other (probabilities are rounded to 16 bits for
// the tensor cores relative to the scores' own maximum, never to a larger sink).
template <typename T>
__device__ void merge_warps_store(const float* merge_acc, const float* merge_m, const float* merge_l, int G, int hpb,
                                  int head_dim, int t, int h0, int num_heads, int split, int splits, T* out,
                                  float* part_acc, float* part_m, float* part_l, const float* sink_m) {
    for (int j = threadIdx.x; j < hpb * head_dim; j += blockDim.x) {
        const int g = j / head_dim, d = j % head_dim;
        const float sk = sink_m[g];
        float mx = sk;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, merge_m[w * G + g]);
        float a = 0.f, sum = sk == -INFINITY ? 0.f : expf(sk - mx);
#pragma unroll
        for (int w = 0; w < kWarps; ++w) {
            const float mw = merge_m[w * G + g];
            const float wt = mw == -INFINITY ? 0.f : expf(mw - mx);
            a += merge_acc[(w * G + g) * head_dim + d] * wt;
            sum += merge_l[w * G + g] * wt;
        }
        const size_t row = (size_t)t * num_heads + h0 + g;  // (token, query head)
        if (splits == 1) {
            out[row * head_dim + d] = atomk_from_float<T>(a / sum);
        } else {
            const size_t pi = row * splits + split;
            part_acc[pi * head_dim + d] = mx == -INFINITY ? 0.f : a;
            if (d == 0) {
                part_m[pi] = mx;
                part_l[pi] = sum;
            }
        }
    }
}

#if defined(ATOMK_CUDA)
// ---------------------------------------------------------------- tensor-core decode kernel
// Why a second kernel: the portable one converts every K/V element to float and reduces each
// score across a warp with shuffles, so at GQA 4 its arithmetic, not the memory, sets the pace
// (0.4-0.6 TB/s of KV on an H200). Here K/V go from memory to mma.sync fragments untouched:
// 16-byte loads, no shared-memory staging, no conversion, and the group's dot products are
// one m16n8k16 per 16 head dims and 8 positions. The group (hpb <= 8 query heads) fills rows
// 0..hpb-1 of the 16-row A operand; the rest are zeros: decode is bound by the KV read, so the
// idle half of the tensor core costs nothing.
//
// Layout (lane = 4*g + c, g = mma groupID 0..7, c = thread in group 0..3). A warp step covers
// KT tiles of 8 consecutive positions; in each tile:
//  - S = Q·Kᵀ, m16n8k16 over the head dims, B = Kᵀ with column n = position n of the tile:
//    lane (g, c) loads key row g of the tile as D/32 16-byte pieces at dims 8*(c + 4i), i.e.
//    the four lanes of a group read 64 contiguous bytes per load. The dot product does not care
//    in which order dims are summed, so mma chunk 2i+h takes its k slots {2c,2c+1 | 2c+8,2c+9}
//    from dims 8*(c+4i) + 4h + {0,1 | 2,3} of those pieces, and Q's A fragment (row g = head g)
//    is loaded with the same map. The result gives lane (g, c) the scores of head g at
//    positions 2c and 2c+1 of the tile.
//  - O += P·V, m16n8k8 (or m16n8k16 over a pair of tiles) over the positions, n over the head
//    dims: the A fragment of P is exactly the lane's two probabilities (packed to 16 bits); the
//    B fragment needs, per n tile, V at positions 2c and 2c+1 for one dim, so lane (g, c)
//    loads those two rows at dims 64j + 8g .. +7 (eight lanes read 128 contiguous bytes) and
//    pairs the halves with byte permutes: n tile 8j + e, column n is dim 64j + 8n + e. The
//    position offsets come from the lanes that looked them up for K (a shuffle).
// The online softmax runs in base 2 on fp32 scores (pre-multiplied by scale·log2 e); a row's
// maximum is shared by its four lanes with two shuffles. Block table entries for the next step
// are read while the current one computes. Positions past the partition are neither loaded
// (their K/V registers are zero) nor weighted (score -inf). Under a sliding window the
// partitions divide only the window (token_split_range): positions before it are never read.
//
// A block is kWarps warps on one (token, head group, partition); warps interleave their steps,
// so each KV row is read once per block and the warps are merged as in the portable kernel.

// 16-bit fragment helpers per storage type.
template <typename T> struct Frag;
template <> struct Frag<atomk_bf16> {
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t*>(&v);
    }
    // d[0..1] += A·B for rows 0-7 of A (a0: k 0-7, a2: k 8-15), rows 8-15 zero.
    static __device__ __forceinline__ void mma16(float* d, uint32_t a0, uint32_t a2, uint32_t b0, uint32_t b1) {
        [[maybe_unused]] float z2, z3;
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%5}, {%7,%8}, "
            "{%0,%1,%9,%9};"
            : "+f"(d[0]), "+f"(d[1]), "=f"(z2), "=f"(z3)
            : "r"(a0), "r"(0u), "r"(a2), "r"(b0), "r"(b1), "f"(0.f));
    }
    static __device__ __forceinline__ void mma8(float* d, uint32_t a0, uint32_t b0) {
        [[maybe_unused]] float z2, z3;
        asm("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%7,%7};"
            : "+f"(d[0]), "+f"(d[1]), "=f"(z2), "=f"(z3)
            : "r"(a0), "r"(0u), "r"(b0), "f"(0.f));
    }
};
template <> struct Frag<atomk_f16> {
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __half2 v = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t*>(&v);
    }
    static __device__ __forceinline__ void mma16(float* d, uint32_t a0, uint32_t a2, uint32_t b0, uint32_t b1) {
        [[maybe_unused]] float z2, z3;
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%5}, {%7,%8}, "
            "{%0,%1,%9,%9};"
            : "+f"(d[0]), "+f"(d[1]), "=f"(z2), "=f"(z3)
            : "r"(a0), "r"(0u), "r"(a2), "r"(b0), "r"(b1), "f"(0.f));
    }
    static __device__ __forceinline__ void mma8(float* d, uint32_t a0, uint32_t b0) {
        [[maybe_unused]] float z2, z3;
        asm("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%7,%7};"
            : "+f"(d[0]), "+f"(d[1]), "=f"(z2), "=f"(z3)
            : "r"(a0), "r"(0u), "r"(b0), "f"(0.f));
    }
};

__device__ __forceinline__ uint32_t word(const uint4& v, int w) { return w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w; }

__device__ __forceinline__ uint4 load16(const void* p) { return __ldg(static_cast<const uint4*>(p)); }

// A 16-byte shared-memory load the compiler may not hoist out of a loop into registers.
__device__ __forceinline__ uint4 lds16(const uint4* p) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"((unsigned)__cvta_generic_to_shared(p)));
    return v;
}

// 8-position tiles per warp step, and the launch bound: each warp keeps 4 KB (head_dim 128,
// 1 tile) to 8 KB (64: 4 tiles; 256: 1 tile) of K/V in flight, and four blocks share an SM (two
// for head_dim 256), about 64 KB per SM, which covers the memory latency at full bandwidth.
// Two tiles at head_dim 128 need ~150 registers (three blocks per SM): the same bytes in
// flight per SM, so a grid of more than three blocks per SM (a 64 x 2048 decode is 512 blocks)
// keeps one tile. A grid that fits three blocks per SM takes the Wide instance (two tiles) when
// its context is split: a small decode batch, where a block's 64-position partition is then
// one loop step per warp instead of two, each a dependent round trip to L2 on the step's
// critical path (a measurable share of the batch-1 step).
template <int D, bool Wide = false> struct DecodeTiles {
    static constexpr int value = D <= 64 ? 4 : D == 128 ? (Wide ? 2 : 1) : 1;
    static constexpr int min_blocks = D >= 256 ? 2 : D == 128 && value > 1 ? 3 : 4;  // per SM
};

// Fetches the K and V rows of one cache slot (one head's D values each) into L2.
template <typename T, int D>
__device__ __forceinline__ void prefetch_kv_row(const T* k_head, const T* v_head, size_t kv_row, int slot) {
    const char* kp = reinterpret_cast<const char*>(k_head + (size_t)slot * kv_row);
    const char* vp = reinterpret_cast<const char*>(v_head + (size_t)slot * kv_row);
#pragma unroll
    for (int b = 0; b < D * (int)sizeof(T); b += 128) atomk_prefetch_l2(kp + b), atomk_prefetch_l2(vp + b);
}

// Wide: two 8-position tiles per warp step at head_dim 128 (DecodeTiles; the launch picks it).
template <typename T, int D, bool Wide = false>
__global__ void __launch_bounds__(kWarps * 32, DecodeTiles<D, Wide>::min_blocks)
decode_attention_kernel(T* out, float* part_acc, float* part_m, float* part_l, const T* q,
                        const T* k_cache, const T* v_cache, const int32_t* token_seq, const int32_t* positions,
                        const int32_t* block_tables, int bt_stride, int num_heads, int num_kv_heads, int hpb,
                        int block_size, float scale, int partition, int window, const float* sinks) {
    // With split contexts (small decode batches) the block's first K and V rows go to L2 while
    // the previous kernel (RoPE, writing this step's rows through L2) finishes: the metadata is
    // uploaded before the step's kernels, and L2 is coherent, so nothing read after the wait can
    // be stale. Only then, and only the first kPrefetchPositions: at batch 64-256 (one split,
    // whole contexts per block) prefetching everything doubled the KV traffic and slowed the
    // step by a fifth. Everything is computed again after the
    // wait: values kept across it made ptxas spill in the main loop.
    if (gridDim.z > 1 && threadIdx.x < kPrefetchPositions) {
        int b, e;
        token_split_range(positions[blockIdx.x], window, blockIdx.z, gridDim.z, partition,
                          8 * DecodeTiles<D, Wide>::value * kWarps, &b, &e);
        const int p = b + threadIdx.x;
        if (p < e) {
            const int32_t* tb = block_tables + (size_t)token_seq[blockIdx.x] * bt_stride;
            const size_t kvh = (size_t)(blockIdx.y * hpb / (num_heads / num_kv_heads));
            prefetch_kv_row<T, D>(k_cache + kvh * D, v_cache + kvh * D, (size_t)num_kv_heads * D,
                                  tb[p / block_size] * block_size + p % block_size);
        }
    }
    ATOMK_PDL_ENTER();
    constexpr int KT = DecodeTiles<D, Wide>::value, STEP = 8 * KT;
    constexpr int KP = D / 32;  // 16-byte pieces of a key row per lane
    constexpr int VP = D / 64;  // 16-byte pieces of a value row per lane and position
    constexpr int NT = D / 8;   // n tiles of P·V
    __shared__ float merge_acc[kWarps * kMaxGroup * D];
    __shared__ float merge_m[kWarps * kMaxGroup], merge_l[kWarps * kMaxGroup];
    __shared__ uint4 q_frag[KP * 32];  // piece i of lane (g, c)'s Q row g at [i*32 + lane]
    __shared__ float sink_m[kMaxGroup];

    const int t = blockIdx.x, h0 = blockIdx.y * hpb, split = blockIdx.z, splits = gridDim.z;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, c = lane % 4;
    int begin, end;
    token_split_range(positions[t], window, split, splits, partition, STEP * kWarps, &begin, &end);
    const int32_t* table = block_tables + (size_t)token_seq[t] * bt_stride;
    const T* k_head = k_cache + (size_t)(h0 / (num_heads / num_kv_heads)) * D;
    const T* v_head = v_cache + (size_t)(h0 / (num_heads / num_kv_heads)) * D;
    const size_t kv_row = (size_t)num_kv_heads * D;
    // Cache slot of position p, -1 past the partition (slots fit int32: the slot mapping is
    // int32).
    auto slot_of = [&](int p) { return p < end ? table[p / block_size] * block_size + p % block_size : -1; };

    // Q of the group, each lane's pieces in the layout of a key row (rows g >= hpb are zero).
    // Kept in shared memory rather than registers, which go to K/V in flight (Q in registers,
    // loaded by each lane so that no barrier holds the first K/V loads, was no faster). A block
    // past the token's context (begin == end) computes nothing: it loads no Q.
    for (int j = threadIdx.x; j < KP * 32; j += blockDim.x) {
        const int i = j / 32, gj = j % 32 / 4, cj = j % 4;
        const T* qh = q + ((size_t)t * num_heads + h0 + gj) * D;
        q_frag[j] = gj < hpb && begin < end ? load16(qh + 8 * (cj + 4 * i)) : make_uint4(0, 0, 0, 0);
    }
    store_sinks(sink_m, sinks, kMaxGroup, hpb, h0, split);
    __syncthreads();
    const float scale2 = scale * 1.4426950408889634f;  // scores in base 2

    float o[NT][2];  // O row g, n tile j: dims 64(j/8) + 16c + j%8 (+8 for o[j][1])
#pragma unroll
    for (int j = 0; j < NT; ++j) o[j][0] = o[j][1] = 0.f;
    float m_run = -INFINITY, l_run = 0.f;  // row g's running max (base 2) and this lane's share of the sum

    int p0 = begin + warp * STEP;
    int next[KT];  // slot of position p0 + 8kt + g, looked up one step ahead
#pragma unroll
    for (int kt = 0; kt < KT; ++kt) next[kt] = slot_of(p0 + 8 * kt + g);
#pragma unroll 1  // unrolling would hold two steps' registers
    for (; p0 < end; p0 += kWarps * STEP) {
        uint4 kr[KT][KP], va[KT][VP], vb[KT][VP];
#pragma unroll
        for (int kt = 0; kt < KT; ++kt) {
            const int ks = next[kt];
            const int sa = __shfl_sync(0xffffffffu, ks, 8 * c), sb = __shfl_sync(0xffffffffu, ks, 8 * c + 4);
            const T* kp = k_head + (size_t)max(ks, 0) * kv_row + 8 * c;
            const T* pa = v_head + (size_t)max(sa, 0) * kv_row + 8 * g;
            const T* pb = v_head + (size_t)max(sb, 0) * kv_row + 8 * g;
#pragma unroll
            for (int i = 0; i < KP; ++i)
                kr[kt][i] = ks >= 0 ? load16(kp + 32 * i) : make_uint4(0, 0, 0, 0);
#pragma unroll
            for (int j = 0; j < VP; ++j) {
                va[kt][j] = sa >= 0 ? load16(pa + 64 * j) : make_uint4(0, 0, 0, 0);
                vb[kt][j] = sb >= 0 ? load16(pb + 64 * j) : make_uint4(0, 0, 0, 0);
            }
        }
#pragma unroll
        for (int kt = 0; kt < KT; ++kt) next[kt] = slot_of(p0 + kWarps * STEP + 8 * kt + g);

        // Scores of head g at positions p0 + 8kt + 2c + {0, 1}.
        float s[KT][2];
#pragma unroll
        for (int kt = 0; kt < KT; ++kt) {
            float d[2] = {0.f, 0.f};
#pragma unroll
            for (int ch = 0; ch < D / 16; ++ch) {
                const int i = ch / 2, w = 2 * (ch % 2);
                const uint4 qv = lds16(&q_frag[i * 32 + lane]);
                Frag<T>::mma16(d, word(qv, w), word(qv, w + 1), word(kr[kt][i], w), word(kr[kt][i], w + 1));
            }
            const int p = p0 + 8 * kt + 2 * c;
            s[kt][0] = p < end ? d[0] * scale2 : -INFINITY;
            s[kt][1] = p + 1 < end ? d[1] * scale2 : -INFINITY;
        }

        // Online softmax. Position p0 is inside the partition, so the maximum is finite.
        float mx = m_run;
#pragma unroll
        for (int kt = 0; kt < KT; ++kt) mx = fmaxf(mx, fmaxf(s[kt][0], s[kt][1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float corr = exp2f(m_run - mx);  // 0 on the first step (m_run = -inf)
        m_run = mx;
        uint32_t pf[KT];  // P of the lane's two positions per tile, as the A fragment
        float rs = 0.f;
#pragma unroll
        for (int kt = 0; kt < KT; ++kt) {
            const float e0 = exp2f(s[kt][0] - mx), e1 = exp2f(s[kt][1] - mx);
            rs += e0 + e1;
            pf[kt] = Frag<T>::pack(e0, e1);
        }
        l_run = l_run * corr + rs;

        // O = O·corr + P·V.
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const int piece = j / 8, w = (j % 8) / 2;
            const uint32_t sel = j % 2 ? 0x7632u : 0x5410u;  // the odd or even dim of each 2-dim word
            o[j][0] *= corr;
            o[j][1] *= corr;
#pragma unroll
            for (int kt = 0; kt + 1 < KT; kt += 2)
                Frag<T>::mma16(o[j], pf[kt], pf[kt + 1],
                               __byte_perm(word(va[kt][piece], w), word(vb[kt][piece], w), sel),
                               __byte_perm(word(va[kt + 1][piece], w), word(vb[kt + 1][piece], w), sel));
            if (KT % 2)
                Frag<T>::mma8(o[j], pf[KT - 1],
                              __byte_perm(word(va[KT - 1][piece], w), word(vb[KT - 1][piece], w), sel));
        }
    }

    l_run += __shfl_xor_sync(0xffffffffu, l_run, 1);
    l_run += __shfl_xor_sync(0xffffffffu, l_run, 2);
    if (c == 0) {
        merge_m[warp * kMaxGroup + g] = m_run * 0.6931471805599453f;  // back to natural-log units
        merge_l[warp * kMaxGroup + g] = l_run;
    }
    float* acc = merge_acc + (warp * kMaxGroup + g) * D;
#pragma unroll
    for (int j = 0; j < NT; ++j) {
        const int d = 64 * (j / 8) + 16 * c + j % 8;
        acc[d] = o[j][0];
        acc[d + 8] = o[j][1];
    }
    __syncthreads();
    merge_warps_store(merge_acc, merge_m, merge_l, kMaxGroup, hpb, D, t, h0, num_heads, split, splits, out, part_acc,
                      part_m, part_l, sink_m);
}
#endif  // ATOMK_CUDA

}  // namespace

#endif  // ATOMK_ATTENTION_DECODE_H
