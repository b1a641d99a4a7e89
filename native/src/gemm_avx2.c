/* AVX2 + FMA micro-kernels (this file is compiled with -mavx2 -mfma and only
   called after a run-time CPU check). */
#include <immintrin.h>

#include "gemm.h"

/* Masked loads and stores of the first n lanes (0 < n < 8, or < 4) of a row
   of C: the mask is a window onto a run of -1s followed by 0s. */
static const int32_t mask_ps[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
static const int64_t mask_pd[8] = {-1, -1, -1, -1, 0, 0, 0, 0};
#define MASK_PS(n) _mm256_loadu_si256((const __m256i *)(mask_ps + 8 - (n)))
#define MASK_PD(n) _mm256_loadu_si256((const __m256i *)(mask_pd + 4 - (n)))
#define MLOAD_PS(p, n) _mm256_maskload_ps((p), MASK_PS(n))
#define MLOAD_PD(p, n) _mm256_maskload_pd((p), MASK_PD(n))

/* The stores are pieces of 4, 2 and 1 lanes: a masked store (vmaskmovps)
   costs AMD's cores tens of cycles.  Zen 4, 1 thread, gemm_narrow on 32 x
   (64x32 @ 32x4) float32: 20.2 us with vmaskmovps stores (one per row of C),
   14.0 with these; 32 x (64x32 @ 32x5) 20.5 -> 14.3. */
static inline void MSTORE_PS(float *p, __m256 v, int n)
{
    __m128 x = _mm256_castps256_ps128(v);
    if (n >= 4) {
        _mm_storeu_ps(p, x);
        x = _mm256_extractf128_ps(v, 1);
        p += 4;
        n -= 4;
    }
    if (n >= 2) {
        _mm_storel_pi((__m64 *)p, x);
        x = _mm_movehl_ps(x, x);
        p += 2;
        n -= 2;
    }
    if (n)
        _mm_store_ss(p, x);
}
/* the first n doubles are the first 2n floats (an even count: only the 4-
   and 2-lane pieces run, whole doubles) */
#define MSTORE_PD(p, v, n) MSTORE_PS((float *)(p), _mm256_castpd_ps(v), 2 * (n))

/* The kernels, main and row tails, full and half width: gemm_ukr_avx2.h once per dtype. */
#define T float
#define V __m256
#define VL 8
#define SFX f32_avx2
#define UKR_FN gemm_ukr_f32
#define PMR GEMM_AVX2_F32_MR
#define LOADU _mm256_loadu_ps
#define STOREU _mm256_storeu_ps
#define SET1 _mm256_set1_ps
#define FMA _mm256_fmadd_ps
#define ADD _mm256_add_ps
#define ZERO _mm256_setzero_ps
#define MLOAD MLOAD_PS
#define MSTORE MSTORE_PS
#include "gemm_ukr_avx2.h"

#define T double
#define V __m256d
#define VL 4
#define SFX f64_avx2
#define UKR_FN gemm_ukr_f64
#define PMR GEMM_AVX2_F64_MR
#define LOADU _mm256_loadu_pd
#define STOREU _mm256_storeu_pd
#define SET1 _mm256_set1_pd
#define FMA _mm256_fmadd_pd
#define ADD _mm256_add_pd
#define ZERO _mm256_setzero_pd
#define MLOAD MLOAD_PD
#define MSTORE MSTORE_PD
#include "gemm_ukr_avx2.h"

#define T float
#define GEMV_SFX f32_avx2
#include "gemm_gemv.h"
#define T double
#define GEMV_SFX f64_avx2
#include "gemm_gemv.h"

/* Packing a column-major B (unit row stride) into row-contiguous micro-panels
   is a transpose; doing it in 8 x 8 (float) or 4 x 4 (double) register blocks
   instead of element by element matters when m is small and the packing cost
   is not amortised (the G @ W^T product of an MLP's backward); the same
   transpose packs a row-major A into MR-tall micro-panels (6 rows at this
   level, where packing element by element cost 11% of a 128^3 product). nr
   is 6 or a multiple of 4 (float) or of 2 (double); the k tail is copied
   element by element. */
static inline void transpose8_ps(__m256 r[8])
{
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
        r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
}

/* A 6-row panel of a row-major A (the AVX2 MR), 8 columns at a time: the six
   rows transposed as eight (rows 6 and 7 repeat 4 and 5), each column stored
   as a whole vector in order, its two extra lanes overwritten by the next
   column's store; the last column of the run is stored as 4 + 2 lanes, so
   nothing is written past the 48 elements. 0.29 against 0.65 cycles an
   element for 4 x 4 transposes and 2-lane stores (Zen 4, 128 x 128 in L2). */
static void packbt6_f32(int64_t kb, const float *src, int64_t ld, float *ap)
{
    int64_t p = 0;
    for (; p + 8 <= kb; p += 8) {
        __m256 r[8];
        for (int i = 0; i < 6; i++)
            r[i] = _mm256_loadu_ps(src + i * ld + p);
        r[6] = r[4];
        r[7] = r[5];
        transpose8_ps(r);
        float *d = ap + p * 6;
        for (int q = 0; q < 7; q++)
            _mm256_storeu_ps(d + q * 6, r[q]);
        _mm_storeu_ps(d + 42, _mm256_castps256_ps128(r[7]));
        _mm_storel_pi((__m64 *)(d + 46), _mm256_extractf128_ps(r[7], 1));
    }
    for (; p < kb; p++)
        for (int i = 0; i < 6; i++)
            ap[p * 6 + i] = src[i * ld + p];
}

/* The k steps transposed per pass over the columns: one register block (32
   bytes of each column), or where the columns are a multiple of 1 KiB apart
   256 bytes of each.  There the columns share a few of L1's 64 sets (4 KiB
   apart, all of them one set), so a line fetched for one block was evicted
   by the other columns' before the next block read its other half.  Zen 4,
   float32, a C harness, ns an element, 32 columns: 4 KiB apart 0.31 ->
   0.12, 2 KiB 0.18 -> 0.11 (64 and 128 bytes a pass: 0.21 and 0.13); 16
   columns 4 KiB apart 0.16 -> 0.12.  3136 bytes apart (no shared sets) the
   wider pass lost (0.10 -> 0.14), so it keeps the block-wise one.  The k
   range is a constant in each instance of the steps (always_inline): a
   run-time one cost 60%. */
static int packbt_lines(int64_t bytes_apart)
{
    return bytes_apart % 1024 == 0;
}

/* the passes of gemm_packbt_*_avx2 (src, csb, bp, nr and kb in scope): STEPS
   over 256 bytes of each column where packbt_lines, else over one register
   block of BLK steps, then the last kb % BLK steps one by one */
#define PACKBT_PASSES(STEPS, BLK)                                                          \
    do {                                                                                   \
        const int64_t wide = 256 / (int64_t)sizeof *src, kbb = kb / (BLK) * (BLK);         \
        int64_t p = 0;                                                                     \
        if (packbt_lines(csb * (int64_t)sizeof *src))                                      \
            for (; p + wide <= kbb; p += wide)                                             \
                STEPS(src, csb, bp, nr, p, p + wide);                                      \
        for (; p < kbb; p += (BLK))                                                        \
            STEPS(src, csb, bp, nr, p, p + (BLK));                                         \
        for (; p < kb; p++)                                                                \
            for (int j = 0; j < nr; j++)                                                   \
                bp[p * nr + j] = src[j * csb + p];                                         \
    } while (0)

/* k steps [p0, p1) (whole blocks of 8) of all nr columns, in 8 x 8 blocks
   and a 4-wide tail (nr = 12 packing an A panel), column block by column
   block */
static inline __attribute__((always_inline)) void packbt_steps_f32(const float *src,
                                                                  int64_t csb, float *bp,
                                                                  int nr, int64_t p0,
                                                                  int64_t p1)
{
    int j = 0;
    for (; j + 8 <= nr; j += 8)
        for (int64_t p = p0; p < p1; p += 8) {
            __m256 r[8];
            for (int jj = 0; jj < 8; jj++)
                r[jj] = _mm256_loadu_ps(src + (j + jj) * csb + p);
            transpose8_ps(r);
            for (int pp = 0; pp < 8; pp++)
                _mm256_storeu_ps(bp + (p + pp) * nr + j, r[pp]);
        }
    for (; j + 4 <= nr; j += 4)
        for (int64_t p = p0; p < p1; p += 8)
            for (int h = 0; h < 8; h += 4) {
                __m128 r0 = _mm_loadu_ps(src + j * csb + p + h);
                __m128 r1 = _mm_loadu_ps(src + (j + 1) * csb + p + h);
                __m128 r2 = _mm_loadu_ps(src + (j + 2) * csb + p + h);
                __m128 r3 = _mm_loadu_ps(src + (j + 3) * csb + p + h);
                _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
                _mm_storeu_ps(bp + (p + h) * nr + j, r0);
                _mm_storeu_ps(bp + (p + h + 1) * nr + j, r1);
                _mm_storeu_ps(bp + (p + h + 2) * nr + j, r2);
                _mm_storeu_ps(bp + (p + h + 3) * nr + j, r3);
            }
}

void gemm_packbt_f32_avx2(int64_t kb, const float *src, int64_t csb, float *bp, int nr)
{
    if (nr == 6) {
        packbt6_f32(kb, src, csb, bp);
        return;
    }
    PACKBT_PASSES(packbt_steps_f32, 8);
}

/* k steps [p0, p1) (whole blocks of 4) of all nr columns, in 4 x 4 blocks
   and a 2-wide tail (nr = 6: rows 4 and 5 of an A panel) */
static inline __attribute__((always_inline)) void packbt_steps_f64(const double *src,
                                                                  int64_t csb, double *bp,
                                                                  int nr, int64_t p0,
                                                                  int64_t p1)
{
    int j = 0;
    for (; j + 4 <= nr; j += 4)
        for (int64_t p = p0; p < p1; p += 4) {
            __m256d r0 = _mm256_loadu_pd(src + j * csb + p);
            __m256d r1 = _mm256_loadu_pd(src + (j + 1) * csb + p);
            __m256d r2 = _mm256_loadu_pd(src + (j + 2) * csb + p);
            __m256d r3 = _mm256_loadu_pd(src + (j + 3) * csb + p);
            __m256d t0 = _mm256_unpacklo_pd(r0, r1), t1 = _mm256_unpackhi_pd(r0, r1);
            __m256d t2 = _mm256_unpacklo_pd(r2, r3), t3 = _mm256_unpackhi_pd(r2, r3);
            _mm256_storeu_pd(bp + p * nr + j, _mm256_permute2f128_pd(t0, t2, 0x20));
            _mm256_storeu_pd(bp + (p + 1) * nr + j, _mm256_permute2f128_pd(t1, t3, 0x20));
            _mm256_storeu_pd(bp + (p + 2) * nr + j, _mm256_permute2f128_pd(t0, t2, 0x31));
            _mm256_storeu_pd(bp + (p + 3) * nr + j, _mm256_permute2f128_pd(t1, t3, 0x31));
        }
    if (j < nr)
        for (int64_t p = p0; p < p1; p += 4) {
            __m256d r0 = _mm256_loadu_pd(src + j * csb + p);
            __m256d r1 = _mm256_loadu_pd(src + (j + 1) * csb + p);
            __m256d lo = _mm256_unpacklo_pd(r0, r1), hi = _mm256_unpackhi_pd(r0, r1);
            double *d = bp + p * nr + j;
            _mm_storeu_pd(d, _mm256_castpd256_pd128(lo));
            _mm_storeu_pd(d + nr, _mm256_castpd256_pd128(hi));
            _mm_storeu_pd(d + 2 * nr, _mm256_extractf128_pd(lo, 1));
            _mm_storeu_pd(d + 3 * nr, _mm256_extractf128_pd(hi, 1));
        }
}

void gemm_packbt_f64_avx2(int64_t kb, const double *src, int64_t csb, double *bp, int nr)
{
    PACKBT_PASSES(packbt_steps_f64, 4);
}
#undef PACKBT_PASSES
