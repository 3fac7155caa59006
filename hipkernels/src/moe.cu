// moe.cu: the sparse mixture-of-experts block of vLLM's fused_moe, in five launches that need no
// host round trip (so a MoE decode step captures into a CUDA graph):
//   1. route:   softmax over the E router logits of each token in float32, the k largest
//               probabilities (lower expert id first on ties), optionally renormalised;
//   2. align:   the token-grouping of vLLM's moe_align_block_size: the (token, expert) slots
//               counted per expert, each expert's run padded to whole tiles of kTile rows,
//               the slot ids sorted by expert and the expert of every tile, on one block;
//   3. gate_up: act[slot] = silu(x[t] · gate_eᵀ) * (x[t] · up_eᵀ), the SiLU-and-mul in the
//               epilogue (each block computes matching gate and up columns);
//   4. down:    y[slot] = w[slot] · (act[slot] · down_eᵀ), the routing weight in the epilogue;
//   5. sum:     out[t] = Σ_j y[t, j] over the token's k experts in ascending id (the order the
//               cpu reference and transformers' index_add use), plus the sigmoid-gated shared
//               expert where the family has one (DeepSeek's ungated shared experts as they are).
// Steps 3 and 4 run one of two kernels over the tiles step 2 made. The tensor-core one (CUDA,
// 16-bit) takes 64-row tiles: a grouped GEMM with mma.sync m16n8k16 whose A rows are gathered
// through the sorted slot ids (moe_mma.h; MXFP4 experts: moe_mx_mma.h, codes expanded in
// registers). The skinny one takes 4-row tiles, for decode-sized batches: each
// warp streams a few weight rows of its tile's expert once and multiplies the tile's rows with
// them, so a batch-1 step reads only the k chosen experts' weights. It also serves f32 and HIP.
// Only tiles below the count step 2 wrote do work; the grids are sized for the most tiles the
// slot count allows, so a launch's shape depends on the batch size alone.
#include <math.h>
#include <stdint.h>

#include "atomk_vec.h"
#include "gemv_input.h"
#include "moe_rank.h"

#if defined(ATOMK_CUDA)
#include "atomk_mma.h"
#endif

