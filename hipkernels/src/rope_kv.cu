// rope_kv.cu: rotary position embedding (neox rotate-half layout) of q and k, fused with the
// store of k and v into the paged KV cache. Two entry points share one kernel:
//   - atomk_rope_write_kv: q, k and v are separate tensors; q and k are rotated in place;
//   - atomk_rope_write_kv_fused: q, k and v are the column ranges of each row of the fused
//     q|k|v projection's output; q is rotated into its own tensor (what attention reads) and
//     k and v go only to the cache, so the decoder needs no split kernel.
#include <stdint.h>

#include "atomk_internal.h"

// Where one token's q, k and v rows are read and written: row t of q_in starts at
// q_in + t * q_in_stride, and so on. q_out may equal q_in (in place); k_out may be NULL (the
// rotated k then goes to the cache only).
template <typename T> struct RopeRows {
    const T* q_in;
    T* q_out;
    const T* k_in;
    T* k_out;
    const T* v;
    int64_t q_in_stride, q_out_stride, k_in_stride, k_out_stride, v_stride;
};

// One block per token t at position pos. First the block computes, into shared memory, cos and
// sin of pos * inv_freq[i] (times attn_factor) for the rotary_dim/2 frequencies. Then each head
// of q and k is rotated: dims i and i + rotary_dim/2 form the pair
//   (x1, x2) -> (x1*cos - x2*sin, x2*cos + x1*sin),
// dims at or past rotary_dim stay (and are copied when q is written elsewhere). The rotated k
// head and the v head are copied into the caches at row slots[t] (skipped when the slot is
// negative or past num_slots). Each thread reads the pair it writes, so in place is safe.
template <typename T>
__global__ void rope_write_kv_kernel(RopeRows<T> io, T* k_cache, T* v_cache, const int32_t* positions,
                                     const int32_t* slots, const float* inv_freq, float attn_factor, int q_heads,
                                     int kv_heads, int head_dim, int rotary_dim, int64_t num_slots) {
    ATOMK_PDL_ENTER();
    extern __shared__ float cs[];  // cos[half], then sin[half]
    const int t = blockIdx.x, half = rotary_dim / 2, pass = head_dim - rotary_dim;
    const float pos = (float)positions[t];
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        float s, c;
        sincosf(pos * inv_freq[i], &s, &c);
        cs[i] = c * attn_factor;
        cs[half + i] = s * attn_factor;
    }
    __syncthreads();

    const T* qi = io.q_in + t * io.q_in_stride;
    T* qo = io.q_out + t * io.q_out_stride;
    for (int j = threadIdx.x; j < q_heads * half; j += blockDim.x) {
        const int off = (j / half) * head_dim, i = j % half;
        const float x1 = atomk_to_float(qi[off + i]), x2 = atomk_to_float(qi[off + i + half]);
        qo[off + i] = atomk_from_float<T>(x1 * cs[i] - x2 * cs[half + i]);
        qo[off + i + half] = atomk_from_float<T>(x2 * cs[i] + x1 * cs[half + i]);
    }
    if (qo != qi) {  // uniform over the block
        for (int j = threadIdx.x; j < q_heads * pass; j += blockDim.x) {
            const int d = (j / pass) * head_dim + rotary_dim + j % pass;
            qo[d] = qi[d];
        }
    }

    const int kvw = kv_heads * head_dim;
    const int64_t slot = slots[t];
    const bool store = slot >= 0 && slot < num_slots;
    const T* ki = io.k_in + t * io.k_in_stride;
    T* ko = io.k_out ? io.k_out + t * io.k_out_stride : nullptr;
    T* kc = k_cache + (store ? slot : 0) * kvw;
    for (int j = threadIdx.x; j < kv_heads * half; j += blockDim.x) {
        const int off = (j / half) * head_dim, i = j % half;
        const float x1 = atomk_to_float(ki[off + i]), x2 = atomk_to_float(ki[off + i + half]);
        const T y1 = atomk_from_float<T>(x1 * cs[i] - x2 * cs[half + i]);
        const T y2 = atomk_from_float<T>(x2 * cs[i] + x1 * cs[half + i]);
        if (ko) {
            ko[off + i] = y1;
            ko[off + i + half] = y2;
        }
        if (store) {
            kc[off + i] = y1;
            kc[off + i + half] = y2;
        }
    }
    if (!store) return;
    for (int j = threadIdx.x; j < kv_heads * pass; j += blockDim.x) {
        const int d = (j / pass) * head_dim + rotary_dim + j % pass;
        kc[d] = ki[d];
    }
    const T* vt = io.v + t * io.v_stride;
    T* vc = v_cache + slot * kvw;
    for (int j = threadIdx.x; j < kvw; j += blockDim.x) vc[j] = vt[j];
}

