// chain_gemv.cu: does a kernel that stays resident across two dependent GEMVs beat two
// launches? The question behind a persistent batch-1 decode kernel (docs/journal/gpu-notes.md, "Where
// batch 1 stands", item 3): between two weight streams the launches pay a ramp (first loads
// after the wait) and a tail (last reductions, completion, the next wait), ~3 µs a GEMM by the
// profile. A stand-alone CUDA program, not part of libatomk (Hopper only):
//
//   nvcc -O3 -std=c++17 -arch=sm_90a -o chain_gemv hipkernels/bench/chain_gemv.cu && ./chain_gemv
//
// y = W1·x, z = W2·y in bf16 with float accumulation, at the 8B MLP's up and down shapes
// (W1 14336×4096, W2 4096×14336: 117 MB each), timed over CUDA graph replays:
//   two     the two GEMVs as two kernels with programmatic dependent launch (as in the decode
//           graph; the second may start early but waits before it reads y);
//   chain   one kernel, grid = the resident blocks, a grid barrier between the two GEMVs;
//   early   as chain, each warp loading its first W2 rows before it arrives at the barrier.
// Each variant's z is checked against the two-kernel one. Prints µs per pair and TB/s.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(x)                                                                                  \
    do {                                                                                          \
        cudaError_t e_ = (x);                                                                     \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));   \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

constexpr int kThreads = 256, kWarps = kThreads / 32, kRows = 2, kUnroll = 4;

__device__ __forceinline__ float dot_chunk(uint4 w, uint4 x) {
    const __nv_bfloat162* wp = reinterpret_cast<const __nv_bfloat162*>(&w);
    const __nv_bfloat162* xp = reinterpret_cast<const __nv_bfloat162*>(&x);
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float2 a = __bfloat1622float2(wp[j]), b = __bfloat1622float2(xp[j]);
        s = fmaf(a.x, b.x, fmaf(a.y, b.y, s));
    }
    return s;
}

// Rows [row0, row0 + kRows) of w [n, k] times x, by one warp; w chunks for the first step
// may already be in pre (then loaded == true). With L2x, x is read around L1 (it was written
// by other blocks of the same kernel).
template <bool L2x = false>
__device__ void warp_rows(__nv_bfloat16* y, const uint4* w, const uint4* x, int n, int k8, int row0, uint4 (&pre)[kUnroll][kRows],
                          bool loaded) {
    const int lane = threadIdx.x % 32;
    float acc[kRows] = {};
    for (int c0 = lane; c0 < k8; c0 += 32 * kUnroll) {
        uint4 wv[kUnroll][kRows];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
                const int c = c0 + 32 * u, row = min(row0 + r, n - 1);
                wv[u][r] = loaded && c0 == lane ? pre[u][r]
                           : c < k8           ? __ldcs(w + (size_t)row * k8 + c)
                                              : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const int c = c0 + 32 * u;
            if (c >= k8) break;
            const uint4 xv = L2x ? __ldcg(x + c) : __ldg(x + c);
#pragma unroll
            for (int r = 0; r < kRows; ++r) acc[r] += dot_chunk(wv[u][r], xv);
        }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        float v = acc[r];
        for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == r && row0 + r < n) y[row0 + r] = __float2bfloat16(v);
    }
}

// The first step's W chunks of rows row0.. (what warp_rows would load first).
__device__ void load_first(uint4 (&pre)[kUnroll][kRows], const uint4* w, int n, int k8, int row0) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            const int c = lane + 32 * u;
            pre[u][r] = c < k8 ? __ldcs(w + (size_t)min(row0 + r, n - 1) * k8 + c) : make_uint4(0, 0, 0, 0);
        }
}

// One GEMV, one warp per row group, grid-stride; launched with programmatic dependent launch.
__global__ void __launch_bounds__(kThreads) gemv(__nv_bfloat16* y, const uint4* w, const uint4* x, int n, int k8) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
    uint4 none[kUnroll][kRows];
    const int warp = blockIdx.x * kWarps + threadIdx.x / 32, warps = gridDim.x * kWarps;
    for (int row0 = warp * kRows; row0 < n; row0 += warps * kRows) warp_rows(y, w, x, n, k8, row0, none, false);
}

// Sense-reversing grid barrier over all blocks (the grid must be resident: see main).
struct Barrier {
    unsigned count, gen;
};
__device__ void grid_sync(Barrier* b) {
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned gen = atomicAdd(&b->gen, 0);
        __threadfence();
        if (atomicAdd(&b->count, 1) == gridDim.x - 1) {
            b->count = 0;
            __threadfence();
            atomicAdd(&b->gen, 1);
        } else {
            while (atomicAdd(&b->gen, 0) == gen) __nanosleep(32);
        }
        __threadfence();
    }
    __syncthreads();
}

// Both GEMVs in one resident grid: y = W1·x, barrier, z = W2·y. With early, each warp loads its
// first W2 chunks before the barrier.
template <bool early>
__global__ void __launch_bounds__(kThreads) chain(__nv_bfloat16* y, __nv_bfloat16* z, const uint4* w1, const uint4* w2,
                                                  const uint4* x, int n1, int k1_8, int n2, Barrier* bar) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
    const int warp = blockIdx.x * kWarps + threadIdx.x / 32, warps = gridDim.x * kWarps;
    uint4 pre[kUnroll][kRows];
    for (int row0 = warp * kRows; row0 < n1; row0 += warps * kRows) warp_rows(y, w1, x, n1, k1_8, row0, pre, false);
    const int k2_8 = n1 / 8;
    if (early && warp * kRows < n2) load_first(pre, w2, n2, k2_8, warp * kRows);
    __threadfence();
    grid_sync(bar);
    const uint4* y4 = reinterpret_cast<const uint4*>(y);
    for (int row0 = warp * kRows; row0 < n2; row0 += warps * kRows)
        warp_rows<true>(z, w2, y4, n2, k2_8, row0, pre, early && row0 == warp * kRows);
}

