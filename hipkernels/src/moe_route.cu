// moe_route.cu: DeepSeek's routers, vLLM's grouped_topk: softmax (V2) or sigmoid (V3) scores,
// an optional per-expert selection bias (V3's e_score_correction_bias), the choice limited to
// the best groups of experts, weights from the unbiased scores, renormalised and scaled
// (routed_scaling_factor). One warp routes one token, as moe.cu's softmax router does, and the
// grouping and expert kernels of moe.cu take its ids and weights unchanged.
#include <math.h>
#include <stdint.h>

#include "atomk_internal.h"
#include "moe_rank.h"

namespace {

constexpr int kThreads = 128;
constexpr int kMaxGroups = 32;

// The best and second best of (a1, a2) and (b1, b2), each ordered.
__device__ __forceinline__ void top2_merge(float& a1, float& a2, float b1, float b2) {
    if (b1 > a1) {
        a2 = fmaxf(a1, b2);
        a1 = b1;
    } else {
        a2 = fmaxf(a2, b1);
    }
}

// Lane l holds experts l, l + W, l + 2W, ... (N of them, with_experts_per_lane).
template <typename T, int N>
__global__ void __launch_bounds__(kThreads)
    moe_route_grouped_kernel(const T* __restrict__ logits, const float* __restrict__ bias, int32_t* __restrict__ ids,
                             float* __restrict__ weights, int rows, int experts, int topk, int scoring, int groups,
                             int topk_groups, int renormalize, float scale) {
    ATOMK_PDL_ENTER();
    const int row = blockIdx.x * (kThreads / ATOMK_WARP_SIZE) + threadIdx.x / ATOMK_WARP_SIZE;
    if (row >= rows) return;
    const int lane = threadIdx.x % ATOMK_WARP_SIZE;
    const T* lr = logits + (size_t)row * experts;
    float score[N], choice[N];
    if (scoring == 2) {  // top-k of the logits themselves, softmax over the k afterwards
#pragma unroll
        for (int i = 0; i < N; ++i) {
            const int e = lane + i * ATOMK_WARP_SIZE;
            score[i] = e < experts ? atomk_to_float(lr[e]) : -INFINITY;
        }
    } else if (scoring == 1) {
#pragma unroll
        for (int i = 0; i < N; ++i) {
            const int e = lane + i * ATOMK_WARP_SIZE;
            score[i] = e < experts ? 1.f / (1.f + expf(-atomk_to_float(lr[e]))) : 0.f;
        }
    } else {
        warp_softmax(lr, experts, score);
    }
#pragma unroll
    for (int i = 0; i < N; ++i) {
        const int e = lane + i * ATOMK_WARP_SIZE;
        choice[i] = e < experts ? score[i] + (bias ? bias[e] : 0.f) : -INFINITY;
    }

    if (groups > 0) {
        // Lane g keeps group g's score: its best choice score, or its best two summed under a bias.
        const int per = experts / groups;
        float my_group = -INFINITY;
        for (int g = 0; g < groups; ++g) {
            float b1 = -INFINITY, b2 = -INFINITY;
#pragma unroll
            for (int i = 0; i < N; ++i) {
                const int e = lane + i * ATOMK_WARP_SIZE;
                if (e < experts && e / per == g) top2_merge(b1, b2, choice[i], -INFINITY);
            }
#pragma unroll
            for (int m = ATOMK_WARP_SIZE / 2; m > 0; m /= 2) {
                const float o1 = ATOMK_SHFL_XOR(b1, m), o2 = ATOMK_SHFL_XOR(b2, m);
                top2_merge(b1, b2, o1, o2);
            }
            if (lane == g) my_group = bias ? b1 + b2 : b1;
        }
        uint32_t chosen = 0;
        for (int j = 0; j < topk_groups; ++j) {
            float bv = 0.f;
            int bi = lane < groups && !(chosen >> lane & 1u) ? lane : -1;
            bv = my_group;
#pragma unroll
            for (int m = ATOMK_WARP_SIZE / 2; m > 0; m /= 2) {
                const float ov = ATOMK_SHFL_XOR(bv, m);
                const int oi = ATOMK_SHFL_XOR(bi, m);
                if (ranks_before(ov, oi, bv, bi)) {
                    bv = ov;
                    bi = oi;
                }
            }
            chosen |= 1u << bi;
        }
#pragma unroll
        for (int i = 0; i < N; ++i) {
            const int e = lane + i * ATOMK_WARP_SIZE;
            if (e < experts && !(chosen >> (e / per) & 1u)) choice[i] = -INFINITY;
        }
    }

    uint32_t taken = 0;
    int my_id = 0;
    float my_w = 0.f;
    for (int j = 0; j < topk; ++j) {
        float bv;
        int bi;
        warp_best(choice, taken, experts, &bv, &bi);
        // The winner's unbiased score, from the lane that holds it.
        float mine = 0.f;
#pragma unroll
        for (int i = 0; i < N; ++i)
            if (i == bi / ATOMK_WARP_SIZE) mine = score[i];
        const float w = ATOMK_SHFL(mine, bi % ATOMK_WARP_SIZE);
        if (bi % ATOMK_WARP_SIZE == lane) taken |= 1u << (bi / ATOMK_WARP_SIZE);
        if (lane == j) {
            my_id = bi;
            my_w = w;
        }
    }
    if (scoring == 2) {
        // The softmax of the chosen logits (the first is their largest), summed in the order chosen.
        const float mx = ATOMK_SHFL(my_w, 0);
        const float ex = lane < topk ? expf(my_w - mx) : 0.f;
        float sum = 0.f;
        for (int j = 0; j < topk; ++j) sum += ATOMK_SHFL(ex, j);
        my_w = ex / sum;
    } else if (renormalize) {
        float sum = 0.f;  // in the order chosen, as the reference sums
        for (int j = 0; j < topk; ++j) sum += ATOMK_SHFL(my_w, j);
        if (scoring == 1) sum += 1e-20f;
        my_w /= sum;
    }
    if (lane < topk) {
        ids[(size_t)row * topk + lane] = my_id;
        weights[(size_t)row * topk + lane] = my_w * scale;
    }
}

}  // namespace

