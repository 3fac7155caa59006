// moe_mx_mma.h: the expert GEMMs of moe.cu on tensor cores for MXFP4 experts (CUDA, 16-bit
// activations): the grouped 64-row tiles, and one slot a block (batch 1, below). Hopper has no
// FP4 MMA: the weights stay MXFP4 in memory (4.25 bits a weight), and each warp expands its
// fragments of them in registers right before mma.sync m16n8k16.
//
// A block takes one 64-row tile of one expert's slots (atomk_moe_align's sorted ids) and 128
// weight rows of that expert, and streams K 64 at a time through a 3-stage cp.async ring: the A
// rows (activations, gathered through the slot ids; padding rows zero-filled), the B rows' codes
// (32 bytes a row) and, through registers one stage ahead, their two E8M0 scales a row, stored
// as the 16-bit multiplier 2^(s-127) in both halves of a word. Each of the 8 warps owns 16
// weight rows (two n8 fragments) and all 64 tile rows (four m16 fragments), so every code is
// expanded once per block; the m16 fragments past the tile's real slots are skipped.
//
// The K order inside an MXFP4 block (32 values, 16 bytes of a row) is permuted the same way on
// both operands, which a dot product allows. Lane l = 4g + q of a warp (g = l/4, q = l%4) reads
// with ldmatrix word q of its row g of the block: codes k = 8q .. 8q+7, byte j holding k = 8q+2j
// (low nibble) and 8q+2j+1. Expanded, byte j is one register of two 16-bit values, the pair
// m16n8k16 wants. K step t (0, 1) of the block takes bytes 2t (as b0, the MMA's k = 2q, 2q+1)
// and 2t+1 (b1, k = 2q+8, 2q+9), so MMA k index 2q+h (h < 2) is block k 8q+4t+h and 2q+8+h is
// 8q+4t+2+h. The A fragment then wants, for rows g and g+8, block k 8q+4t .. 8q+4t+3: the lane
// reads 16 bytes (k 8q .. 8q+7, both steps) of each row straight from shared memory, a0/a2 =
// row g's words 2t/2t+1, a1/a3 = row g+8's.
//
// E2M1 -> 16 bits: every E2M1 value is exact in bf16 and f16. Byte-permute (prmt) lookups of
// the 8 magnitudes' high bytes (and, for bf16, low bytes; f16's are all zero) by the 3-bit
// magnitude codes, the sign bits moved to bit 7 of the high bytes, then the bytes interleaved
// into pairs. The block's scale is multiplied in with one packed 16-bit multiply: a power of two,
// exact while the products stay normal in the type (bf16: scale bytes 2..252; f16: 114..140),
// which the caller checks once at load (ops/gpu: mxfp4Weight) and otherwise takes the skinny
// kernel, which scales in float32.
// Included by moe.cu inside #if defined(ATOMK_CUDA).
#ifndef ATOMK_MOE_MX_MMA_H
#define ATOMK_MOE_MX_MMA_H

namespace {

constexpr int kMxMmaCols = 128;   // weight rows per block
constexpr int kMxMmaK = 64;       // K per stage: two MXFP4 blocks
constexpr int kMxMmaStages = 3;
constexpr int kMxMmaThreads = 256;

// The 16-bit forms of the 8 E2M1 magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6}: byte i of the
// (word 0, word 1) pair is the high (H) or low (L) byte of magnitude i, as prmt indexes 8 bytes.
template <typename T> struct MxE2M1;
template <> struct MxE2M1<atomk_bf16> {  // 0x0000 3F00 3F80 3FC0 4000 4040 4080 40C0
    static constexpr uint32_t H0 = 0x3F3F3F00u, H1 = 0x40404040u, L0 = 0xC0800000u, L1 = 0xC0804000u;
    // 2^(s-127) in both halves (s >= 1).
    static __device__ __forceinline__ uint32_t scale(uint32_t s) { return s * 0x00800080u; }
};
template <> struct MxE2M1<atomk_f16> {  // 0x0000 3800 3C00 3E00 4000 4200 4400 4600
    static constexpr uint32_t H0 = 0x3E3C3800u, H1 = 0x46444240u, L0 = 0u, L1 = 0u;
    // 2^(s-127) in both halves (113 <= s <= 142: exponent field s - 112).
    static __device__ __forceinline__ uint32_t scale(uint32_t s) { return (s - 112u) * 0x04000400u; }
};

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
    uint32_t d;
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}

