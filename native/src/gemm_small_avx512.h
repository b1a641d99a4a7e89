/* The AVX-512 small-product kernel: included once per dtype by
   gemm_ukr_avx512.h (inside its parameters: T, V, VL, SFX, LOADU, STOREU,
   SET1, FMA, ZERO, MLOAD, MSTORE, and for the paired rows ITYPE, PERMX,
   PERMX2, BCAST2). No include guard: including it twice is
   the point.

   gemm_small_<SFX> (gemm.h) computes a whole small product C = A @ B with A,
   B and C row-major, all read and written in place: no packing, and no call
   per register tile. Column panels of up to 4 vectors (64 float32, 32
   float64 columns), the last vector of a partial panel loaded and stored
   through a mask (a masked load never reads past the mask, so B's last
   columns are read in place too); rows in tiles of 4 for panels of 3-4
   vectors (12-16 accumulators) and of 8 for 1-2 vectors, a last tile of up
   to 1.5 times that many rows taken whole; a B at most half a vector wide
   takes C's rows in pairs (pair_tile below). Each tile is the register-tile
   loop of gemm_ukr_tile_avx512.h inlined at constant size: every element is
   the same FMA chain over k from zero as in every other GEMM path, so the
   bits do not change.

   On Zen 4 (1 thread, in-process against OpenBLAS's direct sgemm, which
   numpy calls per batch item), batches of 32x64 @ 64x32, 64x32 @ 32x32 and
   64x64 @ 64x64 float32 ran 4-7% slower through macro() and the tail kernels
   (one call per 12 x 32 tile, a partial B panel packed per item) and 1-5%
   faster through this kernel. On Zen 5 (two full-width FMAs a cycle, 4
   cycles latency: 8 chains only just keep both busy) 8-row tiles of 2
   vectors (16 accumulators, was 4 rows, 8) took 256 x (32x64 @ 64x32) from
   2310 to 2090 cycles an item (kernel alone, C harness, thread CPU time,
   medians), and the paired rows 32 x (64x32 @ 32x8) from 1340 to 930 (it
   ran the AVX2 8-column half kernel before). */

#define SMALL_S(name) UKR_CAT(name, SFX)

#include "gemm_small_tile.h"

/* C's rows in pairs, for n <= VL / 2 columns: one accumulator holds rows i
   and i + 1 with their columns interleaved (lane 2j + r is C[i + r, j]), fed
   by a broadcast of the pair (A[i, p], A[i + 1, p]) and B's row p with each
   element doubled (a permute per p for the whole tile), so every lane of the
   full-width FMA is used; the bits are those of every other path (one FMA
   chain over p per element).  The broadcast pairs come from a copy of the
   tile's rows interleaved in pairs, SMALL_KCH columns at a time on the
   stack.  An odd last row is paired with itself and stored once.  Where
   512-bit ops run as two halves (Zen 4, ad_cpu_vec_bits 256) the driver
   calls AVX2's gemm_narrow for these widths instead: its one 256-bit vector
   a row, fed by broadcast loads, ran 32 x (64x32 @ 32x8) in 1320 cycles an
   item against 2100 here. */
#define SMALL_KCH 128

