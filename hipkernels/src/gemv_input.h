// gemv_input.h: the skinny GEMM's constants and how its input rows reach the registers: the
// 16-byte loads, the unpacking of 16-bit pairs, the three inputs (x as given, the SwiGLU of the
// fused gate|up output, the residual stream already times the norm weight, its sum of squares
// known) and the two outputs.
// Included by gemv.cu (kept apart to keep it readable) and by moe.cu, whose skinny expert
// kernel streams weights the same way.
#ifndef ATOMK_GEMV_INPUT_H
#define ATOMK_GEMV_INPUT_H

#include <string.h>

#include "atomk_internal.h"

namespace {

constexpr int kThreads = 256;                         // per block, a multiple of the warp size
constexpr int kWarps = kThreads / ATOMK_WARP_SIZE;    // 8 on CUDA, 4 on HIP
constexpr int kMaxM = 16;                             // rows of x one launch handles
constexpr int kSwigluMaxM = 4;                        // the same with SwiGLU input (see blas.cu)
constexpr int kTargetWarps = 4096;                    // grid size that covers the latency of an H200 / MI300
constexpr int kMaxSums = 2048;                        // partial sums of squares a kResidualOut launch may leave

// Where a row of the GEMM's input x comes from (the kernel's X parameter).
enum Input {
    kPlainX = 0,   // x as given
    kSwigluX = 1,  // silu(gate)·up of the fused gate|up output (the MLP's down projection)
    kSumNormX = 2, // r · w_norm (r the residual stream) as a kResidualOut launch left it, with r's sum of squares
};

// Where the skinny kernel's results go (the kernel's O parameter).
enum Output {
    kPlainOut = 0,     // out = x · wᵀ (+ bias)
    kResidualOut = 1,  // out (the residual stream) += x · wᵀ, the new out times a norm weight, its sum of squares
};

// The weights are streamed once: on CUDA a load that does not allocate in L1 (evict-first) keeps
// the x chunks resident. HIP's plain load already goes around the vector cache well enough.
__device__ __forceinline__ uint4 load_stream(const uint4* p) {
#if defined(ATOMK_CUDA)
    return __ldcs(p);
#else
    return *p;
#endif
}

__device__ __forceinline__ uint4 load_cached(const uint4* p) {
#if defined(ATOMK_CUDA)
    return __ldg(p);
#else
    return *p;
#endif
}

// Two packed 16-bit values to floats (the low half is the element at the lower address).
template <typename T> __device__ __forceinline__ float2 unpack2(uint32_t u);
template <> __device__ __forceinline__ float2 unpack2<atomk_bf16>(uint32_t u) {
    return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
}
template <> __device__ __forceinline__ float2 unpack2<atomk_f16>(uint32_t u) {
    __half2 h;
    static_assert(sizeof h == sizeof u, "half2 is 4 bytes");
    memcpy(&h, &u, sizeof u);
    return __half22float2(h);
}

// The 8 values of one 16-byte chunk as floats.
template <typename T> __device__ __forceinline__ void unpack8(const uint4& v, float f[8]) {
    const float2 a = unpack2<T>(v.x), b = unpack2<T>(v.y), c = unpack2<T>(v.z), d = unpack2<T>(v.w);
    f[0] = a.x; f[1] = a.y; f[2] = b.x; f[3] = b.y;
    f[4] = c.x; f[5] = c.y; f[6] = d.x; f[7] = d.y;
}

// The floats of one 16-byte chunk (8 16-bit values or 4 floats).
template <typename T> struct Chunk {
    static constexpr int N = 16 / sizeof(T);
    static __device__ __forceinline__ void unpack(const uint4& v, float f[N]) {
        if constexpr (sizeof(T) == 4) {
            f[0] = __uint_as_float(v.x);
            f[1] = __uint_as_float(v.y);
            f[2] = __uint_as_float(v.z);
            f[3] = __uint_as_float(v.w);
        } else {
            unpack8<T>(v, f);
        }
    }
};

// acc += Σ xf[i] · w[i] over one chunk.
template <typename T> __device__ __forceinline__ float dot8(const float xf[8], const uint4& w, float acc) {
    float wf[8];
    unpack8<T>(w, wf);
#pragma unroll
    for (int i = 0; i < 8; ++i) acc = fmaf(xf[i], wf[i], acc);
    return acc;
}

// The 8 x values of chunk c of row i as floats. With kSwigluX, x is the gate|up output (row
// stride 2·k8 chunks, up k8 chunks after gate) and the value is silu(gate)·up, rounded to T as
// the SiLU-and-multiply kernel stores it, so the result matches SiluMulFused + GEMM. With
// kSumNormX, x is r · w_norm as given (the
// launch scales its sums by the row's rsqrt(mean(r²) + eps) at the end): one load per chunk, as
// plain x (a second one, of the norm weight, cost the m = 1 GEMV 10% of its rate).
template <typename T, int X>
__device__ __forceinline__ void load_x8(const uint4* x4, int i, int k8, int c, float xf[8]) {
    if constexpr (X == kPlainX || X == kSumNormX) {
        unpack8<T>(load_cached(x4 + (size_t)i * k8 + c), xf);
        return;
    }
    const uint4* row = x4 + (size_t)i * 2 * k8;
    float up[8];
    unpack8<T>(load_cached(row + c), xf);
    unpack8<T>(load_cached(row + k8 + c), up);
#pragma unroll
    for (int j = 0; j < 8; ++j)  // the fast divide: the IEEE one calls a slow path that spills
        xf[j] = atomk_to_float(atomk_from_float<T>(__fdividef(xf[j], 1.f + __expf(-xf[j])) * up[j]));
}

// The norm operands of the fused launches: a kResidualOut launch writes r · w (rounded to T) to
// res_out and its blocks' partial sums of r² to sums[blockIdx.x]; a kSumNormX launch reads eps
// and the count partial sums (x is r · w).
template <typename T> struct NormIn {
    const T* w;
    T* res_out;
    float eps;
    float* sums;
    int count;
};

// The sum of a kSumNormX launch's count partial sums (sums 16-byte aligned), by one warp, right
// after the wait: a round of loads rather than shared memory for them (8 KiB of static shared
// memory made the m = 1 GEMM 10% slower, in the graph too).
__device__ __forceinline__ float sum_partials(const float* sums, int count) {
    const int lane = threadIdx.x % ATOMK_WARP_SIZE;
    float s = 0.f;
    for (int i = 4 * lane; i < count; i += 4 * ATOMK_WARP_SIZE) {
        const float4 v = *reinterpret_cast<const float4*>(sums + i);
        s += v.x + (i + 1 < count ? v.y : 0.f) + (i + 2 < count ? v.z : 0.f) + (i + 3 < count ? v.w : 0.f);
    }
    return atomk_warp_sum(s);
}

}  // namespace

#endif  // ATOMK_GEMV_INPUT_H
