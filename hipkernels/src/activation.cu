// activation.cu: element-wise kernels of the MLP and the projections: SiLU-and-multiply (of two
// tensors, or of the two halves of the fused gate|up output), the bias add and the split of the
// fused q|k|v output. Each has a 16-byte vector path, taken when the pointers are aligned and
// the widths are whole vectors, and a scalar fallback.
#include "atomk_internal.h"
#include "atomk_vec.h"

__device__ __forceinline__ float silu(float g) { return g / (1.f + expf(-g)); }

// Grid-stride index helpers.
#define ATOMK_GRID_LOOP(i, n) \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

// out[i] = silu(gate[i]) * up[i] over n elements; the first nv = n / N elements go as vectors
// (vec true), the rest one by one.
template <typename T>
__global__ void silu_mul_kernel(T* out, const T* gate, const T* up, size_t n, bool vec) {
    ATOMK_PDL_ENTER();
    constexpr int N = Vec<T>::N;
    size_t done = 0;
    if (vec) {
        const size_t nv = n / N;
        ATOMK_GRID_LOOP(i, nv) {
            const Vec<T> g = reinterpret_cast<const Vec<T>*>(gate)[i], u = reinterpret_cast<const Vec<T>*>(up)[i];
            Vec<T> o;
#pragma unroll
            for (int j = 0; j < N; ++j) o.v[j] = atomk_from_float<T>(silu(atomk_to_float(g.v[j])) * atomk_to_float(u.v[j]));
            reinterpret_cast<Vec<T>*>(out)[i] = o;
        }
        done = nv * N;
    }
    ATOMK_GRID_LOOP(i, n - done) {
        const size_t e = done + i;
        out[e] = atomk_from_float<T>(silu(atomk_to_float(gate[e])) * atomk_to_float(up[e]));
    }
}

// out[r, c] = silu(gu[r, c]) * gu[r, cols + c], out [rows, cols], gu [rows, 2*cols]. With vec,
// cols is a multiple of N and the loop runs over vectors.
template <typename T>
__global__ void silu_mul_fused_kernel(T* out, const T* gu, int rows, int cols, bool vec) {
    ATOMK_PDL_ENTER();
    if (vec) {
        constexpr int N = Vec<T>::N;
        const int cv = cols / N;
        ATOMK_GRID_LOOP(i, (size_t)rows * cv) {
            const size_t r = i / cv, c = i % cv;
            const Vec<T>* row = reinterpret_cast<const Vec<T>*>(gu + r * 2 * cols);
            const Vec<T> g = row[c], u = row[cv + c];
            Vec<T> o;
#pragma unroll
            for (int j = 0; j < N; ++j) o.v[j] = atomk_from_float<T>(silu(atomk_to_float(g.v[j])) * atomk_to_float(u.v[j]));
            reinterpret_cast<Vec<T>*>(out)[i] = o;
        }
        return;
    }
    ATOMK_GRID_LOOP(i, (size_t)rows * cols) {
        const size_t r = i / cols, c = i % cols;
        const T* row = gu + r * 2 * cols;
        out[i] = atomk_from_float<T>(silu(atomk_to_float(row[c])) * atomk_to_float(row[cols + c]));
    }
}

// out[r, c] += bias[c] over [rows, cols]; with vec, cols is a multiple of N.
template <typename T>
__global__ void add_bias_kernel(T* out, const T* bias, int rows, int cols, bool vec) {
    ATOMK_PDL_ENTER();
    if (vec) {
        constexpr int N = Vec<T>::N;
        const int cv = cols / N;
        ATOMK_GRID_LOOP(i, (size_t)rows * cv) {
            Vec<T> o = reinterpret_cast<Vec<T>*>(out)[i];
            const Vec<T> b = reinterpret_cast<const Vec<T>*>(bias)[i % cv];
#pragma unroll
            for (int j = 0; j < N; ++j) o.v[j] = atomk_from_float<T>(atomk_to_float(o.v[j]) + atomk_to_float(b.v[j]));
            reinterpret_cast<Vec<T>*>(out)[i] = o;
        }
        return;
    }
    ATOMK_GRID_LOOP(i, (size_t)rows * cols) out[i] = atomk_from_float<T>(atomk_to_float(out[i]) + atomk_to_float(bias[i % cols]));
}

// Row r of src [rows, ca+cb+cc] goes to a[r], b[r], c[r]. U is the unit moved: Vec<T> when every
// width is a whole number of vectors (widths then counted in vectors), else T.
template <typename U>
__global__ void split_cols_kernel(U* a, U* b, U* c, const U* src, int rows, int ca, int cb, int cc) {
    ATOMK_PDL_ENTER();
    const int w = ca + cb + cc;
    ATOMK_GRID_LOOP(i, (size_t)rows * w) {
        const size_t r = i / w;
        const int col = (int)(i % w);
        const U v = src[i];
        if (col < ca) a[r * ca + col] = v;
        else if (col < ca + cb) b[r * cb + col - ca] = v;
        else c[r * cc + col - ca - cb] = v;
    }
}