// The 8 E2M1 codes of w (nibble i = bits 4i..4i+3, bit 3 the sign) as 16-bit values: r[j] holds
// the codes of byte j, the low nibble's value in the low half.
template <typename T>
__device__ __forceinline__ void mx_expand(uint32_t w, uint32_t r[4]) {
    using C = MxE2M1<T>;
    const uint32_t mag = w & 0x77777777u;  // prmt reads a selector nibble's bit 3 as a mode bit
    const uint32_t s4 = w << 4;            // byte j's low-nibble sign at bit 7 of byte j
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const uint32_t sel = h ? mag >> 16 : mag;  // nibbles 4h .. 4h+3 (prmt reads 16 selector bits)
        // High bytes of nibbles 4h .. 4h+3; their signs: the low nibble's from s4, the high one's
        // from w (bit 7 of its byte).
        uint32_t hi = prmt(C::H0, C::H1, sel);
        hi |= prmt(s4, w, h ? 0x7362u : 0x5140u) & 0x80808080u;
        if constexpr (C::L0 == 0u && C::L1 == 0u) {
            r[2 * h] = prmt(hi, 0u, 0x1404u);  // bytes 0, hi0, 0, hi1
            r[2 * h + 1] = prmt(hi, 0u, 0x3424u);
        } else {
            const uint32_t lo = prmt(C::L0, C::L1, sel);
            r[2 * h] = prmt(lo, hi, 0x5140u);  // bytes lo0, hi0, lo1, hi1
            r[2 * h + 1] = prmt(lo, hi, 0x7362u);
        }
    }
}