namespace {

constexpr int kRouteThreads = 128;  // one warp per token row
constexpr int kAlignThreads = 1024;
constexpr int kRouteAlignRows = kAlignThreads / ATOMK_WARP_SIZE;  // rows one route-and-group launch takes
constexpr int kSkinnyRows = 4;     // tile rows of the skinny kernel
constexpr int kMmaRows = 64;       // tile rows of the tensor-core kernel
constexpr int kSkinnyThreads = 256;
constexpr int kSkinnyWarps = kSkinnyThreads / ATOMK_WARP_SIZE;
constexpr int kSumThreads = 128;
constexpr int kMXBlock = 32;  // values one MXFP4 scale covers (16 bytes of codes)

// Routes one row on one warp: lane l holds experts l, l + W, l + 2W, ... (N of them).
template <typename T, int N>
__device__ __forceinline__ void route_row(const T* __restrict__ logits, int32_t* __restrict__ ids,
                                          float* __restrict__ weights, int row, int experts, int topk, int renormalize) {
    const int lane = threadIdx.x % ATOMK_WARP_SIZE;
    const T* lr = logits + (size_t)row * experts;
    float p[N];
    warp_softmax(lr, experts, p);

    uint32_t taken = 0;
    int my_id = 0;
    float my_w = 0.f;
    for (int j = 0; j < topk; ++j) {
        float bv;
        int bi;
        warp_best(p, taken, experts, &bv, &bi);
        if (bi % ATOMK_WARP_SIZE == lane) taken |= 1u << (bi / ATOMK_WARP_SIZE);
        if (lane == j) {
            my_id = bi;
            my_w = bv;
        }
    }
    if (renormalize) {
        // Summed in the order the k winners were chosen, as the reference does.
        float sum = 0.f;
        for (int j = 0; j < topk; ++j) sum += ATOMK_SHFL(my_w, j);
        my_w /= sum;
    }
    if (lane < topk) {
        ids[(size_t)row * topk + lane] = my_id;
        weights[(size_t)row * topk + lane] = my_w;
    }
}

template <typename T, int N>
__global__ void __launch_bounds__(kRouteThreads) moe_route_kernel(const T* __restrict__ logits, int32_t* __restrict__ ids,
                                                                  float* __restrict__ weights, int rows, int experts,
                                                                  int topk, int renormalize) {
    ATOMK_PDL_ENTER();
    const int row = blockIdx.x * (kRouteThreads / ATOMK_WARP_SIZE) + threadIdx.x / ATOMK_WARP_SIZE;
    if (row < rows) route_row<T, N>(logits, ids, weights, row, experts, topk, renormalize);
}

// The most tiles `slots` slots over `experts` experts can fill in runs padded to `tile` rows: every
// non-empty expert adds at most one partly filled tile.
int max_tiles(int slots, int experts, int tile) { return slots / tile + (slots < experts ? slots : experts); }

// The grouping on one block: counts per expert, padded offsets (a block-wide scan), tile
// experts, sorted slots. ids may have been written by this block (after a barrier).
__device__ __forceinline__ void align_block(const int32_t* ids, int slots, int experts, int tile,
                                            int32_t* __restrict__ sorted, int32_t* __restrict__ tile_expert,
                                            int32_t* __restrict__ num_tiles) {
    __shared__ int count[ATOMK_MOE_MAX_EXPERTS];
    __shared__ int offset[ATOMK_MOE_MAX_EXPERTS + 1];
    __shared__ int cursor[ATOMK_MOE_MAX_EXPERTS];
    const int tid = threadIdx.x;
    for (int e = tid; e < experts; e += blockDim.x) count[e] = cursor[e] = 0;
    __syncthreads();
    for (int s = tid; s < slots; s += blockDim.x) atomicAdd(&count[ids[s]], 1);
    __syncthreads();
    // Inclusive scan of the padded counts into offset[1..E] (Hillis-Steele, E <= blockDim).
    const int padded = tid < experts ? (count[tid] + tile - 1) / tile * tile : 0;
    if (tid < experts) offset[tid + 1] = padded;
    if (tid == 0) offset[0] = 0;
    __syncthreads();
    for (int d = 1; d < experts; d *= 2) {
        const int add = tid < experts && tid >= d ? offset[tid + 1 - d] : 0;
        __syncthreads();
        if (tid < experts) offset[tid + 1] += add;
        __syncthreads();
    }
    const int total = offset[experts];
    if (tid == 0) *num_tiles = total / tile;
    if (tid < experts)
        for (int t = offset[tid] / tile; t < offset[tid + 1] / tile; ++t) tile_expert[t] = tid;
    for (int p = tid; p < total; p += blockDim.x) sorted[p] = slots;  // padding: no slot
    __syncthreads();
    for (int s = tid; s < slots; s += blockDim.x) {
        const int e = ids[s];
        sorted[offset[e] + atomicAdd(&cursor[e], 1)] = s;
    }
}

__global__ void __launch_bounds__(kAlignThreads) moe_align_kernel(const int32_t* __restrict__ ids, int slots, int experts,
                                                                  int tile, int32_t* __restrict__ sorted,
                                                                  int32_t* __restrict__ tile_expert,
                                                                  int32_t* __restrict__ num_tiles) {
    ATOMK_PDL_ENTER();
    align_block(ids, slots, experts, tile, sorted, tile_expert, num_tiles);
}

// Decode batches (rows <= kRouteAlignRows) route and group in one launch: a warp per row, then
// the block groups the slots it wrote.
template <typename T, int N>
__global__ void __launch_bounds__(kAlignThreads) moe_route_align_kernel(const T* __restrict__ logits, int32_t* ids,
                                                                        float* __restrict__ weights, int rows, int experts,
                                                                        int topk, int renormalize, int tile,
                                                                        int32_t* __restrict__ sorted,
                                                                        int32_t* __restrict__ tile_expert,
                                                                        int32_t* __restrict__ num_tiles) {
    ATOMK_PDL_ENTER();
    const int warp = threadIdx.x / ATOMK_WARP_SIZE;
    if (warp < rows) route_row<T, N>(logits, ids, weights, warp, experts, topk, renormalize);
    __syncthreads();
    align_block(ids, rows * topk, experts, tile, sorted, tile_expert, num_tiles);
}

// ---- the skinny kernel ----

// Weight rows a warp of the skinny kernel streams: gate_up takes one act column (its gate row and
// its up row), which keeps the registers to three blocks an SM and a batch-1 grid of several
// waves (at four rows a warp the 8 experts' 384 blocks filled 1.45 waves: the last one ran
// half empty); down, whose rows are short (K = I), four.
template <bool GATE_UP> constexpr int kSkinnyWeightRows = GATE_UP ? 2 : 4;


// The experts' activation and biases (gpt-oss's; none for the others): b13 [E, 2I] (each
// expert's gate biases, then its up biases) added to gate|up before the activation, b2 [E, H]
// added to down's output before the routing weight. clamped selects gpt-oss's SwiGLU:
// g = min(gate, limit), u = clamp(up, ±limit), act = (u + 1) · g · sigmoid(alpha · g).
template <typename T> struct MoEAct {
    const T* b13;
    const T* b2;
    int clamped;
    float alpha, limit;

    __device__ __forceinline__ float gate_up(float g, float u, int e, int col, int inter) const {
        if (b13) {
            g += atomk_to_float(b13[(size_t)e * 2 * inter + col]);
            u += atomk_to_float(b13[(size_t)e * 2 * inter + inter + col]);
        }
        if (clamped) {
            g = fminf(g, limit);
            u = fminf(fmaxf(u, -limit), limit);
            return (u + 1.f) * (g / (1.f + expf(-alpha * g)));
        }
        return g / (1.f + expf(-g)) * u;
    }
    __device__ __forceinline__ float down(float v, int e, int col, int hidden) const {
        return b2 ? v + atomk_to_float(b2[(size_t)e * hidden + col]) : v;
    }
};

// One block: kSkinnyWarps warps, each owning R rows of the tile's expert weight (gate_up: R/2
// act columns, their gate rows and their up rows), lanes splitting K in 16-byte chunks; the tile's
// up to kSkinnyRows slots each multiply the rows (rows past the slot count are padding).
// GATE_UP: w = w13 [E, 2I, H], x rows = tokens (slot / topk), out = act [slots, I].
// Otherwise: w = w2 [E, H, I], x = act, out = y [slots, H] times weights[slot].
// DIRECT: no grouping (the smallest batches, whose slots rarely share an expert): block row
// blockIdx.y is slot blockIdx.y alone, of expert ids[slot].
// The value of an E8M0 scale byte: 2^(s - 127) (s = 0 is the subnormal 2^-127; the loader refuses
// 0xFF).
__device__ __forceinline__ float e8m0(uint32_t s) { return s ? __uint_as_float(s << 23) : __uint_as_float(0x00400000u); }

// Σ_q lut[code q] · x[q] over the CE nibbles of word w from nibble n0 (an MXFP4 block's codes,
// low nibble first) and the CE values xf: the block's dot product before its scale.
template <int CE>
__device__ __forceinline__ float dot_fp4(uint32_t w, int n0, const float* xf, const float* lut, float acc) {
#pragma unroll
    for (int q = 0; q < CE; ++q) acc = fmaf(lut[(w >> (4 * (n0 + q))) & 0xFu], xf[q], acc);
    return acc;
}

template <typename T, bool GATE_UP, bool DIRECT, bool MX>
__global__ void __launch_bounds__(kSkinnyThreads, GATE_UP ? 3 : 2) moe_skinny_kernel(T* __restrict__ out, const T* __restrict__ x,
                                                                    const void* __restrict__ w,
                                                                    const uint8_t* __restrict__ wscale, const float* __restrict__ weights,
                                                                    const int32_t* __restrict__ ids,
                                                                    const int32_t* __restrict__ sorted,
                                                                    const int32_t* __restrict__ tile_expert,
                                                                    const int32_t* __restrict__ num_tiles, int slots,
                                                                    int topk, int hidden, int inter, MoEAct<T> act) {
    // U chunks of each weight row in flight: an MXFP4 chunk carries 4x the values of a 16-bit
    // one, so a 4-slot tile takes one at a time (registers); a single slot (DIRECT) has the
    // registers for 4, which its pure weight stream needs to keep enough bytes in flight.
    // SR: the slots a block multiplies (DIRECT: one).
    constexpr int R = kSkinnyWeightRows<GATE_UP>, U = MX && !DIRECT ? 1 : 4, CE = Chunk<T>::N;
    constexpr int SR = DIRECT ? 1 : kSkinnyRows;
    // A 16-byte weight chunk holds CE values of T, or (MX) one MXFP4 block of 32 codes, whose x
    // values are XC chunks of x.
    constexpr int WE = MX ? kMXBlock : CE, XC = WE / CE;
    __shared__ float lut[16];
    if constexpr (MX) {
        if (threadIdx.x < 16) {
            const uint32_t m = threadIdx.x & 7u, ex = m >> 1;
            const float mag = m < 2 ? 0.5f * (float)m : (float)(2 + (m & 1u)) * (float)(1u << (ex - 1)) * 0.5f;
            lut[threadIdx.x] = threadIdx.x & 8u ? -mag : mag;
        }
        __syncthreads();
    }
    ATOMK_PDL_ENTER();
    const int tile = blockIdx.y;
    if (!DIRECT && tile >= *num_tiles) return;
    const int lane = threadIdx.x % ATOMK_WARP_SIZE, warp = threadIdx.x / ATOMK_WARP_SIZE;
    const int e = DIRECT ? ids[tile] : tile_expert[tile];
    const int n_out = GATE_UP ? inter : hidden;  // output columns
    const int k = GATE_UP ? hidden : inter;
    const int kc = k / WE;                       // weight chunks per row
    constexpr int cols = GATE_UP ? R / 2 : R;     // output columns per warp
    const int col0 = (blockIdx.x * kSkinnyWarps + warp) * cols;
    if (col0 >= n_out) return;
    const uint4* wrow[R];
    const uint8_t* srow[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        int row;
        if constexpr (GATE_UP)
            row = (r < cols ? 0 : inter) + min(col0 + r % cols, n_out - 1);
        else
            row = min(col0 + r, n_out - 1);
        const size_t rows_per_expert = GATE_UP ? 2 * (size_t)inter : (size_t)hidden;
        const size_t wr = (size_t)e * rows_per_expert + row;
        if constexpr (MX) {
            wrow[r] = reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(w) + wr * (k / 2));
            srow[r] = wscale + wr * (k / kMXBlock);
        } else {
            wrow[r] = reinterpret_cast<const uint4*>(static_cast<const T*>(w) + wr * k);
            srow[r] = nullptr;
        }
    }
    int slot[SR];
    const uint4* xrow[SR];
    int m = 0;  // real slots of the tile (they come first)
#pragma unroll
    for (int i = 0; i < SR; ++i) {
        slot[i] = DIRECT ? (i == 0 ? tile : slots) : sorted[tile * kSkinnyRows + i];
        if (slot[i] < slots) m = i + 1;
        const int xr = slot[i] < slots ? (GATE_UP ? slot[i] / topk : slot[i]) : 0;
        xrow[i] = reinterpret_cast<const uint4*>(x + (size_t)xr * k);
    }
    float acc[SR][R];
#pragma unroll
    for (int i = 0; i < SR; ++i)
#pragma unroll
        for (int r = 0; r < R; ++r) acc[i][r] = 0.f;
    // U chunks of each of the R rows are loaded before any is used: U·R 16-byte loads in flight
    // per lane, which a batch-1 step (one slot a tile) needs to approach the copy bandwidth.
    for (int c0 = lane; c0 < kc; c0 += U * ATOMK_WARP_SIZE) {
        uint4 wv[U][R];
        float sv[U][R];
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const int c = c0 + u * ATOMK_WARP_SIZE;
                wv[u][r] = c < kc ? load_stream(wrow[r] + c) : make_uint4(0, 0, 0, 0);
                if constexpr (MX) sv[u][r] = c < kc ? e8m0(srow[r][c]) : 0.f;
            }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int c = c0 + u * ATOMK_WARP_SIZE;
            if (c >= kc) break;
            // Unpacked where used (cheap shifts) rather than held: registers decide occupancy.
#pragma unroll
            for (int i = 0; i < SR; ++i) {
                if (i >= m) break;
                if constexpr (MX) {
                    // The block's 32 codes against its 32 x values, XC chunks of x, then its scale.
                    float bs[R];
#pragma unroll
                    for (int r = 0; r < R; ++r) bs[r] = 0.f;
                    // Not unrolled: with the 4 slots of a tile, unrolled blocks spill registers.
#pragma unroll 1
                    for (int xc = 0; xc < XC; ++xc) {
                        float xf[CE];
                        Chunk<T>::unpack(load_cached(xrow[i] + c * XC + xc), xf);
                        const int word = xc * CE / 8, n0 = xc * CE % 8;
#pragma unroll
                        for (int r = 0; r < R; ++r) {
                            const uint4 v = wv[u][r];
                            const uint32_t wd = word == 0 ? v.x : word == 1 ? v.y : word == 2 ? v.z : v.w;
                            bs[r] = dot_fp4<CE>(wd, n0, xf, lut, bs[r]);
                        }
                    }
#pragma unroll
                    for (int r = 0; r < R; ++r) acc[i][r] = fmaf(bs[r], sv[u][r], acc[i][r]);
                } else {
                    float xf[CE];
                    Chunk<T>::unpack(load_cached(xrow[i] + c), xf);
#pragma unroll
                    for (int r = 0; r < R; ++r) {
                        float wf[CE];
                        Chunk<T>::unpack(wv[u][r], wf);
#pragma unroll
                        for (int q = 0; q < CE; ++q) acc[i][r] = fmaf(xf[q], wf[q], acc[i][r]);
                    }
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < SR; ++i) {
        if (i >= m) break;
#pragma unroll
        for (int r = 0; r < R; ++r) acc[i][r] = atomk_warp_sum(acc[i][r]);
        if (lane == 0) {
#pragma unroll
            for (int r = 0; r < cols; ++r) {
                const int col = col0 + r;
                if (col >= n_out) break;
                float v;
                if constexpr (GATE_UP) {
                    v = act.gate_up(acc[i][r], acc[i][r + cols], e, col, inter);
                } else {
                    v = act.down(acc[i][r], e, col, hidden) * weights[slot[i]];
                }
                out[(size_t)slot[i] * n_out + col] = atomk_from_float<T>(v);
            }
        }
    }
}

// ---- the sum over a token's experts ----

// Thread (chunk c, token t): columns c·N .. c·N+N-1 (one 16-byte chunk) of out[t] = Σ_j y[t*k + j]
// in ascending expert id (+ sigmoid(gate)·shared). The k chunks of y are loaded at once; the
// order comes from each expert's rank among the token's (distinct) ids.
template <typename T>
__global__ void __launch_bounds__(kSumThreads) moe_sum_kernel(T* __restrict__ out, const T* __restrict__ y,
                                                              const int32_t* __restrict__ ids, int topk, int hidden,
                                                              const T* __restrict__ shared, const T* __restrict__ shared_gate,
                                                              int gate_stride) {
    constexpr int CE = Chunk<T>::N, K = ATOMK_MOE_MAX_TOPK;
    ATOMK_PDL_ENTER();
    const int t = blockIdx.y, c = blockIdx.x * kSumThreads + threadIdx.x;
    if (c * CE >= hidden) return;
    int id[K];
    uint4 yv[K];
#pragma unroll
    for (int j = 0; j < K; ++j)
        if (j < topk) {
            id[j] = ids[(size_t)t * topk + j];
            yv[j] = load_cached(reinterpret_cast<const uint4*>(y + ((size_t)t * topk + j) * hidden) + c);
        }
    int rank[K];
#pragma unroll
    for (int j = 0; j < K; ++j) {
        rank[j] = 0;
#pragma unroll
        for (int q = 0; q < K; ++q)
            if (j < topk && q < topk) rank[j] += id[q] < id[j];
    }
    float s[CE];
#pragma unroll
    for (int i = 0; i < CE; ++i) s[i] = 0.f;
#pragma unroll
    for (int r = 0; r < K; ++r) {
        if (r >= topk) break;
        uint4 v = make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int j = 0; j < K; ++j)
            if (j < topk && rank[j] == r) v = yv[j];
        float f[CE];
        Chunk<T>::unpack(v, f);
#pragma unroll
        for (int i = 0; i < CE; ++i) s[i] += f[i];
    }
    if (shared) {
        const float scale =
            shared_gate ? 1.f / (1.f + expf(-atomk_to_float(shared_gate[(size_t)t * gate_stride]))) : 1.f;
        float f[CE];
        Chunk<T>::unpack(load_cached(reinterpret_cast<const uint4*>(shared + (size_t)t * hidden) + c), f);
#pragma unroll
        for (int i = 0; i < CE; ++i) s[i] += scale * f[i];
    }
    Vec<T> o;
#pragma unroll
    for (int i = 0; i < CE; ++i) o.v[i] = atomk_from_float<T>(s[i]);
    *reinterpret_cast<Vec<T>*>(out + (size_t)t * hidden + (size_t)c * CE) = o;
}

}  // namespace

