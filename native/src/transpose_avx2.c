/* transpose_avx2.c - the copies of a transposed plane (strided.c's copy_plane)
 * by register blocks: 8 x 8 elements of 4 bytes, 4 x 4 of 8 bytes, moved as
 * bits (a shuffle never looks at the values: NaN payloads, -0 and integers
 * come out as they went in).  Compiled with -mavx2 (tools/build.py); called
 * only after a CPU check, at the AVX2 and the AVX-512 level alike. */
#include <immintrin.h>
#include <string.h>

#include "strided.h"

/* dst row r, column c at dst + r drs + c es; src's at src + c scs + r es
   (rows contiguous in src, columns in dst); steps in bytes */
#define AT(p, i, step) ((p) + (i) * (step))

static inline void block8x8(char *d, int64_t drs, const char *s, int64_t scs) {
    __m256 r0 = _mm256_loadu_ps((const float *)AT(s, 0, scs));
    __m256 r1 = _mm256_loadu_ps((const float *)AT(s, 1, scs));
    __m256 r2 = _mm256_loadu_ps((const float *)AT(s, 2, scs));
    __m256 r3 = _mm256_loadu_ps((const float *)AT(s, 3, scs));
    __m256 r4 = _mm256_loadu_ps((const float *)AT(s, 4, scs));
    __m256 r5 = _mm256_loadu_ps((const float *)AT(s, 5, scs));
    __m256 r6 = _mm256_loadu_ps((const float *)AT(s, 6, scs));
    __m256 r7 = _mm256_loadu_ps((const float *)AT(s, 7, scs));
    /* pairs of source columns interleaved, then quads: u_j holds element j
       and j + 4 of four columns in each 128-bit half */
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
    __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
    __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
    __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
    _mm256_storeu_ps((float *)AT(d, 0, drs), _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps((float *)AT(d, 1, drs), _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps((float *)AT(d, 2, drs), _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps((float *)AT(d, 3, drs), _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps((float *)AT(d, 4, drs), _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps((float *)AT(d, 5, drs), _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps((float *)AT(d, 6, drs), _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps((float *)AT(d, 7, drs), _mm256_permute2f128_ps(u3, u7, 0x31));
}

static inline void block4x4(char *d, int64_t drs, const char *s, int64_t scs) {
    __m256d r0 = _mm256_loadu_pd((const double *)AT(s, 0, scs));
    __m256d r1 = _mm256_loadu_pd((const double *)AT(s, 1, scs));
    __m256d r2 = _mm256_loadu_pd((const double *)AT(s, 2, scs));
    __m256d r3 = _mm256_loadu_pd((const double *)AT(s, 3, scs));
    __m256d t0 = _mm256_unpacklo_pd(r0, r1), t1 = _mm256_unpackhi_pd(r0, r1);
    __m256d t2 = _mm256_unpacklo_pd(r2, r3), t3 = _mm256_unpackhi_pd(r2, r3);
    _mm256_storeu_pd((double *)AT(d, 0, drs), _mm256_permute2f128_pd(t0, t2, 0x20));
    _mm256_storeu_pd((double *)AT(d, 1, drs), _mm256_permute2f128_pd(t1, t3, 0x20));
    _mm256_storeu_pd((double *)AT(d, 2, drs), _mm256_permute2f128_pd(t0, t2, 0x31));
    _mm256_storeu_pd((double *)AT(d, 3, drs), _mm256_permute2f128_pd(t1, t3, 0x31));
}

/* Tiles of TILE_R rows x TILE_C columns: a tile's source lines (TILE_R
   elements of each of TILE_C columns: whole 64-byte lines) are read once and
   its destination rows written TILE_C elements at a time.  Zen 4, 1 thread,
   (tile rows x columns), float32: 1024^2 8x8 430 us, 16x128 405, 32x32 390;
   1000^2 8x8 210, 16x128 107, 32x32 105; 2048^2 8x8 2.7 ms, 16x128 1.9-2.0,
   32x32 2.7 (the tiled row walk it replaces: 1.4 / 0.45-0.67 / 6.0 ms);
   float64: 1000^2 8x64 500 us, 16x64 590, 8x128 400, 32x32 570; 2048^2 8.6 /
   11.1 / 5.1 / 6.5 ms; 1024^2 0.8 ms in each. */
#define DEF_TRANSPOSE(NAME, ES, B, BLOCK, TILE_R, TILE_C)                                    \
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
                for (; r < r1; r++) /* the last rows */                                     \
                    for (int64_t c = c0; c < c1; c++)                                       \
                        memcpy(AT(dst, r, drs) + c * ES, AT(src, c, scs) + r * ES, ES);     \
            }                                                                               \
    }
DEF_TRANSPOSE(ad_transpose4_avx2, 4, 8, block8x8, 16, 128)
DEF_TRANSPOSE(ad_transpose8_avx2, 8, 4, block4x4, 8, 128)