__global__ void fill(__nv_bfloat16* p, size_t n, uint32_t seed, float scale) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        p[i] = __float2bfloat16(((h & 0xffff) / 65535.f - 0.5f) * scale);
    }
}

template <typename Kernel, typename... Args>
void launch_pdl(Kernel k, int grid, cudaStream_t s, Args... args) {
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = kThreads;
    cfg.stream = s;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    CHECK(cudaLaunchKernelEx(&cfg, k, args...));
}

int main() {
    const int K = 4096, N1 = 14336, N2 = 4096, pairs = 8;  // 8 pairs per graph, like 8 layers
    int sms = 0;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    __nv_bfloat16 *x, *w1, *w2, *y, *z, *zref;
    CHECK(cudaMalloc(&x, K * 2));
    CHECK(cudaMalloc(&w1, (size_t)N1 * K * 2 * pairs));
    CHECK(cudaMalloc(&w2, (size_t)N2 * N1 * 2 * pairs));
    CHECK(cudaMalloc(&y, N1 * 2));
    CHECK(cudaMalloc(&z, N2 * 2 * pairs));
    CHECK(cudaMalloc(&zref, N2 * 2 * pairs));
    Barrier* bar;
    CHECK(cudaMalloc(&bar, sizeof(Barrier)));
    CHECK(cudaMemset(bar, 0, sizeof(Barrier)));
    fill<<<1024, 256>>>(x, K, 1, 2.f);
    fill<<<4096, 256>>>(w1, (size_t)N1 * K * pairs, 2, 0.05f);
    fill<<<4096, 256>>>(w2, (size_t)N2 * N1 * pairs, 3, 0.05f);
    CHECK(cudaDeviceSynchronize());

    int per_sm = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, chain<true>, kThreads, 0));
    int per_sm_b = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm_b, chain<false>, kThreads, 0));
    per_sm = per_sm < per_sm_b ? per_sm : per_sm_b;
    const int resident = per_sm * sms;  // the chained grid: every block resident, or the barrier hangs
    const int gemv_grid = (N1 / kRows + kWarps - 1) / kWarps;
    printf("%d SMs, chained grid %d blocks (%d per SM), two-kernel grid %d blocks\n", sms, resident, per_sm, gemv_grid);

    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const char* names[] = {"two", "chain", "early"};
    double bytes = 2.0 * ((double)N1 * K + (double)N2 * N1) * pairs;
    for (int v = 0; v < 3; ++v) {
        cudaGraph_t g;
        cudaGraphExec_t ge;
        CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        for (int p = 0; p < pairs; ++p) {
            const uint4* a = reinterpret_cast<const uint4*>(w1 + (size_t)p * N1 * K);
            const uint4* b = reinterpret_cast<const uint4*>(w2 + (size_t)p * N2 * N1);
            __nv_bfloat16* out = (v == 0 ? zref : z) + p * N2;
            if (v == 0) {
                launch_pdl(gemv, gemv_grid, s, y, a, reinterpret_cast<const uint4*>(x), N1, K / 8);
                launch_pdl(gemv, (N2 / kRows + kWarps - 1) / kWarps, s, out, b, reinterpret_cast<const uint4*>(y), N2, N1 / 8);
            } else if (v == 1) {
                launch_pdl(chain<false>, resident, s, y, out, a, b, reinterpret_cast<const uint4*>(x), N1, K / 8, N2, bar);
            } else {
                launch_pdl(chain<true>, resident, s, y, out, a, b, reinterpret_cast<const uint4*>(x), N1, K / 8, N2, bar);
            }
        }
        CHECK(cudaStreamEndCapture(s, &g));
        CHECK(cudaGraphInstantiate(&ge, g, 0));
        for (int i = 0; i < 5; ++i) CHECK(cudaGraphLaunch(ge, s));
        cudaEvent_t e0, e1;
        CHECK(cudaEventCreate(&e0));
        CHECK(cudaEventCreate(&e1));
        const int reps = 50;
        CHECK(cudaEventRecord(e0, s));
        for (int i = 0; i < reps; ++i) CHECK(cudaGraphLaunch(ge, s));
        CHECK(cudaEventRecord(e1, s));
        CHECK(cudaEventSynchronize(e1));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, e0, e1));
        const double us = ms * 1e3 / reps / pairs;
        double worst = 0;
        if (v > 0) {
            static __nv_bfloat16 hz[N2 * pairs], hr[N2 * pairs];
            CHECK(cudaMemcpy(hz, z, sizeof hz, cudaMemcpyDeviceToHost));
            CHECK(cudaMemcpy(hr, zref, sizeof hr, cudaMemcpyDeviceToHost));
            for (int i = 0; i < N2 * pairs; ++i) {
                const double d = fabs((double)__bfloat162float(hz[i]) - (double)__bfloat162float(hr[i]));
                worst = d > worst ? d : worst;
            }
        }
        printf("%-6s %8.2f us per pair  %5.2f TB/s  max |z - z_two| %.3g\n", names[v], us, bytes / pairs / (us * 1e-6) / 1e12,
               worst);
        CHECK(cudaGraphExecDestroy(ge));
        CHECK(cudaGraphDestroy(g));
    }
    return 0;
}