static inline __attribute__((always_inline)) void SMALL_S(pair_tile)(
    const int P, int64_t k, const T *restrict a, int64_t rsa, int64_t rows,
    const T *restrict b, int64_t rsb, int n, T *restrict c, int64_t rsc, int accum)
{
    ITYPE ilo[VL], ihi[VL], idup[VL], iev[VL], iod[VL];
    for (int l = 0; l < VL; l++) {
        ilo[l] = (ITYPE)((l & 1) * VL + l / 2);
        ihi[l] = (ITYPE)(ilo[l] + VL / 2);
        idup[l] = (ITYPE)(l / 2);
        iev[l] = (ITYPE)((2 * l) % VL);
        iod[l] = (ITYPE)((2 * l + 1) % VL);
    }
    const __m512i xlo = _mm512_loadu_si512(ilo), xhi = _mm512_loadu_si512(ihi),
                  xdup = _mm512_loadu_si512(idup);
    T buf[12 * 2 * SMALL_KCH] __attribute__((aligned(64)));
    V acc[12];
    _Pragma("GCC unroll 12") for (int q = 0; q < P; q++) acc[q] = ZERO();
    for (int64_t p0 = 0; p0 < k; p0 += SMALL_KCH) {
        int64_t kc = k - p0 < SMALL_KCH ? k - p0 : SMALL_KCH;
        _Pragma("GCC unroll 1") for (int q = 0; q < P; q++) {
            const T *x0 = a + 2 * q * rsa + p0, *y0 = 2 * q + 1 < rows ? x0 + rsa : x0;
            T *o = buf + q * SMALL_KCH * 2;
            int64_t p = 0;
            for (; p + VL <= kc; p += VL) {
                V x = LOADU(x0 + p), y = LOADU(y0 + p);
                STOREU(o + 2 * p, PERMX2(x, xlo, y));
                STOREU(o + 2 * p + VL, PERMX2(x, xhi, y));
            }
            if (p < kc) {
                V x = MLOAD(x0 + p, (int)(kc - p)), y = MLOAD(y0 + p, (int)(kc - p));
                STOREU(o + 2 * p, PERMX2(x, xlo, y));
                STOREU(o + 2 * p + VL, PERMX2(x, xhi, y));
            }
        }
        const T *bp = b + p0 * rsb;
        for (int64_t p = 0; p < kc; p++) {
            V bv = PERMX(xdup, MLOAD(bp, n));
            _Pragma("GCC unroll 12") for (int q = 0; q < P; q++)
                acc[q] = FMA(BCAST2(buf + (q * SMALL_KCH + p) * 2), bv, acc[q]);
            bp += rsb;
        }
    }
    const __m512i xev = _mm512_loadu_si512(iev), xod = _mm512_loadu_si512(iod);
    _Pragma("GCC unroll 12") for (int q = 0; q < P; q++) {
        T *c0 = c + 2 * q * rsc, *c1 = c0 + rsc;
        V r0 = PERMX(xev, acc[q]), r1 = PERMX(xod, acc[q]);
        MSTORE(c0, accum ? ADD(r0, MLOAD(c0, n)) : r0, n);
        if (2 * q + 1 < rows)
            MSTORE(c1, accum ? ADD(r1, MLOAD(c1, n)) : r1, n);
    }
}

void SMALL_S(gemm_small)(int64_t m, int64_t n, int64_t k, const T *a, int64_t rsa, const T *b,
                         int64_t rsb, T *c, int64_t rsc, int accum)
{
    if (n <= VL / 2) {
        int64_t pairs = (m + 1) / 2;
        for (int64_t q = 0, pb; q < pairs; q += pb) {
            pb = gemm_tile_rows(8, 12, pairs - q);
            const T *aq = a + 2 * q * rsa;
            T *cq = c + 2 * q * rsc;
            int64_t rows = m - 2 * q < 2 * pb ? m - 2 * q : 2 * pb;
#define SMALL_PAIR_(P)                                                                      \
    case P:                                                                                 \
        SMALL_S(pair_tile)(P, k, aq, rsa, rows, b, rsb, (int)n, cq, rsc, accum);            \
        break;
            switch ((int)pb) {
                GEMM_ROWS_1_TO_12(SMALL_PAIR_)
            }
#undef SMALL_PAIR_
        }
        return;
    }
    for (int64_t j = 0; j < n; j += 4 * VL) {
        int64_t w = n - j < 4 * VL ? n - j : 4 * VL;
        int nv = (int)((w + VL - 1) / VL);
        int last = (int)(w - (nv - 1) * VL), masked = last < VL;
        int64_t th = nv > 2 ? 4 : 8;
        for (int64_t i = 0, ib; i < m; i += ib) {
            ib = gemm_tile_rows(th, th + th / 2, m - i);
            const T *ai = a + i * rsa, *bj = b + j;
            T *cij = c + i * rsc + j;
#define SMALL_CASE_(MR, NV)                                                                 \
    case (NV) * 16 + (MR):                                                                  \
        if (masked)                                                                         \
            SMALL_S(small_tile)(MR, NV, 1, k, ai, rsa, bj, rsb, cij, rsc, last, accum);     \
        else                                                                                \
            SMALL_S(small_tile)(MR, NV, 0, k, ai, rsa, bj, rsb, cij, rsc, last, accum);     \
        break;
#define SMALL_ROWS6_(NV)                                                                    \
    SMALL_CASE_(1, NV) SMALL_CASE_(2, NV) SMALL_CASE_(3, NV) SMALL_CASE_(4, NV)             \
    SMALL_CASE_(5, NV) SMALL_CASE_(6, NV)
#define SMALL_ROWS12_(NV)                                                                   \
    SMALL_ROWS6_(NV) SMALL_CASE_(7, NV) SMALL_CASE_(8, NV) SMALL_CASE_(9, NV)               \
    SMALL_CASE_(10, NV) SMALL_CASE_(11, NV) SMALL_CASE_(12, NV)
            switch (nv * 16 + (int)ib) {
                SMALL_ROWS12_(1)
                SMALL_ROWS12_(2)
                SMALL_ROWS6_(3)
                SMALL_ROWS6_(4)
            }
#undef SMALL_ROWS12_
#undef SMALL_ROWS6_
#undef SMALL_CASE_
        }
    }
}

#undef SMALL_S
