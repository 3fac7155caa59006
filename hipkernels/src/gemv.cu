// gemv.cu: the skinny GEMM of decode batches, out[m,n] = x[m,k] · w[n,k]ᵀ (+ bias[n]) for a few
// rows m, 16-bit operands, float accumulation.
//
// At small m a Linear layer is a pure weight stream: every weight byte is read once and used m
// times, so the time is the weight bytes over the memory bandwidth. The vendor GEMM reaches about
// 68% of the copy bandwidth at m = 1 (tiles built for reuse, a split-k tail); this kernel aims at
// the copy rate by keeping many 16-byte weight loads in flight on every SM:
//   - a warp owns R consecutive rows of w (or a k-slice of them, see below) and its lanes split k
//     in 8-element (16-byte) chunks, so one load instruction of the warp reads a contiguous
//     32 × 16 = 512 bytes of a weight row;
//   - the loop is unrolled U chunks deep and loads all U·R weight chunks before using any, so
//     U·R loads per lane are in flight;
//   - x (m·k elements, a few KiB) is read through the read-only cache; each x chunk is reused
//     across the R rows, which is what keeps the cache traffic below the weight traffic at m = 8;
//   - when n is small (few row groups), KW warps of a block share a row group, each taking every
//     KW-th chunk, and their partial sums meet in shared memory: the grid then still holds enough
//     warps to cover the memory latency.
// Each lane holds M·R float partial sums; warp shuffles reduce them and lane j writes output j.
// With SwiGLU input (kSwigluX, the MLP's down projection) x is not read as such: row i of x is
// silu(gate)·up computed chunk by chunk from row i of the fused gate|up output [m, 2k], which
// saves the SiLU-and-multiply kernel and its round trip through memory at decode sizes; the
// fused residual add and pre-norm (kResidualOut, kSumNormX, one row) are in gemv_input.h.
// The caller (atomk_gemm in blas.cu) guarantees k % 8 == 0 and 16-byte aligned x and w; m above
// kMaxM is processed kMaxM rows at a time.
#include <atomic>

#include "gemv_input.h"

namespace {

// Rows of w per warp and chunks unrolled per lane, by m: more rows per warp reuse each x chunk
// more (cache traffic), fewer keep the registers of the M·R accumulators in check. With SwiGLU
// input (G) each x chunk costs two loads and eight SiLUs, so m = 1 takes 4 rows as well (m = 2
// would spill at its occupancy): the 8B down projection at m = 1 runs 8% faster with 4 rows
// than with 2.
// U counts the chunks of one loop step; the pipelined loop (P = 1, see Pipelined) holds two
// steps in registers, so its U is half the depth.
template <int M, int X = kPlainX, int P = 0> struct Tile {
    static constexpr bool G = X == kSwigluX;
    static constexpr int R = G && M == 1 ? 4 : M >= 3 ? 4 : 2;
    static constexpr int kDepth = G && M == 1 ? 2 : M <= 4 ? 4 : 2;  // chunks in flight per row
    static constexpr int U = P == 0 ? kDepth : kDepth > 1 ? kDepth / 2 : 1;
    // Blocks per SM the register allocation must allow: without it ptxas caps the larger M at
    // 128 registers and spills; with it the small M keep their occupancy.
    static constexpr int kMinBlocks = M <= 2 ? 4 : M <= 8 ? 2 : 1;
};

// Loads the U·R weight chunks of one loop step (chunks c0, c0 + stride, ... of each row; zero
// past k8).
template <int U, int R>
__device__ __forceinline__ void load_step(uint4 (&wv)[U][R], const uint4* const (&wrow)[R], int c0, int stride, int k8) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const int c = c0 + u * stride;
#pragma unroll
        for (int r = 0; r < R; ++r) wv[u][r] = c < k8 ? load_stream(wrow[r] + c) : make_uint4(0, 0, 0, 0);
    }
}

