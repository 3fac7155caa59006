// rope_kv.cu: rotary position embedding (neox rotate-half layout) of q and k, fused with the
// store of k and v into the paged KV cache. Two entry points share one kernel:
//   - atomk_rope_write_kv: q, k and v are separate tensors; q and k are rotated in place;
//   - atomk_rope_write_kv_fused: q, k and v are the column ranges of each row of the fused
//     q|k|v projection's output; q is rotated into its own tensor (what attention reads) and
//     k and v go only to the cache, so the decoder needs no split kernel. With per-head norm
//     weights (Qwen3's q_norm and k_norm) each q and k head is RMS-normalised first, in the
//     same block: the split and the two norm kernels (three dependent launches and a round
//     trip of q|k|v through memory per layer) are not needed either.
#include <stdint.h>

#include "atomk_internal.h"

// Where one token's q, k and v rows are read and written: row t of q_in starts at
// q_in + t * q_in_stride, and so on. q_out may equal q_in (in place); k_out may be NULL (the
// rotated k then goes to the cache only). q_norm and k_norm, when not NULL, are head_dim
// weights of an RMSNorm applied to every q (k) head before the rotation, with norm_eps.
template <typename T> struct RopeRows {
    const T* q_in;
    T* q_out;
    const T* k_in;
    T* k_out;
    const T* v;
    int64_t q_in_stride, q_out_stride, k_in_stride, k_out_stride, v_stride;
    const T* q_norm;
    const T* k_norm;
    float norm_eps;
};

// One block per (token t, head): blockIdx.y < q_heads rotates that q head; the others rotate
// kv head y - q_heads and store it, with the v head, into the caches at row slots[t] (skipped
// when the slot is negative or past num_slots). Rotary dims i and i + rotary_dim/2 form the pair
//   (x1, x2) -> (x1*cos - x2*sin, x2*cos + x1*sin),  angle pos * inv_freq[i], times attn_factor,
// dims at or past rotary_dim stay (and are copied when the head is written elsewhere). A block
// per head rather than per token keeps a decode step's few tokens from serialising the heads'
// load-store round trips in one block (in place, the compiler cannot overlap them). Each thread
// reads the pair it writes, so in place is safe.
template <typename T>
__global__ void rope_write_kv_kernel(RopeRows<T> io, T* k_cache, T* v_cache, const int32_t* positions,
                                     const int32_t* slots, const float* inv_freq, float attn_factor, int q_heads,
                                     int kv_heads, int head_dim, int rotary_dim, int64_t num_slots) {
    const int t = blockIdx.x, head = blockIdx.y, half = rotary_dim / 2;
    // Positions and slots are uploaded before the step's kernels and inv_freq once: none is a
    // kernel's output, so they are read while the previous kernel finishes.
    const float pos = (float)positions[t];
    const int64_t slot = slots[t];
    if (threadIdx.x * 32 < half) atomk_prefetch_l2(inv_freq + threadIdx.x * 32);
    ATOMK_PDL_ENTER();
    const bool is_q = head < q_heads;
    const int off = (is_q ? head : head - q_heads) * head_dim;
    const bool store = !is_q && slot >= 0 && slot < num_slots;
    const int64_t kvw = (int64_t)kv_heads * head_dim;
    const T* in = is_q ? io.q_in + t * io.q_in_stride + off : io.k_in + t * io.k_in_stride + off;
    T* out = is_q ? io.q_out + t * io.q_out_stride + off : (io.k_out ? io.k_out + t * io.k_out_stride + off : nullptr);
    T* kc = store ? k_cache + slot * kvw + off : nullptr;
    // The head's RMSNorm (uniform over the block): the sum of squares is taken before anything
    // is written, so in place is still safe. A normalised value is rounded to T, as the separate
    // norm kernel (atomk_head_rms_norm) stores it, before it is rotated.
    const T* nw = is_q ? io.q_norm : io.k_norm;
    float inv = 1.f;
    if (nw) {
        __shared__ float scratch[1024 / ATOMK_WARP_SIZE];
        float ss = 0.f;
        for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
            const float v = atomk_to_float(in[d]);
            ss += v * v;
        }
        inv = rsqrtf(atomk_block_sum(ss, scratch) / (float)head_dim + io.norm_eps);
    }
    auto value = [&](int d) {
        const float x = atomk_to_float(in[d]);
        return nw ? atomk_to_float(atomk_from_float<T>(x * inv * atomk_to_float(nw[d]))) : x;
    };
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        float s, c;
        sincosf(pos * inv_freq[i], &s, &c);
        c *= attn_factor;
        s *= attn_factor;
        const float x1 = value(i), x2 = value(i + half);
        const T y1 = atomk_from_float<T>(x1 * c - x2 * s);
        const T y2 = atomk_from_float<T>(x2 * c + x1 * s);
        if (out) {
            out[i] = y1;
            out[i + half] = y2;
        }
        if (kc) {
            kc[i] = y1;
            kc[i + half] = y2;
        }
    }
    for (int d = rotary_dim + threadIdx.x; d < head_dim; d += blockDim.x) {
        const T y = atomk_from_float<T>(value(d));
        if (out && (out != in || nw)) out[d] = y;
        if (kc) kc[d] = y;
    }
    if (!store) return;
    const T* vt = io.v + t * io.v_stride + off;
    T* vc = v_cache + slot * kvw + off;
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) vc[d] = vt[d];
}