#if defined(ATOMK_CUDA)
#include "moe_mma.h"
#include "moe_mx_mma.h"
#endif

namespace {

// Whether the tensor-core kernel serves dtype in this build.
bool moe_mma_supported(int dtype) {
#if defined(ATOMK_CUDA)
    return dtype == ATOMK_BF16 || dtype == ATOMK_F16;
#else
    (void)dtype;
    return false;
#endif
}

// Slots from which the tensor-core kernel takes over from the skinny one (at a 64-row tile an
// expert's weights are read once per 64 of its slots, at a 4-row tile once per 4).
constexpr int kMmaMinSlots = 256;
// Slots up to which, when they are at most a quarter of the experts (so that few of them share
// one), the skinny kernels take the slots one by one with no grouping launch at all: a batch-1
// step's MoE is then route, gate_up, down and sum, each a short launch across the whole GPU.
constexpr int kDirectMaxSlots = 32;

int check_moe_shape(const char* op, int slots, int experts, int topk, int hidden, int inter, int tile) {
    if (slots < 0 || experts < 1 || experts > ATOMK_MOE_MAX_EXPERTS || topk < 1 || topk > ATOMK_MOE_MAX_TOPK ||
        topk > experts || hidden < 8 || inter < 8 || hidden % 8 || inter % 8 ||
        (tile != 1 && tile != kSkinnyRows && tile != kMmaRows))
        return atomk_fail(ATOMK_ERR_INVALID, "%s: %d slots, %d experts, top-%d, hidden %d, expert width %d, tile %d", op,
                          slots, experts, topk, hidden, inter, tile);
    return ATOMK_OK;
}

}  // namespace