// acc[i][r] += x row i · weight chunks wv[·][r] of one loop step.
template <typename T, int M, int U, int R, int X>
__device__ __forceinline__ void dot_step(float (&acc)[M][R], const uint4 (&wv)[U][R], const uint4* x4, int c0, int stride,
                                         int k8) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const int c = c0 + u * stride;
        if (c >= k8) break;
#pragma unroll
        for (int i = 0; i < M; ++i) {
            float xf[8];
            load_x8<T, X>(x4, i, k8, c, xf);
#pragma unroll
            for (int r = 0; r < R; ++r) acc[i][r] = dot8<T>(xf, wv[u][r], acc[i][r]);
        }
    }
}

// One block: kWarps / kw row groups of R rows, kw warps per group splitting k. x [M, k], w [n, k],
// out [M, n] (row stride n), bias [n] or NULL. k8 = k / 8 chunks per row. P selects the loop:
// 0 one step at a time, 1 pipelined with the first step loaded before the PDL wait (see
// Pipelined). X is the Input; with kSumNormX x is r · w_norm (norm holds eps and the sums). O is
// the Output: with kResidualOut (M = 1) out is the
// residual stream, read and written, and norm holds the next norm's weight, the row for r · w
// (res_out) and the sums.
template <typename T, int M, int X, int P = 0, int O = kPlainOut>
__global__ void __launch_bounds__(kThreads, (Tile<M, X, P>::kMinBlocks)) gemv_kernel(T* __restrict__ out, const T* __restrict__ x,
                                                        const T* __restrict__ w, const T* __restrict__ bias,
                                                        int n, int k8, int kw, NormIn<T> norm) {
    static_assert((X != kSumNormX && O == kPlainOut) || M == 1, "the fused norms take one row");
    constexpr int R = Tile<M, X, P>::R, U = Tile<M, X, P>::U;
    __shared__ float partial[kWarps][M * R];
    const int lane = threadIdx.x % ATOMK_WARP_SIZE, warp = threadIdx.x / ATOMK_WARP_SIZE;
    const int slice = warp % kw;                                       // this warp's share of k
    const int row0 = (blockIdx.x * (kWarps / kw) + warp / kw) * R;     // first row of w of the group
    const uint4* x4 = reinterpret_cast<const uint4*>(x);
    // kResidualOut: the residual value this lane adds to and the norm weight of its row (lane
    // r < R of the group's first warp writes row row0 + r), loaded after the wait, used at the end.
    float res_old = 0.f, norm_w = 0.f;
    // kSumNormX: rsqrt(mean(r²) + eps) of the row, from the producer's partial sums, read right
    // after the wait, while the first step's weights are in flight: read in the epilogue, the
    // round trip lengthened every block's tail and the fusion lost to the RMSNorm kernels.
    float inv = 1.f;
    auto after_wait = [&] {
        if constexpr (O == kResidualOut)
            if (slice == 0 && lane < R && row0 + lane < n) {
                res_old = atomk_to_float(out[row0 + lane]);
                norm_w = atomk_to_float(norm.w[row0 + lane]);
            }
        if constexpr (X == kSumNormX)
            if (slice == 0) inv = rsqrtf(sum_partials(norm.sums, norm.count) / (float)(k8 * 8) + norm.eps);
    };
    const uint4* wrow[R];
#pragma unroll
    for (int r = 0; r < R; ++r)  // rows past n read row n-1 (valid memory) and are not written
        wrow[r] = reinterpret_cast<const uint4*>(w) + (size_t)min(row0 + r, n - 1) * k8;

    float acc[M][R];
#pragma unroll
    for (int i = 0; i < M; ++i)
#pragma unroll
        for (int r = 0; r < R; ++r) acc[i][r] = 0.f;

    const int stride = kw * ATOMK_WARP_SIZE;  // chunks between one lane's consecutive chunks
    if constexpr (P != 0) {
        // Every step's loads are issued before the arithmetic of the step before, so a warp
        // never waits on memory with nothing in flight, and the first step's weights are loaded
        // before the wait for the previous kernel (weights are no kernel's output).
        int c0 = slice * ATOMK_WARP_SIZE + lane;
        uint4 wv[U][R];
        load_step<U, R>(wv, wrow, c0, stride, k8);
        ATOMK_PDL_ENTER();
        after_wait();
        for (; c0 < k8; c0 += U * stride) {
            uint4 next[U][R];
            load_step<U, R>(next, wrow, c0 + U * stride, stride, k8);
            dot_step<T, M, U, R, X>(acc, wv, x4, c0, stride, k8);
#pragma unroll
            for (int u = 0; u < U; ++u)
#pragma unroll
                for (int r = 0; r < R; ++r) wv[u][r] = next[u][r];
        }
    } else {
        ATOMK_PDL_ENTER();
        after_wait();
        for (int c0 = slice * ATOMK_WARP_SIZE + lane; c0 < k8; c0 += U * stride) {
            uint4 wv[U][R];  // all U·R weight loads first, so they are in flight together
            load_step<U, R>(wv, wrow, c0, stride, k8);
            dot_step<T, M, U, R, X>(acc, wv, x4, c0, stride, k8);
        }
    }

    // Reduce over the lanes; with kw > 1 the group's other warps hand their sums to its first.
#pragma unroll
    for (int i = 0; i < M; ++i)
#pragma unroll
        for (int r = 0; r < R; ++r) acc[i][r] = atomk_warp_sum(acc[i][r]);
    if (kw > 1) {  // uniform over the block: every thread reaches the barrier
        if (slice != 0) {
#pragma unroll
            for (int i = 0; i < M; ++i)
#pragma unroll
                for (int r = 0; r < R; ++r)
                    if (lane == (i * R + r) % ATOMK_WARP_SIZE) partial[warp][i * R + r] = acc[i][r];
        }
        __syncthreads();
        if (slice == 0) {
#pragma unroll
            for (int i = 0; i < M; ++i)
#pragma unroll
                for (int r = 0; r < R; ++r)
                    if (lane == (i * R + r) % ATOMK_WARP_SIZE)
                        for (int s = 1; s < kw; ++s) acc[i][r] += partial[warp + s][i * R + r];
        }
    }
    if (O == kPlainOut && slice != 0) return;
    float sq = 0.f;  // kResidualOut: this lane's share of the block's sum of squares
    if (slice == 0) {
#pragma unroll
        for (int i = 0; i < M; ++i)
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const int row = row0 + r;
                if (lane == (i * R + r) % ATOMK_WARP_SIZE && row < n) {
                    const float b = bias ? atomk_to_float(bias[row]) : 0.f;
                    T y = atomk_from_float<T>(acc[i][r] * inv + b);
                    if constexpr (O == kResidualOut) {  // rounded as atomk_rms_norm's residual add stores it
                        y = atomk_from_float<T>(res_old + atomk_to_float(y));
                        const float f = atomk_to_float(y);
                        sq += f * f;
                        norm.res_out[row] = atomk_from_float<T>(f * norm_w);
                    }
                    out[(size_t)i * n + row] = y;
                }
            }
    }
    if constexpr (O == kResidualOut) {  // every thread is still here: the block's sum, in a fixed order
        __shared__ float block_sq[kWarps];
        sq = atomk_warp_sum(sq);
        if (lane == 0) block_sq[warp] = sq;
        __syncthreads();
        if (threadIdx.x == 0) {
            float total = 0.f;
            for (int v = 0; v < kWarps; ++v) total += block_sq[v];
            norm.sums[blockIdx.x] = total;
        }
    }
}

