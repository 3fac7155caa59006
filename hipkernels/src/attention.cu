// attention.cu: causal attention of a mixed varlen batch (prefill chunks with a cached prefix,
// decodes) over the paged KV cache.
//
// The work is divided by query token, by group of query heads sharing a KV head (so each K/V row
// is read once for the whole group) and, when that alone would not fill the GPU (few tokens
// with long contexts: decodes), by partition of the context ("split-K"): each partition then
// produces an unnormalised partial result that a second kernel merges.
#include <math.h>
#include <stdint.h>

#include "atomk_internal.h"

namespace {

constexpr int kWarps = 4;              // warps per block; each walks its own context positions
constexpr int kMaxGroup = 8;           // query heads per block, at most
constexpr int kMinPartition = 256;     // context positions per split, at least
constexpr int kBlocksPerSM = 4;        // split until the grid has this many blocks per SM
constexpr int kMinSplitPositions = 64;  // a token's partitions hold at least this many positions

// One block per (query token t, group of query heads, context partition). The group is
// heads [y*hpb, y*hpb + hpb), all reading kv head y*hpb / (num_heads / num_kv_heads); G >= hpb
// is the compile-time bound. Token t of sequence token_seq[t] at position pos attends to
// context positions 0..pos; with S splits this block covers [split*P, (split+1)*P) of them,
// P = ceil((pos+1)/S) (at least min(partition, kMinSplitPositions)): the token's own context
// divided evenly, whatever bound on the context chose S.
//
// Warp w walks the block's positions in runs of U consecutive ones, w*U, w*U + kWarps*U, ...
// For each position it loads the K and V rows once (lane owns head dims lane, lane + WARP, ...:
// DPL of them) and, per query head of the group, keeps an online softmax: the running maximum
// m of the scores, the running sum l of exp(score - m), and acc = Σ exp(score - m) · v,
// rescaled whenever m grows. A score is the warp-wide sum of the lanes' partial dot products
// with the (pre-scaled) query.
//
// The warps are then merged through shared memory: M = max_w m_w, weight_w = exp(m_w - M),
// acc = Σ_w acc_w · weight_w, l = Σ_w l_w · weight_w. With one partition the block writes
// out = acc / l; otherwise it writes acc, M and l to the partial buffers for the merge kernel.
template <typename T, int DPL, int G>
__global__ void __launch_bounds__(kWarps * ATOMK_WARP_SIZE)
paged_attention_kernel(T* out, float* part_acc, float* part_m, float* part_l, const T* q, const T* k_cache,
                       const T* v_cache, const int32_t* token_seq, const int32_t* positions,
                       const int32_t* block_tables, int bt_stride, int num_heads, int num_kv_heads, int hpb,
                       int head_dim, int block_size, float scale, int partition) {
    extern __shared__ float smem[];  // acc [kWarps][G][head_dim], then m [kWarps][G], l [kWarps][G]
    float* merge_acc = smem;
    float* merge_m = smem + kWarps * G * head_dim;
    float* merge_l = merge_m + kWarps * G;

    const int t = blockIdx.x, h0 = blockIdx.y * hpb, split = blockIdx.z, splits = gridDim.z;
    const int lane = threadIdx.x % ATOMK_WARP_SIZE, warp = threadIdx.x / ATOMK_WARP_SIZE;
    const int kvh = h0 / (num_heads / num_kv_heads);
    const int ctx = positions[t] + 1;
    // Each token splits its own context evenly, so a split count chosen for a bound on the
    // context (a graph captured for the longest sequence) still spreads a short one.
    const int part = splits == 1 ? ctx : max((ctx + splits - 1) / splits, min(partition, kMinSplitPositions));
    const int begin = split * part, end = min(ctx, begin + part);
    const int32_t* table = block_tables + (size_t)token_seq[t] * bt_stride;
    const size_t kv_row = (size_t)num_kv_heads * head_dim;

    float qv[G][DPL], acc[G][DPL], m[G], l[G];
#pragma unroll
    for (int g = 0; g < G; ++g) {
        const T* qh = q + ((size_t)t * num_heads + h0 + g) * head_dim;
#pragma unroll
        for (int i = 0; i < DPL; ++i) {
            const int d = lane + i * ATOMK_WARP_SIZE;
            qv[g][i] = g < hpb && d < head_dim ? atomk_to_float(qh[d]) * scale : 0.f;
            acc[g][i] = 0.f;
        }
        m[g] = -INFINITY;
        l[g] = 0.f;
    }

    // U consecutive positions per warp and iteration: their K and V rows are all loaded before
    // any reduction, so U independent loads are in flight, and the online softmax is updated
    // once per U positions (one rescale).
    constexpr int U = DPL >= 8 ? 2 : 4;
    for (int p0 = begin + warp * U; p0 < end; p0 += kWarps * U) {
        float kf[U][DPL], vf[U][DPL];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int p = p0 + u;  // uniform across the warp
            const bool in = p < end;
            const size_t slot = in ? (size_t)table[p / block_size] * block_size + p % block_size : 0;
            const T* kp = k_cache + slot * kv_row + (size_t)kvh * head_dim;
            const T* vp = v_cache + slot * kv_row + (size_t)kvh * head_dim;
#pragma unroll
            for (int i = 0; i < DPL; ++i) {
                const int d = lane + i * ATOMK_WARP_SIZE;
                kf[u][i] = in && d < head_dim ? atomk_to_float(kp[d]) : 0.f;
                vf[u][i] = in && d < head_dim ? atomk_to_float(vp[d]) : 0.f;
            }
        }
#pragma unroll
        for (int g = 0; g < G; ++g) {
            if (g >= hpb) break;  // uniform across the block
            float s[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                float a = 0.f;
#pragma unroll
                for (int i = 0; i < DPL; ++i) a += qv[g][i] * kf[u][i];
                s[u] = a;
            }
#pragma unroll
            for (int u = 0; u < U; ++u) s[u] = atomk_warp_sum(s[u]);
            float m_new = m[g];
#pragma unroll
            for (int u = 0; u < U; ++u)
                if (p0 + u < end) m_new = fmaxf(m_new, s[u]);
            const float corr = expf(m[g] - m_new);  // 0 on the first positions (m = -inf)
            float e[U], esum = 0.f;
#pragma unroll
            for (int u = 0; u < U; ++u) {
                e[u] = p0 + u < end ? expf(s[u] - m_new) : 0.f;
                esum += e[u];
            }
            l[g] = l[g] * corr + esum;
#pragma unroll
            for (int i = 0; i < DPL; ++i) {
                float a = acc[g][i] * corr;
#pragma unroll
                for (int u = 0; u < U; ++u) a += e[u] * vf[u][i];
                acc[g][i] = a;
            }
            m[g] = m_new;
        }
    }

#pragma unroll
    for (int g = 0; g < G; ++g) {
        if (lane == 0) {
            merge_m[warp * G + g] = m[g];
            merge_l[warp * G + g] = l[g];
        }
#pragma unroll
        for (int i = 0; i < DPL; ++i) {
            const int d = lane + i * ATOMK_WARP_SIZE;
            if (d < head_dim) merge_acc[(warp * G + g) * head_dim + d] = acc[g][i];
        }
    }
    __syncthreads();

