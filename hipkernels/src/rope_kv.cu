// rope_kv.cu: rotary position embedding (neox rotate-half layout) of q and k, fused with the
// store of k and v into the paged KV cache.
#include <stdint.h>

#include "atomk_internal.h"

// One block per token t at position pos. First the block computes, into shared memory, cos and
// sin of pos * inv_freq[i] (times attn_factor) for the rotary_dim/2 frequencies. Then each head
// of q and k is rotated in place: dims i and i + rotary_dim/2 form the pair
//   (x1, x2) -> (x1*cos - x2*sin, x2*cos + x1*sin),
// dims at or past rotary_dim stay. The rotated k head and the v head are copied into the
// caches at row slots[t] (skipped when the slot is negative or past num_slots).
template <typename T>
__global__ void rope_write_kv_kernel(T* q, T* k, const T* v, T* k_cache, T* v_cache, const int32_t* positions,
                                     const int32_t* slots, const float* inv_freq, float attn_factor, int q_heads,
                                     int kv_heads, int head_dim, int rotary_dim, int64_t num_slots) {
    extern __shared__ float cs[];  // cos[half], then sin[half]
    const int t = blockIdx.x, half = rotary_dim / 2;
    const float pos = (float)positions[t];
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        float s, c;
        sincosf(pos * inv_freq[i], &s, &c);
        cs[i] = c * attn_factor;
        cs[half + i] = s * attn_factor;
    }
    __syncthreads();

    T* qt = q + (size_t)t * q_heads * head_dim;
    for (int j = threadIdx.x; j < q_heads * half; j += blockDim.x) {
        T* p = qt + (j / half) * head_dim;
        const int i = j % half;
        const float x1 = atomk_to_float(p[i]), x2 = atomk_to_float(p[i + half]);
        p[i] = atomk_from_float<T>(x1 * cs[i] - x2 * cs[half + i]);
        p[i + half] = atomk_from_float<T>(x2 * cs[i] + x1 * cs[half + i]);
    }

    const int kvw = kv_heads * head_dim;
    const int64_t slot = slots[t];
    const bool store = slot >= 0 && slot < num_slots;
    T* kt = k + (size_t)t * kvw;
    T* kc = k_cache + (store ? slot : 0) * kvw;
    for (int j = threadIdx.x; j < kv_heads * half; j += blockDim.x) {
        const int off = (j / half) * head_dim, i = j % half;
        const float x1 = atomk_to_float(kt[off + i]), x2 = atomk_to_float(kt[off + i + half]);
        const T y1 = atomk_from_float<T>(x1 * cs[i] - x2 * cs[half + i]);
        const T y2 = atomk_from_float<T>(x2 * cs[i] + x1 * cs[half + i]);
        kt[off + i] = y1;
        kt[off + i + half] = y2;
        if (store) {
            kc[off + i] = y1;
            kc[off + i + half] = y2;
        }
    }
    if (!store) return;
    const int pass = head_dim - rotary_dim;  // dims that RoPE leaves alone
    for (int j = threadIdx.x; j < kv_heads * pass; j += blockDim.x) {
        const int d = (j / pass) * head_dim + rotary_dim + j % pass;
        kc[d] = kt[d];
    }
    const T* vt = v + (size_t)t * kvw;
    T* vc = v_cache + slot * kvw;
    for (int j = threadIdx.x; j < kvw; j += blockDim.x) vc[j] = vt[j];
}

extern "C" {

int atomk_rope_write_kv(int dtype, void* q, void* k, const void* v, void* k_cache, void* v_cache,
                        const int32_t* positions, const int32_t* slots, const float* inv_freq, float attn_factor,
                        int tokens, int q_heads, int kv_heads, int head_dim, int rotary_dim, int64_t num_slots,
                        void* stream) {
    if (tokens < 0 || q_heads <= 0 || kv_heads <= 0 || head_dim <= 0 || rotary_dim <= 0 || rotary_dim % 2 != 0 ||
        rotary_dim > head_dim)
        return atomk_fail(ATOMK_ERR_INVALID,
                          "atomk_rope_write_kv: tokens=%d q_heads=%d kv_heads=%d head_dim=%d rotary_dim=%d", tokens,
                          q_heads, kv_heads, head_dim, rotary_dim);
    if (tokens == 0) return ATOMK_OK;
    const int threads = 128;
    const size_t smem = (size_t)rotary_dim * sizeof(float);
    ATOMK_DISPATCH(dtype, "atomk_rope_write_kv",
                   rope_write_kv_kernel<T><<<tokens, threads, smem, ATOMK_STREAM(stream)>>>(
                       static_cast<T*>(q), static_cast<T*>(k), static_cast<const T*>(v), static_cast<T*>(k_cache),
                       static_cast<T*>(v_cache), positions, slots, inv_freq, attn_factor, q_heads, kv_heads, head_dim,
                       rotary_dim, num_slots));
    ATOMK_LAUNCHED("rope_write_kv");
    return ATOMK_OK;
}

}  // extern "C"
