// activation.cu: element-wise kernels of the MLP and the projections: SiLU-and-multiply and the
// bias add.
#include "atomk_internal.h"

// out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)); grid-stride over n elements.
template <typename T>
__global__ void silu_mul_kernel(T* out, const T* gate, const T* up, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float g = atomk_to_float(gate[i]);
        out[i] = atomk_from_float<T>(g / (1.f + expf(-g)) * atomk_to_float(up[i]));
    }
}

// out[r, c] += bias[c] over rows*cols elements, grid-stride.
template <typename T>
__global__ void add_bias_kernel(T* out, const T* bias, size_t n, int cols) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = atomk_from_float<T>(atomk_to_float(out[i]) + atomk_to_float(bias[i % cols]));
}

extern "C" {

int atomk_silu_mul(int dtype, void* out, const void* gate, const void* up, int rows, int cols, void* stream) {
    if (rows < 0 || cols <= 0) return atomk_fail(ATOMK_ERR_INVALID, "atomk_silu_mul: rows=%d cols=%d", rows, cols);
    const size_t n = (size_t)rows * cols;
    if (n == 0) return ATOMK_OK;
    const int threads = 256;
    ATOMK_DISPATCH(dtype, "atomk_silu_mul",
                   silu_mul_kernel<T><<<atomk_grid(n, threads), threads, 0, ATOMK_STREAM(stream)>>>(
                       static_cast<T*>(out), static_cast<const T*>(gate), static_cast<const T*>(up), n));
    ATOMK_LAUNCHED("silu_mul");
    return ATOMK_OK;
}

int atomk_add_bias(int dtype, void* out, const void* bias, int rows, int cols, void* stream) {
    if (rows < 0 || cols <= 0) return atomk_fail(ATOMK_ERR_INVALID, "atomk_add_bias: rows=%d cols=%d", rows, cols);
    const size_t n = (size_t)rows * cols;
    if (n == 0) return ATOMK_OK;
    const int threads = 256;
    ATOMK_DISPATCH(dtype, "atomk_add_bias",
                   add_bias_kernel<T><<<atomk_grid(n, threads), threads, 0, ATOMK_STREAM(stream)>>>(
                       static_cast<T*>(out), static_cast<const T*>(bias), n, cols));
    ATOMK_LAUNCHED("add_bias");
    return ATOMK_OK;
}

}  // extern "C"