extern "C" {

int atomk_silu_mul(int dtype, void* out, const void* gate, const void* up, int rows, int cols, void* stream) {
    if (rows < 0 || cols <= 0) return atomk_fail(ATOMK_ERR_INVALID, "atomk_silu_mul: rows=%d cols=%d", rows, cols);
    const size_t n = (size_t)rows * cols;
    if (n == 0) return ATOMK_OK;
    const int threads = 256;
    const bool vec = atomk_aligned16(out) && atomk_aligned16(gate) && atomk_aligned16(up);
    ATOMK_DISPATCH(dtype, "atomk_silu_mul",
                   atomk_launch(silu_mul_kernel<T>, atomk_grid(vec ? n / Vec<T>::N + 1 : n, threads), threads, 0, ATOMK_STREAM(stream),
                       static_cast<T*>(out), static_cast<const T*>(gate), static_cast<const T*>(up), n, vec));
    ATOMK_LAUNCHED("silu_mul");
    return ATOMK_OK;
}

int atomk_silu_mul_fused(int dtype, void* out, const void* gate_up, int rows, int cols, void* stream) {
    if (rows < 0 || cols <= 0) return atomk_fail(ATOMK_ERR_INVALID, "atomk_silu_mul_fused: rows=%d cols=%d", rows, cols);
    if (rows == 0) return ATOMK_OK;
    const int threads = 256;
    const size_t n = (size_t)rows * cols;
    const bool aligned = atomk_aligned16(out) && atomk_aligned16(gate_up);
    ATOMK_DISPATCH(dtype, "atomk_silu_mul_fused", {
        const bool vec = aligned && cols % Vec<T>::N == 0;
        atomk_launch(silu_mul_fused_kernel<T>, atomk_grid(vec ? n / Vec<T>::N : n, threads), threads, 0, ATOMK_STREAM(stream),
            static_cast<T*>(out), static_cast<const T*>(gate_up), rows, cols, vec);
    });
    ATOMK_LAUNCHED("silu_mul_fused");
    return ATOMK_OK;
}

int atomk_add_bias(int dtype, void* out, const void* bias, int rows, int cols, void* stream) {
    if (rows < 0 || cols <= 0) return atomk_fail(ATOMK_ERR_INVALID, "atomk_add_bias: rows=%d cols=%d", rows, cols);
    const size_t n = (size_t)rows * cols;
    if (n == 0) return ATOMK_OK;
    const int threads = 256;
    const bool aligned = atomk_aligned16(out) && atomk_aligned16(bias);
    ATOMK_DISPATCH(dtype, "atomk_add_bias", {
        const bool vec = aligned && cols % Vec<T>::N == 0;
        atomk_launch(add_bias_kernel<T>, atomk_grid(vec ? n / Vec<T>::N : n, threads), threads, 0, ATOMK_STREAM(stream),
            static_cast<T*>(out), static_cast<const T*>(bias), rows, cols, vec);
    });
    ATOMK_LAUNCHED("add_bias");
    return ATOMK_OK;
}

int atomk_split_cols(int dtype, void* a, void* b, void* c, const void* src, int rows, int ca, int cb, int cc,
                     void* stream) {
    if (rows < 0 || ca < 0 || cb < 0 || cc < 0 || ca + cb + cc <= 0 || (ca && !a) || (cb && !b) || (cc && !c))
        return atomk_fail(ATOMK_ERR_INVALID, "atomk_split_cols: rows=%d widths %d+%d+%d", rows, ca, cb, cc);
    if (rows == 0) return ATOMK_OK;
    const int threads = 256;
    const size_t n = (size_t)rows * (ca + cb + cc);
    const bool aligned = atomk_aligned16(a) && atomk_aligned16(b) && atomk_aligned16(c) && atomk_aligned16(src);
    ATOMK_DISPATCH(dtype, "atomk_split_cols", {
        constexpr int N = Vec<T>::N;
        if (aligned && ca % N == 0 && cb % N == 0 && cc % N == 0) {
            typedef Vec<T> U;
            atomk_launch(split_cols_kernel<U>, atomk_grid(n / N, threads), threads, 0, ATOMK_STREAM(stream),
                static_cast<U*>(a), static_cast<U*>(b), static_cast<U*>(c), static_cast<const U*>(src), rows, ca / N,
                cb / N, cc / N);
        } else {
            atomk_launch(split_cols_kernel<T>, atomk_grid(n, threads), threads, 0, ATOMK_STREAM(stream),
                static_cast<T*>(a), static_cast<T*>(b), static_cast<T*>(c), static_cast<const T*>(src), rows, ca, cb, cc);
        }
    });
    ATOMK_LAUNCHED("split_cols");
    return ATOMK_OK;
}

}  // extern "C"