// Blocks of one gemv_kernel instance resident on the whole device at once (its occupancy times
// the multiprocessors), per device; 0 if the runtime cannot say.
template <typename T, int M, int X, int P, int O>
int resident_blocks() {
    constexpr int kDevices = 16;
    static std::atomic<int> cache[kDevices];  // 0: not asked yet
    int dev = 0;
    if (gpuGetDevice(&dev) != gpuSuccess) return 0;
    const int i = dev >= 0 && dev < kDevices ? dev : 0;
    const int c = cache[i].load(std::memory_order_relaxed);
    if (c > 0) return c;
    int per_sm = 0;
    if (gpuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gemv_kernel<T, M, X, P, O>, kThreads, 0) != gpuSuccess)
        return 0;
    const int r = per_sm * atomk_sm_count();
    cache[i].store(r, std::memory_order_relaxed);
    return r;
}

// Warps per row group (1, 2, 4 ... kWarps; k is never sliced finer than one chunk per lane).
// The grid is a whole number of waves of resident blocks or close to it: a last wave half
// full costs nearly as much time as a full one (on an H200 at m = 1, the 8B model's 6144-wide
// q|k|v streamed 30% faster at 2.9 waves than at 1.45). A larger kw (more, shorter warps) is
// taken only when it fills the waves at least 5% better, since each split of k costs a
// reduction.
int warps_per_group(int groups, int k8, int resident) {
    auto fill = [&](int kw) {  // fraction of the waves' block slots the grid uses
        const long blocks = ((long)groups + kWarps / kw - 1) / (kWarps / kw);
        const long waves = (blocks + resident - 1) / resident;
        return (double)blocks / (double)(waves * resident);
    };
    if (resident <= 0) {  // no occupancy figure: enough warps to cover the latency
        int kw = 1;
        while (kw < kWarps && (long)groups * kw < kTargetWarps && (long)(2 * kw) * ATOMK_WARP_SIZE <= k8) kw *= 2;
        return kw;
    }
    int best = 1;
    for (int kw = 2; kw <= kWarps && (long)kw * ATOMK_WARP_SIZE <= k8; kw *= 2)
        if (fill(kw) > 1.05 * fill(best)) best = kw;
    // Forcing more warps per group on many-wave grids (shorter blocks, a shorter tail) gained
    // nothing through the engine.
    return best;
}