int atomk_moe_route(int dtype, const void* logits, int32_t* ids, float* weights, int rows, int experts, int topk,
                    int renormalize, void* stream) {
    if (rows < 0 || experts < 1 || experts > ATOMK_MOE_MAX_EXPERTS || topk < 1 || topk > ATOMK_MOE_MAX_TOPK || topk > experts)
        return atomk_fail(ATOMK_ERR_INVALID, "atomk_moe_route: %d rows, top-%d of %d experts", rows, topk, experts);
    if (rows == 0) return ATOMK_OK;
    const int per_block = kRouteThreads / ATOMK_WARP_SIZE;
    ATOMK_DISPATCH(dtype, "atomk_moe_route", with_experts_per_lane(experts, [&](auto n) {
                       atomk_launch(moe_route_kernel<T, decltype(n)::value>, dim3((rows + per_block - 1) / per_block),
                                    dim3(kRouteThreads), 0, ATOMK_STREAM(stream), static_cast<const T*>(logits), ids,
                                    weights, rows, experts, topk, renormalize);
                   }));
    ATOMK_LAUNCHED("moe_route_kernel");
    return ATOMK_OK;
}

int atomk_moe_route_align(int dtype, const void* logits, int32_t* ids, float* weights, int rows, int experts, int topk,
                          int renormalize, int tile_rows, int32_t* sorted, int32_t* tile_expert, int32_t* num_tiles,
                          void* stream) {
    if (tile_rows == 1) return atomk_moe_route(dtype, logits, ids, weights, rows, experts, topk, renormalize, stream);
    if (rows > kRouteAlignRows) {
        if (int st = atomk_moe_route(dtype, logits, ids, weights, rows, experts, topk, renormalize, stream)) return st;
        return atomk_moe_align(ids, rows * topk, experts, tile_rows, sorted, tile_expert, num_tiles, stream);
    }
    if (rows < 0 || experts < 1 || experts > ATOMK_MOE_MAX_EXPERTS || topk < 1 || topk > ATOMK_MOE_MAX_TOPK || topk > experts)
        return atomk_fail(ATOMK_ERR_INVALID, "atomk_moe_route_align: %d rows, top-%d of %d experts", rows, topk, experts);
    if (int st = check_moe_shape("atomk_moe_route_align", rows * topk, experts, topk, 8, 8, tile_rows)) return st;
    ATOMK_DISPATCH(dtype, "atomk_moe_route_align", with_experts_per_lane(experts, [&](auto n) {
                       atomk_launch(moe_route_align_kernel<T, decltype(n)::value>, dim3(1), dim3(kAlignThreads), 0,
                                    ATOMK_STREAM(stream), static_cast<const T*>(logits), ids, weights, rows, experts,
                                    topk, renormalize, tile_rows, sorted, tile_expert, num_tiles);
                   }));
    ATOMK_LAUNCHED("moe_route_align_kernel");
    return ATOMK_OK;
}

