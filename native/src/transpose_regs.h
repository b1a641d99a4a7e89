/* transpose_regs.h - square transposes in 256-bit registers, moved as bits (a
 * shuffle never looks at the values: NaN payloads, -0 and integers come out
 * as they went in): transpose_avx2.c's plane copies and matmul.c's dot and
 * thin paths.  The including code is compiled for AVX2 (-mavx2, or a
 * function with that target) and names its vectors: as arrays they went
 * through the stack. */
#ifndef AD_TRANSPOSE_REGS_H
#define AD_TRANSPOSE_REGS_H

/* __m256 c0..c7 := the columns of the 8 x 8 float32 block with rows r0..r7:
   pairs of rows interleaved, then quads (u_j: columns j and j + 4 of rows
   0-3, v_j: of rows 4-7), then the 128-bit halves joined */
#define TR8X8_PS(r0, r1, r2, r3, r4, r5, r6, r7, c0, c1, c2, c3, c4, c5, c6, c7)   \
    do {                                                                        \
        __m256 t0_ = _mm256_unpacklo_ps(r0, r1), t1_ = _mm256_unpackhi_ps(r0, r1); \
        __m256 t2_ = _mm256_unpacklo_ps(r2, r3), t3_ = _mm256_unpackhi_ps(r2, r3); \
        __m256 t4_ = _mm256_unpacklo_ps(r4, r5), t5_ = _mm256_unpackhi_ps(r4, r5); \
        __m256 t6_ = _mm256_unpacklo_ps(r6, r7), t7_ = _mm256_unpackhi_ps(r6, r7); \
        __m256 u0_ = _mm256_shuffle_ps(t0_, t2_, 0x44);                           \
        __m256 u1_ = _mm256_shuffle_ps(t0_, t2_, 0xee);                           \
        __m256 u2_ = _mm256_shuffle_ps(t1_, t3_, 0x44);                           \
        __m256 u3_ = _mm256_shuffle_ps(t1_, t3_, 0xee);                           \
        __m256 v0_ = _mm256_shuffle_ps(t4_, t6_, 0x44);                           \
        __m256 v1_ = _mm256_shuffle_ps(t4_, t6_, 0xee);                           \
        __m256 v2_ = _mm256_shuffle_ps(t5_, t7_, 0x44);                           \
        __m256 v3_ = _mm256_shuffle_ps(t5_, t7_, 0xee);                           \
        c0 = _mm256_permute2f128_ps(u0_, v0_, 0x20);                              \
        c1 = _mm256_permute2f128_ps(u1_, v1_, 0x20);                              \
        c2 = _mm256_permute2f128_ps(u2_, v2_, 0x20);                              \
        c3 = _mm256_permute2f128_ps(u3_, v3_, 0x20);                              \
        c4 = _mm256_permute2f128_ps(u0_, v0_, 0x31);                              \
        c5 = _mm256_permute2f128_ps(u1_, v1_, 0x31);                              \
        c6 = _mm256_permute2f128_ps(u2_, v2_, 0x31);                              \
        c7 = _mm256_permute2f128_ps(u3_, v3_, 0x31);                              \
    } while (0)

/* __m256d c0..c3 := the columns of the 4 x 4 float64 block with rows r0..r3
   (t_j: columns j and j + 2 of rows 0-1, u_j: of rows 2-3) */
#define TR4X4_PD(r0, r1, r2, r3, c0, c1, c2, c3)                                   \
    do {                                                                        \
        __m256d t0_ = _mm256_unpacklo_pd(r0, r1), t1_ = _mm256_unpackhi_pd(r0, r1); \
        __m256d u0_ = _mm256_unpacklo_pd(r2, r3), u1_ = _mm256_unpackhi_pd(r2, r3); \
        c0 = _mm256_permute2f128_pd(t0_, u0_, 0x20);                              \
        c1 = _mm256_permute2f128_pd(t1_, u1_, 0x20);                              \
        c2 = _mm256_permute2f128_pd(t0_, u0_, 0x31);                              \
        c3 = _mm256_permute2f128_pd(t1_, u1_, 0x31);                              \
    } while (0)

#endif
