// sampling.cu: helpers for sampling on the device. For now the greedy pick (argmax per row), so
// a greedy step can copy back one int per sequence instead of a row of logits.
#include <stdint.h>

#include "atomk_internal.h"

// True when (v, i) should win over (bv, bi): larger value, or equal value and smaller index.
// NaN never wins (comparisons with NaN are false), so a row of NaN yields index -1.
__device__ __forceinline__ bool atomk_better(float v, int i, float bv, int bi) {
    if (v != v) return false;  // NaN
    if (bi < 0) return true;   // nothing picked yet
    return v > bv || (v == bv && i < bi);
}

// One block per row of x [rows, cols]: each thread scans a strided slice, then the block
// reduces (value, index) pairs, first within warps by shuffles, then across warps in shared memory.
template <typename T>
__global__ void argmax_rows_kernel(int32_t* out, const T* x, int cols) {
    __shared__ float sv[1024 / ATOMK_WARP_SIZE];
    __shared__ int si[1024 / ATOMK_WARP_SIZE];
    const T* row = x + (size_t)blockIdx.x * cols;
    float best = -INFINITY;
    int bi = -1;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const float v = atomk_to_float(row[c]);
        if (atomk_better(v, c, best, bi)) {
            best = v;
            bi = c;
        }
    }
#pragma unroll
    for (int m = ATOMK_WARP_SIZE / 2; m > 0; m >>= 1) {
        const float ov = ATOMK_SHFL_XOR(best, m);
        const int oi = ATOMK_SHFL_XOR(bi, m);
        if (oi >= 0 && atomk_better(ov, oi, best, bi)) {
            best = ov;
            bi = oi;
        }
    }
    const int lane = threadIdx.x % ATOMK_WARP_SIZE, warp = threadIdx.x / ATOMK_WARP_SIZE;
    if (lane == 0) {
        sv[warp] = best;
        si[warp] = bi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x / ATOMK_WARP_SIZE); ++w)
            if (si[w] >= 0 && atomk_better(sv[w], si[w], best, bi)) {
                best = sv[w];
                bi = si[w];
            }
        out[blockIdx.x] = bi;
    }
}

extern "C" {

int atomk_argmax_rows(int dtype, int32_t* out, const void* x, int rows, int cols, void* stream) {
    if (rows < 0 || cols <= 0) return atomk_fail(ATOMK_ERR_INVALID, "atomk_argmax_rows: rows=%d cols=%d", rows, cols);
    if (rows == 0) return ATOMK_OK;
    ATOMK_DISPATCH(dtype, "atomk_argmax_rows",
                   argmax_rows_kernel<T><<<rows, atomk_row_threads(cols), 0, ATOMK_STREAM(stream)>>>(
                       out, static_cast<const T*>(x), cols));
    ATOMK_LAUNCHED("argmax_rows");
    return ATOMK_OK;
}

}  // extern "C"