int atomk_moe_tile_rows(int dtype, int slots, int experts, int* rows) {
    if (slots <= kDirectMaxSlots && 4 * slots <= experts)
        *rows = 1;
    else
        *rows = moe_mma_supported(dtype) && slots >= kMmaMinSlots ? kMmaRows : kSkinnyRows;
    return ATOMK_OK;
}

int atomk_moe_workspace(int max_slots, int experts, int* sorted_len, int* tiles_len) {
    if (max_slots < 0 || experts < 1 || experts > ATOMK_MOE_MAX_EXPERTS)
        return atomk_fail(ATOMK_ERR_INVALID, "atomk_moe_workspace: %d slots, %d experts", max_slots, experts);
    const int a = max_tiles(max_slots, experts, kSkinnyRows), b = max_tiles(max_slots, experts, kMmaRows);
    *sorted_len = a * kSkinnyRows > b * kMmaRows ? a * kSkinnyRows : b * kMmaRows;
    *tiles_len = a > b ? a : b;
    return ATOMK_OK;
}

int atomk_moe_align(const int32_t* ids, int slots, int experts, int tile_rows, int32_t* sorted, int32_t* tile_expert,
                    int32_t* num_tiles, void* stream) {
    if (int st = check_moe_shape("atomk_moe_align", slots, experts, 1, 8, 8, tile_rows)) return st;
    if (tile_rows == 1) return ATOMK_OK;  // the direct kernels need no grouping
    atomk_launch(moe_align_kernel, dim3(1), dim3(kAlignThreads), 0, ATOMK_STREAM(stream), ids, slots, experts, tile_rows,
                 sorted, tile_expert, num_tiles);
    ATOMK_LAUNCHED("moe_align_kernel");
    return ATOMK_OK;
}

