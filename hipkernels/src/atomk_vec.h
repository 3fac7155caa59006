// atomk_vec.h: 16-byte vectors of the element-wise kernels (norm.cu, activation.cu). A Vec<T>
// holds the 16 / sizeof(T) elements that one 16-byte load or store moves (8 for the 16-bit types,
// 4 for float); kernels take the vector path when every pointer is 16-byte aligned and the row
// widths are whole vectors, else a scalar loop.
#ifndef ATOMK_VEC_H
#define ATOMK_VEC_H

#include <stdint.h>

#include "atomk_port.h"

template <typename T>
struct alignas(16) Vec {
    static constexpr int N = 16 / sizeof(T);
    T v[N];
};

// Whether p is 16-byte aligned (NULL counts as aligned: an absent operand).
static inline bool atomk_aligned16(const void* p) { return ((uintptr_t)p & 15u) == 0; }

#endif  // ATOMK_VEC_H
