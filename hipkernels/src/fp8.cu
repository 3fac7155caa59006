// fp8.cu: block-scaled FP8 weights (float8_e4m3fn [n, k] with float32 scales [ceil(n/bn),
// ceil(k/bk)], DeepSeek-V3's and Qwen3-FP8's layout) against 16-bit or float activations.
//
// Decode reads the weight at one byte an element: the skinny kernel below streams 16-byte chunks
// of codes (16 elements, inside one scale block since bk is a multiple of 16), widens them in
// registers, multiplies them with the activations in float and applies the block's scale once
// per chunk. The activations are not quantized (weight-only: the exact dequantized-weight model,
// which the cpu reference computes). Larger batches of 16-bit activations with 128x128 blocks
// run on the tensor cores in FP8 (CUDA: cuBLASLt's block-scaled GEMM, DeepSeek-V3's recipe): the
// activations are quantized per row and 128 columns (e4m3 codes, a float32 scale each), then the
// GEMM applies both operands' scales per 128-deep slice of k. Elsewhere (HIP, other blocks, no
// cuBLASLt algorithm) the weight is dequantized into a 16-bit scratch for the BLAS GEMM.
#include <stdint.h>

#include "atomk_internal.h"
#include "atomk_vec.h"
#include "gemv_input.h"

#if defined(ATOMK_CUDA)
#include <cuda_fp8.h>
#endif

namespace {

constexpr int kFp8Threads = 256;
constexpr int kFp8Warps = kFp8Threads / ATOMK_WARP_SIZE;
constexpr int kFp8Rows = 2;      // weight rows a warp streams
constexpr int kFp8Depth = 4;     // chunks of each row in flight per lane
constexpr int kFp8MaxM = 8;      // activation rows one launch multiplies

#if !defined(ATOMK_CUDA)
// One float8_e4m3fn code as a float: exponent 0 is subnormal (m/8 · 2⁻⁶), S.1111.111 is NaN.
__device__ __forceinline__ float fp8_e4m3_to_float(uint32_t b) {
    const uint32_t v = b & 0x7fu;
    float f = v >= 8u ? __uint_as_float((v << 20) + (120u << 23)) : (float)v * 0.001953125f;
    if (v == 0x7fu) f = __uint_as_float(0x7fc00000u);
    return b & 0x80u ? -f : f;
}
#endif

// The 16 codes of a chunk as floats (the hardware's paired conversion on CUDA).
__device__ __forceinline__ void fp8_unpack16(const uint4& c, float f[16]) {
    const uint32_t w[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#if defined(ATOMK_CUDA)
        const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w[i] & 0xffffu), __NV_E4M3);
        const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w[i] >> 16), __NV_E4M3);
        const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&lo));
        const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&hi));
        f[4 * i] = a.x;
        f[4 * i + 1] = a.y;
        f[4 * i + 2] = b.x;
        f[4 * i + 3] = b.y;
#else
#pragma unroll
        for (int j = 0; j < 4; ++j) f[4 * i + j] = fp8_e4m3_to_float(w[i] >> (8 * j) & 0xffu);
#endif
    }
}

// 16 activations (chunk c of a row of k, 16 elements) as floats; past k, zeros (a row of x is
// 16-byte aligned: k is a multiple of 8).
template <typename T>
__device__ __forceinline__ void load_x16(const T* row, int c, int k, float f[16]) {
    if (16 * c + 16 > k) {
#pragma unroll
        for (int q = 0; q < 16; ++q) f[q] = 16 * c + q < k ? atomk_to_float(row[16 * c + q]) : 0.f;
        return;
    }
    const uint4* p = reinterpret_cast<const uint4*>(row + 16 * c);
    if constexpr (sizeof(T) == 4) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const uint4 v = load_cached(p + i);
            f[4 * i] = __uint_as_float(v.x);
            f[4 * i + 1] = __uint_as_float(v.y);
            f[4 * i + 2] = __uint_as_float(v.z);
            f[4 * i + 3] = __uint_as_float(v.w);
        }
    } else {
        unpack8<T>(load_cached(p), f);
        unpack8<T>(load_cached(p + 1), f + 8);
    }
}

