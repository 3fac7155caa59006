// atomk_internal.h: helpers shared by the library's sources (not part of the ABI): error
// reporting, the runtime-call check, the launch check and the dtype dispatch.
#ifndef ATOMK_INTERNAL_H
#define ATOMK_INTERNAL_H

#include <stdlib.h>

#include "atomk_port.h"
#include "atomk.h"

// Records a formatted message for atomk_last_error and returns status.
int atomk_fail(int status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// Returns ATOMK_ERR_RUNTIME from the enclosing function when a runtime call fails.
#define ATOMK_RT(call)                                                                        \
    do {                                                                                      \
        gpuError_t atomk_e_ = (call);                                                         \
        if (atomk_e_ != gpuSuccess)                                                           \
            return atomk_fail(ATOMK_ERR_RUNTIME, "%s: %s", #call, gpuGetErrorString(atomk_e_)); \
    } while (0)

// After a kernel launch: reports a launch failure (bad configuration, no kernel image...).
#define ATOMK_LAUNCHED(name)                                                                   \
    do {                                                                                       \
        gpuError_t atomk_e_ = gpuGetLastError();                                               \
        if (atomk_e_ != gpuSuccess)                                                            \
            return atomk_fail(ATOMK_ERR_RUNTIME, "launch %s: %s", name, gpuGetErrorString(atomk_e_)); \
    } while (0)

// Runs body with T bound to the storage type of dtype, or returns ATOMK_ERR_UNSUPPORTED.
#define ATOMK_DISPATCH(dtype, fn_name, ...)                                                 \
    switch (dtype) {                                                                        \
        case ATOMK_F32: { typedef float T; __VA_ARGS__; } break;                            \
        case ATOMK_F16: { typedef atomk_f16 T; __VA_ARGS__; } break;                        \
        case ATOMK_BF16: { typedef atomk_bf16 T; __VA_ARGS__; } break;                      \
        default: return atomk_fail(ATOMK_ERR_UNSUPPORTED, "%s: dtype %d", fn_name, (int)(dtype)); \
    }

#define ATOMK_STREAM(s) static_cast<gpuStream_t>(s)

// cuBLASLt's block-scaled FP8 GEMM (blas.cu; CUDA on Hopper): out[m,n] (dtype F16 or BF16) =
// Σ_k (codes[m,k] · act_scales[k/128, m]) (w[n,k] · w_scales[n/128, k/128]), codes and w e4m3 rows
// of k bytes (a multiple of 16), act_scales [ceil(k/128), m], w_scales rows ceil(k/128) rounded up
// to 4 apart. run false: only makes the plan (ATOMK_ERR_UNSUPPORTED, nothing queued, where the
// library has no algorithm for the shape; remembered per shape); true: queues the GEMM.
int atomk_blas_fp8_block(void* handle, void* stream, int dtype, void* out, const uint8_t* codes, const float* act_scales,
                         const uint8_t* w, const float* w_scales, int m, int n, int k, bool run);

// Whether kernels are launched with programmatic dependent launch: on CUDA devices of compute
// capability 9.0 and later (read once per process).
bool atomk_pdl_enabled();

// Launches kernel like kernel<<<grid, block, smem, s>>>(args...), with programmatic stream
// serialization where atomk_pdl_enabled (the kernel must start with ATOMK_PDL_ENTER) unless
// pdl is false. Failures are left for ATOMK_LAUNCHED, as with <<<>>>.
template <typename... Params, typename... Args>
static inline void atomk_launch_pdl(bool pdl, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                                    gpuStream_t s, Args... args) {
#if defined(ATOMK_CUDA)
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = attr;
    cfg.numAttrs = pdl && atomk_pdl_enabled() ? 1 : 0;
    (void)cudaLaunchKernelEx(&cfg, kernel, static_cast<Params>(args)...);
#else
    (void)pdl;
    hipLaunchKernelGGL(kernel, grid, block, smem, s, static_cast<Params>(args)...);
#endif
}

// A launch with programmatic dependent launch where the device has it.
template <typename... Params, typename... Args>
static inline void atomk_launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, gpuStream_t s,
                                Args... args) {
    atomk_launch_pdl(true, kernel, grid, block, smem, s, args...);
}

// A launch without it: the kernel's blocks are not scheduled before the previous kernel has
// finished, and its own early trigger launches nothing ahead of time.
template <typename... Params, typename... Args>
static inline void atomk_launch_serial(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, gpuStream_t s,
                                       Args... args) {
    atomk_launch_pdl(false, kernel, grid, block, smem, s, args...);
}

// The integer in environment variable name when it is one in [lo, hi], else def (read once by
// its caller's static: ATOM_GO_PROFILE_GRAPH_LAUNCH).
static inline int atomk_env_int(const char* name, int def, int lo, int hi) {
    const char* e = getenv(name);
    if (!e || !*e) return def;
    char* end = nullptr;
    const long n = strtol(e, &end, 10);
    return (*end == 0 && n >= lo && n <= hi) ? (int)n : def;
}

// Multiprocessors of the current device (cached per thread and device; 132, an H100/H200's,
// if the runtime cannot say).
static inline int atomk_sm_count() {
    static thread_local int dev = -1, sms = 0;
    int d = 0;
    if (gpuGetDevice(&d) != gpuSuccess) return 132;
    if (d != dev) {
        if (gpuDeviceGetAttribute(&sms, gpuDevAttrMultiProcessorCount, d) != gpuSuccess) sms = 132;
        dev = d;
    }
    return sms;
}

// Threads for a per-row kernel: the row width rounded up to whole warps, at most 1024.
static inline int atomk_row_threads(int cols) {
    int t = ((cols + ATOMK_WARP_SIZE - 1) / ATOMK_WARP_SIZE) * ATOMK_WARP_SIZE;
    return t > 1024 ? 1024 : (t < ATOMK_WARP_SIZE ? ATOMK_WARP_SIZE : t);
}

// Blocks for a grid-stride loop over n elements with threads per block, capped so that the
// grid stays within limits; the loop covers the rest.
static inline unsigned atomk_grid(size_t n, int threads) {
    size_t b = (n + threads - 1) / threads;
    if (b > 65535u * 8u) b = 65535u * 8u;
    return b == 0 ? 1u : (unsigned)b;
}

#endif  // ATOMK_INTERNAL_H