// a · b on two packed pairs of T (round to nearest; exact here: b is a power of two).
template <typename T> __device__ __forceinline__ uint32_t mul2(uint32_t a, uint32_t b);
template <> __device__ __forceinline__ uint32_t mul2<atomk_bf16>(uint32_t a, uint32_t b) {
    uint32_t d;
    asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
template <> __device__ __forceinline__ uint32_t mul2<atomk_f16>(uint32_t a, uint32_t b) {
    uint32_t d;
    asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

// Element offset of 16-byte chunk c of row r in an A stage [64][kMxMmaK]: rows 2p and 2p+1,
// which one quarter-warp's 16-byte loads read at the same 4 chunks, sit in opposite halves of
// the banks.
__device__ __forceinline__ int mx_swz_a(int r, int c) { return r * kMxMmaK + ((c ^ ((r & 1) << 2)) << 3); }
// Byte offset of block b (0, 1) of row r's 32 code bytes in a B stage: rows r and r+4, which an
// ldmatrix reads together, in opposite halves of the banks.
__device__ __forceinline__ int mx_swz_b(int r, int b) { return r * 32 + ((b ^ ((r >> 2) & 1)) << 4); }

template <typename T, bool GATE_UP>
__global__ void __launch_bounds__(kMxMmaThreads, 2) moe_mx_mma_kernel(T* __restrict__ out, const T* __restrict__ x,
                                                                      const uint8_t* __restrict__ codes,
                                                                      const uint8_t* __restrict__ scales,
                                                                      const float* __restrict__ weights,
                                                                      const int32_t* __restrict__ sorted,
                                                                      const int32_t* __restrict__ tile_expert,
                                                                      const int32_t* __restrict__ num_tiles, int slots,
                                                                      int topk, int hidden, int inter, MoEAct<T> act) {
    constexpr int BM = kMmaRows, BN = kMxMmaCols, BK = kMxMmaK, S = kMxMmaStages;
    __shared__ __align__(128) T sA[S][BM * BK];
    __shared__ __align__(128) uint8_t sB[S][BN * BK / 2];
    __shared__ uint32_t sS[S][2][BN];  // [stage][block][row]: the scale multipliers
    ATOMK_PDL_ENTER();
    const int tile = blockIdx.y;
    if (tile >= *num_tiles) return;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int e = tile_expert[tile];
    const int k = GATE_UP ? hidden : inter;
    const int kc = k / 8;              // 16-byte chunks of an A row
    const int kb = k / kMXBlock;       // MXFP4 blocks of a B row
    const int n_out = GATE_UP ? inter : hidden;
    const int n0 = blockIdx.x * (GATE_UP ? BN / 2 : BN);  // first output column of the block
    const size_t rows_per_expert = GATE_UP ? 2 * (size_t)inter : (size_t)hidden;

    // The tile's real slots (they come first): m16 fragments past them are skipped.
    const int m_real = __popc(__ballot_sync(~0u, sorted[tile * BM + lane] < slots)) +
                       __popc(__ballot_sync(~0u, sorted[tile * BM + 32 + lane] < slots));

    // A: rows tid/8 + 32i (i < 2), chunk tid % 8.
    const int ch = tid % 8;
    const T* arow[2];
    bool aok[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int s = sorted[tile * BM + tid / 8 + 32 * i];
        aok[i] = s < slots;
        arow[i] = x + (size_t)(aok[i] ? (GATE_UP ? s / topk : s) : 0) * k;
    }
    // B: row tid/2, block tid%2 of the stage (its 16 code bytes and its scale). For gate_up, row
    // r is in group r/8: gate rows (even groups) or up rows (odd) of act columns 8·(r/16)..+7, so
    // warp w's two n8 fragments are the gate and up rows of the same 8 columns.
    const int br = tid / 2, bb = tid % 2;
    int bcol, bsrc;
    if constexpr (GATE_UP) {
        bcol = n0 + (br / 16) * 8 + br % 8;
        bsrc = ((br / 8) & 1 ? inter : 0) + bcol;
    } else {
        bcol = n0 + br;
        bsrc = bcol;
    }
    const bool bok = bcol < n_out;
    const size_t wr = (size_t)e * rows_per_expert + (bok ? bsrc : 0);
    const uint8_t* bcodes = codes + wr * (k / 2);
    const uint8_t* bscale = scales + wr * kb;

    auto load = [&](int kt) {
        const int st = kt % S;
        const int c = kt * (BK / 8) + ch;
        const bool kin = c < kc;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int r = tid / 8 + 32 * i;
            cp_async16(&sA[st][mx_swz_a(r, ch)], arow[i] + (kin ? c * 8 : 0), aok[i] && kin ? 16 : 0);
        }
        const int blk = kt * 2 + bb;
        const bool bin = bok && blk < kb;
        cp_async16(&sB[st][mx_swz_b(br, bb)], bcodes + (bin ? blk * 16 : 0), bin ? 16 : 0);
    };
    // This thread's scale byte of stage kt (0 past the row's blocks or the expert's rows: its
    // codes are zero-filled, and a zero multiplier keeps the padding exactly zero).
    auto scale_of = [&](int kt) -> uint32_t {
        const int blk = kt * 2 + bb;
        return bok && blk < kb ? MxE2M1<T>::scale(bscale[blk]) : 0u;
    };

    float acc[4][2][4];
#pragma unroll
    for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int nf = 0; nf < 2; ++nf)
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[mi][nf][c] = 0.f;

    const int nk = (k + BK - 1) / BK;
    // The ring: stage kt's copies are commit group kt (empty past nk, so that the wait counts
    // stay uniform); its scales are read into a register at iteration kt-2 and stored at kt-1.
    load(0);
    cp_async_commit();
    if (nk > 1) load(1);
    cp_async_commit();
    sS[0][bb][br] = scale_of(0);
    uint32_t s_next = nk > 1 ? scale_of(1) : 0u;

    const int g = lane / 4, q = lane % 4;
    const int wrow = warp * 16;  // the warp's first B row
    for (int kt = 0; kt < nk; ++kt) {
        cp_async_wait_but_one();  // group kt has landed (kt+1 may be in flight)
        __syncthreads();          // ... for every thread; and stage kt-1's buffers are free
        if (kt + 2 < nk) load(kt + 2);
        cp_async_commit();
        if (kt + 1 < nk) sS[(kt + 1) % S][bb][br] = s_next;  // last read by stage kt-2's MMAs
        if (kt + 2 < nk) s_next = scale_of(kt + 2);

        const int st = kt % S;
        const T* a = sA[st];
        // ldmatrix x4: matrix i = (block i/2, n8 fragment i%2); lane l gives row wrow + 8·((l/8)%2) + l%8
        // of block l/16 and receives word q of row g of each matrix.
        uint32_t bw[4];
        {
            const int r = wrow + 8 * ((lane / 8) & 1) + lane % 8;
            ldmatrix_x4(bw, &sB[st][mx_swz_b(r, lane / 16)]);
        }
#pragma unroll
        for (int blk = 0; blk < 2; ++blk) {
            uint32_t bf[2][4];
#pragma unroll
            for (int nf = 0; nf < 2; ++nf) {
                const uint32_t m = sS[st][blk][wrow + 8 * nf + g];
                mx_expand<T>(bw[2 * blk + nf], bf[nf]);
#pragma unroll
                for (int j = 0; j < 4; ++j) bf[nf][j] = mul2<T>(bf[nf][j], m);
            }
#pragma unroll
            for (int mi = 0; mi < 4; ++mi) {
                if (mi * 16 >= m_real) break;
                const int r = mi * 16 + g;
                const uint4 lo = *reinterpret_cast<const uint4*>(&a[mx_swz_a(r, 4 * blk + q)]);
                const uint4 hi = *reinterpret_cast<const uint4*>(&a[mx_swz_a(r + 8, 4 * blk + q)]);
#pragma unroll
                for (int t = 0; t < 2; ++t) {
                    const uint32_t af[4] = {t ? lo.z : lo.x, t ? hi.z : hi.x, t ? lo.w : lo.y, t ? hi.w : hi.y};
#pragma unroll
                    for (int nf = 0; nf < 2; ++nf) Mma<T>::run(acc[mi][nf], af, bf[nf][2 * t], bf[nf][2 * t + 1]);
                }
            }
        }
    }

    // Epilogue: accumulator c of fragment (mi, nf) is tile row mi·16 + g (+8 for c >= 2) and B
    // row wrow + 8·nf + 2q + (c & 1). gate_up: nf 0 the gate, nf 1 the up of act column
    // n0 + 8·warp + 2q + (c & 1); down: output column n0 + wrow + 8·nf + 2q + (c & 1).
#pragma unroll
    for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = mi * 16 + g + 8 * h;
            if (row >= m_real) continue;
            const int s = sorted[tile * BM + row];
            T* orow = out + (size_t)s * n_out;
            if constexpr (GATE_UP) {
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                    const int col = n0 + 8 * warp + 2 * q + c;
                    if (col < n_out)
                        orow[col] = atomk_from_float<T>(act.gate_up(acc[mi][0][2 * h + c], acc[mi][1][2 * h + c], e, col, inter));
                }
            } else {
                const float rw = weights[s];
#pragma unroll
                for (int nf = 0; nf < 2; ++nf)
#pragma unroll
                    for (int c = 0; c < 2; ++c) {
                        const int col = n0 + wrow + 8 * nf + 2 * q + c;
                        if (col < n_out) orow[col] = atomk_from_float<T>(act.down(acc[mi][nf][2 * h + c], e, col, hidden) * rw);
                    }
            }
        }
}

