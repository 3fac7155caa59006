// norm.cu: RMSNorm with the fused residual add of every pre-norm decoder layer, and the
// per-head RMSNorm that Qwen3 applies to q and k.
#include "atomk_internal.h"
#include "atomk_vec.h"

// One block per row. With a residual: residual = residual + x (stored in T), then the row is
// normalised from the stored residual; without: from x. out = row * rsqrt(mean(row²) + eps) * w.
// Each thread re-reads in the second pass only the elements it wrote or read in the first. U is
// the unit each thread moves: Vec<T> (16 bytes; cols then counts vectors) when every pointer is
// aligned and the width is whole vectors, else T.
template <typename T, typename U>
__device__ __forceinline__ float add_square(U& v, const U& add, bool sum) {
    constexpr int N = sizeof(U) / sizeof(T);
    T* e = reinterpret_cast<T*>(&v);
    const T* a = reinterpret_cast<const T*>(&add);
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < N; ++j) {
        if (sum) e[j] = atomk_from_float<T>(atomk_to_float(e[j]) + atomk_to_float(a[j]));
        const float f = atomk_to_float(e[j]);
        ss += f * f;
    }
    return ss;
}

// v · inv · w elementwise, rounded to T.
template <typename T, typename U>
__device__ __forceinline__ U scale_row(const U& v, const U& w, float inv) {
    constexpr int N = sizeof(U) / sizeof(T);
    const T* ve = reinterpret_cast<const T*>(&v);
    const T* we = reinterpret_cast<const T*>(&w);
    U out;
    T* oe = reinterpret_cast<T*>(&out);
#pragma unroll
    for (int j = 0; j < N; ++j) oe[j] = atomk_from_float<T>(atomk_to_float(ve[j]) * inv * atomk_to_float(we[j]));
    return out;
}

template <typename T, typename U>
__global__ void rms_norm_kernel(T* out, const T* x, T* residual, const T* w, int cols, int width, float eps) {
    // The weights are no kernel's output: fetched into L2 while the previous kernel finishes.
    for (int b = threadIdx.x * 128; b < width * (int)sizeof(T); b += blockDim.x * 128)
        atomk_prefetch_l2(reinterpret_cast<const char*>(w) + b);
    ATOMK_PDL_ENTER();
    __shared__ float scratch[1024 / ATOMK_WARP_SIZE];
    constexpr int N = sizeof(U) / sizeof(T);
    const size_t base = (size_t)blockIdx.x * cols;  // cols counts units of U
    const U* xr = reinterpret_cast<const U*>(x + base * N);
    U* rr = residual ? reinterpret_cast<U*>(residual + base * N) : nullptr;
    const U* wv = reinterpret_cast<const U*>(w);
    U* o = reinterpret_cast<U*>(out + base * N);
    if (cols <= (int)blockDim.x) {  // a unit per thread (decode rows): w is loaded with x, not after the sum
        const int c = threadIdx.x;
        U v{}, ww{};
        float ss = 0.f;
        if (c < cols) {
            v = xr[c];
            ww = wv[c];
            if (rr) {
                U r = rr[c];
                ss = add_square<T>(r, v, true);
                rr[c] = r;
                v = r;
            } else {
                ss = add_square<T>(v, v, false);
            }
        }
        const float inv = rsqrtf(atomk_block_sum(ss, scratch) / (float)width + eps);
        if (c < cols) o[c] = scale_row<T>(v, ww, inv);
        return;
    }
    float ss = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        U v = xr[c];
        if (rr) {
            U r = rr[c];
            ss += add_square<T>(r, v, true);
            rr[c] = r;
        } else {
            ss += add_square<T>(v, v, false);
        }
    }
    const float inv = rsqrtf(atomk_block_sum(ss, scratch) / (float)width + eps);
    const U* src = rr ? rr : xr;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) o[c] = scale_row<T>(src[c], wv[c], inv);
}

// One warp per head of x [rows, heads*head_dim], normalised in place with w [head_dim].
template <typename T>
__global__ void head_rms_norm_kernel(T* x, const T* w, size_t total_heads, int head_dim, float eps) {
    ATOMK_PDL_ENTER();
    const size_t h = (size_t)blockIdx.x * (blockDim.x / ATOMK_WARP_SIZE) + threadIdx.x / ATOMK_WARP_SIZE;
    if (h >= total_heads) return;  // the whole warp leaves together
    const int lane = threadIdx.x % ATOMK_WARP_SIZE;
    T* p = x + h * head_dim;
    float ss = 0.f;
    for (int d = lane; d < head_dim; d += ATOMK_WARP_SIZE) {
        const float v = atomk_to_float(p[d]);
        ss += v * v;
    }
    const float inv = rsqrtf(atomk_warp_sum(ss) / (float)head_dim + eps);
    for (int d = lane; d < head_dim; d += ATOMK_WARP_SIZE)
        p[d] = atomk_from_float<T>(atomk_to_float(p[d]) * inv * atomk_to_float(w[d]));
}

extern "C" {

int atomk_rms_norm(int dtype, void* out, const void* x, void* residual, const void* w, int rows, int cols, float eps,
                   void* stream) {
    if (rows < 0 || cols <= 0) return atomk_fail(ATOMK_ERR_INVALID, "atomk_rms_norm: rows=%d cols=%d", rows, cols);
    if (rows == 0) return ATOMK_OK;
    const bool aligned = atomk_aligned16(out) && atomk_aligned16(x) && atomk_aligned16(residual) && atomk_aligned16(w);
    ATOMK_DISPATCH(dtype, "atomk_rms_norm", {
        constexpr int N = Vec<T>::N;
        if (aligned && cols % N == 0) {
            atomk_launch(rms_norm_kernel<T, Vec<T>>, rows, atomk_row_threads(cols / N), 0, ATOMK_STREAM(stream),
                static_cast<T*>(out), static_cast<const T*>(x), static_cast<T*>(residual), static_cast<const T*>(w),
                cols / N, cols, eps);
        } else {
            atomk_launch(rms_norm_kernel<T, T>, rows, atomk_row_threads(cols), 0, ATOMK_STREAM(stream),
                static_cast<T*>(out), static_cast<const T*>(x), static_cast<T*>(residual), static_cast<const T*>(w),
                cols, cols, eps);
        }
    });
    ATOMK_LAUNCHED("rms_norm");
    return ATOMK_OK;
}

int atomk_head_rms_norm(int dtype, void* x, const void* w, int rows, int heads, int head_dim, float eps, void* stream) {
    if (rows < 0 || heads <= 0 || head_dim <= 0)
        return atomk_fail(ATOMK_ERR_INVALID, "atomk_head_rms_norm: rows=%d heads=%d head_dim=%d", rows, heads, head_dim);
    if (rows == 0) return ATOMK_OK;
    const size_t total = (size_t)rows * heads;
    const int threads = 256, per_block = threads / ATOMK_WARP_SIZE;
    const unsigned blocks = (unsigned)((total + per_block - 1) / per_block);
    ATOMK_DISPATCH(dtype, "atomk_head_rms_norm",
                   atomk_launch(head_rms_norm_kernel<T>, blocks, threads, 0, ATOMK_STREAM(stream),
                       static_cast<T*>(x), static_cast<const T*>(w), total, head_dim, eps));
    ATOMK_LAUNCHED("head_rms_norm");
    return ATOMK_OK;
}

}  // extern "C"