// The pipelined loop (P = 1) at the decode sizes, m <= 2: back to back it streams the weights a
// few percent faster than one step at a time, and in the decode step (the merge of split
// attention launched without PDL, so the o projection's early loads do not meet the
// attention's KV reads) it is 5% faster; the larger tiles have no registers to spare for two
// steps. Loading every step after the wait instead, or keeping the projection after an
// attention on one step at a time, lost to it.
template <int M> constexpr int Pipelined = M <= 2 ? 1 : 0;

// With max_blocks > 0 a grid of more blocks is not launched (ATOMK_ERR_UNSUPPORTED; a
// kResidualOut launch writes a partial sum per block); *blocks (when not NULL) receives the
// grid's size.
template <typename T, int M, int X, int P, int O>
int launch_loop(T* out, const T* x, const T* w, const T* bias, int n, int k, const NormIn<T>& norm, gpuStream_t s,
                int max_blocks, int* blocks_out) {
    const int k8 = k / 8, groups = (n + Tile<M, X, P>::R - 1) / Tile<M, X, P>::R;
    const int kw = warps_per_group(groups, k8, resident_blocks<T, M, X, P, O>()), per_block = kWarps / kw;
    const unsigned blocks = (unsigned)((groups + per_block - 1) / per_block);
    if (max_blocks > 0 && blocks > (unsigned)max_blocks) return ATOMK_ERR_UNSUPPORTED;
    if (blocks_out) *blocks_out = (int)blocks;
    atomk_launch(gemv_kernel<T, M, X, P, O>, blocks, kThreads, 0, s, out, x, w, bias, n, k8, kw, norm);
    ATOMK_LAUNCHED("gemv");
    return ATOMK_OK;
}

template <typename T, int M, int X, int O = kPlainOut>
int launch(T* out, const T* x, const T* w, const T* bias, int n, int k, gpuStream_t s, const NormIn<T>& norm = {},
           int max_blocks = 0, int* blocks = nullptr) {
    return launch_loop<T, M, X, Pipelined<M>, O>(out, x, w, bias, n, k, norm, s, max_blocks, blocks);
}

