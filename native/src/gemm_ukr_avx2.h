/* gemm_avx2.c's micro-kernel template: included once per dtype by
   gemm_avx2.c, which defines T, V (the vector type), VL (its lanes), SFX (the
   name suffix), UKR_FN (its kernel pointer type), PMR (the
   packed panel height), LOADU, STOREU, SET1, FMA, ADD,
   ZERO, MLOAD and MSTORE first.  No include guard: including it twice is the
   point.

   ukr_body is the one kernel: MR rows x NV vectors, C (+)= A micro-panel @ B
   micro-panel with the contract of GEMM_UKR_DECLARE (gemm.h).  It is inlined
   into a wrapper per (MR, NV), where both are constants, so the accumulator
   array is kept in registers as in the AVX-512 kernels.  Unlike those, A's
   column stride is read at run time in the packed form (rsa == 1): the same
   loop then reads a unit-row-stride A in place or a panel packed at any
   height, at no cost in the loop (the pointer step is a register add either
   way).  The k loop is unrolled 4 times: under PYAUTODIFF_ISA=avx2 on Zen 5
   that took 1-2% off every product measured (8 times was level with 4; a
   prefetch of the C tile before the loop was level with none). */

#define UKR_CAT_(a, b) a##_##b
#define UKR_CAT(a, b) UKR_CAT_(a, b)
#define UKR_S(name) UKR_CAT(name, SFX)

static inline __attribute__((always_inline)) void UKR_S(ukr_body)(
    const int MR, const int NV, int64_t k, const T *restrict a, int64_t rsa, int64_t csa,
    const T *restrict bp, int64_t rsb, T *restrict c, int64_t rsc, int64_t rows, int64_t cols,
    int accum)
{
    V acc[PMR][2];
    _Pragma("GCC unroll 16") for (int i = 0; i < MR; i++)
        _Pragma("GCC unroll 4") for (int j = 0; j < NV; j++) acc[i][j] = ZERO();
    /* the k loop: A element (i, p) at a[i * ars + p * acs] */
#define UKR_LOOP_(ARS, ACS)                                                                 \
    _Pragma("GCC unroll 4") for (int64_t p = 0; p < k; p++) {                                  \
        V bv[2];                                                                           \
        _Pragma("GCC unroll 4") for (int j = 0; j < NV; j++) bv[j] = LOADU(bp + j * VL);   \
        _Pragma("GCC unroll 16") for (int i = 0; i < MR; i++) {                            \
            V av = SET1(a[i * (ARS)]);                                                     \
            _Pragma("GCC unroll 4") for (int j = 0; j < NV; j++)                           \
                acc[i][j] = FMA(av, bv[j], acc[i][j]);                                     \
        }                                                                                  \
        a += (ACS);                                                                        \
        bp += rsb;                                                                         \
    }
    if (csa == 1)
        UKR_LOOP_(rsa, 1)
    else
        UKR_LOOP_(1, csa)
#undef UKR_LOOP_
    _Pragma("GCC unroll 16") for (int i = 0; i < MR; i++) {
        if (i >= rows)
            break;
        T *ci = c + i * rsc;
        _Pragma("GCC unroll 4") for (int j = 0; j < NV; j++) {
            V r = acc[i][j];
            int64_t lanes = cols - j * VL;
            if (lanes >= VL) {
                if (accum)
                    r = ADD(r, LOADU(ci + j * VL));
                STOREU(ci + j * VL, r);
            } else if (lanes > 0) {
                if (accum)
                    r = ADD(r, MLOAD(ci + j * VL, lanes));
                MSTORE(ci + j * VL, r, lanes);
            }
        }
    }
}

/* One kernel of MR rows and NV vectors, as NAME (a one-line wrapper). */
#define UKR_WRAP(QUAL, NAME, MR, NV)                                                         \
    QUAL void NAME(int64_t k, const T *restrict a, int64_t rsa, int64_t csa,                \
                   const T *restrict bp, int64_t rsb, T *restrict c, int64_t rsc,          \
                   int64_t rows, int64_t cols, int accum)                                  \
    { UKR_S(ukr_body)(MR, NV, k, a, rsa, csa, bp, rsb, c, rsc, rows, cols, accum); }