namespace {

// The epilogue of the gate_up (GATE_UP: bias is b13) or down (bias is b2) GEMM.
template <typename T, bool GATE_UP>
MoEAct<T> moe_act(const void* bias, int clamped, float alpha, float limit) {
    const T* b = static_cast<const T*>(bias);
    return MoEAct<T>{GATE_UP ? b : nullptr, GATE_UP ? nullptr : b, GATE_UP ? clamped : 0, alpha, limit};
}

// Launches the gate_up (GATE_UP) or down GEMM of one call on the kernel its tile rows select.
template <bool GATE_UP>
int moe_gemm(const char* op, int dtype, void* out, const void* x, const void* w, const uint8_t* wscale, const float* weights, const int32_t* ids,
             const int32_t* sorted, const int32_t* tile_expert, const int32_t* num_tiles, int tile_rows, int slots, int experts, int topk, int hidden,
             int inter, const void* bias, int clamped, float alpha, float limit, void* stream) {
    if (int st = check_moe_shape(op, slots, experts, topk, hidden, inter, tile_rows)) return st;
    if (slots == 0) return ATOMK_OK;
    const int tiles = max_tiles(slots, experts, tile_rows);
    const int n_out = GATE_UP ? inter : hidden;
    if (wscale && (hidden % kMXBlock || inter % kMXBlock))
        return atomk_fail(ATOMK_ERR_UNSUPPORTED, "%s: mxfp4 experts of hidden %d, width %d (whole blocks of %d)", op,
                          hidden, inter, kMXBlock);
    if (tile_rows == kMmaRows) {
#if defined(ATOMK_CUDA)
        if (!moe_mma_supported(dtype)) return atomk_fail(ATOMK_ERR_UNSUPPORTED, "%s: dtype %d on 64-row tiles", op, dtype);
        if (wscale) {
            const dim3 grid((n_out + (GATE_UP ? kMxMmaCols / 2 : kMxMmaCols) - 1) / (GATE_UP ? kMxMmaCols / 2 : kMxMmaCols),
                            tiles);
            const uint8_t* codes = static_cast<const uint8_t*>(w);
            if (dtype == ATOMK_BF16)
                atomk_launch(moe_mx_mma_kernel<atomk_bf16, GATE_UP>, grid, dim3(kMxMmaThreads), 0, ATOMK_STREAM(stream),
                             static_cast<atomk_bf16*>(out), static_cast<const atomk_bf16*>(x), codes, wscale, weights,
                             sorted, tile_expert, num_tiles, slots, topk, hidden, inter,
                             moe_act<atomk_bf16, GATE_UP>(bias, clamped, alpha, limit));
            else
                atomk_launch(moe_mx_mma_kernel<atomk_f16, GATE_UP>, grid, dim3(kMxMmaThreads), 0, ATOMK_STREAM(stream),
                             static_cast<atomk_f16*>(out), static_cast<const atomk_f16*>(x), codes, wscale, weights,
                             sorted, tile_expert, num_tiles, slots, topk, hidden, inter,
                             moe_act<atomk_f16, GATE_UP>(bias, clamped, alpha, limit));
            ATOMK_LAUNCHED("moe_mx_mma_kernel");
            return ATOMK_OK;
        }
        const int cols = GATE_UP ? kMmaCols / 2 : kMmaCols;
        const dim3 grid((n_out + cols - 1) / cols, tiles);
        if (dtype == ATOMK_BF16)
            atomk_launch(moe_mma_kernel<atomk_bf16, GATE_UP>, grid, dim3(kMmaThreads), 0, ATOMK_STREAM(stream),
                         static_cast<atomk_bf16*>(out), static_cast<const atomk_bf16*>(x),
                         static_cast<const atomk_bf16*>(w), weights, sorted, tile_expert, num_tiles, slots, topk, hidden,
                         inter, moe_act<atomk_bf16, GATE_UP>(bias, clamped, alpha, limit));
        else
            atomk_launch(moe_mma_kernel<atomk_f16, GATE_UP>, grid, dim3(kMmaThreads), 0, ATOMK_STREAM(stream),
                         static_cast<atomk_f16*>(out), static_cast<const atomk_f16*>(x), static_cast<const atomk_f16*>(w),
                         weights, sorted, tile_expert, num_tiles, slots, topk, hidden, inter,
                         moe_act<atomk_f16, GATE_UP>(bias, clamped, alpha, limit));
        ATOMK_LAUNCHED("moe_mma_kernel");
        return ATOMK_OK;
#else
        return atomk_fail(ATOMK_ERR_UNSUPPORTED, "%s: 64-row tiles need the CUDA build", op);
#endif
    }
    const bool direct = tile_rows == 1, mx = wscale != nullptr;
#if defined(ATOMK_CUDA)
    if (direct && mx && moe_mma_supported(dtype)) {
        const int cols = kMxDirectThreads / ATOMK_WARP_SIZE * (GATE_UP ? 8 : 16);
        const dim3 grid((n_out + cols - 1) / cols, slots);
        const uint8_t* codes = static_cast<const uint8_t*>(w);
        if (dtype == ATOMK_BF16)
            atomk_launch(moe_mx_direct_kernel<atomk_bf16, GATE_UP>, grid, dim3(kMxDirectThreads), 0, ATOMK_STREAM(stream),
                         static_cast<atomk_bf16*>(out), static_cast<const atomk_bf16*>(x), codes, wscale, weights, ids,
                         topk, hidden, inter, moe_act<atomk_bf16, GATE_UP>(bias, clamped, alpha, limit));
        else
            atomk_launch(moe_mx_direct_kernel<atomk_f16, GATE_UP>, grid, dim3(kMxDirectThreads), 0, ATOMK_STREAM(stream),
                         static_cast<atomk_f16*>(out), static_cast<const atomk_f16*>(x), codes, wscale, weights, ids,
                         topk, hidden, inter, moe_act<atomk_f16, GATE_UP>(bias, clamped, alpha, limit));
        ATOMK_LAUNCHED("moe_mx_direct_kernel");
        return ATOMK_OK;
    }
#endif
    const int cols_per_block = kSkinnyWarps * (GATE_UP ? kSkinnyWeightRows<true> / 2 : kSkinnyWeightRows<false>);
    const dim3 grid((n_out + cols_per_block - 1) / cols_per_block, tile_rows == 1 ? slots : tiles);
#define ATOMK_MOE_SKINNY(D, M)                                                                                        \
    atomk_launch(moe_skinny_kernel<T, GATE_UP, D, M>, grid, dim3(kSkinnyThreads), 0, ATOMK_STREAM(stream),          \
                 static_cast<T*>(out), static_cast<const T*>(x), w, wscale, weights, ids, sorted, tile_expert,       \
                 num_tiles, slots, topk, hidden, inter, moe_act<T, GATE_UP>(bias, clamped, alpha, limit))
    ATOMK_DISPATCH(dtype, op,
                   if (direct && mx) ATOMK_MOE_SKINNY(true, true);
                   else if (direct) ATOMK_MOE_SKINNY(true, false);
                   else if (mx) ATOMK_MOE_SKINNY(false, true);
                   else ATOMK_MOE_SKINNY(false, false));
#undef ATOMK_MOE_SKINNY
    ATOMK_LAUNCHED("moe_skinny_kernel");
    return ATOMK_OK;
}

}  // namespace

