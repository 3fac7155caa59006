// moe_rank.h: the order of router candidates shared by the MoE routers (moe.cu, moe_route.cu).
#ifndef ATOMK_MOE_RANK_H
#define ATOMK_MOE_RANK_H

// Whether (v, i) ranks before (u, j): the larger score, the lower id on a tie; an empty
// candidate (id -1) never ranks first, any real one does (so a row of NaNs still yields k
// distinct ids, as on the cpu).
__device__ __forceinline__ bool ranks_before(float v, int i, float u, int j) {
    if (i < 0) return false;
    if (j < 0) return true;
    if (v > u) return true;
    if (u > v) return false;
    return i < j;  // equal, or a NaN: the lower id
}

#endif  // ATOMK_MOE_RANK_H