UKR_WRAP(, UKR_CAT(gemm_ukr, SFX), PMR, 2)
UKR_WRAP(, UKR_CAT(gemm_ukrh, SFX), PMR, 1)
UKR_WRAP(static, UKR_S(ukr1), 1, 2)
UKR_WRAP(static, UKR_S(ukr2), 2, 2)
UKR_WRAP(static, UKR_S(ukr3), 3, 2)
UKR_WRAP(static, UKR_S(ukr4), 4, 2)
UKR_WRAP(static, UKR_S(ukr5), 5, 2)
UKR_WRAP(static, UKR_S(ukrh1), 1, 1)
UKR_WRAP(static, UKR_S(ukrh2), 2, 1)
UKR_WRAP(static, UKR_S(ukrh3), 3, 1)
UKR_WRAP(static, UKR_S(ukrh4), 4, 1)
UKR_WRAP(static, UKR_S(ukrh5), 5, 1)

/* tails[r]: exactly r < PMR rows (the driver takes the same paths as at the
   AVX-512 level: row tails, small batches, in-place last rows) */
_Static_assert(PMR == 6, "the tail tables below list rows 1 .. 5");
const UKR_FN UKR_CAT(gemm_tails, SFX)[PMR] = {
    NULL, UKR_S(ukr1), UKR_S(ukr2), UKR_S(ukr3), UKR_S(ukr4), UKR_S(ukr5)};
const UKR_FN UKR_CAT(gemm_tails_half, SFX)[PMR] = {
    NULL, UKR_S(ukrh1), UKR_S(ukrh2), UKR_S(ukrh3), UKR_S(ukrh4), UKR_S(ukrh5)};

/* gemm_narrow: a whole product at most one vector wide (n <= VL), A, B
   and C row-major and read and written in place: no packing, no call per
   tile.  Rows in tiles of 8, a last one of up to 12 (gemm_tile_rows), each
   gemm_small_tile.h's loop at one vector: 8-12 FMA chains where the
   macro-kernel's half-width tails give MR = 6 (75% of two FMA pipes at 4
   cycles latency) and pack B's partial panel per product.  The AVX-512
   level calls it too where 512-bit ops run as two halves (gemm_dtype.h).
   Zen 4, float32, 32 x (m x k @ k x 8), C harness, cycles an item
   (medians, interleaved): against the AVX-512 paired rows 64x32 1324 vs
   2103, 64x128 8169 vs 9502, 256x32 5393 vs 8492, 16x64 641 vs 995; 8-row
   tiles beat 12 and 16 (16 spills: 16 ymm registers). */
#define SMALL_S(name) UKR_CAT(name, SFX)
#include "gemm_small_tile.h"

void UKR_CAT(gemm_narrow, SFX)(int64_t m, int64_t n, int64_t k, const T *a, int64_t rsa,
                               const T *b, int64_t rsb, T *c, int64_t rsc, int accum)
{
    int last = (int)n;
    for (int64_t i = 0, ib; i < m; i += ib) {
        ib = gemm_tile_rows(8, 12, m - i);
        const T *ai = a + i * rsa;
        T *ci = c + i * rsc;
#define NARROW_CASE_(MR)                                                                    \
    case MR:                                                                                \
        if (last < VL)                                                                      \
            SMALL_S(small_tile)(MR, 1, 1, k, ai, rsa, b, rsb, ci, rsc, last, accum);        \
        else                                                                                \
            SMALL_S(small_tile)(MR, 1, 0, k, ai, rsa, b, rsb, ci, rsc, last, accum);        \
        break;
        switch ((int)ib) {
            GEMM_ROWS_1_TO_12(NARROW_CASE_)
        }
#undef NARROW_CASE_
    }
}
#undef SMALL_S

#undef UKR_WRAP
#undef UKR_S
#undef UKR_CAT
#undef UKR_CAT_
/* the includer's parameters: templates clean up after themselves */
#undef T
#undef V
#undef VL
#undef SFX
#undef UKR_FN
#undef PMR
#undef LOADU
#undef STOREU
#undef SET1
#undef FMA
#undef ADD
#undef ZERO
#undef MLOAD
#undef MSTORE