    for (int j = threadIdx.x; j < hpb * head_dim; j += blockDim.x) {
        const int g = j / head_dim, d = j % head_dim;
        float mx = -INFINITY;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, merge_m[w * G + g]);
        float a = 0.f, sum = 0.f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) {
            const float mw = merge_m[w * G + g];
            const float wt = mw == -INFINITY ? 0.f : expf(mw - mx);  // a warp that saw no position
            a += merge_acc[(w * G + g) * head_dim + d] * wt;
            sum += merge_l[w * G + g] * wt;
        }
        const size_t row = (size_t)t * num_heads + h0 + g;  // (token, query head)
        if (splits == 1) {
            out[row * head_dim + d] = atomk_from_float<T>(a / sum);
        } else {
            const size_t pi = row * splits + split;
            part_acc[pi * head_dim + d] = a;
            if (d == 0) {
                part_m[pi] = mx;
                part_l[pi] = sum;
            }
        }
    }
}

// Merges the partitions of one (token, query head): out = Σ_s acc_s·w_s / Σ_s l_s·w_s with
// w_s = exp(m_s - max_s m_s); a partition past the token's context has m = -inf and weight 0.
template <typename T>
__global__ void attention_merge_kernel(T* out, const float* part_acc, const float* part_m, const float* part_l,
                                       int head_dim, int splits) {
    const size_t row = (size_t)blockIdx.x * gridDim.y + blockIdx.y;
    const float* m = part_m + row * splits;
    const float* l = part_l + row * splits;
    float mx = -INFINITY;
    for (int s = 0; s < splits; ++s) mx = fmaxf(mx, m[s]);
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float a = 0.f, sum = 0.f;
        for (int s = 0; s < splits; ++s) {
            const float wt = m[s] == -INFINITY ? 0.f : expf(m[s] - mx);
            a += part_acc[(row * splits + s) * head_dim + d] * wt;
            sum += l[s] * wt;
        }
        out[row * head_dim + d] = atomk_from_float<T>(a / sum);
    }
}

