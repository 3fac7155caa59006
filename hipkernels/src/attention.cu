// attention.cu: causal attention of a mixed varlen batch (prefill chunks with a cached prefix,
// decodes) over the paged KV cache.
//
// The work is divided by query token, by group of query heads sharing a KV head (so each K/V row
// is read once for the whole group) and, when that alone would not fill the GPU (few tokens
// with long contexts: decodes), by partition of the context ("split-K"): each partition then
// produces an unnormalised partial result that a second kernel merges.
//
// Two kernels share that division of work and the merge. On CUDA with 16-bit K/V and head_dim
// 64, 128 or 256, decode_attention_kernel streams K/V with 16-byte loads straight into tensor-
// core fragments (decode is bound by the KV read, so everything else must get out of its way);
// every other case (HIP, f32, other head dims) runs paged_attention_kernel, the portable one.
//
// Both apply a sliding window (a token at position p attends to max(0, p-window+1)..p only; the
// partitions divide that range, so a long context costs only its window) and attention sinks
// (one logit per query head in the softmax's denominator, merged in once per (token, head) with
// the warps' results of partition 0: merge_warps_store).
#include <math.h>
#include <stdint.h>

#include "atomk_internal.h"
#include "attention_decode.h"

namespace {

// Context positions per split, at least. 64 rather than 256: a batch-1 decode at context ~1k
// then spreads over ~18 splits of each of 8 KV heads instead of 6, and the attention of a layer
// takes a quarter less time.
constexpr int kMinPartition = kMinSplitPositions;
constexpr int kBlocksPerSM = 4;        // split until the grid has about this many blocks per SM
constexpr int kMergeThreads = 512;     // threads of the merge kernel's blocks

// ---------------------------------------------------------------- portable kernel
// One block per (query token t, group of query heads, context partition). The group is
// heads [y*hpb, y*hpb + hpb), all reading kv head y*hpb / (num_heads / num_kv_heads); G >= hpb
// is the compile-time bound. Token t of sequence token_seq[t] at position pos attends to
// context positions attn_from(pos, window)..pos; with S splits this block covers the positions
// token_split_range gives.
//
// Warp w walks the block's positions in runs of U consecutive ones, w*U, w*U + kWarps*U, ...
// For each position it loads the K and V rows once (lane owns head dims lane, lane + WARP, ...:
// DPL of them) and, per query head of the group, keeps an online softmax: the running maximum
// m of the scores, the running sum l of exp(score - m), and acc = Σ exp(score - m) · v,
// rescaled whenever m grows. A score is the warp-wide sum of the lanes' partial dot products
// with the (pre-scaled) query. The warps are then merged by merge_warps_store.
template <typename T, int DPL, int G>
__global__ void __launch_bounds__(kWarps * ATOMK_WARP_SIZE)
paged_attention_kernel(T* out, float* part_acc, float* part_m, float* part_l, const T* q, const T* k_cache,
                       const T* v_cache, const int32_t* token_seq, const int32_t* positions,
                       const int32_t* block_tables, int bt_stride, int num_heads, int num_kv_heads, int hpb,
                       int head_dim, int block_size, float scale, int partition, int window,
                       const float* sinks) {
    ATOMK_PDL_ENTER();
    extern __shared__ float smem[];  // acc [kWarps][G][head_dim], then m [kWarps][G], l [kWarps][G]
    __shared__ float sink_m[G];
    float* merge_acc = smem;
    float* merge_m = smem + kWarps * G * head_dim;
    float* merge_l = merge_m + kWarps * G;

    const int t = blockIdx.x, h0 = blockIdx.y * hpb, split = blockIdx.z, splits = gridDim.z;
    const int lane = threadIdx.x % ATOMK_WARP_SIZE, warp = threadIdx.x / ATOMK_WARP_SIZE;
    const int kvh = h0 / (num_heads / num_kv_heads);
    int begin, end;
    token_split_range(positions[t], window, split, splits, partition, 1, &begin, &end);
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
    store_sinks(sink_m, sinks, G, hpb, h0, split);
    __syncthreads();
    merge_warps_store(merge_acc, merge_m, merge_l, G, hpb, head_dim, t, h0, num_heads, split, splits, out, part_acc,
                      part_m, part_l, sink_m);
}

// Partitions each merging thread loads in one round (see attention_merge_kernel).
constexpr int kMergeRound = 24;

// Merges the partitions of one (token, query head), row = blockIdx.x * gridDim.y + blockIdx.y:
// out = Σ_s acc_s·w_s / Σ_s l_s·w_s with w_s = exp(m_s - max_s m_s); a partition past the
// token's context has m = -inf and weight 0. blockDim/head_dim groups of head_dim threads each
// take a share of the partitions and load its m, l and acc all at once (kMergeRound per
// thread in flight), keeping their own maximum, sum and accumulator; the groups then meet once
// in shared memory, rescaled to the common maximum. One round of loads and one barrier: the
// merge sits between the attention and the output projection, and every round trip there is on
// the decode step's critical path. head_dim <= kMergeThreads.
// When one round covers every partition, all are read: those past the context hold m = -inf
// and zeros (merge_warps_store), and no load waits for positions[t] (one L2 round trip fewer on
// the batch-1 step's critical path). Otherwise only
// those holding positions are (split_count of the token's context, or of its window, with the
// partition and quantum the attention kernel used), so that a long graph bound costs no extra
// rounds.
template <typename T>
__global__ void __launch_bounds__(kMergeThreads)
attention_merge_kernel(T* out, const float* part_acc, const float* part_m, const float* part_l, int head_dim,
                       int splits, const int32_t* positions, int partition, int quantum, int window) {
    ATOMK_PDL_ENTER();
    __shared__ float sums[kMergeThreads];
    __shared__ float group_m[kMergeThreads], group_l[kMergeThreads];
    const size_t row = (size_t)blockIdx.x * gridDim.y + blockIdx.y;
    const int tid = threadIdx.x, groups = blockDim.x / head_dim, grp = tid / head_dim, d = tid % head_dim;
    const int active = splits <= kMergeRound * groups
                           ? splits
                           : split_count(attn_len(positions[blockIdx.x], window), splits, partition, quantum);
    const float* m = part_m + row * splits;
    const float* l = part_l + row * splits;
    const float* acc = part_acc + row * splits * head_dim;
    if (grp < groups) {
        float mx = -INFINITY, a = 0.f, den = 0.f;
        for (int s0 = grp; s0 < active; s0 += kMergeRound * groups) {
            float ms[kMergeRound], as[kMergeRound], ls[kMergeRound];
#pragma unroll
            for (int u = 0; u < kMergeRound; ++u) {
                const int s = s0 + u * groups;
                const bool in = s < active;
                ms[u] = in ? m[s] : -INFINITY;
                ls[u] = in ? l[s] : 0.f;
                as[u] = in ? acc[(size_t)s * head_dim + d] : 0.f;
            }
            float top = mx;
#pragma unroll
            for (int u = 0; u < kMergeRound; ++u) top = fmaxf(top, ms[u]);
            if (top == -INFINITY) continue;  // no positions in this round or before
            const float c = mx == -INFINITY ? 0.f : expf(mx - top);
            a *= c;
            den *= c;
            mx = top;
#pragma unroll
            for (int u = 0; u < kMergeRound; ++u)
                if (ms[u] != -INFINITY) {
                    const float w = expf(ms[u] - mx);
                    a += as[u] * w;
                    den += ls[u] * w;
                }
        }
        sums[tid] = a;
        if (d == 0) {
            group_m[grp] = mx;
            group_l[grp] = den;
        }
    }
    __syncthreads();
    if (tid < head_dim) {
        float mx = -INFINITY;
        for (int gi = 0; gi < groups; ++gi) mx = fmaxf(mx, group_m[gi]);
        float a = 0.f, den = 0.f;
        for (int gi = 0; gi < groups; ++gi)
            if (group_m[gi] != -INFINITY) {
                const float w = expf(group_m[gi] - mx);
                a += sums[gi * head_dim + tid] * w;
                den += group_l[gi] * w;
            }
        out[row * head_dim + tid] = atomk_from_float<T>(a / den);
    }
}

// Query heads per block: the whole group when it fits, else the largest power of two <= kMaxGroup
// dividing it.
int heads_per_block(int group) {
    if (group <= kMaxGroup) return group;
    int h = kMaxGroup;
    while (group % h != 0) h /= 2;
    return h;
}

// Context partitions: 1 unless the blocks of the batch (tokens × head groups) fill less than half
// of kBlocksPerSM per SM and the longest context has room for partitions of kMinPartition; then
// as many as keep the grid within kBlocksPerSM per SM (rounding down: a grid just over one
// wave of resident blocks would leave a tail of a few blocks running alone).
int attention_splits(int tokens, int head_blocks, int max_ctx) {
    const long base = (long)tokens * head_blocks;
    const long target = (long)kBlocksPerSM * atomk_sm_count();
    if (2 * base > target || max_ctx < 2 * kMinPartition) return 1;
    const long want = target / base;
    const long most = max_ctx / kMinPartition;
    return (int)(want < most ? want : most);
}

// With S > 1 partitions: each (token, query head, partition)'s unnormalised result (head_dim
// floats), then all the maxima, then all the sums.
size_t workspace_bytes(int tokens, int num_heads, int head_dim, int splits) {
    if (splits <= 1) return 0;
    return (size_t)tokens * num_heads * splits * (head_dim + 2) * sizeof(float);
}

// The operands of one launch, shared by both kernels' launchers.
struct AttnLaunch {
    dim3 grid;
    gpuStream_t stream;
    float *pa, *pm, *pl;
    const int32_t *token_seq, *positions, *tables;
    int stride, num_heads, num_kv_heads, hpb, head_dim, block_size, partition;
    int quantum;  // split_range's quantum of the kernel that ran (launch_decode sets it)
    int window;   // sliding window (0: none)
    float scale;
    const float* sinks;  // [num_heads] sink logits, NULL: none
};

template <typename T, int DPL>
int launch_portable(const AttnLaunch& L, T* out, const T* q, const T* kc, const T* vc) {
    // Shared memory per unit of G: warps' acc (head_dim floats) plus their m and l.
    const size_t smem = (size_t)kWarps * (L.head_dim + 2) * sizeof(float);
#define ATOMK_ATTN(G)                                                                                          \
    atomk_launch(paged_attention_kernel<T, DPL, G>, L.grid, kWarps * ATOMK_WARP_SIZE, smem * G, L.stream, \
        out, L.pa, L.pm, L.pl, q, kc, vc, L.token_seq, L.positions, L.tables, L.stride, L.num_heads,            \
        L.num_kv_heads, L.hpb, L.head_dim, L.block_size, L.scale, L.partition, L.window, L.sinks)
    if (L.hpb == 1) ATOMK_ATTN(1);
    else if (L.hpb == 2) ATOMK_ATTN(2);
    else if (L.hpb <= 4) ATOMK_ATTN(4);
    else ATOMK_ATTN(8);
#undef ATOMK_ATTN
    ATOMK_LAUNCHED("paged_attention");
    return ATOMK_OK;
}

template <typename T>
int launch_portable_dpl(const AttnLaunch& L, T* out, const T* q, const T* kc, const T* vc) {
    if (L.head_dim <= ATOMK_WARP_SIZE) return launch_portable<T, 1>(L, out, q, kc, vc);
    if (L.head_dim <= 2 * ATOMK_WARP_SIZE) return launch_portable<T, 2>(L, out, q, kc, vc);
    if (L.head_dim <= 4 * ATOMK_WARP_SIZE) return launch_portable<T, 4>(L, out, q, kc, vc);
    return launch_portable<T, 8>(L, out, q, kc, vc);
}

#if defined(ATOMK_CUDA)
// Whether a head_dim 128 launch takes a two-tile instance (DecodeTiles): a split context and a
// grid of at most three blocks per SM, the Wide instances' residency, so that every block
// still runs in the first wave.
bool wide_decode(const AttnLaunch& L) {
    const long blocks = (long)L.grid.x * L.grid.y * L.grid.z;
    return L.grid.z > 1 &&
           blocks <= (long)DecodeTiles<128, true>::min_blocks * atomk_sm_count();
}
#endif

// Runs the tensor-core decode kernel when it applies (CUDA, 16-bit, head_dim 64/128/256,
// 16-byte aligned rows); returns ATOMK_ERR_UNSUPPORTED otherwise, launching nothing.
template <typename T>
int launch_decode(AttnLaunch& L, T* out, const T* q, const T* kc, const T* vc) {
#if defined(ATOMK_CUDA)
    if constexpr (sizeof(T) == 2) {
        if (((uintptr_t)q | (uintptr_t)kc | (uintptr_t)vc) % 16 != 0) return ATOMK_ERR_UNSUPPORTED;
#define ATOMK_DECODE_TILES(D, WIDE)                                                                           \
    L.quantum = 8 * DecodeTiles<D, WIDE>::value * kWarps;                                                     \
    atomk_launch(decode_attention_kernel<T, D, WIDE>, L.grid, kWarps * 32, 0, L.stream, out, L.pa, L.pm, L.pl, q, kc, \
                 vc, L.token_seq, L.positions, L.tables, L.stride, L.num_heads, L.num_kv_heads, L.hpb, L.block_size, \
                 L.scale, L.partition, L.window, L.sinks)
        switch (L.head_dim) {  // the quantum is the one of the kernel's split_range (the merge's too)
            case 64: ATOMK_DECODE_TILES(64, false); break;
            case 128:
                if (wide_decode(L)) {
                    ATOMK_DECODE_TILES(128, true);
                } else {
                    ATOMK_DECODE_TILES(128, false);
                }
                break;
            case 256: ATOMK_DECODE_TILES(256, false); break;
            default: return ATOMK_ERR_UNSUPPORTED;
        }
#undef ATOMK_DECODE_TILES
        ATOMK_LAUNCHED("decode_attention");
        return ATOMK_OK;
    }
#endif
    (void)L, (void)out, (void)q, (void)kc, (void)vc;
    return ATOMK_ERR_UNSUPPORTED;
}

// The merge of split decode attention is launched without programmatic dependent launch: with
// it, the merge's early trigger let the o projection's blocks become resident and stream
// weights while the attention kernel still ran, and the batch-1 step was slower (a late
// trigger in the merge won back only half of the difference).
template <typename T>
int launch_attention(AttnLaunch L, void* out, const void* q, const void* kc, const void* vc, int tokens, int splits) {
    T* o = static_cast<T*>(out);
    const T *qt = static_cast<const T*>(q), *kt = static_cast<const T*>(kc), *vt = static_cast<const T*>(vc);
    int st = ATOMK_OK;
    L.quantum = 1;  // paged_attention_kernel's split_range; launch_decode sets its own
    st = launch_decode<T>(L, o, qt, kt, vt);
    if (st == ATOMK_ERR_UNSUPPORTED) st = launch_portable_dpl<T>(L, o, qt, kt, vt);
    if (st != ATOMK_OK || splits <= 1) return st;
    atomk_launch_serial(attention_merge_kernel<T>, dim3(tokens, L.num_heads), kMergeThreads, 0, L.stream, o, L.pa,
                        L.pm, L.pl, L.head_dim, splits, L.positions, L.partition, L.quantum, L.window);
    ATOMK_LAUNCHED("attention_merge");
    return ATOMK_OK;
}

// The most positions one token of a batch bounded by max_ctx attends to: the window, when
// there is one and it is shorter (what the context partitions divide).
int attended(int max_ctx, int window) { return window > 0 && window < max_ctx ? window : max_ctx; }

// Checks the attention shape shared by both entry points and fills L and *splits for it (the
// grid, the workspace's partitions); with tokens == 0 it checks only.
int prepare_launch(const char* name, AttnLaunch* L, int* splits, const int32_t* token_seq, const int32_t* positions,
                   const int32_t* block_tables, int block_table_stride, int tokens, int num_heads, int num_kv_heads,
                   int head_dim, int block_size, float scale, int max_ctx, int window, const float* sinks,
                   void* workspace, size_t workspace_size, void* stream) {
    if (tokens < 0 || num_heads <= 0 || num_kv_heads <= 0 || num_heads % num_kv_heads != 0 || head_dim <= 0 ||
        block_size <= 0 || block_table_stride <= 0 || max_ctx <= 0 || window < 0)
        return atomk_fail(ATOMK_ERR_INVALID,
                          "%s: tokens=%d heads=%d kv_heads=%d head_dim=%d block_size=%d stride=%d max_ctx=%d "
                          "window=%d",
                          name, tokens, num_heads, num_kv_heads, head_dim, block_size, block_table_stride, max_ctx,
                          window);
    if (tokens == 0) return ATOMK_OK;
    if (head_dim > 8 * ATOMK_WARP_SIZE)
        return atomk_fail(ATOMK_ERR_UNSUPPORTED, "%s: head_dim %d > %d", name, head_dim, 8 * ATOMK_WARP_SIZE);
    const int hpb = heads_per_block(num_heads / num_kv_heads);
    const int span = attended(max_ctx, window);
    const int s = attention_splits(tokens, num_heads / hpb, span);
    const size_t need = workspace_bytes(tokens, num_heads, head_dim, s);
    if (workspace_size < need)
        return atomk_fail(ATOMK_ERR_INVALID, "%s: workspace of %zu bytes, %zu needed", name, workspace_size, need);
    if (num_heads / hpb > 65535 || s > 65535)
        return atomk_fail(ATOMK_ERR_INVALID, "%s: grid of %d head groups, %d splits", name, num_heads / hpb, s);
    *splits = s;
    L->grid = dim3(tokens, num_heads / hpb, s);
    L->stream = ATOMK_STREAM(stream);
    L->pa = s > 1 ? static_cast<float*>(workspace) : nullptr;
    const size_t rows = (size_t)tokens * num_heads * s;
    L->pm = s > 1 ? L->pa + rows * head_dim : nullptr;
    L->pl = s > 1 ? L->pm + rows : nullptr;
    L->token_seq = token_seq;
    L->positions = positions;
    L->tables = block_tables;
    L->stride = block_table_stride;
    L->num_heads = num_heads;
    L->num_kv_heads = num_kv_heads;
    L->hpb = hpb;
    L->head_dim = head_dim;
    L->block_size = block_size;
    L->partition = (span + s - 1) / s;
    L->window = window;
    L->scale = scale;
    L->sinks = sinks;
    return ATOMK_OK;
}

}  // namespace

