// moe_rank.h: the warp-wide steps the MoE routers share (moe.cu, moe_route.cu): the softmax of a
// row of logits, the order of candidates and the choice of the best one.
#ifndef ATOMK_MOE_RANK_H
#define ATOMK_MOE_RANK_H

#include <type_traits>

// Calls f(std::integral_constant<int, N>) with N the experts a lane of a routing warp holds: the
// smallest power of two of lanes' worth that covers `experts`. A compile-time N keeps the
// per-lane arrays in registers and every scan of them as short as the router's width allows
// (at a fixed 16 a lane, a 128-expert top-8 scanned 12 empty slots a lane for each choice: most
// of a batch-1 route's 11 us).
template <typename F> inline void with_experts_per_lane(int experts, F&& f) {
    constexpr int kMax = ATOMK_MOE_MAX_EXPERTS / ATOMK_WARP_SIZE;
    const int n = (experts + ATOMK_WARP_SIZE - 1) / ATOMK_WARP_SIZE;
    if (n <= 1)
        f(std::integral_constant<int, 1>{});
    else if (n <= 2)
        f(std::integral_constant<int, 2>{});
    else if (n <= 4)
        f(std::integral_constant<int, 4>{});
    else if (n <= 8 && kMax > 8)
        f(std::integral_constant<int, 8>{});
    else
        f(std::integral_constant<int, kMax>{});
}

// Whether (v, i) ranks before (u, j): the larger score, the lower id on a tie; an empty
// candidate (id -1) never ranks first, any real one does (so a row of NaNs still yields k
// distinct ids, as on the cpu).
__device__ __forceinline__ bool ranks_before(float v, int i, float u, int j) {
    if (i < 0) return false;
    if (j < 0) return true;
    if (v > u) return true;
    if (u > v) return false;
    return i < j;  // equal, or a NaN: the lower id
}

// p = softmax in float32 of the experts logits lr (lane l holds experts l, l + W, ...; slots past
// experts get 0): the softmax router's scores, and DeepSeek-V2's.
template <typename T, int N>
__device__ __forceinline__ void warp_softmax(const T* __restrict__ lr, int experts, float (&p)[N]) {
    const int lane = threadIdx.x % ATOMK_WARP_SIZE;
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < N; ++i) {
        const int e = lane + i * ATOMK_WARP_SIZE;
        p[i] = e < experts ? atomk_to_float(lr[e]) : -INFINITY;
        mx = fmaxf(mx, p[i]);
    }
    mx = atomk_warp_max(mx);
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < N; ++i) {
        const int e = lane + i * ATOMK_WARP_SIZE;
        p[i] = e < experts ? expf(p[i] - mx) : 0.f;
        s += p[i];
    }
    s = atomk_warp_sum(s);
#pragma unroll
    for (int i = 0; i < N; ++i) p[i] /= s;
}

// The best candidate not yet taken of a warp whose lane l holds experts l, l + W, l + 2W, ... in
// v (bit i of taken: the lane's expert l + iW is taken), by ranks_before: every lane gets its
// score in *bv and its id in *bi.
template <int N>
__device__ __forceinline__ void warp_best(const float (&v)[N], uint32_t taken, int experts, float* bv, int* bi) {
    const int lane = threadIdx.x % ATOMK_WARP_SIZE;
    float best = 0.f;
    int id = -1;
#pragma unroll
    for (int i = 0; i < N; ++i) {
        const int e = lane + i * ATOMK_WARP_SIZE;
        if (e < experts && !(taken >> i & 1u) && ranks_before(v[i], e, best, id)) {
            best = v[i];
            id = e;
        }
    }
#pragma unroll
    for (int m = ATOMK_WARP_SIZE / 2; m > 0; m /= 2) {
        const float ov = ATOMK_SHFL_XOR(best, m);
        const int oi = ATOMK_SHFL_XOR(id, m);
        if (ranks_before(ov, oi, best, id)) {
            best = ov;
            id = oi;
        }
    }
    *bv = best;
    *bi = id;
}

#endif  // ATOMK_MOE_RANK_H