// Multiprocessors of the current device (cached per thread and device).
int sm_count() {
    static thread_local int dev = -1, sms = 0;
    int d = 0;
    if (gpuGetDevice(&d) != gpuSuccess) return 132;
    if (d != dev) {
        if (gpuDeviceGetAttribute(&sms, gpuDevAttrMultiProcessorCount, d) != gpuSuccess) sms = 132;
        dev = d;
    }
    return sms;
}

// Query heads per block: the whole group when it fits, else the largest power of two <= kMaxGroup
// dividing it.
int heads_per_block(int group) {
    if (group <= kMaxGroup) return group;
    int h = kMaxGroup;
    while (group % h != 0) h /= 2;
    return h;
}

// Context partitions: 1 unless the blocks of the batch (tokens × head groups) fall short of
// kBlocksPerSM per SM and the longest context has room for partitions of kMinPartition.
int attention_splits(int tokens, int head_blocks, int max_ctx) {
    const long base = (long)tokens * head_blocks;
    const long target = (long)kBlocksPerSM * sm_count();
    if (base >= target || max_ctx < 2 * kMinPartition) return 1;
    const long want = (target + base - 1) / base;
    const long most = max_ctx / kMinPartition;
    return (int)(want < most ? want : most);
}

size_t workspace_bytes(int tokens, int num_heads, int head_dim, int splits) {
    return splits <= 1 ? 0 : (size_t)tokens * num_heads * splits * (head_dim + 2) * sizeof(float);
}

template <typename T, int DPL>
int launch_dpl(int hpb, dim3 grid, size_t smem, gpuStream_t s, T* out, float* pa, float* pm, float* pl, const T* q,
               const T* kc, const T* vc, const int32_t* token_seq, const int32_t* positions, const int32_t* tables,
               int stride, int num_heads, int num_kv_heads, int head_dim, int block_size, float scale, int partition) {
#define ATOMK_ATTN(G)                                                                                           \
    paged_attention_kernel<T, DPL, G><<<grid, kWarps * ATOMK_WARP_SIZE, smem * G, s>>>(                          \
        out, pa, pm, pl, q, kc, vc, token_seq, positions, tables, stride, num_heads, num_kv_heads, hpb, head_dim, \
        block_size, scale, partition)
    if (hpb == 1) ATOMK_ATTN(1);
    else if (hpb == 2) ATOMK_ATTN(2);
    else if (hpb <= 4) ATOMK_ATTN(4);
    else ATOMK_ATTN(8);
#undef ATOMK_ATTN
    ATOMK_LAUNCHED("paged_attention");
    return ATOMK_OK;
}

}  // namespace