// Rows of x at once, by a switch over the template instances 1..kMaxM (1..kSwigluMaxM with
// SwiGLU input, whose callers send larger m elsewhere).
template <typename T, bool G>
int launch_rows(T* out, const T* x, const T* w, const T* bias, int m, int n, int k, gpuStream_t s) {
    if constexpr (G) {
        static_assert(kSwigluMaxM == 4, "one case per m below");
        switch (m) {
            case 1: return launch<T, 1, G ? kSwigluX : kPlainX>(out, x, w, bias, n, k, s);
            case 2: return launch<T, 2, G ? kSwigluX : kPlainX>(out, x, w, bias, n, k, s);
            case 3: return launch<T, 3, G ? kSwigluX : kPlainX>(out, x, w, bias, n, k, s);
            case 4: return launch<T, 4, G ? kSwigluX : kPlainX>(out, x, w, bias, n, k, s);
        }
        return atomk_fail(ATOMK_ERR_INVALID, "gemv swiglu: %d rows in one launch", m);
    } else {
        switch (m) {
#define ATOMK_GEMV_CASE(M) \
        case M: return launch<T, M, kPlainX>(out, x, w, bias, n, k, s);
            ATOMK_GEMV_CASE(1) ATOMK_GEMV_CASE(2) ATOMK_GEMV_CASE(3) ATOMK_GEMV_CASE(4)
            ATOMK_GEMV_CASE(5) ATOMK_GEMV_CASE(6) ATOMK_GEMV_CASE(7) ATOMK_GEMV_CASE(8)
            ATOMK_GEMV_CASE(9) ATOMK_GEMV_CASE(10) ATOMK_GEMV_CASE(11) ATOMK_GEMV_CASE(12)
            ATOMK_GEMV_CASE(13) ATOMK_GEMV_CASE(14) ATOMK_GEMV_CASE(15) ATOMK_GEMV_CASE(16)
#undef ATOMK_GEMV_CASE
        }
        return atomk_fail(ATOMK_ERR_INVALID, "gemv: %d rows in one launch", m);
    }
}

// Rows m0.. of one launch, plain x or SwiGLU input (x then has 2k columns).
template <typename T>
int launch_slice(void* out, const void* x, const void* w, const void* bias, int m0, int rows, int n, int k,
                 bool swiglu, gpuStream_t s) {
    T* o = static_cast<T*>(out) + (size_t)m0 * n;
    const T* xs = static_cast<const T*>(x) + (size_t)m0 * k * (swiglu ? 2 : 1);
    const T* ws = static_cast<const T*>(w);
    const T* bs = static_cast<const T*>(bias);
    return swiglu ? launch_rows<T, true>(o, xs, ws, bs, rows, n, k, s) : launch_rows<T, false>(o, xs, ws, bs, rows, n, k, s);
}

// One row added into the residual stream (kResidualOut), plain or SwiGLU input; r · norm_w goes
// to scaled and the blocks' partial sums of r² to sums (at most max_sums, their number to *count).
template <typename T>
int launch_residual(void* res, void* scaled, const void* norm_w, const void* x, const void* w, int n, int k, bool swiglu,
                    float* sums, int max_sums, int* count, gpuStream_t s) {
    NormIn<T> in{};
    in.w = static_cast<const T*>(norm_w);
    in.res_out = static_cast<T*>(scaled);
    in.sums = sums;
    T* r = static_cast<T*>(res);
    const T* xs = static_cast<const T*>(x);
    const T* ws = static_cast<const T*>(w);
    return swiglu ? launch<T, 1, kSwigluX, kResidualOut>(r, xs, ws, nullptr, n, k, s, in, max_sums, count)
                  : launch<T, 1, kPlainX, kResidualOut>(r, xs, ws, nullptr, n, k, s, in, max_sums, count);
}