// ---- one slot a block (batch 1: atomk_moe_tile_rows 1) ----
//
// The weights are the M = 16 operand and the slot is column 0 of N = 8 (columns 1-7 zero), so
// the multiply-adds run on the tensor cores and a weight costs only its expansion. Warp w of
// block (x, slot) owns 16 weight rows of expert ids[slot] (gate_up: rows 0-7 the gate rows of 8
// act columns, rows 8-15 their up rows, so a lane ends with a gate and its up; down: 16 output
// columns) and streams them along K one MXFP4 block at a time, U blocks in flight: lane (g, q)
// loads word q (codes k = 8q .. 8q+7) of the block of rows g and g+8, expands them as the tiled
// kernel does (the same K permutation, A fragment a0/a2 = row g's registers 2t/2t+1, a1/a3 = row
// g+8's), and lanes 0-3 (g = 0, column 0) load the slot's x values k = 8q .. 8q+7 as the B
// fragment (b0/b1 = words 2t/2t+1); the other lanes' B is zero. The block's two MMAs accumulate
// into a fresh fragment, which is scaled in float32 by the rows' E8M0 scales: exact for every
// scale, as the skinny kernel.
constexpr int kMxDirectThreads = 128;  // 4 warps
constexpr int kMxDirectU = 8;          // MXFP4 blocks of each row in flight per lane

