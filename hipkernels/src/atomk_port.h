// atomk_port.h: the one portability header. Every kernel source includes it and spells the
// vendor runtime as gpu*, the 16-bit float types as atomk_f16 / atomk_bf16, and the warp width
// as ATOMK_WARP_SIZE, so one file builds with nvcc (CUDA) and hipcc (HIP/ROCm).
#ifndef ATOMK_PORT_H
#define ATOMK_PORT_H

#if defined(__HIPCC__) || defined(__HIP_PLATFORM_AMD__)
// ---------------------------------------------------------------- HIP (ROCm)
#define ATOMK_HIP 1
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <hip/hip_bf16.h>

// The targets built here (gfx942 = MI300, gfx950 = MI350) are CDNA parts with 64-wide wavefronts.
#define ATOMK_WARP_SIZE 64

typedef __half atomk_f16;
typedef __hip_bfloat16 atomk_bf16;

#define gpuError_t hipError_t
#define gpuSuccess hipSuccess
#define gpuGetErrorString hipGetErrorString
#define gpuGetLastError hipGetLastError
#define gpuStream_t hipStream_t
#define gpuEvent_t hipEvent_t
#define gpuGraph_t hipGraph_t
#define gpuGraphExec_t hipGraphExec_t
#define gpuDeviceProp hipDeviceProp_t
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuGetDeviceProperties hipGetDeviceProperties
#define gpuSetDevice hipSetDevice
#define gpuGetDevice hipGetDevice
#define gpuDeviceSynchronize hipDeviceSynchronize
#define gpuDeviceGetAttribute hipDeviceGetAttribute
#define gpuDevAttrMultiProcessorCount hipDeviceAttributeMultiprocessorCount
#define gpuOccupancyMaxActiveBlocksPerMultiprocessor hipOccupancyMaxActiveBlocksPerMultiprocessor
#define gpuMemGetInfo hipMemGetInfo
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuHostAlloc(p, n) hipHostMalloc((p), (n), hipHostMallocDefault)
#define gpuFreeHost hipHostFree
#define gpuMemcpyAsync hipMemcpyAsync
#define gpuMemsetAsync hipMemsetAsync
#define gpuMemcpyHostToDevice hipMemcpyHostToDevice
#define gpuMemcpyDeviceToHost hipMemcpyDeviceToHost
#define gpuMemcpyDefault hipMemcpyDefault
#define gpuMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define gpuStreamCreateWithFlags hipStreamCreateWithFlags
#define gpuStreamNonBlocking hipStreamNonBlocking
#define gpuStreamDestroy hipStreamDestroy
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuStreamWaitEvent hipStreamWaitEvent
#define gpuEventCreate hipEventCreate
#define gpuEventDestroy hipEventDestroy
#define gpuEventRecord hipEventRecord
#define gpuEventSynchronize hipEventSynchronize
#define gpuEventElapsedTime hipEventElapsedTime
#define gpuStreamBeginCapture hipStreamBeginCapture
#define gpuStreamCaptureModeThreadLocal hipStreamCaptureModeThreadLocal
#define gpuStreamEndCapture hipStreamEndCapture
#define gpuGraphInstantiateWithFlags hipGraphInstantiateWithFlags
#define gpuGraphLaunch hipGraphLaunch
#define gpuGraphDestroy hipGraphDestroy
#define gpuGraphExecDestroy hipGraphExecDestroy

// A full-wavefront exchange; HIP's __shfl_xor works on the whole 64-lane wavefront.
#define ATOMK_SHFL_XOR(v, m) __shfl_xor((v), (m))
// Lane src's v, broadcast to the wavefront.
#define ATOMK_SHFL(v, src) __shfl((v), (src))

#else
// ---------------------------------------------------------------- CUDA
#define ATOMK_CUDA 1
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#define ATOMK_WARP_SIZE 32

typedef __half atomk_f16;
typedef __nv_bfloat16 atomk_bf16;

#define gpuError_t cudaError_t
#define gpuSuccess cudaSuccess
#define gpuGetErrorString cudaGetErrorString
#define gpuGetLastError cudaGetLastError
#define gpuStream_t cudaStream_t
#define gpuEvent_t cudaEvent_t
#define gpuGraph_t cudaGraph_t
#define gpuGraphExec_t cudaGraphExec_t
#define gpuDeviceProp cudaDeviceProp
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuGetDeviceProperties cudaGetDeviceProperties
#define gpuSetDevice cudaSetDevice
#define gpuGetDevice cudaGetDevice
#define gpuDeviceSynchronize cudaDeviceSynchronize
#define gpuDeviceGetAttribute cudaDeviceGetAttribute
#define gpuDevAttrMultiProcessorCount cudaDevAttrMultiProcessorCount
#define gpuOccupancyMaxActiveBlocksPerMultiprocessor cudaOccupancyMaxActiveBlocksPerMultiprocessor
#define gpuMemGetInfo cudaMemGetInfo
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuHostAlloc(p, n) cudaHostAlloc((p), (n), cudaHostAllocDefault)
#define gpuFreeHost cudaFreeHost
#define gpuMemcpyAsync cudaMemcpyAsync
#define gpuMemsetAsync cudaMemsetAsync
#define gpuMemcpyHostToDevice cudaMemcpyHostToDevice
#define gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define gpuMemcpyDefault cudaMemcpyDefault
#define gpuMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define gpuStreamCreateWithFlags cudaStreamCreateWithFlags
#define gpuStreamNonBlocking cudaStreamNonBlocking
#define gpuStreamDestroy cudaStreamDestroy
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuStreamWaitEvent(s, e, f) cudaStreamWaitEvent((s), (e), (f))
#define gpuEventCreate cudaEventCreate
#define gpuEventDestroy cudaEventDestroy
#define gpuEventRecord cudaEventRecord
#define gpuEventSynchronize cudaEventSynchronize
#define gpuEventElapsedTime cudaEventElapsedTime
#define gpuStreamBeginCapture cudaStreamBeginCapture
#define gpuStreamCaptureModeThreadLocal cudaStreamCaptureModeThreadLocal
#define gpuStreamEndCapture cudaStreamEndCapture
#define gpuGraphInstantiateWithFlags cudaGraphInstantiateWithFlags
#define gpuGraphLaunch cudaGraphLaunch
#define gpuGraphDestroy cudaGraphDestroy
#define gpuGraphExecDestroy cudaGraphExecDestroy

