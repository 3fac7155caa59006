// Compile-check shim: ROCm 5.2 (Debian 12) predates hip_bf16.h; map its names onto hip_bfloat16.
#pragma once
#include <hip/hip_bfloat16.h>
typedef hip_bfloat16 __hip_bfloat16;
__host__ __device__ inline float __bfloat162float(__hip_bfloat16 x) { return float(x); }
__host__ __device__ inline __hip_bfloat16 __float2bfloat16(float f) { return __hip_bfloat16(f); }