extern "C" {

int atomk_paged_attention_workspace(int tokens, int num_heads, int num_kv_heads, int head_dim, int max_ctx,
                                    size_t* bytes) {
    if (!bytes || num_kv_heads <= 0 || num_heads % num_kv_heads != 0)
        return atomk_fail(ATOMK_ERR_INVALID, "atomk_paged_attention_workspace: heads=%d kv_heads=%d", num_heads,
                          num_kv_heads);
    const int hpb = heads_per_block(num_heads / num_kv_heads);
    *bytes = workspace_bytes(tokens, num_heads, head_dim, attention_splits(tokens, num_heads / hpb, max_ctx));
    return ATOMK_OK;
}

int atomk_paged_attention(int dtype, void* out, const void* q, const void* k_cache, const void* v_cache,
                          const int32_t* token_seq, const int32_t* positions, const int32_t* block_tables,
                          int block_table_stride, int tokens, int num_heads, int num_kv_heads, int head_dim,
                          int block_size, float scale, int max_ctx, void* workspace, size_t workspace_size,
                          void* stream) {
    if (tokens < 0 || num_heads <= 0 || num_kv_heads <= 0 || num_heads % num_kv_heads != 0 || head_dim <= 0 ||
        block_size <= 0 || block_table_stride <= 0 || max_ctx <= 0)
        return atomk_fail(ATOMK_ERR_INVALID,
                          "atomk_paged_attention: tokens=%d heads=%d kv_heads=%d head_dim=%d block_size=%d "
                          "stride=%d max_ctx=%d",
                          tokens, num_heads, num_kv_heads, head_dim, block_size, block_table_stride, max_ctx);
    if (tokens == 0) return ATOMK_OK;
    if (head_dim > 8 * ATOMK_WARP_SIZE)
        return atomk_fail(ATOMK_ERR_UNSUPPORTED, "atomk_paged_attention: head_dim %d > %d", head_dim, 8 * ATOMK_WARP_SIZE);
    const int hpb = heads_per_block(num_heads / num_kv_heads);
    const int splits = attention_splits(tokens, num_heads / hpb, max_ctx);
    const size_t need = workspace_bytes(tokens, num_heads, head_dim, splits);
    if (workspace_size < need)
        return atomk_fail(ATOMK_ERR_INVALID, "atomk_paged_attention: workspace of %zu bytes, %zu needed", workspace_size,
                          need);
    if (num_heads / hpb > 65535 || splits > 65535)
        return atomk_fail(ATOMK_ERR_INVALID, "atomk_paged_attention: grid of %d head groups, %d splits",
                          num_heads / hpb, splits);
    const int partition = (max_ctx + splits - 1) / splits;
    float* pa = static_cast<float*>(workspace);
    const size_t rows = (size_t)tokens * num_heads * splits;
    float* pm = splits > 1 ? pa + rows * head_dim : nullptr;
    float* pl = splits > 1 ? pm + rows : nullptr;
    const dim3 grid(tokens, num_heads / hpb, splits);
    // Shared memory per unit of G: warps' acc (head_dim floats) plus their m and l.
    const size_t smem = (size_t)kWarps * (head_dim + 2) * sizeof(float);
    gpuStream_t s = ATOMK_STREAM(stream);
    int st = ATOMK_OK;
#define ATOMK_DPL(DPL)                                                                                            \
    st = launch_dpl<T, DPL>(hpb, grid, smem, s, static_cast<T*>(out), pa, pm, pl, static_cast<const T*>(q),        \
                            static_cast<const T*>(k_cache), static_cast<const T*>(v_cache), token_seq, positions, \
                            block_tables, block_table_stride, num_heads, num_kv_heads, head_dim, block_size, scale, \
                            partition)
    ATOMK_DISPATCH(dtype, "atomk_paged_attention",
                   if (head_dim <= ATOMK_WARP_SIZE) ATOMK_DPL(1);
                   else if (head_dim <= 2 * ATOMK_WARP_SIZE) ATOMK_DPL(2);
                   else if (head_dim <= 4 * ATOMK_WARP_SIZE) ATOMK_DPL(4);
                   else ATOMK_DPL(8);
                   if (st == ATOMK_OK && splits > 1) {
                       attention_merge_kernel<T><<<dim3(tokens, num_heads), 128, 0, s>>>(static_cast<T*>(out), pa, pm,
                                                                                         pl, head_dim, splits);
                       ATOMK_LAUNCHED("attention_merge");
                   });
#undef ATOMK_DPL
    return st;
}

}  // extern "C"
