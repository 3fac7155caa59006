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

// Whether ATOM_GO_SKIP_KERNELS (a comma-separated list, read once) names kind: "rope",
// "attention", "merge", "norm", "gemv" (the skinny GEMM), "sample" (atomk_sample_rows) or
// "feed" (atomk_load_step_inputs: a decode step's inputs). The named entry points then queue
// nothing and return ATOMK_OK: results are wrong, and the decode graph's step time without
// them says what those kernels cost inside it (the bound on what fusing them away can gain).
// For measurements only.
bool atomk_skip(const char* kind);

// Whether kernels are launched with programmatic dependent launch: on CUDA devices of compute
// capability 9.0 and later, unless ATOM_GO_PDL=0 (read once per process; for measurements).
bool atomk_pdl_enabled();

// Whether ATOM_GO_PDL_SERIAL (a comma-separated list of the kinds atomk_skip knows, read once;
// "merge" when unset, "" for none) names kind: those kernels are then launched without
// programmatic dependent launch, so their blocks are not scheduled before the previous kernel
// has finished and their own early trigger launches nothing ahead of time.
bool atomk_pdl_serial(const char* kind);

// The pdl_mode argument for a kernel of kind (atomk_pdl_enter_mode): kPdlNoTrigger where
// ATOM_GO_PDL_NOTRIGGER names kind, else kPdlLate where ATOM_GO_PDL_LATE does, else kPdlEarly
// (the same comma-separated kinds, read once). Only the kernels that take the argument
// honour it: "rope", "gemv" (and "o_gemv", the projection launched right after an attention),
// "attention" (the tensor-core decode kernel) and "merge". For measurements.
int atomk_pdl_mode(const char* kind);

// Launches kernel like kernel<<<grid, block, smem, s>>>(args...), with programmatic stream
// serialization where atomk_pdl_enabled (the kernel must start with ATOMK_PDL_ENTER) and kind
// (nullptr: none) is not in ATOM_GO_PDL_SERIAL. Failures are left for ATOMK_LAUNCHED, as with
// <<<>>>.
template <typename... Params, typename... Args>
static inline void atomk_launch_kind(const char* kind, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
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
    cfg.numAttrs = atomk_pdl_enabled() && !(kind && atomk_pdl_serial(kind)) ? 1 : 0;
    (void)cudaLaunchKernelEx(&cfg, kernel, static_cast<Params>(args)...);
#else
    (void)kind;
    hipLaunchKernelGGL(kernel, grid, block, smem, s, static_cast<Params>(args)...);
#endif
}

template <typename... Params, typename... Args>
static inline void atomk_launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, gpuStream_t s,
                                Args... args) {
    atomk_launch_kind(nullptr, kernel, grid, block, smem, s, args...);
}

// The integer in environment variable name when it is one in [lo, hi], else def. For the
// library's measurement knobs (ATOM_GO_GEMV_*, ATOM_GO_PDL, ...), each read once by its
// caller's static.
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

// True after atomk_paged_attention queued its kernels on this thread, until the next skinny GEMM
// launch reads and clears it (ATOM_GO_GEMV_PIPELINE=2 tells the projection of the attention
// output apart; for measurements only).
extern thread_local bool atomk_attention_launched;

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