// One row r · norm_w normalised with the partial sums a launch_residual left (kSumNormX).
template <typename T>
int launch_summed(void* out, const void* scaled, const float* sums, int count, float eps, const void* w,
                  const void* bias, int n, int k, gpuStream_t s) {
    NormIn<T> in{};
    in.eps = eps;
    in.sums = const_cast<float*>(sums);
    in.count = count;
    return launch<T, 1, kSumNormX>(static_cast<T*>(out), static_cast<const T*>(scaled), static_cast<const T*>(w),
                                   static_cast<const T*>(bias), n, k, s, in);
}

}  // namespace

// atomk_gemv_launch queues out = x·wᵀ (+ bias) with the skinny kernel; with swiglu, x is the
// fused gate|up output [m, 2k] and the GEMM's input is silu(gate)·up. Internal (declared in
// blas.cu, its one caller, which has checked the shape, k % 8 == 0 and the 16-byte alignment).
int atomk_gemv_launch(void* stream, int dtype, void* out, const void* x, const void* w, const void* bias, int m,
                      int n, int k, int swiglu) {
    gpuStream_t s = ATOMK_STREAM(stream);
    for (int m0 = 0; m0 < m; m0 += kMaxM) {
        const int rows = m - m0 < kMaxM ? m - m0 : kMaxM;
        int st = ATOMK_ERR_UNSUPPORTED;
        if (dtype == ATOMK_BF16) {
            st = launch_slice<atomk_bf16>(out, x, w, bias, m0, rows, n, k, swiglu != 0, s);
        } else if (dtype == ATOMK_F16) {
            st = launch_slice<atomk_f16>(out, x, w, bias, m0, rows, n, k, swiglu != 0, s);
        } else {
            return atomk_fail(ATOMK_ERR_UNSUPPORTED, "gemv: dtype %d", dtype);
        }
        if (st != ATOMK_OK) return st;
    }
    return ATOMK_OK;
}

// atomk_gemv_residual_launch queues res[1,n] += x·wᵀ (swiglu: x is gate|up [1, 2k]), scaled =
// res · norm_w, and the row's partial sums of squares to sums; ATOMK_ERR_UNSUPPORTED, nothing
// queued, when the grid would exceed max_sums blocks. Internal (declared in blas.cu, whose
// atomk_gemm_residual checks the operands).
int atomk_gemv_residual_launch(void* stream, int dtype, void* res, void* scaled, const void* norm_w, const void* x,
                               const void* w, int n, int k, int swiglu, float* sums, int max_sums, int* count) {
    gpuStream_t s = ATOMK_STREAM(stream);
    if (max_sums > kMaxSums) max_sums = kMaxSums;
    if (dtype == ATOMK_BF16)
        return launch_residual<atomk_bf16>(res, scaled, norm_w, x, w, n, k, swiglu != 0, sums, max_sums, count, s);
    if (dtype == ATOMK_F16)
        return launch_residual<atomk_f16>(res, scaled, norm_w, x, w, n, k, swiglu != 0, sums, max_sums, count, s);
    return atomk_fail(ATOMK_ERR_UNSUPPORTED, "gemv residual: dtype %d", dtype);
}

// atomk_gemv_summed_launch queues out[1,n] = (scaled · rsqrt(Σ sums / k + eps)) · wᵀ (+ bias),
// scaled and the count sums as an atomk_gemv_residual_launch left them. Internal (declared in
// blas.cu, whose atomk_gemm_norm_summed checks the operands).
int atomk_gemv_summed_launch(void* stream, int dtype, void* out, const void* scaled, const float* sums, int count,
                             float eps, const void* w, const void* bias, int n, int k) {
    gpuStream_t s = ATOMK_STREAM(stream);
    if (count < 0 || count > kMaxSums) return atomk_fail(ATOMK_ERR_INVALID, "gemv summed: %d sums", count);
    if (dtype == ATOMK_BF16) return launch_summed<atomk_bf16>(out, scaled, sums, count, eps, w, bias, n, k, s);
    if (dtype == ATOMK_F16) return launch_summed<atomk_f16>(out, scaled, sums, count, eps, w, bias, n, k, s);
    return atomk_fail(ATOMK_ERR_UNSUPPORTED, "gemv summed: dtype %d", dtype);
}