extern "C" int atomk_moe_route_grouped(int dtype, const void* logits, const float* bias, int32_t* ids, float* weights,
                                       int rows, int experts, int topk, int scoring, int groups, int topk_groups,
                                       int renormalize, float scale, void* stream) {
    const bool grouped_ok = groups == 0 || (groups <= kMaxGroups && groups <= ATOMK_WARP_SIZE &&
                                            experts % groups == 0 && topk_groups >= 1 && topk_groups <= groups &&
                                            topk <= topk_groups * (experts / groups) && (!bias || experts / groups >= 2));
    if (rows < 0 || experts < 1 || experts > ATOMK_MOE_MAX_EXPERTS || topk < 1 || topk > ATOMK_MOE_MAX_TOPK ||
        topk > experts || scoring < 0 || scoring > 2 || groups < 0 || !grouped_ok || !(scale > 0.f) ||
        (scoring == 2 && (groups != 0 || bias)))
        return atomk_fail(ATOMK_ERR_INVALID,
                          "atomk_moe_route_grouped: %d rows, top-%d of %d experts, scoring %d, top-%d of %d groups, "
                          "scale %g",
                          rows, topk, experts, scoring, topk_groups, groups, (double)scale);
    if (rows == 0) return ATOMK_OK;
    const int per_block = kThreads / ATOMK_WARP_SIZE;
    ATOMK_DISPATCH(dtype, "atomk_moe_route_grouped", with_experts_per_lane(experts, [&](auto n) {
                       atomk_launch(moe_route_grouped_kernel<T, decltype(n)::value>,
                                    dim3((rows + per_block - 1) / per_block), dim3(kThreads), 0, ATOMK_STREAM(stream),
                                    static_cast<const T*>(logits), bias, ids, weights, rows, experts, topk, scoring,
                                    groups, topk_groups, renormalize, scale);
                   }));
    ATOMK_LAUNCHED("moe_route_grouped_kernel");
    return ATOMK_OK;
}