// out[i, row] = Σ_k x[i, k] · float(w[row, k]) · scale[row/bn, k/bk] (+ bias[row]) for the M rows
// of x; each warp takes kFp8Rows weight rows, its lanes the 16-element chunks of k. The codes'
// rows are kp bytes apart (k rounded up to 16, zero-padded), bk16 = bk/16 chunks a scale block,
// the scale rows sc floats apart. Each chunk's codes are widened once and each x chunk loaded once per
// step: at 8 rows of x the conversions would otherwise cost more than the multiplications.
template <typename T, int M>
__global__ void __launch_bounds__(kFp8Threads) gemv_fp8_kernel(T* __restrict__ out, const T* __restrict__ x,
                                                               const uint8_t* __restrict__ w,
                                                               const float* __restrict__ scales,
                                                               const T* __restrict__ bias, int m, int n, int k, int kp,
                                                               int bn, int bk16, int sc) {
    constexpr int R = kFp8Rows, U = kFp8Depth;
    const int lane = threadIdx.x % ATOMK_WARP_SIZE, warp = threadIdx.x / ATOMK_WARP_SIZE;
    const int row0 = (blockIdx.x * kFp8Warps + warp) * R;
    const int k16 = kp / 16;
    const uint4* wrow[R];
    const float* srow[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {  // rows past n read row n-1 and are not written
        const int row = min(row0 + r, n - 1);
        wrow[r] = reinterpret_cast<const uint4*>(w + (size_t)row * kp);
        srow[r] = scales + (size_t)(row / bn) * sc;
    }
    ATOMK_PDL_ENTER();
    float acc[M][R];
#pragma unroll
    for (int i = 0; i < M; ++i)
#pragma unroll
        for (int r = 0; r < R; ++r) acc[i][r] = 0.f;
    for (int c0 = lane; c0 < k16; c0 += U * ATOMK_WARP_SIZE) {
        uint4 wv[U][R];
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const int c = c0 + u * ATOMK_WARP_SIZE;
                wv[u][r] = c < k16 ? load_stream(wrow[r] + c) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int c = c0 + u * ATOMK_WARP_SIZE;
            if (c >= k16) break;
            float s[R], wf[R][16];
#pragma unroll
            for (int r = 0; r < R; ++r) {
                s[r] = srow[r][c / bk16];
                fp8_unpack16(wv[u][r], wf[r]);
            }
#pragma unroll
            for (int i = 0; i < M; ++i) {
                if (i >= m) break;
                float xf[16];
                load_x16<T>(x + (size_t)i * k, c, k, xf);
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    float p = 0.f;
#pragma unroll
                    for (int q = 0; q < 16; ++q) p = fmaf(xf[q], wf[r][q], p);
                    acc[i][r] = fmaf(p, s[r], acc[i][r]);
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < M; ++i) {
        if (i >= m) break;
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const float v = atomk_warp_sum(acc[i][r]);
            if (lane == 0 && row0 + r < n)
                out[(size_t)i * n + row0 + r] = atomk_from_float<T>(v + (bias ? atomk_to_float(bias[row0 + r]) : 0.f));
        }
    }
}

// out[row, :k] = float(w[row, :]) · scale, 16 elements a thread (codes rows kp bytes apart).
template <typename T>
__global__ void dequant_fp8_kernel(T* __restrict__ out, const uint8_t* __restrict__ w, const float* __restrict__ scales,
                                   int n, int k, int kp, int bn, int bk16, int sc) {
    ATOMK_PDL_ENTER();
    const int k16 = kp / 16;
    const size_t total = (size_t)n * k16;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += (size_t)gridDim.x * blockDim.x) {
        const int row = (int)(idx / k16), c = (int)(idx % k16);
        float f[16];
        fp8_unpack16(reinterpret_cast<const uint4*>(w)[idx], f);
        const float s = scales[(size_t)(row / bn) * sc + c / bk16];
        T* dst = out + (size_t)row * k + 16 * c;
        if (16 * c + 16 > k) {  // the zero-padded tail of a row
            for (int q = 0; 16 * c + q < k; ++q) dst[q] = atomk_from_float<T>(f[q] * s);
            continue;
        }
#pragma unroll
        for (int h = 0; h < 16 / Vec<T>::N; ++h) {
            Vec<T> v;
#pragma unroll
            for (int j = 0; j < Vec<T>::N; ++j) v.v[j] = atomk_from_float<T>(f[h * Vec<T>::N + j] * s);
            reinterpret_cast<Vec<T>*>(dst)[h] = v;
        }
    }
}

int check_fp8(const char* op, int m, int n, int k, int kp, int bn, int bk, int sc) {
    if (m < 0 || n < 1 || k < 8 || k % 8 || kp != (k + 15) / 16 * 16 || bn < 1 || bk < 16 || bk % 16 ||
        sc < (k + bk - 1) / bk)
        return atomk_fail(ATOMK_ERR_INVALID, "%s: m %d, n %d, k %d (row stride %d), blocks %dx%d, scale rows %d apart (k "
                          "must be a multiple of 8, the stride k rounded up to 16, the block's k a multiple of 16, the scale "
                          "rows at least ceil(k / block k) apart)", op, m, n, k, kp, bn, bk, sc);
    return ATOMK_OK;
}