int atomk_moe_gate_up(int dtype, void* act, const void* x, const void* w13, const uint8_t* w13_scales, const int32_t* ids,
                      const int32_t* sorted, const int32_t* tile_expert, const int32_t* num_tiles, int tile_rows, int slots,
                      int experts, int topk, int hidden, int inter, const void* b13, int clamped, float alpha, float limit,
                      void* stream) {
    if (clamped && !(alpha > 0.f && limit > 0.f))
        return atomk_fail(ATOMK_ERR_INVALID, "atomk_moe_gate_up: clamped SwiGLU with alpha %g, limit %g", (double)alpha,
                          (double)limit);
    return moe_gemm<true>("atomk_moe_gate_up", dtype, act, x, w13, w13_scales, nullptr, ids, sorted, tile_expert, num_tiles, tile_rows,
                          slots, experts, topk, hidden, inter, b13, clamped, alpha, limit, stream);
}

int atomk_moe_down(int dtype, void* y, const void* act, const void* w2, const uint8_t* w2_scales, const float* weights,
                   const int32_t* ids,
                   const int32_t* sorted, const int32_t* tile_expert, const int32_t* num_tiles, int tile_rows, int slots,
                   int experts, int topk, int hidden, int inter, const void* b2, void* stream) {
    return moe_gemm<false>("atomk_moe_down", dtype, y, act, w2, w2_scales, weights, ids, sorted, tile_expert, num_tiles, tile_rows,
                           slots, experts, topk, hidden, inter, b2, 0, 0.f, 0.f, stream);
}