template <typename T, bool GATE_UP>
__global__ void __launch_bounds__(kMxDirectThreads) moe_mx_direct_kernel(T* __restrict__ out, const T* __restrict__ x,
                                                                         const uint8_t* __restrict__ codes,
                                                                         const uint8_t* __restrict__ scales,
                                                                         const float* __restrict__ weights,
                                                                         const int32_t* __restrict__ ids, int topk,
                                                                         int hidden, int inter, MoEAct<T> act) {
    constexpr int U = kMxDirectU;
    ATOMK_PDL_ENTER();
    const int slot = blockIdx.y;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, q = lane % 4;
    const int n_out = GATE_UP ? inter : hidden;
    const int k = GATE_UP ? hidden : inter;
    const int kb = k / kMXBlock;
    const int col0 = (blockIdx.x * (kMxDirectThreads / 32) + warp) * (GATE_UP ? 8 : 16);
    if (col0 >= n_out) return;
    const int e = ids[slot];
    // Rows g and g+8 of the warp (clamped past the last column: loaded, never stored).
    int ra, rb;
    if constexpr (GATE_UP) {
        ra = min(col0 + g, n_out - 1);
        rb = inter + ra;
    } else {
        ra = min(col0 + g, n_out - 1);
        rb = min(col0 + 8 + g, n_out - 1);
    }
    const size_t base = (size_t)e * (GATE_UP ? 2 * (size_t)inter : (size_t)hidden);
    const uint32_t* wa = reinterpret_cast<const uint32_t*>(codes + (base + ra) * (k / 2)) + q;  // + 4·block
    const uint32_t* wb = reinterpret_cast<const uint32_t*>(codes + (base + rb) * (k / 2)) + q;
    const uint8_t* sa = scales + (base + ra) * kb;
    const uint8_t* sb = scales + (base + rb) * kb;
    const uint4* xr = reinterpret_cast<const uint4*>(x + (size_t)(GATE_UP ? slot / topk : slot) * k) + q;  // + 4·block
    float acc_a = 0.f, acc_b = 0.f;
    for (int b0 = 0; b0 < kb; b0 += U) {
        uint32_t ca[U], cb[U], sca[U], scb[U];
        uint4 xv[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int b = b0 + u;
            const bool ok = b < kb;
            ca[u] = ok ? __ldg(wa + 4 * b) : 0u;
            cb[u] = ok ? __ldg(wb + 4 * b) : 0u;
            sca[u] = ok ? sa[b] : 0u;
            scb[u] = ok ? sb[b] : 0u;
            xv[u] = ok && g == 0 ? load_cached(xr + 4 * b) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (b0 + u >= kb) break;
            uint32_t fa[4], fb[4];
            mx_expand<T>(ca[u], fa);
            mx_expand<T>(cb[u], fb);
            float c[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
            for (int t = 0; t < 2; ++t) {
                const uint32_t af[4] = {fa[2 * t], fb[2 * t], fa[2 * t + 1], fb[2 * t + 1]};
                Mma<T>::run(c, af, t ? xv[u].z : xv[u].x, t ? xv[u].w : xv[u].y);
            }
            // c[0]: row g, column 0; c[2]: row g+8, column 0.
            acc_a = fmaf(c[0], e8m0(sca[u]), acc_a);
            acc_b = fmaf(c[2], e8m0(scb[u]), acc_b);
        }
    }
    if (q != 0) return;
    if constexpr (GATE_UP) {
        const int col = col0 + g;
        if (col < n_out) out[(size_t)slot * n_out + col] = atomk_from_float<T>(act.gate_up(acc_a, acc_b, e, col, inter));
    } else {
        const float rw = weights[slot];
        const int col = col0 + g;
        if (col < n_out) out[(size_t)slot * n_out + col] = atomk_from_float<T>(act.down(acc_a, e, col, hidden) * rw);
        if (col + 8 < n_out) out[(size_t)slot * n_out + col + 8] = atomk_from_float<T>(act.down(acc_b, e, col + 8, hidden) * rw);
    }
}

}  // namespace

#endif  // ATOMK_MOE_MX_MMA_H