namespace {

// Checks the shape shared by both entry points and launches one block per (token, head).
template <typename T>
int launch_rope(const char* name, RopeRows<T> io, void* k_cache, void* v_cache, const int32_t* positions,
                const int32_t* slots, const float* inv_freq, float attn_factor, int tokens, int q_heads, int kv_heads,
                int head_dim, int rotary_dim, int64_t num_slots, void* stream) {
    if (q_heads + kv_heads > 65535)
        return atomk_fail(ATOMK_ERR_INVALID, "%s: %d q + %d kv heads (at most 65535)", name, q_heads, kv_heads);
    const int threads = atomk_row_threads(rotary_dim / 2 < 256 ? rotary_dim / 2 : 256);
    atomk_launch(rope_write_kv_kernel<T>, dim3(tokens, q_heads + kv_heads), threads, 0, ATOMK_STREAM(stream), io,
                 static_cast<T*>(k_cache), static_cast<T*>(v_cache), positions, slots, inv_freq, attn_factor, q_heads,
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
                                                     static_cast<const T*>(v), qw, qw, kvw, kvw, kvw, nullptr,
                                                     nullptr, 0.f},
                                         k_cache, v_cache, positions, slots, inv_freq, attn_factor, tokens, q_heads,
                                         kv_heads, head_dim, rotary_dim, num_slots, stream));
    return ATOMK_OK;
}

int atomk_rope_write_kv_fused(int dtype, void* q_out, const void* qkv, void* k_cache, void* v_cache,
                              const int32_t* positions, const int32_t* slots, const float* inv_freq,
                              float attn_factor, const void* q_norm, const void* k_norm, float norm_eps, int tokens,
                              int q_heads, int kv_heads, int head_dim, int rotary_dim, int64_t num_slots,
                              void* stream) {
    int st = check_rope("atomk_rope_write_kv_fused", tokens, q_heads, kv_heads, head_dim, rotary_dim);
    if (st != ATOMK_OK || tokens == 0) return st;
    const int64_t qw = (int64_t)q_heads * head_dim, kvw = (int64_t)kv_heads * head_dim, w = qw + 2 * kvw;
    ATOMK_DISPATCH(dtype, "atomk_rope_write_kv_fused",
                   const T* row = static_cast<const T*>(qkv);
                   return launch_rope<T>("rope_write_kv_fused",
                                         RopeRows<T>{row, static_cast<T*>(q_out), row + qw, nullptr, row + qw + kvw,
                                                     w, qw, w, 0, w, static_cast<const T*>(q_norm),
                                                     static_cast<const T*>(k_norm), norm_eps},
                                         k_cache, v_cache, positions, slots, inv_freq, attn_factor, tokens, q_heads,
                                         kv_heads, head_dim, rotary_dim, num_slots, stream));
    return ATOMK_OK;
}

}  // extern "C"