#if defined(ATOMK_CUDA)
constexpr int kQuantGroup = 128;  // activation columns one scale covers (cuBLASLt's VEC128)
constexpr float kQuantEps = 1e-10f;  // the smallest amax a group is scaled for (an all-zero group)
static_assert(ATOMK_WARP_SIZE * 4 == kQuantGroup, "a warp quantizes one group, 4 elements a lane");

// codes[r, :] = e4m3(x[r, :] / s) and scales[g, r] = s = max(amax of the group, eps) / 448 for
// each group g of 128 columns of row r: one warp a group. Codes past k up to the stride are zero.
// The scales are row-contiguous per group (cuBLASLt's VEC128 layout for the B operand).
template <typename T>
__global__ void __launch_bounds__(256) quant_fp8_kernel(uint8_t* __restrict__ codes, float* __restrict__ scales,
                                                        const T* __restrict__ x, int m, int k, int stride, int groups) {
    ATOMK_PDL_ENTER();
    const int lane = threadIdx.x % ATOMK_WARP_SIZE;
    const int idx = blockIdx.x * (blockDim.x / ATOMK_WARP_SIZE) + threadIdx.x / ATOMK_WARP_SIZE;
    if (idx >= m * groups) return;
    const int row = idx / groups, g = idx % groups, col = g * kQuantGroup + 4 * lane;
    float f[4] = {0.f, 0.f, 0.f, 0.f};
    if (col < k) {  // k % 8 == 0: a lane's 4 elements are all inside k or all past it
        const T* p = x + (size_t)row * k + col;
#pragma unroll
        for (int j = 0; j < 4; ++j) f[j] = atomk_to_float(p[j]);
    }
    const float amax = atomk_warp_max(fmaxf(fmaxf(fabsf(f[0]), fabsf(f[1])), fmaxf(fabsf(f[2]), fabsf(f[3]))));
    const float s = fmaxf(amax, kQuantEps) / 448.f;
    if (col < stride) {
        uint32_t q = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j)
            q |= (uint32_t)__nv_cvt_float_to_fp8(f[j] / s, __NV_SATFINITE, __NV_E4M3) << (8 * j);
        *reinterpret_cast<uint32_t*>(codes + (size_t)row * stride + col) = q;
    }
    if (lane == 0) scales[(size_t)g * m + row] = s;
}
#endif

int check_quant(const char* op, int dtype, int m, int k, int stride) {
    if (m < 1 || k < 8 || k % 8 || stride != (k + 15) / 16 * 16)
        return atomk_fail(ATOMK_ERR_INVALID, "%s: m %d, k %d, stride %d (k must be a multiple of 8, the stride k rounded "
                          "up to 16)", op, m, k, stride);
    if (dtype != ATOMK_BF16 && dtype != ATOMK_F16)
        return atomk_fail(ATOMK_ERR_UNSUPPORTED, "%s: dtype %d (16-bit activations only)", op, dtype);
#if !defined(ATOMK_CUDA)
    return atomk_fail(ATOMK_ERR_UNSUPPORTED, "%s: FP8 activations need the CUDA build", op);
#else
    return ATOMK_OK;
#endif
}

}  // namespace

int atomk_gemv_fp8(int dtype, void* out, const void* x, const uint8_t* w, const float* scales, const void* bias, int m, int n,
                   int k, int w_stride, int block_n, int block_k, int scale_stride, void* stream) {
    if (int st = check_fp8("atomk_gemv_fp8", m, n, k, w_stride, block_n, block_k, scale_stride)) return st;
    const dim3 grid((n + kFp8Warps * kFp8Rows - 1) / (kFp8Warps * kFp8Rows));
    for (int i0 = 0; i0 < m; i0 += kFp8MaxM) {
        const int mm = m - i0 < kFp8MaxM ? m - i0 : kFp8MaxM;
        ATOMK_DISPATCH(dtype, "atomk_gemv_fp8", {
            T* o = static_cast<T*>(out) + (size_t)i0 * n;
            const T* xi = static_cast<const T*>(x) + (size_t)i0 * k;
            if (mm == 1)
                atomk_launch(gemv_fp8_kernel<T, 1>, grid, dim3(kFp8Threads), 0, ATOMK_STREAM(stream), o, xi, w, scales,
                             static_cast<const T*>(bias), mm, n, k, w_stride, block_n, block_k / 16, scale_stride);
            else if (mm <= 2)
                atomk_launch(gemv_fp8_kernel<T, 2>, grid, dim3(kFp8Threads), 0, ATOMK_STREAM(stream), o, xi, w, scales,
                             static_cast<const T*>(bias), mm, n, k, w_stride, block_n, block_k / 16, scale_stride);
            else if (mm <= 4)
                atomk_launch(gemv_fp8_kernel<T, 4>, grid, dim3(kFp8Threads), 0, ATOMK_STREAM(stream), o, xi, w, scales,
                             static_cast<const T*>(bias), mm, n, k, w_stride, block_n, block_k / 16, scale_stride);
            else
                atomk_launch(gemv_fp8_kernel<T, kFp8MaxM>, grid, dim3(kFp8Threads), 0, ATOMK_STREAM(stream), o, xi, w,
                             scales, static_cast<const T*>(bias), mm, n, k, w_stride, block_n, block_k / 16, scale_stride);
        });
        ATOMK_LAUNCHED("gemv_fp8_kernel");
    }
    return ATOMK_OK;
}