namespace {

// Thread i expands MXFP4 block i (16 code bytes, one scale) into 32 values of T.
template <typename T>
__global__ void __launch_bounds__(256) mxfp4_dequant_kernel(T* __restrict__ out, const uint8_t* __restrict__ codes,
                                                            const uint8_t* __restrict__ scales, int64_t blocks) {
    ATOMK_PDL_ENTER();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= blocks) return;
    const uint4 v = load_stream(reinterpret_cast<const uint4*>(codes) + i);
    const float s = e8m0(scales[i]);
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
    T* o = out + i * kMXBlock;
#pragma unroll
    for (int q = 0; q < 32; ++q) {
        const uint32_t c = (w[q / 8] >> (4 * (q % 8))) & 0xFu, m = c & 7u, ex = m >> 1;
        const float mag = m < 2 ? 0.5f * (float)m : (float)(2 + (m & 1u)) * (float)(1u << (ex - 1)) * 0.5f;
        o[q] = atomk_from_float<T>((c & 8u ? -mag : mag) * s);
    }
}

}  // namespace

int atomk_dequant_mxfp4(int dtype, void* out, const uint8_t* codes, const uint8_t* scales, int64_t n, void* stream) {
    if (n < 0 || n % kMXBlock || !out || !codes || !scales)
        return atomk_fail(ATOMK_ERR_INVALID, "atomk_dequant_mxfp4: %lld values (whole blocks of %d)", (long long)n, kMXBlock);
    if (n == 0) return ATOMK_OK;
    const int64_t blocks = n / kMXBlock;
    if ((blocks + 255) / 256 > 0x7fffffff) return atomk_fail(ATOMK_ERR_INVALID, "atomk_dequant_mxfp4: %lld values", (long long)n);
    ATOMK_DISPATCH(dtype, "atomk_dequant_mxfp4",
                   atomk_launch(mxfp4_dequant_kernel<T>, dim3((unsigned)((blocks + 255) / 256)), dim3(256), 0,
                                ATOMK_STREAM(stream), static_cast<T*>(out), codes, scales, blocks));
    ATOMK_LAUNCHED("mxfp4_dequant_kernel");
    return ATOMK_OK;
}

int atomk_moe_sum(int dtype, void* out, const void* y, const int32_t* ids, int rows, int topk, int hidden,
                  const void* shared, const void* shared_gate, int gate_stride, void* stream) {
    if (rows < 0 || topk < 1 || topk > ATOMK_MOE_MAX_TOPK || hidden < 8 || hidden % 8 ||
        (shared_gate && gate_stride < 1))
        return atomk_fail(ATOMK_ERR_INVALID, "atomk_moe_sum: %d rows, top-%d, hidden %d, gate stride %d", rows, topk, hidden,
                          gate_stride);
    if (rows == 0) return ATOMK_OK;
    ATOMK_DISPATCH(dtype, "atomk_moe_sum",
                   atomk_launch(moe_sum_kernel<T>,
                                dim3((hidden / Chunk<T>::N + kSumThreads - 1) / kSumThreads, rows), dim3(kSumThreads), 0,
                                ATOMK_STREAM(stream),
                                static_cast<T*>(out), static_cast<const T*>(y), ids, topk, hidden,
                                static_cast<const T*>(shared), static_cast<const T*>(shared_gate), gate_stride));
    ATOMK_LAUNCHED("moe_sum_kernel");
    return ATOMK_OK;
}