namespace {

// Checks the shape shared by both entry points and launches one block per token.
template <typename T>
int launch_rope(const char* name, RopeRows<T> io, void* k_cache, void* v_cache, const int32_t* positions,
                const int32_t* slots, const float* inv_freq, float attn_factor, int tokens, int q_heads, int kv_heads,
                int head_dim, int rotary_dim, int64_t num_slots, void* stream) {
    const int threads = 128;
    const size_t smem = (size_t)rotary_dim * sizeof(float);
    atomk_launch(rope_write_kv_kernel<T>, tokens, threads, smem, ATOMK_STREAM(stream),
        io, static_cast<T*>(k_cache), static_cast<T*>(v_cache), positions, slots, inv_freq, attn_factor, q_heads,
        kv_heads, head_dim, rotary_dim, num_slots);
    ATOMK_LAUNCHED(name);
    return ATOMK_OK;
}

int check_rope(const char* name, int tokens, int q_heads, int kv_heads, int head_dim, int rotary_dim) {
    if (tokens < 0 || q_heads <= 0 || kv_heads <= 0 || head_dim <= 0 || rotary_dim <= 0 || rotary_dim % 2 != 0 ||
        rotary_dim > head_dim)
        return atomk_fail(ATOMK_ERR_INVALID, "%s: tokens=%d q_heads=%d kv_heads=%d head_dim=%d rotary_dim=%d", name,
                          tokens, q_heads, kv_heads, head_dim, rotary_dim);
    return ATOMK_OK;
}

}  // namespace

extern "C" {

int atomk_rope_write_kv(int dtype, void* q, void* k, const void* v, void* k_cache, void* v_cache,
                        const int32_t* positions, const int32_t* slots, const float* inv_freq, float attn_factor,
                        int tokens, int q_heads, int kv_heads, int head_dim, int rotary_dim, int64_t num_slots,
                        void* stream) {
    int st = check_rope("atomk_rope_write_kv", tokens, q_heads, kv_heads, head_dim, rotary_dim);
    if (st != ATOMK_OK || tokens == 0) return st;
    const int64_t qw = (int64_t)q_heads * head_dim, kvw = (int64_t)kv_heads * head_dim;
    ATOMK_DISPATCH(dtype, "atomk_rope_write_kv",
                   return launch_rope<T>("rope_write_kv",
                                         RopeRows<T>{static_cast<const T*>(q), static_cast<T*>(q),
                                                     static_cast<const T*>(k), static_cast<T*>(k),
                                                     static_cast<const T*>(v), qw, qw, kvw, kvw, kvw},
                                         k_cache, v_cache, positions, slots, inv_freq, attn_factor, tokens, q_heads,
                                         kv_heads, head_dim, rotary_dim, num_slots, stream));
    return ATOMK_OK;
}

int atomk_rope_write_kv_fused(int dtype, void* q_out, const void* qkv, void* k_cache, void* v_cache,
                              const int32_t* positions, const int32_t* slots, const float* inv_freq,
                              float attn_factor, int tokens, int q_heads, int kv_heads, int head_dim, int rotary_dim,
                              int64_t num_slots, void* stream) {
    int st = check_rope("atomk_rope_write_kv_fused", tokens, q_heads, kv_heads, head_dim, rotary_dim);
    if (st != ATOMK_OK || tokens == 0) return st;
    const int64_t qw = (int64_t)q_heads * head_dim, kvw = (int64_t)kv_heads * head_dim, w = qw + 2 * kvw;
    ATOMK_DISPATCH(dtype, "atomk_rope_write_kv_fused",
                   const T* row = static_cast<const T*>(qkv);
                   return launch_rope<T>("rope_write_kv_fused",
                                         RopeRows<T>{row, static_cast<T*>(q_out), row + qw, nullptr, row + qw + kvw,
                                                     w, qw, w, 0, w},
                                         k_cache, v_cache, positions, slots, inv_freq, attn_factor, tokens, q_heads,
                                         kv_heads, head_dim, rotary_dim, num_slots, stream));
    return ATOMK_OK;
}

}  // extern "C"
