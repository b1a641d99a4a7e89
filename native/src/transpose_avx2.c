/* transpose_avx2.c - the copies of a transposed plane (strided.c's copy_plane)
 * by register blocks (transpose_regs.h): 8 x 8 elements of 4 bytes, 4 x 4 of
 * 8 bytes, moved as bits.  Compiled with -mavx2 (tools/build.py); called
 * only after a CPU check, at the AVX2 and the AVX-512 level alike. */
#include <immintrin.h>
#include <string.h>

#include "strided.h"
#include "transpose_regs.h"

/* dst row r, column c at dst + r drs + c es; src's at src + c scs + r es
   (rows contiguous in src, columns in dst); steps in bytes */
#define AT(p, i, step) ((p) + (i) * (step))

static inline void block8x8(char *d, int64_t drs, const char *s, int64_t scs) {
#define R(i) _mm256_loadu_ps((const float *)AT(s, i, scs))
    __m256 r0 = R(0), r1 = R(1), r2 = R(2), r3 = R(3), r4 = R(4), r5 = R(5), r6 = R(6), r7 = R(7);
#undef R
    __m256 c0, c1, c2, c3, c4, c5, c6, c7;
    TR8X8_PS(r0, r1, r2, r3, r4, r5, r6, r7, c0, c1, c2, c3, c4, c5, c6, c7);
    _mm256_storeu_ps((float *)AT(d, 0, drs), c0);
    _mm256_storeu_ps((float *)AT(d, 1, drs), c1);
    _mm256_storeu_ps((float *)AT(d, 2, drs), c2);
    _mm256_storeu_ps((float *)AT(d, 3, drs), c3);
    _mm256_storeu_ps((float *)AT(d, 4, drs), c4);
    _mm256_storeu_ps((float *)AT(d, 5, drs), c5);
    _mm256_storeu_ps((float *)AT(d, 6, drs), c6);
    _mm256_storeu_ps((float *)AT(d, 7, drs), c7);
}

static inline void block4x4(char *d, int64_t drs, const char *s, int64_t scs) {
#define R(i) _mm256_loadu_pd((const double *)AT(s, i, scs))
    __m256d r0 = R(0), r1 = R(1), r2 = R(2), r3 = R(3);
#undef R
    __m256d c0, c1, c2, c3;
    TR4X4_PD(r0, r1, r2, r3, c0, c1, c2, c3);
    _mm256_storeu_pd((double *)AT(d, 0, drs), c0);
    _mm256_storeu_pd((double *)AT(d, 1, drs), c1);
    _mm256_storeu_pd((double *)AT(d, 2, drs), c2);
    _mm256_storeu_pd((double *)AT(d, 3, drs), c3);
}

/* The same blocks for the last nr < B rows: each source column's nr elements
   by a masked load (nothing read past them), nr rows stored (a 28-row plane,
   such as a sum over a last dim of 28, took a scalar copy per element for
   its last 4 rows: 47% of that sum's time) */
static inline void block8x8_rows(char *d, int64_t drs, const char *s, int64_t scs, int nr) {
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(nr),
                                         _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
#define R(i) _mm256_maskload_ps((const float *)AT(s, i, scs), m)
    __m256 r0 = R(0), r1 = R(1), r2 = R(2), r3 = R(3), r4 = R(4), r5 = R(5), r6 = R(6), r7 = R(7);
#undef R
    __m256 c[8];
    TR8X8_PS(r0, r1, r2, r3, r4, r5, r6, r7, c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]);
    for (int i = 0; i < nr; i++) _mm256_storeu_ps((float *)AT(d, i, drs), c[i]);
}

static inline void block4x4_rows(char *d, int64_t drs, const char *s, int64_t scs, int nr) {
    const __m256i m = _mm256_cmpgt_epi64(_mm256_set1_epi64x(nr), _mm256_setr_epi64x(0, 1, 2, 3));
#define R(i) _mm256_maskload_pd((const double *)AT(s, i, scs), m)
    __m256d r0 = R(0), r1 = R(1), r2 = R(2), r3 = R(3);
#undef R
    __m256d c[4];
    TR4X4_PD(r0, r1, r2, r3, c[0], c[1], c[2], c[3]);
    for (int i = 0; i < nr; i++) _mm256_storeu_pd((double *)AT(d, i, drs), c[i]);
}

/* Tiles of TILE_R rows x TILE_C columns: a tile's source lines (TILE_R
   elements of each of TILE_C columns: whole 64-byte lines) are read once and
   its destination rows written TILE_C elements at a time.  Zen 4, 1 thread,
   (tile rows x columns), float32: 1024^2 8x8 430 us, 16x128 405, 32x32 390;
   1000^2 8x8 210, 16x128 107, 32x32 105; 2048^2 8x8 2.7 ms, 16x128 1.9-2.0,
   32x32 2.7 (the tiled row walk it replaces: 1.4 / 0.45-0.67 / 6.0 ms);
   float64: 1000^2 8x64 500 us, 16x64 590, 8x128 400, 32x32 570; 2048^2 8.6 /
   11.1 / 5.1 / 6.5 ms; 1024^2 0.8 ms in each. */
#define DEF_TRANSPOSE(NAME, ES, B, BLOCK, BLOCK_ROWS, TILE_R, TILE_C)                        \
    void NAME(int64_t rows, int64_t cols, char *dst, int64_t drs, const char *src,          \
              int64_t scs) {                                                                \
        for (int64_t r0 = 0; r0 < rows; r0 += TILE_R)                                       \
            for (int64_t c0 = 0; c0 < cols; c0 += TILE_C) {                                 \
                int64_t r1 = r0 + TILE_R < rows ? r0 + TILE_R : rows;                       \
                int64_t c1 = c0 + TILE_C < cols ? c0 + TILE_C : cols, r = r0;               \
                for (; r + B <= r1; r += B) {                                               \
                    int64_t c = c0;                                                         \
                    for (; c + B <= c1; c += B)                                             \
                        BLOCK(AT(dst, r, drs) + c * ES, drs, AT(src, c, scs) + r * ES, scs); \
                    for (; c < c1; c++) /* the last columns: B rows each */                 \
                        for (int k = 0; k < B; k++)                                         \
                            memcpy(AT(dst, r + k, drs) + c * ES, AT(src, c, scs) + (r + k) * ES, ES); \
                }                                                                           \
                int64_t c = c0;                                                             \
                if (r < r1) /* the last rows: B columns at a time, then one by one */       \
                    for (; c + B <= c1; c += B)                                             \
                        BLOCK_ROWS(AT(dst, r, drs) + c * ES, drs, AT(src, c, scs) + r * ES, scs, \
                                   (int)(r1 - r));                                          \
                for (; r < r1; r++)                                                         \
                    for (int64_t cc = c; cc < c1; cc++)                                     \
                        memcpy(AT(dst, r, drs) + cc * ES, AT(src, cc, scs) + r * ES, ES);   \
            }                                                                               \
    }
DEF_TRANSPOSE(ad_transpose4_avx2, 4, 8, block8x8, block8x8_rows, 16, 128)
DEF_TRANSPOSE(ad_transpose8_avx2, 8, 4, block4x4, block4x4_rows, 8, 128)