int atomk_dequant_fp8(int dtype, void* out, const uint8_t* w, const float* scales, int n, int k, int w_stride, int block_n,
                      int block_k, int scale_stride, void* stream) {
    if (int st = check_fp8("atomk_dequant_fp8", 0, n, k, w_stride, block_n, block_k, scale_stride)) return st;
    const int threads = 256;
    ATOMK_DISPATCH(dtype, "atomk_dequant_fp8",
                   atomk_launch(dequant_fp8_kernel<T>, dim3(atomk_grid((size_t)n * (w_stride / 16), threads)), dim3(threads),
                                0, ATOMK_STREAM(stream), static_cast<T*>(out), w, scales, n, k, w_stride, block_n,
                                block_k / 16, scale_stride));
    ATOMK_LAUNCHED("dequant_fp8_kernel");
    return ATOMK_OK;
}

int atomk_quant_fp8(int dtype, uint8_t* codes, float* scales, const void* x, int m, int k, int stride, void* stream) {
    if (int st = check_quant("atomk_quant_fp8", dtype, m, k, stride)) return st;
#if defined(ATOMK_CUDA)
    const int groups = (k + kQuantGroup - 1) / kQuantGroup, threads = 256;
    const dim3 grid((unsigned)(((size_t)m * groups + threads / ATOMK_WARP_SIZE - 1) / (threads / ATOMK_WARP_SIZE)));
    ATOMK_DISPATCH(dtype, "atomk_quant_fp8",
                   atomk_launch(quant_fp8_kernel<T>, grid, dim3(threads), 0, ATOMK_STREAM(stream), codes, scales,
                                static_cast<const T*>(x), m, k, stride, groups));
    ATOMK_LAUNCHED("quant_fp8_kernel");
#endif
    return ATOMK_OK;
}

int atomk_gemm_fp8(void* handle, void* stream, int dtype, void* out, const void* x, void* act, const uint8_t* w,
                   const float* scales, const void* bias, int m, int n, int k, int w_stride, int block_n, int block_k,
                   int scale_stride) {
    if (int st = check_fp8("atomk_gemm_fp8", m, n, k, w_stride, block_n, block_k, scale_stride)) return st;
    if (int st = check_quant("atomk_gemm_fp8", dtype, m, k, w_stride)) return st;
    if (!handle || !out || !x || !act || !w || !scales)
        return atomk_fail(ATOMK_ERR_INVALID, "atomk_gemm_fp8: null handle or operand");
    const int groups = (k + 127) / 128;
    if (block_n != 128 || block_k != 128 || scale_stride != (groups + 3) / 4 * 4 || (uintptr_t)out % 16 ||
        (uintptr_t)act % 16 || (uintptr_t)w % 16 || (uintptr_t)scales % 16)
        return atomk_fail(ATOMK_ERR_UNSUPPORTED, "atomk_gemm_fp8: %dx%d blocks, scale rows %d apart, out %p, act %p, w %p, "
                          "scales %p (the FP8 GEMM takes 128x128 blocks, scale rows ceil(k/128) rounded up to 4 apart, "
                          "16-byte aligned operands)", block_n, block_k, scale_stride, out, act, (const void*)w,
                          (const void*)scales);
    uint8_t* codes = static_cast<uint8_t*>(act);
    float* act_scales = reinterpret_cast<float*>(codes + (size_t)m * w_stride);
    // The plan first: where cuBLASLt has none, nothing is queued and the caller dequantizes.
    if (int st = atomk_blas_fp8_block(handle, stream, dtype, out, codes, act_scales, w, scales, m, n, w_stride, false))
        return st;
    if (int st = atomk_quant_fp8(dtype, codes, act_scales, x, m, k, w_stride, stream)) return st;
    if (int st = atomk_blas_fp8_block(handle, stream, dtype, out, codes, act_scales, w, scales, m, n, w_stride, true))
        return st;
    if (bias) return atomk_add_bias(dtype, out, bias, m, n, stream);
    return ATOMK_OK;
}