#define ATOMK_SHFL_XOR(v, m) __shfl_xor_sync(0xffffffffu, (v), (m))
#define ATOMK_SHFL(v, src) __shfl_sync(0xffffffffu, (v), (src))

#endif

// Conversions between the storage types and float, the type every kernel computes in.
__device__ __forceinline__ float atomk_to_float(float x) { return x; }
__device__ __forceinline__ float atomk_to_float(atomk_f16 x) { return __half2float(x); }
__device__ __forceinline__ float atomk_to_float(atomk_bf16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T atomk_from_float(float x);
template <> __device__ __forceinline__ float atomk_from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ atomk_f16 atomk_from_float<atomk_f16>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ atomk_bf16 atomk_from_float<atomk_bf16>(float x) { return __float2bfloat16(x); }  // round to nearest even on both vendors

// Programmatic dependent launch (Hopper and later, CUDA only). A kernel launched with
// atomk_launch may start while its predecessor in the stream is still running, so every kernel
// begins with ATOMK_PDL_ENTER: let the successor's blocks be scheduled, then wait until the
// predecessor grid has finished and its writes are visible. Waiting before anything is read or
// written keeps every read-after-write and write-after-read order of plain stream semantics
// (the successor waits for this grid, which finished only after its own predecessor did).
// Triggering before the wait lets a chain of short kernels all be resident ahead of time, so
// the next weight stream's prefetch (below) runs under the latency-bound kernels before it:
// the batch-1 step was 3% faster than with wait-then-trigger. A successor launches only once
// every block of this grid has started, so waiting blocks never keep a predecessor's blocks off
// the GPU. Without PDL (HIP, older GPUs, a launch without the attribute) both instructions are
// no-ops.
// A kernel may load data no kernel writes (weights) before ATOMK_PDL_ENTER: that is the
// overlap worth having for a weight stream.
__device__ __forceinline__ void atomk_pdl_enter() {
#if defined(ATOMK_CUDA) && defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
#define ATOMK_PDL_ENTER() atomk_pdl_enter()

// Asks for the 128-byte line at p to be fetched into L2 (no register, no wait). Used before
// ATOMK_PDL_ENTER on data no preceding kernel of the step writes, or writes only through L2
// (L2 is the point of coherence, so a prefetch can never make a later load stale). HIP: no-op.
__device__ __forceinline__ void atomk_prefetch_l2(const void* p) {
#if defined(ATOMK_CUDA)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#else
    (void)p;
#endif
}

// A load through L2, past the SM's L1: for values other blocks of the same grid wrote (and
// fenced) after this block may have cached the line.
template <typename V>
__device__ __forceinline__ V atomk_load_l2(const V* p) {
#if defined(ATOMK_CUDA)
    return __ldcg(p);
#else
    return __hip_atomic_load(p, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
#endif
}

// Sum of v over the warp; every lane receives the total.
__device__ __forceinline__ float atomk_warp_sum(float v) {
#pragma unroll
    for (int m = ATOMK_WARP_SIZE / 2; m > 0; m >>= 1) v += ATOMK_SHFL_XOR(v, m);
    return v;
}

// Maximum of v over the warp; every lane receives it.
__device__ __forceinline__ float atomk_warp_max(float v) {
#pragma unroll
    for (int m = ATOMK_WARP_SIZE / 2; m > 0; m >>= 1) v = fmaxf(v, ATOMK_SHFL_XOR(v, m));
    return v;
}

// Sum of v over the block (blockDim.x a multiple of the warp size, at most 1024); every thread
// receives the total. scratch holds at least 1024 / ATOMK_WARP_SIZE floats. Ends with a
// barrier, so scratch may be reused right after.
__device__ __forceinline__ float atomk_block_sum(float v, float* scratch) {
    const int lane = threadIdx.x % ATOMK_WARP_SIZE, warp = threadIdx.x / ATOMK_WARP_SIZE;
    const int nwarps = blockDim.x / ATOMK_WARP_SIZE;
    v = atomk_warp_sum(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float total = 0.f;
    for (int w = 0; w < nwarps; ++w) total += scratch[w];
    __syncthreads();
    return total;
}

#endif  // ATOMK_PORT_H
