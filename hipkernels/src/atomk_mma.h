// atomk_mma.h: the sm_80+ tensor-core building blocks of the library's MMA kernels (prefill
// attention, the grouped expert GEMM): cp.async copies into shared memory, ldmatrix loads of
// 8x8 16-bit tiles, the m16n8k16 MMA with fp32 accumulation, and the XOR swizzle that keeps
// ldmatrix free of bank conflicts. CUDA only: include it inside #if defined(ATOMK_CUDA).
#ifndef ATOMK_MMA_H
#define ATOMK_MMA_H

#include <stdint.h>

#include "atomk_port.h"

namespace {

// Shared-memory address of a generic pointer, as the PTX instructions want it.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Copies 16 bytes global -> shared without passing through registers; with bytes = 0 the
// destination is zero-filled instead (rows past the context or past the tile's query rows).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
// Waits until at most the newest committed group is still in flight (double buffering).
__device__ __forceinline__ void cp_async_wait_but_one() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }

// Four 8x8 16-bit matrices; lane l gives the address of row l%8 of matrix l/8, and receives in
// r[i] its row l/4, columns 2*(l%4) and +1, of matrix i (with trans: the transposed element pair).
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

// c += a·b for one m16n8k16 tile (a row-major 16x16, b "col-major" 16x8, c fp32 16x8), and the
// packing of two floats into the input type (the lower column in the low half).
template <typename T> struct Mma;
template <> struct Mma<atomk_bf16> {
    static __device__ __forceinline__ void run(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t*>(&v);
    }
};
template <> struct Mma<atomk_f16> {
    static __device__ __forceinline__ void run(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __half2 v = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t*>(&v);
    }
};

// Element offset of 16-byte chunk `chunk` of row `row` in a [rows][D] shared tile. The chunk
// index is XORed with row % 8, so the 8 rows an ldmatrix reads at one logical column sit in 8
// different bank groups (rows are 128 or 256 bytes: unswizzled, all 8 would hit the same banks).
template <int D>
__device__ __forceinline__ int swz(int row, int chunk) {
    return row * D + ((chunk ^ (row & 7)) << 3);
}

}  // namespace

#endif  // ATOMK_MMA_H
