/* matmul.c - the matmul op: batch dims broadcast numpy-style, operands in
 * any strided layout (transposed views go straight to the packed GEMM). */
#include <string.h>

#include "cpu.h"
#include "ew.h"
#include "gemm.h"
#include "nnops.h"
#include "parallel.h"
#include "simd.h"
#include "strided.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "transpose_regs.h"
#endif

/* ---- matrix-vector products ----------------------------------------------------------

   y = M x without packing (the packed GEMM would copy M for a single pass over
   it), in one of two forms by M's layout:
     dot:  M's rows unit-stride, x contiguous: y[i * incy] = M[i, :] . x, four
           rows at a time (x is loaded once for the four, and four streams of M
           are in flight), L partial sums per row;
     axpy: M's columns unit-stride (M^T's rows), y contiguous: y += x[p] M[p, :]
           four rows of M^T at a time.
   Each output is summed in an order fixed by k alone, so any split over
   threads gives the same bits.  Plain C at the baseline ISA: the portable
   level's kernels (matmul_mv.h; the SIMD levels' are below). */

/* _L: L partial sums per row; a short row (k < 2L) takes the kernel with a
   quarter as many, whose final sum is cheaper (batches of small products) */
#define T float
#define L 8
#define S(name) name##_f32_base8
#include "matmul_mv.h"
#define T double
#define L 4
#define S(name) name##_f64_base4
#include "matmul_mv.h"
#define T float
#define L 2
#define S(name) name##_f32_base2
#include "matmul_mv.h"
#define T double
#define L 1
#define S(name) name##_f64_base1
#include "matmul_mv.h"

#if defined(__x86_64__) || defined(__i386__)
/* ---- the matrix-vector kernels of the AVX2 and AVX-512 levels ------------------------

   Hand-vectorised: the plain-C kernels above end each row in a horizontal sum
   through the stack (a store-forwarding stall per lane), which cost as much
   as the products for k up to a few hundred (a batch of 64 x 32 matrices
   times vectors ran at a third of numpy's speed).  Here
     dot:  eight rows at a time, one vector accumulator each (eight FMA
           chains in flight, x loaded once for the eight), the k % W tail by
           masked loads, and the eight sums reduced together by a tree of
           horizontal adds;
     axpy: AXG rows of M^T at a time into y's vectors, y's tail masked;
     skinny (2 to 8 rows of A times a row-major B): tiles of C in registers.
   A row's sum has one order (W lanes by FMA over p, then lane i + i + W/2, then
   the same horizontal tree) whether it ran in a group of eight or alone, so
   any split over threads gives the same bits. */
#define MV_ATTR_avx2 __attribute__((target("avx2,fma")))
#define MV_ATTR_avx512 __attribute__((target("avx512f,fma")))

/* eight rows' 8-lane f32 sums -> the eight totals, ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)) */
MV_ATTR_avx2 static inline __m256 mv_red8_f32(__m256 y0, __m256 y1, __m256 y2, __m256 y3,
                                              __m256 y4, __m256 y5, __m256 y6, __m256 y7) {
    __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(y0, y1), _mm256_hadd_ps(y2, y3));
    __m256 b = _mm256_hadd_ps(_mm256_hadd_ps(y4, y5), _mm256_hadd_ps(y6, y7));
    return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}