extern "C" {

int atomk_paged_attention_workspace(int tokens, int num_heads, int num_kv_heads, int head_dim, int max_ctx,
                                    int window, size_t* bytes) {
    if (!bytes || num_kv_heads <= 0 || num_heads % num_kv_heads != 0 || window < 0)
        return atomk_fail(ATOMK_ERR_INVALID, "atomk_paged_attention_workspace: heads=%d kv_heads=%d window=%d",
                          num_heads, num_kv_heads, window);
    const int hpb = heads_per_block(num_heads / num_kv_heads);
    *bytes = workspace_bytes(tokens, num_heads, head_dim,
                             attention_splits(tokens, num_heads / hpb, attended(max_ctx, window)));
    return ATOMK_OK;
}

int atomk_paged_attention(int dtype, void* out, const void* q, const void* k_cache, const void* v_cache,
                          const int32_t* token_seq, const int32_t* positions, const int32_t* block_tables,
                          int block_table_stride, int tokens, int num_heads, int num_kv_heads, int head_dim,
                          int block_size, float scale, int max_ctx, int window, const float* sinks,
                          void* workspace, size_t workspace_size, void* stream) {
    AttnLaunch L;
    int splits = 0;
    int st = prepare_launch("atomk_paged_attention", &L, &splits, token_seq, positions, block_tables, block_table_stride,
                            tokens, num_heads, num_kv_heads, head_dim, block_size, scale, max_ctx, window, sinks,
                            workspace, workspace_size, stream);
    if (st != ATOMK_OK || tokens == 0) return st;
    ATOMK_DISPATCH(dtype, "atomk_paged_attention",
                   st = launch_attention<T>(L, out, q, k_cache, v_cache, tokens, splits));
    return st;
}

}  // extern "C"