MV_ATTR_avx2 static inline float mv_red1_f32(__m256 y) {
    __m256 h = _mm256_hadd_ps(y, y);
    h = _mm256_hadd_ps(h, h);
    return _mm_cvtss_f32(_mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
}
/* four rows' 4-lane f64 sums -> the four totals, (l0+l1)+(l2+l3) */
MV_ATTR_avx2 static inline __m256d mv_red4_f64(__m256d y0, __m256d y1, __m256d y2, __m256d y3) {
    __m256d a = _mm256_hadd_pd(y0, y1), b = _mm256_hadd_pd(y2, y3);
    return _mm256_add_pd(_mm256_permute2f128_pd(a, b, 0x20), _mm256_permute2f128_pd(a, b, 0x31));
}
MV_ATTR_avx2 static inline double mv_red1_f64(__m256d y) {
    __m256d h = _mm256_hadd_pd(y, y);
    return _mm_cvtsd_f64(_mm_add_pd(_mm256_castpd256_pd128(h), _mm256_extractf128_pd(h, 1)));
}
MV_ATTR_avx2 static inline void mv_put8_f32(float *y, int64_t incy, __m256 s) {
    if (incy == 1) {
        _mm256_storeu_ps(y, s);
        return;
    }
    float t[8];
    _mm256_storeu_ps(t, s);
    for (int r = 0; r < 8; r++) y[r * incy] = t[r];
}
MV_ATTR_avx2 static inline void mv_put4_f64(double *y, int64_t incy, __m256d s) {
    if (incy == 1) {
        _mm256_storeu_pd(y, s);
        return;
    }
    double t[4];
    _mm256_storeu_pd(t, s);
    for (int r = 0; r < 4; r++) y[r * incy] = t[r];
}

/* Columns [0, nc) (nc at most 8 float32 or 4 float64) of rows [0, nr) of s
   (row stride ss) transposed in registers into d (row stride ds), in
   blocks of w rows: the dot path's copy of B^T and the thin path's C from
   C^T.  One call takes a whole strip (a call per block cost a 512 x 4
   float32 B^T copy about a third of its time).  Masked loads read only the
   block's elements (missing rows are zeros); a part row is stored in 16-,
   8- and 4-byte pieces (AMD's masked stores are slow: a thin (128x512)^T
   @ (128x4) 6.6 -> 8.2 us with them, Zen 4). */
MV_ATTR_avx2 static inline void mv_put_part(char *d, int bytes, __m256 v) {
    __m128 h = _mm256_castps256_ps128(v);
    if (bytes >= 16) {
        _mm_storeu_ps((float *)d, h);
        h = _mm256_extractf128_ps(v, 1), d += 16, bytes -= 16;
    }
    if (bytes >= 8) {
        _mm_storel_pi((__m64 *)d, h);
        h = _mm_movehl_ps(h, h), d += 8, bytes -= 8;
    }
    if (bytes) _mm_store_ss((float *)d, h);
}
#define TR_LOAD(i, LOADU, MLOAD, ZERO) \
    ((i) >= nr ? ZERO() : nc == w ? LOADU(s + (i) * ss) : MLOAD(s + (i) * ss, ld))
#define TR_STORE(q, v, BYTES)                                                  \
    do {                                                                       \
        if ((q) >= nc) return;                                                 \
        if (nr == w) _mm256_storeu_ps((float *)(d + (q) * ds), (v));           \
        else if (nr * BYTES == 16)                                             \
            _mm_storeu_ps((float *)(d + (q) * ds), _mm256_castps256_ps128(v)); \
        else mv_put_part((char *)(d + (q) * ds), nr * BYTES, (v));             \
    } while (0)
/* one block of nr <= 8 rows: an 8 x 8 transpose, or for nc <= 4 rows i and
   i + 4 in the halves of one vector and a 4 x 4 transpose in each half */
MV_ATTR_avx2 static inline __attribute__((always_inline)) void
mv_tr_block_f32(const float *s, int64_t ss, int nr, int nc, __m256i ld, float *d, int64_t ds) {
    const int w = 8;
    __m256 c0, c1, c2, c3, c4, c5, c6, c7;
    if (nc <= 4) {
        const __m128i ld4 = _mm256_castsi256_si128(ld);
#define L(i)                                                      \
    ((i) >= nr ? _mm_setzero_ps() : nc == 4 ? _mm_loadu_ps(s + (i) * ss) \
                                            : _mm_maskload_ps(s + (i) * ss, ld4))
#define R(i) _mm256_insertf128_ps(_mm256_castps128_ps256(L(i)), L((i) + 4), 1)
        __m256 r0 = R(0), r1 = R(1), r2 = R(2), r3 = R(3);
#undef R
#undef L
        __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
        __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
        c0 = _mm256_shuffle_ps(t0, t2, 0x44), c1 = _mm256_shuffle_ps(t0, t2, 0xee);
        c2 = _mm256_shuffle_ps(t1, t3, 0x44), c3 = _mm256_shuffle_ps(t1, t3, 0xee);
        c4 = c5 = c6 = c7 = c0; /* never stored: q >= nc */
    } else {
#define L(i) TR_LOAD(i, _mm256_loadu_ps, _mm256_maskload_ps, _mm256_setzero_ps)
        __m256 r0 = L(0), r1 = L(1), r2 = L(2), r3 = L(3), r4 = L(4), r5 = L(5), r6 = L(6),
               r7 = L(7);
#undef L
        TR8X8_PS(r0, r1, r2, r3, r4, r5, r6, r7, c0, c1, c2, c3, c4, c5, c6, c7);
    }
    TR_STORE(0, c0, 4);
    TR_STORE(1, c1, 4);
    TR_STORE(2, c2, 4);
    TR_STORE(3, c3, 4);
    TR_STORE(4, c4, 4);
    TR_STORE(5, c5, 4);
    TR_STORE(6, c6, 4);
    TR_STORE(7, c7, 4);
}
MV_ATTR_avx2 static inline __attribute__((always_inline)) void
mv_tr_block_f64(const double *s, int64_t ss, int nr, int nc, __m256i ld, double *d, int64_t ds) {
    const int w = 4;
#define L(i) TR_LOAD(i, _mm256_loadu_pd, _mm256_maskload_pd, _mm256_setzero_pd)
    __m256d r0 = L(0), r1 = L(1), r2 = L(2), r3 = L(3);
#undef L
    __m256d c0, c1, c2, c3;
    TR4X4_PD(r0, r1, r2, r3, c0, c1, c2, c3);
    TR_STORE(0, _mm256_castpd_ps(c0), 8);
    TR_STORE(1, _mm256_castpd_ps(c1), 8);
    TR_STORE(2, _mm256_castpd_ps(c2), 8);
    TR_STORE(3, _mm256_castpd_ps(c3), 8);
}
#undef TR_LOAD
#undef TR_STORE
MV_ATTR_avx2 static void mv_tr_f32(const float *s, int64_t ss, int64_t nr, int nc, float *d,
                                   int64_t ds) {
    const __m256i ld = _mm256_cmpgt_epi32(_mm256_set1_epi32(nc),
                                          _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    int64_t i = 0;
    if (nc == 8) /* whole blocks of the common widths with their branches folded */
        for (; i + 8 <= nr; i += 8) mv_tr_block_f32(s + i * ss, ss, 8, 8, ld, d + i, ds);
    else if (nc == 4)
        for (; i + 8 <= nr; i += 8) mv_tr_block_f32(s + i * ss, ss, 8, 4, ld, d + i, ds);
    for (; i < nr; i += 8)
        mv_tr_block_f32(s + i * ss, ss, nr - i < 8 ? (int)(nr - i) : 8, nc, ld, d + i, ds);
}
MV_ATTR_avx2 static void mv_tr_f64(const double *s, int64_t ss, int64_t nr, int nc, double *d,
                                   int64_t ds) {
    const __m256i ld = _mm256_cmpgt_epi64(_mm256_set1_epi64x(nc), _mm256_setr_epi64x(0, 1, 2, 3));
    for (int64_t i = 0; i < nr; i += 4)
        mv_tr_block_f64(s + i * ss, ss, nr - i < 4 ? (int)(nr - i) : 4, nc, ld, d + i, ds);
}

/* an AVX-512 accumulator to the AVX2 width: its halves added */
MV_ATTR_avx512 static inline __m256 mv_narrow_f32(__m512 v) {
    return _mm256_add_ps(_mm512_castps512_ps256(v),
                         _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}
MV_ATTR_avx512 static inline __m256d mv_narrow_f64(__m512d v) {
    return _mm256_add_pd(_mm512_castpd512_pd256(v), _mm512_extractf64x4_pd(v, 1));
}

/* eight rows' accumulators c[0..8) -> their totals at y[r * incy], per level and dtype */
MV_ATTR_avx2 static inline void mv_sum8_f32_avx2(float *y, int64_t incy, const __m256 *c) {
    mv_put8_f32(y, incy, mv_red8_f32(c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]));
}
MV_ATTR_avx2 static inline void mv_sum8_f64_avx2(double *y, int64_t incy, const __m256d *c) {
    mv_put4_f64(y, incy, mv_red4_f64(c[0], c[1], c[2], c[3]));
    mv_put4_f64(y + 4 * incy, incy, mv_red4_f64(c[4], c[5], c[6], c[7]));
}
MV_ATTR_avx512 static inline void mv_sum8_f32_avx512(float *y, int64_t incy, const __m512 *c) {
    mv_put8_f32(y, incy, mv_red8_f32(mv_narrow_f32(c[0]), mv_narrow_f32(c[1]),
                                     mv_narrow_f32(c[2]), mv_narrow_f32(c[3]),
                                     mv_narrow_f32(c[4]), mv_narrow_f32(c[5]),
                                     mv_narrow_f32(c[6]), mv_narrow_f32(c[7])));
}
MV_ATTR_avx512 static inline void mv_sum8_f64_avx512(double *y, int64_t incy, const __m512d *c) {
    mv_put4_f64(y, incy, mv_red4_f64(mv_narrow_f64(c[0]), mv_narrow_f64(c[1]),
                                     mv_narrow_f64(c[2]), mv_narrow_f64(c[3])));
    mv_put4_f64(y + 4 * incy, incy, mv_red4_f64(mv_narrow_f64(c[4]), mv_narrow_f64(c[5]),
                                                mv_narrow_f64(c[6]), mv_narrow_f64(c[7])));
}

/* The skinny kernel's tiles: mr rows by SKNV(mr) vectors (16 registers at
   AVX2: 6-8 accumulators; 32 at AVX-512: 8-16); SK_CACHED: the bytes of B
   read as one block of rows (matmul_simd.h's sk_rows). The axpy form's passes
   over y: 8 rows of M^T each, or AXG for an M past AXPY_FAR bytes on a core
   whose L1D holds AXPY_WIDE_L1, as many broadcast x[p] as the registers hold
   (Zen 5, L1D 48 KiB, AVX-512, f32, thread CPU time against
   numpy: 4096 x 4096 16 rows 0.88-0.99x, 8 rows 0.83-0.90x, 4 rows
   0.75-0.85x; 1024 x 1024, in cache, 16 rows 0.67x, 8 rows 0.94-1.05x:
   16 rows 4 KiB apart alias in L1's sets). With more than one thread
   streaming M at once the passes stay at 8 rows: Zen 4, 2 threads, wall
   time interleaved in one process, (4096,) @ (4096x4096) 2077 -> 1659 us
   and 2203 -> 1897 (numpy 1795, 1944), (8192,) @ (8192x2048) 2025 -> 1678.
   At 1 thread on Zen 4 (L1D 32 KiB), 8 rows were faster too: numpy's time
   over ours, old and new builds alternating, min of 9 blocks, (2048,) @
   (2048x8192) 16 rows 0.90-0.93x, 8 rows 0.99-1.08x; (4096,) @ (4096x4096)
   0.95-1.06x and 1.00-1.05x; (1x4096) @ (4096x4096) 0.93-1.05x and
   0.99-1.04x. */
#define AXPY_FAR ((int64_t)16 << 20)
#define AXPY_WIDE_L1 (48L << 10)
#define SKNV_avx2(mr) ((mr) <= 2 ? 4 : (mr) <= 4 ? 2 : 1)
#define SKNV_avx512(mr) ((mr) <= 4 ? 4 : 2)
#define SK_CACHED ((int64_t)256 << 10)
/* The tall form of the skinny kernel (matmul_simd.h's sk_tall: 9 to
   SK_TALL_MAX rows of A, B past SK_CACHED), at the AVX-512 level only: tiles
   of 8 rows by 2 vectors, B read once in blocks of SK_TALL_KC rows (16 once
   B is past SK_FAR, where it streams from memory), every row group taking
   each tile of B from L1 in turn. Zen 4, against the packed GEMM, which
   copies all of B for the few multiply-adds per element it feeds
   (interleaved in one process, medians), 1 thread: float32 12x512x4096
   1031 -> 701 us, 16x512x4096 1132 -> 860, 24x1024x1024 638 -> 503;
   float64 12x512x4096 3838 -> 2820, 24x1024x1024 1793 -> 1567; 2 threads:
   float32 16x512x4096 1446 -> 448. From 32 rows it was level or behind.
   Under PYAUTODIFF_ISA=avx2 the AVX2 tiles (6 x 2, 4 x 3, 8 x 1 vectors)
   lost to the packed GEMM at every size tried. */
#define SK_MAX_M 8
/* The thin path (thin_batch below) takes up to the skinny rows as columns of
   C, except float64 at AVX2 from 5 on: tiles of more than 4 rows are a
   single vector there, a broadcast per FMA of 4 lanes, and the packed GEMM
   was faster ((512x128) @ (128x5..7), A column-major, Zen 4: 32 us against
   38-47). */
#define THIN_MAX_F64_AVX2 4
/* The dot path (dotn_batch below) with B^T copied (mv_transpose, strips 32
   bytes wide in registers: 0.1 us for a 512 x 4 float32 B) takes the n
   of each level and dtype whose other kernel leaves lanes idle (a bit per
   n).  Zen 4, 1 thread, against that kernel, (128x512), (1024x256), 16 x
   (64x128) and (256x64) @ (k x n): float32 n = 5-7 and 9-12 1.0-1.57x at
   both levels, n = 8 0.95-1.07 (left out);
   float64 at AVX2 n = 3 1.55x, 5-7 and 9-11 0.96-1.34x, 12 0.93-1.18 (left
   out); at AVX-512 (8-lane vectors) n = 5-7 0.83-1.16x (left out), 9-12
   1.00-1.40.  Rows of B wider than 16 bytes only from k = DN_WIDE_MIN_K
   (at k = 32, n = 10 and 12 float32 0.85-1.04x) and unit-stride (the
   others are copied an element at a time). */
#define DN_COPIED_F32 0x1efc        /* 2-7, 9-12 */
#define DN_COPIED_F64_AVX2 0x0eec   /* 2, 3, 5-7, 9-11 */
#define DN_COPIED_F64_AVX512 0x1e0c /* 2, 3, 9-12 */
#define DN_WIDE_MIN_K 64
#define SK_TALL_MAX 24
#define SK_TALL_KC 512
#define SK_FAR ((int64_t)4 << 20)
/* the kernels per level and dtype: matmul_simd.h */
#define T float
#define S(name) name##_f32_avx2
#define MV_ATTR MV_ATTR_avx2
#define V __m256
#define W 8
#define MT __m256i
#define LOAD _mm256_loadu_ps
#define STORE _mm256_storeu_ps
#define FMA _mm256_fmadd_ps
#define ZERO _mm256_setzero_ps
#define SET1 _mm256_set1_ps
#define MASK(n) _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
#define MLOAD(p, mk) _mm256_maskload_ps((p), (mk))
#define MSTORE(p, mk, v) _mm256_maskstore_ps((p), (mk), (v))
#define NARROW(v) (v)
#define SUM8 mv_sum8_f32_avx2
#define RED1 mv_red1_f32
#define SKNV SKNV_avx2
#define AXG 8
#define DOTN
#include "matmul_simd.h"
#define T double
#define S(name) name##_f64_avx2
#define MV_ATTR MV_ATTR_avx2
#define V __m256d
#define W 4
#define MT __m256i
#define LOAD _mm256_loadu_pd
#define STORE _mm256_storeu_pd
#define FMA _mm256_fmadd_pd
#define ZERO _mm256_setzero_pd
#define SET1 _mm256_set1_pd
#define MASK(n) _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_setr_epi64x(0, 1, 2, 3))
#define MLOAD(p, mk) _mm256_maskload_pd((p), (mk))
#define MSTORE(p, mk, v) _mm256_maskstore_pd((p), (mk), (v))
#define NARROW(v) (v)
#define SUM8 mv_sum8_f64_avx2
#define RED1 mv_red1_f64
#define SKNV SKNV_avx2
#define AXG 8
#define DOTN
#include "matmul_simd.h"
#define T float
#define S(name) name##_f32_avx512
#define MV_ATTR MV_ATTR_avx512
#define V __m512
#define W 16
#define MT __mmask16
#define LOAD _mm512_loadu_ps
#define STORE _mm512_storeu_ps
#define FMA _mm512_fmadd_ps
#define ZERO _mm512_setzero_ps
#define SET1 _mm512_set1_ps
#define MASK(n) ((__mmask16)((1u << (n)) - 1))
#define MLOAD(p, mk) _mm512_maskz_loadu_ps((mk), (p))
#define MSTORE(p, mk, v) _mm512_mask_storeu_ps((p), (mk), (v))
#define NARROW(v) mv_narrow_f32(v)
#define SUM8 mv_sum8_f32_avx512
#define RED1 mv_red1_f32
#define SKNV SKNV_avx512
#define SK_TALL_NV 2
#define AXG 16
#include "matmul_simd.h"
#define T double
#define S(name) name##_f64_avx512
#define MV_ATTR MV_ATTR_avx512
#define V __m512d
#define W 8
#define MT __mmask8
#define LOAD _mm512_loadu_pd
#define STORE _mm512_storeu_pd
#define FMA _mm512_fmadd_pd
#define ZERO _mm512_setzero_pd
#define SET1 _mm512_set1_pd
#define MASK(n) ((__mmask8)((1u << (n)) - 1))
#define MLOAD(p, mk) _mm512_maskz_loadu_pd((mk), (p))
#define MSTORE(p, mk, v) _mm512_mask_storeu_pd((p), (mk), (v))
#define NARROW(v) mv_narrow_f64(v)
#define SUM8 mv_sum8_f64_avx512
#define RED1 mv_red1_f64
#define SKNV SKNV_avx512
#define SK_TALL_NV 2
#define AXG 16
#include "matmul_simd.h"
#endif

typedef void (*mv_dot_fn)(int64_t, int64_t, const void *, int64_t, const void *, void *, int64_t);
typedef void (*mv_axpy_fn)(int64_t, int64_t, const void *, int64_t, const void *, int64_t, void *);
typedef void (*mv_skinny_fn)(int64_t, int64_t, int64_t, const void *, int64_t, int64_t,
                             const void *, int64_t, void *, int64_t);
typedef void (*mv_dotn_fn)(int64_t, int64_t, int64_t, const void *, int64_t, const void *,
                           int64_t, void *, int64_t);
typedef void (*mv_tr_fn)(const void *, int64_t, int64_t, int, void *, int64_t);

/* One level's kernels for one dtype: dot_short for rows shorter than
   short_k (the portable level's kernel with fewer partial sums), dot else;
   skinny NULL where the level has none (the packed GEMM runs instead). */
typedef struct {
    mv_dot_fn dot, dot_short;
    int64_t short_k;
    mv_axpy_fn axpy;
    mv_skinny_fn skinny;
    int64_t skinny_max; /* rows the skinny kernel takes (SK_TALL_MAX for a B past SK_CACHED) */
    int64_t thin_max;   /* columns of C the thin path takes (its skinny rows) */
    mv_dotn_fn dotn;    /* the dot path's kernel (AVX2's at both SIMD levels), or NULL */
    unsigned dotn_copied; /* bit n: the dot path takes n columns with B^T copied */
    mv_tr_fn tr;          /* mv_tr_*: strips 32 bytes wide transposed, or NULL */
} mv_kernels;

/* [dtype: f32, f64] per level */
static const mv_kernels mv_base[2] = {
    {(mv_dot_fn)mv_dot_f32_base8, (mv_dot_fn)mv_dot_f32_base2, 2 * 8,
     (mv_axpy_fn)mv_axpy_f32_base8, NULL, 0, 0, NULL, 0, NULL},
    {(mv_dot_fn)mv_dot_f64_base4, (mv_dot_fn)mv_dot_f64_base1, 2 * 4,
     (mv_axpy_fn)mv_axpy_f64_base4, NULL, 0, 0, NULL, 0, NULL},
};
#if defined(__x86_64__) || defined(__i386__)
static const mv_kernels mv_avx2[2] = {
    {(mv_dot_fn)mv_dot_f32_avx2, NULL, 0, (mv_axpy_fn)mv_axpy_f32_avx2,
     (mv_skinny_fn)mv_skinny_f32_avx2, SK_MAX_M, SK_MAX_M, (mv_dotn_fn)mv_dotn_f32_avx2,
     DN_COPIED_F32, (mv_tr_fn)mv_tr_f32},
    {(mv_dot_fn)mv_dot_f64_avx2, NULL, 0, (mv_axpy_fn)mv_axpy_f64_avx2,
     (mv_skinny_fn)mv_skinny_f64_avx2, SK_MAX_M, THIN_MAX_F64_AVX2,
     (mv_dotn_fn)mv_dotn_f64_avx2,
     DN_COPIED_F64_AVX2, (mv_tr_fn)mv_tr_f64},
};
static const mv_kernels mv_avx512[2] = {
    {(mv_dot_fn)mv_dot_f32_avx512, NULL, 0, (mv_axpy_fn)mv_axpy_f32_avx512,
     (mv_skinny_fn)mv_skinny_f32_avx512, SK_TALL_MAX, SK_TALL_MAX,
     (mv_dotn_fn)mv_dotn_f32_avx2,
     DN_COPIED_F32, (mv_tr_fn)mv_tr_f32},
    {(mv_dot_fn)mv_dot_f64_avx512, NULL, 0, (mv_axpy_fn)mv_axpy_f64_avx512,
     (mv_skinny_fn)mv_skinny_f64_avx512, SK_TALL_MAX, SK_TALL_MAX,
     (mv_dotn_fn)mv_dotn_f64_avx2,
     DN_COPIED_F64_AVX512, (mv_tr_fn)mv_tr_f64},
};
#endif

/* The kernels of the GEMM's level (ad_gemm_set_kernel lets tests reach every
   level's kernels) for a dtype. */
static const mv_kernels *mv_pick(int dtype) {
    int isa = ad_isa_by_name(gemm_kernel_name());
#if defined(__x86_64__) || defined(__i386__)
    if (isa == AD_ISA_AVX512) return &mv_avx512[dtype != AD_FLOAT32];
    if (isa == AD_ISA_AVX2) return &mv_avx2[dtype != AD_FLOAT32];
#else
    (void)isa;
#endif
    return &mv_base[dtype != AD_FLOAT32];
}

/* Elements of M (multiply-adds of a skinny product) from which a product is
   split over threads (smaller ones run on the calling thread: a wake-up
   costs more). */
#define MV_PAR_MIN ((int64_t)1 << 17)

/* A batch of products for the unpacked paths below: item i is C_i = A_i
   B_i with A_i at a + ao[i] elements (row stride rsa, column stride csa),
   B_i at b + bo[i], C_i at c + co[i] (co[i] = i m n: row-major, items one
   after the other).  MM_UNPACK(p) names its fields as locals. */
typedef struct {
    int dtype;
    int64_t batch;
    const int64_t *ao, *bo, *co;
    int64_t m, n, k, rsa, csa, rsb, csb;
    const void *a, *b;
    void *c;
} mm_args;
#define MM_UNPACK(p)                                                                      \
    const int dtype = (p)->dtype;                                                         \
    const int64_t batch = (p)->batch, m = (p)->m, n = (p)->n, k = (p)->k;                 \
    const int64_t rsa = (p)->rsa, csa = (p)->csa, rsb = (p)->rsb, csb = (p)->csb;         \
    const int64_t *const ao = (p)->ao, *const bo = (p)->bo, *const co = (p)->co;          \
    const void *const a = (p)->a, *const b = (p)->b;                                      \
    void *const c = (p)->c;                                                               \
    (void)dtype, (void)batch, (void)m, (void)n, (void)k, (void)rsa, (void)csa, (void)rsb, \
        (void)csb, (void)ao, (void)bo, (void)co, (void)a, (void)b, (void)c

/* A batch of products as mv_run runs it: range(j, it, r0, r1) computes item
   it's outputs [r0, r1) (rows or columns of C, as each path counts them),
   outs of them per item, grain per task when one item is split over threads
   (item: that one).  Each path's job struct starts with one. */
typedef struct run_job run_job;
struct run_job {
    void (*range)(const run_job *j, int64_t it, int64_t r0, int64_t r1);
    int64_t outs, grain, item;
};

static void run_items_task(void *ctx, int64_t i0, int64_t i1) {
    const run_job *j = ctx;
    for (int64_t it = i0; it < i1; it++) j->range(j, it, 0, j->outs);
}

static void run_outs_task(void *ctx, int64_t g0, int64_t g1) {
    const run_job *j = ctx;
    int64_t r1 = g1 * j->grain;
    j->range(j, j->item, g0 * j->grain, r1 < j->outs ? r1 : j->outs);
}

/* Runs a batch of products, each of `work` multiply-adds: whole items per
   thread when there are enough of them, else each item's outputs in grains
   per task. */
static void mv_run(int64_t batch, int64_t work, run_job *j) {
    int threads = par_num_threads();
    if (threads > 1 && batch > 1 && work * batch >= MV_PAR_MIN && batch >= threads) {
        par_for(batch, run_items_task, j);
    } else if (threads > 1 && work >= MV_PAR_MIN) {
        for (j->item = 0; j->item < batch; j->item++)
            par_for((j->outs + j->grain - 1) / j->grain, run_outs_task, j);
    } else {
        run_items_task(j, 0, batch);
    }
}

/* One matrix-vector job: per item i, y_i = M_i x_i with M_i = mat + mo[i] and
   so on (element offsets); either form above. */
typedef struct {
    run_job run;
    int dot;
    mv_dot_fn fdot;
    mv_axpy_fn faxpy;
    int64_t es; /* signed: offsets and strides can be negative (reversed views) */
    int64_t cols, rsm, incx, incy;
    const char *mat, *x;
    char *y;
    const int64_t *mo, *xo, *yo;
} mv_job;

static void mv_range(const run_job *rj, int64_t it, int64_t r0, int64_t r1) {
    const mv_job *j = (const mv_job *)rj;
    const char *mat = j->mat + j->mo[it] * j->es, *x = j->x + j->xo[it] * j->es;
    char *y = j->y + j->yo[it] * j->es;
    if (j->dot)
        j->fdot(r1 - r0, j->cols, mat + r0 * j->rsm * j->es, j->rsm, x,
                y + r0 * j->incy * j->es, j->incy);
    else
        j->faxpy(j->cols, r1 - r0, x, j->incx, mat + r0 * j->es, j->rsm, y + r0 * j->es);
}

/* The batch of products of fwd_matmul when m == 1 or n == 1 and a layout
   fits one of the two forms; returns 0 (nothing done) otherwise. */
static int matvec_batch(const mm_args *p) {
    MM_UNPACK(p);
    int64_t es = dtype == AD_FLOAT32 ? sizeof(float) : sizeof(double);
    mv_job j;
    if (n == 1 && csa == 1 && rsb == 1) { /* rows of A . b */
        j = (mv_job){{mv_range, m, 64, 0}, 1, 0, 0, es, k, rsa, 1, 1, a, b, c, ao, bo, co};
    } else if (n == 1 && rsa == 1) { /* sum_p b[p] A[:, p] */
        j = (mv_job){{mv_range, m, 256, 0}, 0, 0, 0, es, k, csa, rsb, 1, a, b, c, ao, bo, co};
    } else if (m == 1 && csb == 1) { /* sum_p a[p] B[p, :] */
        j = (mv_job){{mv_range, n, 256, 0}, 0, 0, 0, es, k, rsb, csa, 1, b, a, c, bo, ao, co};
    } else if (m == 1 && rsb == 1 && csa == 1) { /* columns of B . a */
        j = (mv_job){{mv_range, n, 64, 0}, 1, 0, 0, es, k, csb, 1, 1, b, a, c, bo, ao, co};
    } else {
        return 0;
    }
    const mv_kernels *mk = mv_pick(dtype);
    j.fdot = k < mk->short_k ? mk->dot_short : mk->dot;
    j.faxpy = mk->axpy;
    mv_run(batch, j.run.outs * k, &j.run);
    return 1;
}

/* ---- skinny products: C = A B for a few rows of A (m <= skinny_max), B row-major ----

   Each tile of C (mr <= 8 rows by a few vectors of columns) is accumulated in
   registers over B's rows, read in place: the packed GEMM would copy all of
   B for the few multiply-adds per element it feeds. The SIMD levels only
   (matmul_simd.h); columns split over threads in grains of SK_GRAIN. */
#define SK_GRAIN 256

typedef struct {
    run_job run; /* its outputs: columns of C */
    mv_skinny_fn f;
    int64_t es; /* signed, as mv_job's */
    int64_t m, k, n, rsa, csa, rsb;
    const char *a, *b;
    char *c;
    const int64_t *ao, *bo, *co;
} sk_job;

static void sk_range(const run_job *rj, int64_t it, int64_t j0, int64_t j1) {
    const sk_job *j = (const sk_job *)rj;
    j->f(j->m, j->k, j1 - j0, j->a + j->ao[it] * j->es, j->rsa, j->csa,
         j->b + (j->bo[it] + j0) * j->es, j->rsb, j->c + (j->co[it] + j0) * j->es, j->n);
}

/* The batch of products of fwd_matmul when 2 <= m <= SK_MAX_M (the level's
   skinny_max for a B past SK_CACHED) and B's rows are unit-stride, at a
   level with the kernel; returns 0 (nothing done) otherwise. */
static int skinny_batch(const mm_args *p) {
    MM_UNPACK(p);
    const mv_kernels *mk = mv_pick(dtype);
    int64_t es = dtype == AD_FLOAT32 ? sizeof(float) : sizeof(double);
    int64_t rows = k * n * es > SK_CACHED ? mk->skinny_max : SK_MAX_M;
    if (m < 2 || m > rows || csb != 1 || !mk->skinny) return 0;
    sk_job j = {{sk_range, n, SK_GRAIN, 0}, mk->skinny, es, m, k, n, rsa, csa, rsb, a, b, c,
                ao, bo, co};
    mv_run(batch, m * n * k, &j.run);
    return 1;
}

/* ---- thin products: a few columns of C, A's columns unit-stride ----------------------

   C^T = B^T A^T is a skinny product (n rows) whose B, A^T, has unit-stride
   rows: the skinny kernel reads A in place into a scratch C^T (the item's
   columns of C^T, or a grain of them, at a time), which the same task then
   transposes into C.  The packed GEMM would copy all of A for the n
   multiply-adds per element it feeds, and fill half-empty tiles (a matmul's
   weight gradient X^T G for a head of a few outputs; Zen 4, 1 thread,
   float32 (512x128) @ (128x4), A column-major: 28 -> 6 us).  Each element of
   C is one FMA chain over k, the skinny kernel's. */
typedef struct {
    run_job run; /* its outputs: rows of C */
    sk_job sk;   /* the product C^T = B^T A^T, into the scratch */
    char *y;     /* C, with sk's item offsets (sk.c is the scratch) */
    const mv_kernels *mk;
} thin_job;

/* d[j][i] = s[i][j] for rows i < rows and columns j < cols of s (row
   strides ss and ds, elements of es bytes), in the level's strips of
   columns */
static void mv_transpose(const mv_kernels *mk, int64_t es, int64_t rows, int64_t cols,
                         const char *s, int64_t ss, char *d, int64_t ds) {
    const int64_t w = 32 / es;
    for (int64_t j = 0; j < cols; j += w)
        mk->tr(s + j * es, ss, rows, (int)(cols - j < w ? cols - j : w), d + j * ds * es, ds);
}

/* C's rows [i0, i1) of item it (C^T's columns) from the scratch */
static void thin_put(const thin_job *t, int64_t it, int64_t i0, int64_t i1) {
    const int64_t rows = t->sk.m, cols = t->sk.n, es = t->sk.es, off = t->sk.co[it] * es;
    mv_transpose(t->mk, es, rows, i1 - i0, t->sk.c + off + i0 * es, cols,
                 t->y + off + i0 * rows * es, rows);
}

/* item it's rows [i0, i1) of C: C^T's columns SK_GRAIN at a time, each
   block transposed into C while it is in L1 */
static void thin_range(const run_job *rj, int64_t it, int64_t i0, int64_t i1) {
    const thin_job *t = (const thin_job *)rj;
    for (int64_t j0 = i0; j0 < i1; j0 += SK_GRAIN) {
        int64_t j1 = j0 + SK_GRAIN < i1 ? j0 + SK_GRAIN : i1;
        sk_range(&t->sk.run, it, j0, j1);
        thin_put(t, it, j0, j1);
    }
}

/* The batch of products of fwd_matmul when A's columns are unit-stride (its
   rows not) and n is within the skinny kernel's rows, at a level with the
   kernel; item i's C at c + co[i] elements, co[i] = i m n (fwd_matmul's).
   Returns 0 (nothing done) otherwise, or when the scratch cannot be had. */
static int thin_batch(const mm_args *p) {
    MM_UNPACK(p);
    const mv_kernels *mk = mv_pick(dtype);
    if (rsa != 1 || csa == 1 || n < 2 || n > mk->thin_max) return 0;
    int64_t es = dtype == AD_FLOAT32 ? sizeof(float) : sizeof(double);
    void *raw;
    char *s = ad_malloc_aligned((size_t)(batch * m * n * es), &raw);
    if (!s) return 0;
    thin_job t = {{thin_range, m, SK_GRAIN, 0},
                  {{sk_range, m, SK_GRAIN, 0}, mk->skinny, es, n, k, m, csb, rsb, csa, b, a, s,
                   bo, ao, co},
                  c, mk};
    mv_run(batch, m * n * k, &t.run);
    ad_mfree(raw);
    return 1;
}

/* ---- dot products: a few columns of C, A's rows unit-stride ------------------------

   C[i, j] = A[i, :] . B^T[j, :] (matmul_simd.h's dotn), A read in place and
   B^T in place when B's columns are unit-stride (x @ w^T, a linear head),
   else copied once (n k elements).  Every lane of every vector does useful
   work: a B of n < W columns leaves W - n lanes of each idle in the narrow
   kernel (one vector a row of C), and the packed GEMM fills its tiles as
   little.  AVX2's kernel at the AVX-512 level too, so both give the same
   bits.  An item's rows split over threads in one grain per thread (a
   multiple of 12 rows: whole tiles), so that no thread takes two. */
#define DN_MIN_K 16 /* shallower products: mostly the masked tail and the final sums */
/* Columns of C the path takes: up to 12 (from 16 the packed GEMM kept up
   with B^T in place), with B^T copied those in the level's dotn_copied
   (DN_COPIED_* above). */
#define DN_MAX_N 12

typedef struct {
    run_job run; /* its outputs: rows of C */
    mv_dotn_fn f;
    int64_t es, n, k, rsa, rsbt;
    const char *a, *bt; /* bt: B itself (B^T's rows are its columns), or the copies */
    char *c;
    const int64_t *ao, *bo, *co; /* bo NULL: item i's copy at bt + i n k (or bt, shared) */
    int shared;                  /* one copy for every item (B broadcast over the batch) */
} dn_job;

static void dn_range(const run_job *rj, int64_t it, int64_t r0, int64_t r1) {
    const dn_job *j = (const dn_job *)rj;
    const char *bt = j->bo ? j->bt + j->bo[it] * j->es
                           : j->bt + (j->shared ? 0 : it) * j->n * j->k * j->es;
    j->f(r1 - r0, j->n, j->k, j->a + (j->ao[it] + r0 * j->rsa) * j->es, j->rsa, bt, j->rsbt,
         j->c + (j->co[it] + r0 * j->n) * j->es, j->n);
}

#define DN_COPY(T)                                                                       \
    for (int64_t p = 0; p < k; p++)                                                      \
        for (int64_t q = 0; q < n; q++) ((T *)d)[q * k + p] = ((const T *)s)[p * rsb + q * csb]

/* B^T of each item (of the first only, if shared) into bt: in registers
   when B's rows are unit-stride */
static void dn_copy(const mv_kernels *mk, int64_t es, int64_t items, const int64_t *bo,
                    int64_t n, int64_t k, const char *b, int64_t rsb, int64_t csb, char *bt) {
    for (int64_t it = 0; it < items; it++) {
        const char *s = b + bo[it] * es;
        char *d = bt + it * n * k * es;
        if (csb == 1) mv_transpose(mk, es, k, n, s, rsb, d, k);
        else if (es == sizeof(float)) DN_COPY(float);
        else DN_COPY(double);
    }
}
#undef DN_COPY

/* The batch of products of fwd_matmul when A's rows are unit-stride, n is
   from 2 to DN_MAX_* and k >= DN_MIN_K, at a SIMD level; item i's C at c +
   co[i] elements with row stride n.  Returns 0 (nothing done) otherwise,
   or when the copy of B^T cannot be had. */
static int dotn_batch(const mm_args *p) {
    MM_UNPACK(p);
    const mv_kernels *mk = mv_pick(dtype);
    int64_t es = dtype == AD_FLOAT32 ? sizeof(float) : sizeof(double);
    int in_place = rsb == 1;
    if (!mk->dotn || csa != 1 || m < 2 || n < 2 || n > DN_MAX_N || k < DN_MIN_K) return 0;
    if (!in_place && (!(mk->dotn_copied >> n & 1)
                      || (n * es > 16 && (k < DN_WIDE_MIN_K || csb != 1))))
        return 0;
    int64_t th = par_num_threads();
    dn_job j = {{dn_range, m, ((m + th - 1) / th + 11) / 12 * 12, 0},
                mk->dotn, es, n, k, rsa, in_place ? csb : k, a, b, c, ao, in_place ? bo : NULL,
                co, 1};
    char *bt = NULL;
    void *raw = NULL;
    if (!in_place) {
        for (int64_t it = 1; it < batch && j.shared; it++) j.shared = bo[it] == bo[0];
        int64_t items = j.shared ? 1 : batch;
        if (!(bt = ad_malloc_aligned((size_t)(items * n * k * es), &raw))) return 0;
        dn_copy(mk, es, items, bo, n, k, b, rsb, csb, bt);
        j.bt = bt;
    }
    mv_run(batch, m * n * k, &j.run);
    ad_mfree(raw);
    return 1;
}

/* The paths that read A and B in place (or nearly), in the order they are
   tried; the packed GEMM takes the products none of them does. */
static int (*const mm_paths[])(const mm_args *) = {matvec_batch, skinny_batch, thin_batch,
                                                    dotn_batch};

static int mm_unpacked(const mm_args *p) {
    if (p->k <= 0) return 0;
    for (size_t i = 0; i < sizeof mm_paths / sizeof *mm_paths; i++)
        if (mm_paths[i](p)) return 1;
    return 0;
}

/* matmul with numpy's rules: a 1-d a is a row (its m dim is dropped from the
   result), a 1-d b a column (its n dim dropped); the other dims are batch
   dims, broadcast. */
ad_status fwd_matmul(const op_args *args, ad_tensor **out) {
    const ad_tensor *a = args->in[0], *b = args->in[1];
    if (a->ndim < 1 || b->ndim < 1)
        return ad_fail(AD_ERR_SHAPE, "matmul: operands need at least 1 dim, got %s and %s",
                       ad_tdesc(a), ad_tdesc(b));
    if (a->dtype != b->dtype || !ad_dtype_is_float(a->dtype))
        return ad_fail(AD_ERR_DTYPE,
                       "matmul: operands must share a float dtype, got %s and %s", ad_tdesc(a),
                       ad_tdesc(b));
    int a1 = a->ndim == 1, b1 = b->ndim == 1;
    int abd = a1 ? 0 : a->ndim - 2, bbd = b1 ? 0 : b->ndim - 2; /* batch dims */
    int64_t m = a1 ? 1 : T_SHAPE(a)[a->ndim - 2], k = T_SHAPE(a)[a->ndim - 1];
    int64_t k2 = T_SHAPE(b)[b1 ? 0 : b->ndim - 2], n = b1 ? 1 : T_SHAPE(b)[b->ndim - 1];
    if (k != k2)
        return ad_fail(AD_ERR_SHAPE, "matmul: inner dims differ, %s @ %s (%lld vs %lld)",
                       ad_tdesc(a), ad_tdesc(b), (long long)k, (long long)k2);
    int64_t shape[AD_MAX_DIMS];
    int bnd;
    ad_status st = ad_broadcast_shapes("matmul", T_SHAPE(a), abd, T_SHAPE(b), bbd, shape, &bnd);
    if (st)
        return ad_fail(AD_ERR_SHAPE, "matmul: batch dims of %s and %s cannot be broadcast "
                       "together", ad_tdesc(a), ad_tdesc(b));
    if (bnd + 2 > AD_MAX_DIMS) return ad_fail(AD_ERR_SHAPE, "matmul: too many dims");
    int ond = bnd;
    if (!a1) shape[ond++] = m;
    if (!b1) shape[ond++] = n;
    ad_tensor *y;
    if ((st = ad_tensor_empty(a->dtype, shape, ond, &y))) return st;
    int64_t batch = 1;
    for (int i = 0; i < bnd; i++) batch *= shape[i];
    if (y->numel == 0) {
        *out = y;
        return AD_OK;
    }
    /* per-batch element offsets (0-stride where a batch dim broadcasts) */
    int64_t sa[AD_MAX_DIMS], sb[AD_MAX_DIMS];
    {
        /* strides of the batch dims only, right-aligned against shape[0:bnd] */
        int la = bnd - abd, lb = bnd - bbd;
        for (int i = 0; i < bnd; i++) {
            int ia = i - la, ib = i - lb;
            sa[i] = (ia < 0 || T_SHAPE(a)[ia] == 1) ? 0 : T_STRIDES(a)[ia];
            sb[i] = (ib < 0 || T_SHAPE(b)[ib] == 1) ? 0 : T_STRIDES(b)[ib];
        }
    }
    int64_t small[3 * 16], *offs = small;
    if (batch > 16) {
        offs = ad_malloc((size_t)batch * 3 * sizeof *offs);
        if (!offs) {
            ad_tensor_release(y);
            return ad_fail_nomem("matmul");
        }
    }
    int64_t *ao = offs, *bo = offs + batch, *co = offs + 2 * batch;
    int64_t idx[AD_MAX_DIMS] = {0}, oa = 0, ob = 0;
    for (int64_t i = 0; i < batch; i++) {
        ao[i] = oa;
        bo[i] = ob;
        co[i] = i * m * n;
        for (int d = bnd - 1; d >= 0; d--) {
            oa += sa[d];
            ob += sb[d];
            if (++idx[d] < shape[d]) break;
            oa -= sa[d] * shape[d];
            ob -= sb[d] * shape[d];
            idx[d] = 0;
        }
    }
    /* a 1-d a is one row (its row stride never read), a 1-d b one column */
    int64_t rsa = a1 ? 0 : T_STRIDES(a)[a->ndim - 2], csa = T_STRIDES(a)[a->ndim - 1];
    int64_t rsb = T_STRIDES(b)[b1 ? 0 : b->ndim - 2], csb = b1 ? 0 : T_STRIDES(b)[b->ndim - 1];
    mm_args p = {a->dtype, batch, ao, bo, co, m, n, k, rsa, csa, rsb, csb, ad_ptr(a), ad_ptr(b),
                 ad_ptr(y)};
    if (mm_unpacked(&p)) {
        /* done */
    } else if (a->dtype == AD_FLOAT32) {
        gemm_batch_f32(batch, ao, bo, co, m, n, k, ad_ptr(a), rsa, csa, ad_ptr(b), rsb, csb,
                       ad_ptr(y), n, 1);
    } else {
        gemm_batch_f64(batch, ao, bo, co, m, n, k, ad_ptr(a), rsa, csa, ad_ptr(b), rsb, csb,
                       ad_ptr(y), n, 1);
    }
    if (offs != small) ad_mfree(offs);
    *out = y;
    return AD_OK;
}

AD_API const char *ad_gemm_kernel(void) { return gemm_kernel_name(); }
AD_API void ad_testing_gemm_packbuf_fail(int mask) { gemm_packbuf_fail(mask); }
AD_API ad_status ad_gemm_set_kernel(const char *name) {
    if (gemm_set_kernel(name))
        return ad_fail(AD_ERR_VALUE,
                       "gemm kernel '%s' is not available (use \"auto\", \"avx512\", \"avx2\" "
                       "or \"portable\", at most \"%s\": this CPU's best level, capped by "
                       "PYAUTODIFF_ISA / PYAUTODIFF_PORTABLE)",
                       name ? name : "", ad_isa_name(ad_cpu_isa()));
    return AD_OK;
}

/* ---- linear: act(x @ w^T + b), the bias and the activation in the GEMM's epilogue ----

   linear(x (..., k), w (n, k)[, b (n,) or one element]) and linear_act with
   iargs {act}.  Each element of C gets c + b[j] and then the activation
   while its block is still in cache, by the same expressions (and, for tanh
   and sigmoid, the same SIMD maps) as the add and unary ops, so the result
   has the bits of the unfused act(x @ w.t() + b). */
/* The epilogue's and the backward's loops, compiled for each ISA level (as
   reduce.c's): matmul_lin.h per level and dtype. */
#if defined(__x86_64__) || defined(__i386__)
#define LIN_ATTR_base
#define LIN_ATTR_avx2 __attribute__((target("avx2")))
#define LIN_ATTR_avx512 __attribute__((target("avx512f")))
#else
#define LIN_ATTR_base
#define LIN_ATTR_avx2
#define LIN_ATTR_avx512
#endif

#define T float
#define S(name) name##_f32_base
#define LIN_ATTR LIN_ATTR_base
#include "matmul_lin.h"
#define T double
#define S(name) name##_f64_base
#define LIN_ATTR LIN_ATTR_base
#include "matmul_lin.h"
#define T float
#define S(name) name##_f32_avx2
#define LIN_ATTR LIN_ATTR_avx2
#include "matmul_lin.h"
#define T double
#define S(name) name##_f64_avx2
#define LIN_ATTR LIN_ATTR_avx2
#include "matmul_lin.h"
#define T float
#define S(name) name##_f32_avx512
#define LIN_ATTR LIN_ATTR_avx512
#include "matmul_lin.h"
#define T double
#define S(name) name##_f64_avx512
#define LIN_ATTR LIN_ATTR_avx512
#include "matmul_lin.h"

typedef struct {
    void (*rows32)(int64_t, int64_t, float *, int64_t, const float *, int64_t, int);
    void (*rows64)(int64_t, int64_t, double *, int64_t, const double *, int64_t, int);
    void (*gradz32)(int64_t, int64_t, int, const float *, const float *, float *, float *);
    void (*gradz64)(int64_t, int64_t, int, const double *, const double *, double *, double *);
} lin_kernels;

static const lin_kernels lin_base = {lin_rows_f32_base, lin_rows_f64_base, lin_gradz_f32_base,
                                     lin_gradz_f64_base};
#if defined(__x86_64__) || defined(__i386__)
static const lin_kernels lin_avx2 = {lin_rows_f32_avx2, lin_rows_f64_avx2, lin_gradz_f32_avx2,
                                     lin_gradz_f64_avx2};
static const lin_kernels lin_avx512 = {lin_rows_f32_avx512, lin_rows_f64_avx512,
                                       lin_gradz_f32_avx512, lin_gradz_f64_avx512};
#endif

static lin_kernels lin_pick(void) {
#if defined(__x86_64__) || defined(__i386__)
    int isa = ad_cpu_isa();
    if (isa == AD_ISA_AVX512) return lin_avx512;
    if (isa == AD_ISA_AVX2) return lin_avx2;
#endif
    return lin_base;
}

typedef struct {
    const char *bias; /* NULL: none */
    int64_t bstride;  /* elements: 0 for a one-element bias */
    int dtype, act;
    lin_kernels k;
    un_kernel un;     /* tanh / sigmoid for this dtype and ISA */
    void (*simd)(int64_t, const float *, int64_t, float *);
} linear_epi_ctx;

static void linear_epi(const void *vctx, void *c, int64_t rsc, int64_t i0, int64_t rows,
                       int64_t j0, int64_t cols) {
    const linear_epi_ctx *e = vctx;
    (void)i0;
    int relu = e->act == AD_LINEAR_RELU;
    size_t es = e->dtype == AD_FLOAT32 ? sizeof(float) : sizeof(double);
    const void *b = e->bias ? e->bias + (size_t)(j0 * e->bstride) * es : NULL;
    if (e->dtype == AD_FLOAT32)
        e->k.rows32(rows, cols, c, rsc, b, e->bstride, relu);
    else
        e->k.rows64(rows, cols, c, rsc, b, e->bstride, relu);
    if (!e->simd && !e->un) return;
    for (int64_t i = 0; i < rows; i++) {
        char *r = (char *)c + (size_t)(i * rsc) * es;
        if (e->simd) e->simd(cols, (float *)r, 1, (float *)r);
        else e->un(cols, r, 1, r, (double[2]){0, 0});
    }
}

/* The activation's elementwise kernel, as elementwise.c picks it. */
static void linear_act_kernel(linear_epi_ctx *e) {
    e->un = NULL;
    e->simd = NULL;
    if (e->act != AD_LINEAR_TANH && e->act != AD_LINEAR_SIGMOID) return;
    int op = e->act == AD_LINEAR_TANH ? AD_OP_TANH : AD_OP_SIGMOID;
    int isa = ad_cpu_isa();
    if (e->dtype == AD_FLOAT32 && isa == AD_ISA_AVX512)
        e->simd = op == AD_OP_TANH ? ad_tanh_f32_avx512 : ad_sigmoid_f32_avx512;
    else if (e->dtype == AD_FLOAT32 && isa == AD_ISA_AVX2)
        e->simd = op == AD_OP_TANH ? ad_tanh_f32_avx2 : ad_sigmoid_f32_avx2;
    else
        e->un = (isa == AD_ISA_AVX512 ? ew_un_table_avx512
                 : isa == AD_ISA_AVX2 ? ew_un_table_avx2 : ew_un_table_portable)[op][e->dtype];
}

/* x's leading dims as rows of one non-negative row stride, if its layout
   allows (else -1: a flipped x's negative stride too, which the GEMM's row
   pointer does not take; it read every row as row 0, or past the buffer). */
static int64_t rows_stride(const ad_tensor *x) {
    int nd = x->ndim - 1;
    int64_t rs = 0, span = 0; /* span: the stride the next outer dim must have */
    bool first = true;
    for (int d = nd - 1; d >= 0; d--) {
        int64_t sz = T_SHAPE(x)[d], st = T_STRIDES(x)[d];
        if (sz == 1) continue;
        if (st < 0) return -1;
        if (first) rs = st, first = false;
        else if (st != span) return -1;
        span = st * sz;
    }
    return rs;
}

ad_status fwd_linear(const op_args *args, ad_tensor **out) {
    const char *op = OP_NAME(args->op);
    if (args->n_in != 2 && args->n_in != 3)
        return ad_fail(AD_ERR_VALUE, "%s: takes (x, weight) or (x, weight, bias), got %d inputs",
                       op, args->n_in);
    const ad_tensor *x = args->in[0], *w = args->in[1], *b = args->n_in == 3 ? args->in[2] : NULL;
    int act = args->op == AD_OP_LINEAR_ACT ? (int)args->iargs[0] : AD_LINEAR_NONE;
    if (act < AD_LINEAR_NONE || act > AD_LINEAR_SIGMOID)
        return ad_fail(AD_ERR_VALUE, "%s: activation %d is not 0 (none), 1 (relu), 2 (tanh) or "
                       "3 (sigmoid)", op, act);
    if (!ad_dtype_is_float(x->dtype) || w->dtype != x->dtype || (b && b->dtype != x->dtype))
        return ad_fail(AD_ERR_DTYPE, "%s: x, weight%s must share a float dtype, got %s, %s%s%s",
                       op, b ? " and bias" : "", ad_tdesc(x), ad_tdesc(w), b ? ", " : "",
                       b ? ad_tdesc(b) : "");
    if (x->ndim < 1 || w->ndim != 2 || T_SHAPE(x)[x->ndim - 1] != T_SHAPE(w)[1])
        return ad_fail(AD_ERR_SHAPE, "%s: x %s (..., in_features) does not match weight %s "
                       "(out_features, in_features)", op, ad_tdesc(x), ad_tdesc(w));
    int64_t n = T_SHAPE(w)[0], k = T_SHAPE(w)[1];
    if (b && (b->ndim > 1 || (b->numel != n && b->numel != 1)))
        return ad_fail(AD_ERR_SHAPE, "%s: bias %s must have shape (%lld,) for weight %s", op,
                       ad_tdesc(b), (long long)n, ad_tdesc(w));
    int64_t shape[AD_MAX_DIMS];
    memcpy(shape, T_SHAPE(x), (size_t)x->ndim * sizeof *shape);
    shape[x->ndim - 1] = n;
    ad_tensor *y, *xc = NULL;
    ad_status st = ad_tensor_empty(x->dtype, shape, x->ndim, &y);
    if (st) return st;
    int64_t m = y->numel / (n ? n : 1);
    if (n == 0 || m == 0 || y->numel == 0) {
        *out = y;
        return AD_OK;
    }
    const ad_tensor *xa = x;
    int64_t rsa = rows_stride(x);
    if (rsa < 0) { /* leading dims that do not merge: one contiguous copy */
        if ((st = ad_tensor_empty(x->dtype, T_SHAPE(x), x->ndim, &xc))) {
            ad_tensor_release(y);
            return st;
        }
        ad_copy_strided(x, ad_ptr(xc));
        xa = xc;
        rsa = k;
    }
    /* the epilogue reads the bias contiguous (lin_rows: b[j]) or as one value
       (a stride 0): a strided or flipped one is copied first (it read b[j]
       whatever the stride, past the end of a flipped bias) */
    ad_tensor *bc = NULL;
    if (b && b->numel == n && n > 1 && b->ndim && T_STRIDES(b)[0] != 1) {
        if ((st = ad_tensor_empty(b->dtype, &n, 1, &bc))) {
            ad_tensor_release(xc);
            ad_tensor_release(y);
            return st;
        }
        ad_copy_strided(b, ad_ptr(bc));
        b = bc;
    }
    linear_epi_ctx e = {b ? ad_ptr(b) : NULL, b && b->numel == n && b->ndim ? T_STRIDES(b)[0] : 0,
                        x->dtype, act, lin_pick(), NULL, NULL};
    linear_act_kernel(&e);
    gemm_epi epi = {linear_epi, &e};
    int64_t csa = T_STRIDES(xa)[xa->ndim - 1];
    int64_t rsb = T_STRIDES(w)[1], csb = T_STRIDES(w)[0]; /* B = w^T */
    static const int64_t zero = 0;
    mm_args p = {x->dtype, 1, &zero, &zero, &zero, m, n, k, rsa, csa, rsb, csb, ad_ptr(xa),
                 ad_ptr(w), ad_ptr(y)};
    if (mm_unpacked(&p))
        linear_epi(&e, ad_ptr(y), n, 0, m, 0, n); /* as matmul's unpacked paths */
    else if (x->dtype == AD_FLOAT32)
        gemm_epi_f32(m, n, k, ad_ptr(xa), rsa, csa, ad_ptr(w), rsb, csb, ad_ptr(y), n, &epi);
    else
        gemm_epi_f64(m, n, k, ad_ptr(xa), rsa, csa, ad_ptr(w), rsb, csb, ad_ptr(y), n, &epi);
    ad_tensor_release(xc);
    ad_tensor_release(bc);
    *out = y;
    return AD_OK;
}

ad_status ad_linear_gradz(int act, const ad_tensor *g, const ad_tensor *y, bool want_b,
                          ad_tensor **gz, ad_tensor **gb) {
    *gz = *gb = NULL;
    int64_t n = g->ndim ? T_SHAPE(g)[g->ndim - 1] : 1, m = n ? g->numel / n : 0;
    ad_tensor *gc = NULL, *yc = NULL;
    const void *pg = NULL, *py = NULL;
    ad_status st = nn_contig(g, &gc, &pg);
    if (!st && act != AD_LINEAR_NONE) st = nn_contig(y, &yc, &py);
    if (!st) {
        if (act == AD_LINEAR_NONE) {
            *gz = gc ? ad_ref(gc) : ad_ref(g);
        } else {
            st = ad_tensor_empty(g->dtype, T_SHAPE(g), g->ndim, gz);
        }
    }
    if (!st && want_b) st = ad_tensor_empty(g->dtype, &n, 1, gb);
    if (!st) {
        void *pz = act == AD_LINEAR_NONE ? NULL : ad_ptr(*gz), *pb = want_b ? ad_ptr(*gb) : NULL;
        lin_kernels k = lin_pick();
        if (g->dtype == AD_FLOAT32)
            k.gradz32(m, n, act, pg, py, pz, pb);
        else
            k.gradz64(m, n, act, pg, py, pz, pb);
    }
    if (st) {
        ad_tensor_release(*gz);
        ad_tensor_release(*gb);
        *gz = *gb = NULL;
    }
    ad_tensor_release(gc);
    ad_tensor_release(yc);
    return st;
}
