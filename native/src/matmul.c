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
#endif

#if defined(__x86_64__) || defined(__i386__)
#define LIN_ATTR_base
#define LIN_ATTR_avx2 __attribute__((target("avx2")))
#define LIN_ATTR_avx512 __attribute__((target("avx512f")))
#else
#define LIN_ATTR_base
#define LIN_ATTR_avx2
#define LIN_ATTR_avx512
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
   threads gives the same bits.  Compiled for each ISA level as the linear
   epilogue (no FMA). */
#define MV_KERNELS(T, SFX, ISA, L)                                                             \
    LIN_ATTR_##ISA static void mv_dot_##SFX##_##ISA##L(int64_t m, int64_t k, const T *a,            \
                                                    int64_t rsa, const T *restrict x,            \
                                                    T *restrict y, int64_t incy) {               \
        int64_t i = 0;                                                                         \
        for (; i + 4 <= m; i += 4) {                                                           \
            const T *restrict r0 = a + i * rsa, *restrict r1 = r0 + rsa;                       \
            const T *restrict r2 = r1 + rsa, *restrict r3 = r2 + rsa;                          \
            T s0[L] = {0}, s1[L] = {0}, s2[L] = {0}, s3[L] = {0};                              \
            int64_t p = 0;                                                                     \
            for (; p + L <= k; p += L)                                                         \
                for (int l = 0; l < L; l++) {                                                  \
                    T xv = x[p + l];                                                           \
                    s0[l] += r0[p + l] * xv;                                                   \
                    s1[l] += r1[p + l] * xv;                                                   \
                    s2[l] += r2[p + l] * xv;                                                   \
                    s3[l] += r3[p + l] * xv;                                                   \
                }                                                                              \
            for (int w = L / 2; w >= 1; w /= 2)                                                \
                for (int l = 0; l < w; l++) {                                                  \
                    s0[l] += s0[l + w];                                                        \
                    s1[l] += s1[l + w];                                                        \
                    s2[l] += s2[l + w];                                                        \
                    s3[l] += s3[l + w];                                                        \
                }                                                                              \
            T t0 = s0[0], t1 = s1[0], t2 = s2[0], t3 = s3[0];                                  \
            for (; p < k; p++) {                                                               \
                t0 += r0[p] * x[p];                                                            \
                t1 += r1[p] * x[p];                                                            \
                t2 += r2[p] * x[p];                                                            \
                t3 += r3[p] * x[p];                                                            \
            }                                                                                  \
            y[i * incy] = t0;                                                                  \
            y[(i + 1) * incy] = t1;                                                            \
            y[(i + 2) * incy] = t2;                                                            \
            y[(i + 3) * incy] = t3;                                                            \
        }                                                                                      \
        for (; i < m; i++) {                                                                   \
            const T *restrict r0 = a + i * rsa;                                                \
            T s0[L] = {0}, t0 = 0;                                                             \
            int64_t p = 0;                                                                     \
            for (; p + L <= k; p += L)                                                         \
                for (int l = 0; l < L; l++) s0[l] += r0[p + l] * x[p + l];                     \
            for (int w = L / 2; w >= 1; w /= 2)                                                \
                for (int l = 0; l < w; l++) s0[l] += s0[l + w];                                \
            t0 = s0[0];                                                                        \
            for (; p < k; p++) t0 += r0[p] * x[p];                                             \
            y[i * incy] = t0;                                                                  \
        }                                                                                      \
    }                                                                                          \
    __attribute__((unused)) LIN_ATTR_##ISA static void mv_axpy_##SFX##_##ISA##L(int64_t k, int64_t n, const T *x,           \
                                                     int64_t incx, const T *b, int64_t rsb,      \
                                                     T *restrict y) {                            \
        for (int64_t j = 0; j < n; j++) y[j] = 0;                                              \
        int64_t p = 0;                                                                         \
        for (; p + 4 <= k; p += 4) {                                                           \
            const T x0 = x[p * incx], x1 = x[(p + 1) * incx], x2 = x[(p + 2) * incx],          \
                    x3 = x[(p + 3) * incx];                                                    \
            const T *restrict q0 = b + p * rsb, *restrict q1 = q0 + rsb;                       \
            const T *restrict q2 = q1 + rsb, *restrict q3 = q2 + rsb;                          \
            for (int64_t j = 0; j < n; j++)                                                    \
                y[j] += x0 * q0[j] + x1 * q1[j] + x2 * q2[j] + x3 * q3[j];                     \
        }                                                                                      \
        for (; p < k; p++) {                                                                   \
            const T xp = x[p * incx], *restrict q = b + p * rsb;                               \
            for (int64_t j = 0; j < n; j++) y[j] += xp * q[j];                                 \
        }                                                                                      \
    }
/* _L: L partial sums per row; a short row (k < 2L) takes the kernel with a
   quarter as many, whose final sum is cheaper (batches of small products) */
MV_KERNELS(float, f32, base, 8)
MV_KERNELS(double, f64, base, 4)
MV_KERNELS(float, f32, base, 2)
MV_KERNELS(double, f64, base, 1)

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
     axpy: four rows of M^T at a time into y's vectors, y's tail masked.
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

/* per level and dtype: the vector type, its lanes, the tail mask and the
   reductions of eight accumulators / of one to the AVX2 width above */
#define MV_F32_avx2_MASK(n) _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
#define MV_F32_avx2_MLOAD(p, mk) _mm256_maskload_ps((p), (mk))
#define MV_F32_avx2_MSTORE(p, mk, v) _mm256_maskstore_ps((p), (mk), (v))
#define MV_F32_avx2_NARROW(v) (v)
#define MV_F64_avx2_MASK(n) _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_setr_epi64x(0, 1, 2, 3))
#define MV_F64_avx2_MLOAD(p, mk) _mm256_maskload_pd((p), (mk))
#define MV_F64_avx2_MSTORE(p, mk, v) _mm256_maskstore_pd((p), (mk), (v))
#define MV_F64_avx2_NARROW(v) (v)
#define MV_F32_avx512_MASK(n) ((__mmask16)((1u << (n)) - 1))
#define MV_F32_avx512_MLOAD(p, mk) _mm512_maskz_loadu_ps((mk), (p))
#define MV_F32_avx512_MSTORE(p, mk, v) _mm512_mask_storeu_ps((p), (mk), (v))
#define MV_F32_avx512_NARROW(v)                                                                \
    _mm256_add_ps(_mm512_castps512_ps256(v),                                                   \
                  _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)))
#define MV_F64_avx512_MASK(n) ((__mmask8)((1u << (n)) - 1))
#define MV_F64_avx512_MLOAD(p, mk) _mm512_maskz_loadu_pd((mk), (p))
#define MV_F64_avx512_MSTORE(p, mk, v) _mm512_mask_storeu_pd((p), (mk), (v))
#define MV_F64_avx512_NARROW(v) _mm256_add_pd(_mm512_castpd512_pd256(v), _mm512_extractf64x4_pd(v, 1))

#define MV_RED8_F32(N, c, y, incy)                                                             \
    mv_put8_f32(y, incy, mv_red8_f32(N(c[0]), N(c[1]), N(c[2]), N(c[3]), N(c[4]), N(c[5]),       \
                                     N(c[6]), N(c[7])))
#define MV_RED1_F32(N, c) mv_red1_f32(N(c))
#define MV_RED8_F64(N, c, y, incy)                                                             \
    do {                                                                                       \
        mv_put4_f64(y, incy, mv_red4_f64(N(c[0]), N(c[1]), N(c[2]), N(c[3])));                  \
        mv_put4_f64((y) + 4 * (incy), incy, mv_red4_f64(N(c[4]), N(c[5]), N(c[6]), N(c[7])));   \
    } while (0)
#define MV_RED1_F64(N, c) mv_red1_f64(N(c))

#define MV_SIMD(T, SFX, D, ISA, V, W, MT, LOAD, STORE, FMA, ZERO, SET1)                         \
    MV_ATTR_##ISA static void mv_dot_##SFX##_##ISA(int64_t m, int64_t k, const T *a, int64_t rsa, \
                                                   const T *restrict x, T *restrict y,         \
                                                   int64_t incy) {                             \
        const int64_t kv = k / W * W;                                                          \
        const int tail = (int)(k - kv);                                                        \
        const MT mk = MV_##D##_##ISA##_MASK(tail);                                             \
        int64_t i = 0;                                                                         \
        for (; i + 8 <= m; i += 8) {                                                           \
            const T *restrict r = a + i * rsa;                                                 \
            V c[8];                                                                            \
            for (int q = 0; q < 8; q++) c[q] = ZERO();                                         \
            for (int64_t p = 0; p < kv; p += W) {                                              \
                V xv = LOAD(x + p);                                                            \
                for (int q = 0; q < 8; q++) c[q] = FMA(LOAD(r + q * rsa + p), xv, c[q]);       \
            }                                                                                  \
            if (tail) {                                                                        \
                V xv = MV_##D##_##ISA##_MLOAD(x + kv, mk);                                     \
                for (int q = 0; q < 8; q++)                                                    \
                    c[q] = FMA(MV_##D##_##ISA##_MLOAD(r + q * rsa + kv, mk), xv, c[q]);        \
            }                                                                                  \
            MV_RED8_##D(MV_##D##_##ISA##_NARROW, c, y + i * incy, incy);                       \
        }                                                                                      \
        for (; i < m; i++) {                                                                   \
            const T *restrict r = a + i * rsa;                                                 \
            V c = ZERO();                                                                      \
            for (int64_t p = 0; p < kv; p += W) c = FMA(LOAD(r + p), LOAD(x + p), c);           \
            if (tail)                                                                          \
                c = FMA(MV_##D##_##ISA##_MLOAD(r + kv, mk), MV_##D##_##ISA##_MLOAD(x + kv, mk), c); \
            y[i * incy] = MV_RED1_##D(MV_##D##_##ISA##_NARROW, c);                             \
        }                                                                                      \
    }                                                                                          \
    MV_ATTR_##ISA static void mv_axpy_##SFX##_##ISA(int64_t k, int64_t n, const T *x,           \
                                                    int64_t incx, const T *b, int64_t rsb,     \
                                                    T *restrict y) {                           \
        const int64_t nv = n / W * W;                                                          \
        const int tail = (int)(n - nv);                                                        \
        const MT mk = MV_##D##_##ISA##_MASK(tail);                                             \
        if (k <= 0) {                                                                          \
            for (int64_t j = 0; j < n; j++) y[j] = 0;                                          \
            return;                                                                            \
        }                                                                                      \
        int64_t p = 0;                                                                         \
        for (; p + 4 <= k; p += 4) {                                                           \
            const V x0 = SET1(x[p * incx]), x1 = SET1(x[(p + 1) * incx]);                       \
            const V x2 = SET1(x[(p + 2) * incx]), x3 = SET1(x[(p + 3) * incx]);                 \
            const T *restrict q0 = b + p * rsb, *restrict q1 = q0 + rsb;                       \
            const T *restrict q2 = q1 + rsb, *restrict q3 = q2 + rsb;                          \
            const int first = p == 0;                                                          \
            for (int64_t j = 0; j < nv; j += W) {                                              \
                V t = first ? ZERO() : LOAD(y + j);                                            \
                t = FMA(x0, LOAD(q0 + j), t);                                                  \
                t = FMA(x1, LOAD(q1 + j), t);                                                  \
                t = FMA(x2, LOAD(q2 + j), t);                                                  \
                t = FMA(x3, LOAD(q3 + j), t);                                                  \
                STORE(y + j, t);                                                               \
            }                                                                                  \
            if (tail) {                                                                        \
                V t = first ? ZERO() : MV_##D##_##ISA##_MLOAD(y + nv, mk);                     \
                t = FMA(x0, MV_##D##_##ISA##_MLOAD(q0 + nv, mk), t);                           \
                t = FMA(x1, MV_##D##_##ISA##_MLOAD(q1 + nv, mk), t);                           \
                t = FMA(x2, MV_##D##_##ISA##_MLOAD(q2 + nv, mk), t);                           \
                t = FMA(x3, MV_##D##_##ISA##_MLOAD(q3 + nv, mk), t);                           \
                MV_##D##_##ISA##_MSTORE(y + nv, mk, t);                                        \
            }                                                                                  \
        }                                                                                      \
        for (; p < k; p++) {                                                                   \
            const V xp = SET1(x[p * incx]);                                                    \
            const T *restrict q = b + p * rsb;                                                 \
            const int first = p == 0;                                                          \
            for (int64_t j = 0; j < nv; j += W)                                                \
                STORE(y + j, FMA(xp, LOAD(q + j), first ? ZERO() : LOAD(y + j)));              \
            if (tail)                                                                          \
                MV_##D##_##ISA##_MSTORE(                                                       \
                    y + nv, mk,                                                                \
                    FMA(xp, MV_##D##_##ISA##_MLOAD(q + nv, mk),                                \
                        first ? ZERO() : MV_##D##_##ISA##_MLOAD(y + nv, mk)));                 \
        }                                                                                      \
    }
MV_SIMD(float, f32, F32, avx2, __m256, 8, __m256i, _mm256_loadu_ps, _mm256_storeu_ps,
        _mm256_fmadd_ps, _mm256_setzero_ps, _mm256_set1_ps)
MV_SIMD(double, f64, F64, avx2, __m256d, 4, __m256i, _mm256_loadu_pd, _mm256_storeu_pd,
        _mm256_fmadd_pd, _mm256_setzero_pd, _mm256_set1_pd)
MV_SIMD(float, f32, F32, avx512, __m512, 16, __mmask16, _mm512_loadu_ps, _mm512_storeu_ps,
        _mm512_fmadd_ps, _mm512_setzero_ps, _mm512_set1_ps)
MV_SIMD(double, f64, F64, avx512, __m512d, 8, __mmask8, _mm512_loadu_pd, _mm512_storeu_pd,
        _mm512_fmadd_pd, _mm512_setzero_pd, _mm512_set1_pd)
#endif

typedef void (*mv_dot_fn)(int64_t, int64_t, const void *, int64_t, const void *, void *, int64_t);
typedef void (*mv_axpy_fn)(int64_t, int64_t, const void *, int64_t, const void *, int64_t, void *);

/* One matrix-vector job: per item i, y_i = M_i x_i with M_i = mat + mo[i] and
   so on (element offsets); either form above. */
typedef struct {
    int dot;
    mv_dot_fn fdot;
    mv_axpy_fn faxpy;
    size_t es;
    int64_t outs, cols, rsm, incx, incy;
    const char *mat, *x;
    char *y;
    const int64_t *mo, *xo, *yo;
    int64_t grain; /* outputs per task when one item is split */
} mv_job;

static void mv_range(const mv_job *j, int64_t it, int64_t r0, int64_t r1) {
    const char *mat = j->mat + (size_t)j->mo[it] * j->es, *x = j->x + (size_t)j->xo[it] * j->es;
    char *y = j->y + (size_t)j->yo[it] * j->es;
    if (j->dot)
        j->fdot(r1 - r0, j->cols, mat + (size_t)(r0 * j->rsm) * j->es, j->rsm, x,
                y + (size_t)(r0 * j->incy) * j->es, j->incy);
    else
        j->faxpy(j->cols, r1 - r0, x, j->incx, mat + (size_t)r0 * j->es, j->rsm,
                 y + (size_t)r0 * j->es);
}

static void mv_items_task(void *ctx, int64_t i0, int64_t i1) {
    const mv_job *j = ctx;
    for (int64_t it = i0; it < i1; it++) mv_range(j, it, 0, j->outs);
}

static void mv_outs_task(void *ctx, int64_t g0, int64_t g1) {
    const mv_job *j = ctx;
    int64_t r1 = g1 * j->grain;
    mv_range(j, 0, g0 * j->grain, r1 < j->outs ? r1 : j->outs);
}

/* Elements of M from which a matrix-vector product is split over threads
   (smaller ones run on the calling thread: a wake-up costs more). */
#define MV_PAR_MIN ((int64_t)1 << 17)

/* The batch of products of fwd_matmul when m == 1 or n == 1 and a layout
   fits one of the two forms; returns 0 (nothing done) otherwise. */
static int matvec_batch(int dtype, int64_t batch, const int64_t *ao, const int64_t *bo,
                        const int64_t *co, int64_t m, int64_t n, int64_t k, const void *a,
                        int64_t rsa, int64_t csa, const void *b, int64_t rsb, int64_t csb,
                        void *c) {
    mv_job j = {0};
    j.es = dtype == AD_FLOAT32 ? sizeof(float) : sizeof(double);
    j.cols = k;
    if (n == 1 && csa == 1 && rsb == 1) { /* rows of A . b */
        j = (mv_job){1, 0, 0, j.es, m, k, rsa, 1, 1, a, b, c, ao, bo, co, 0};
    } else if (n == 1 && rsa == 1) { /* sum_p b[p] A[:, p] */
        j = (mv_job){0, 0, 0, j.es, m, k, csa, rsb, 1, a, b, c, ao, bo, co, 0};
    } else if (m == 1 && csb == 1) { /* sum_p a[p] B[p, :] */
        j = (mv_job){0, 0, 0, j.es, n, k, rsb, csa, 1, b, a, c, bo, ao, co, 0};
    } else if (m == 1 && rsb == 1 && csa == 1) { /* columns of B . a */
        j = (mv_job){1, 0, 0, j.es, n, k, csb, 1, 1, b, a, c, bo, ao, co, 0};
    } else {
        return 0;
    }
    /* the GEMM's level (ad_gemm_set_kernel lets tests reach every level's kernels) */
    int isa = ad_isa_by_name(gemm_kernel_name()), f32 = dtype == AD_FLOAT32;
#define MV_PICK(L32, L64, S32, S64)                                                             \
    do {                                                                                       \
        int sh = k < 2 * (f32 ? L32 : L64);                                                    \
        j.fdot = f32 ? (sh ? (mv_dot_fn)mv_dot_f32_base##S32 : (mv_dot_fn)mv_dot_f32_base##L32)   \
                     : (sh ? (mv_dot_fn)mv_dot_f64_base##S64 : (mv_dot_fn)mv_dot_f64_base##L64);  \
        j.faxpy = f32 ? (mv_axpy_fn)mv_axpy_f32_base##L32 : (mv_axpy_fn)mv_axpy_f64_base##L64;    \
    } while (0)
#define MV_SIMD_PICK(ISA)                                                                      \
    do {                                                                                       \
        j.fdot = f32 ? (mv_dot_fn)mv_dot_f32_##ISA : (mv_dot_fn)mv_dot_f64_##ISA;              \
        j.faxpy = f32 ? (mv_axpy_fn)mv_axpy_f32_##ISA : (mv_axpy_fn)mv_axpy_f64_##ISA;         \
    } while (0)
#if defined(__x86_64__) || defined(__i386__)
    if (isa == AD_ISA_AVX512) MV_SIMD_PICK(avx512);
    else if (isa == AD_ISA_AVX2) MV_SIMD_PICK(avx2);
    else MV_PICK(8, 4, 2, 1);
#else
    (void)isa;
    MV_PICK(8, 4, 2, 1);
#endif
#undef MV_PICK
#undef MV_SIMD_PICK
    int threads = par_num_threads();
    int64_t work = j.outs * k;
    if (threads > 1 && batch > 1 && work * batch >= MV_PAR_MIN && batch >= threads) {
        par_for(batch, mv_items_task, &j);
    } else if (threads > 1 && work >= MV_PAR_MIN) {
        for (int64_t it = 0; it < batch; it++) {
            mv_job one = j;
            one.mo += it;
            one.xo += it;
            one.yo += it;
            one.grain = j.dot ? 64 : 256;
            par_for((j.outs + one.grain - 1) / one.grain, mv_outs_task, &one);
        }
    } else {
        mv_items_task(&j, 0, batch);
    }
    return 1;
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
    if (k > 0 && (m == 1 || n == 1) &&
        matvec_batch(a->dtype, batch, ao, bo, co, m, n, k, ad_ptr(a), rsa, csa, ad_ptr(b), rsb,
                     csb, ad_ptr(y))) {
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
   reduce.c's): the same expressions at every level (no FMA: an add, a select,
   products rounded one by one), so the same bits. */

/* rows x cols of C (row stride rsc): + b[j] (b NULL: none; bs 0: one element),
   then relu when asked */
#define LIN_ROWS(T, SFX, ISA)                                                                      LIN_ATTR_##ISA static void lin_rows_##SFX##_##ISA(int64_t rows, int64_t cols, T *c,                                                               int64_t rsc, const T *b, int64_t bs,                                                            int relu) {                                       for (int64_t i = 0; i < rows; i++) {                                                               T *restrict r = c + i * rsc;                                                                   if (b && bs && relu)                                                                               for (int64_t j = 0; j < cols; j++) {                                                               T t = r[j] + b[j];                                                                             r[j] = t > 0 ? t : 0;                                                                      }                                                                                          else if (b && bs)                                                                                  for (int64_t j = 0; j < cols; j++) r[j] = r[j] + b[j];                                     else if (b && relu)                                                                                for (int64_t j = 0; j < cols; j++) {                                                               T t = r[j] + b[0];                                                                             r[j] = t > 0 ? t : 0;                                                                      }                                                                                          else if (b)                                                                                        for (int64_t j = 0; j < cols; j++) r[j] = r[j] + b[0];                                     else if (relu)                                                                                     for (int64_t j = 0; j < cols; j++) r[j] = r[j] > 0 ? r[j] : 0;                         }                                                                                          }

/* The backward's elementwise part without create_graph: the gradient at the
   pre-activation, gz = g * act'(y) (act' from the output, by the same
   expressions as the relu / tanh / sigmoid backward ops), and, when gb is
   non-NULL, its column sums (the bias gradient) in the same pass.  g, y, gz
   are m x n contiguous; with no activation gz is g and only gb is written. */
#define LIN_GRADZ(T, SFX, ISA)                                                                     LIN_ATTR_##ISA static void lin_gradz_##SFX##_##ISA(int64_t m, int64_t n, int act,                                                                  const T *g, const T *y, T *gz, T *gb) {          if (gb)                                                                                            for (int64_t j = 0; j < n; j++) gb[j] = 0;                                                 for (int64_t i = 0; i < m; i++) {                                                                  const T *restrict gr = g + i * n, *restrict yr = y ? y + i * n : NULL;                         const T *zr = gr;                                                                              if (act != AD_LINEAR_NONE) {                                                                       T *restrict w = gz + i * n;                                                                    if (act == AD_LINEAR_RELU)                                                                         for (int64_t j = 0; j < n; j++) w[j] = (T)(yr[j] > 0) * gr[j];                             else if (act == AD_LINEAR_TANH)                                                                    for (int64_t j = 0; j < n; j++) w[j] = (1 - yr[j] * yr[j]) * gr[j];                        else                                                                                               for (int64_t j = 0; j < n; j++) w[j] = gr[j] * yr[j] * (1 - yr[j]);                        zr = w;                                                                                    }                                                                                              if (gb)                                                                                            for (int64_t j = 0; j < n; j++) gb[j] += zr[j];                                        }                                                                                          }

#define LIN_ISA(ISA)                                                                               LIN_ROWS(float, f32, ISA)                                                                      LIN_ROWS(double, f64, ISA)                                                                     LIN_GRADZ(float, f32, ISA)                                                                     LIN_GRADZ(double, f64, ISA)
LIN_ISA(base)
LIN_ISA(avx2)
LIN_ISA(avx512)

typedef struct {
    void (*rows32)(int64_t, int64_t, float *, int64_t, const float *, int64_t, int);
    void (*rows64)(int64_t, int64_t, double *, int64_t, const double *, int64_t, int);
    void (*gradz32)(int64_t, int64_t, int, const float *, const float *, float *, float *);
    void (*gradz64)(int64_t, int64_t, int, const double *, const double *, double *, double *);
} lin_kernels;

static lin_kernels lin_pick(void) {
#define LIN_K(ISA)                                                                                 (lin_kernels) { lin_rows_f32_##ISA, lin_rows_f64_##ISA, lin_gradz_f32_##ISA,                                   lin_gradz_f64_##ISA }
#if defined(__x86_64__) || defined(__i386__)
    int isa = ad_cpu_isa();
    if (isa == AD_ISA_AVX512) return LIN_K(avx512);
    if (isa == AD_ISA_AVX2) return LIN_K(avx2);
#endif
    return LIN_K(base);
#undef LIN_K
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

/* x's leading dims as rows of one row stride, if its layout allows (else -1). */
static int64_t rows_stride(const ad_tensor *x) {
    int nd = x->ndim - 1;
    int64_t rs = -1, span = 0; /* span: the stride the next outer dim must have */
    for (int d = nd - 1; d >= 0; d--) {
        int64_t sz = T_SHAPE(x)[d], st = T_STRIDES(x)[d];
        if (sz == 1) continue;
        if (rs < 0) rs = st;
        else if (st != span) return -1;
        span = st * sz;
    }
    return rs < 0 ? 0 : rs;
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
    linear_epi_ctx e = {b ? ad_ptr(b) : NULL, b && b->numel == n && b->ndim ? T_STRIDES(b)[0] : 0,
                        x->dtype, act, lin_pick(), NULL, NULL};
    linear_act_kernel(&e);
    gemm_epi epi = {linear_epi, &e};
    int64_t csa = T_STRIDES(xa)[xa->ndim - 1];
    int64_t rsb = T_STRIDES(w)[1], csb = T_STRIDES(w)[0]; /* B = w^T */
    static const int64_t zero = 0;
    if (k > 0 && (m == 1 || n == 1) &&
        matvec_batch(x->dtype, 1, &zero, &zero, &zero, m, n, k, ad_ptr(xa), rsa, csa, ad_ptr(w),
                     rsb, csb, ad_ptr(y)))
        linear_epi(&e, ad_ptr(y), n, 0, m, 0, n); /* as matmul's matrix-vector path */
    else if (x->dtype == AD_FLOAT32)
        gemm_epi_f32(m, n, k, ad_ptr(xa), rsa, csa, ad_ptr(w), rsb, csb, ad_ptr(y), n, &epi);
    else
        gemm_epi_f64(m, n, k, ad_ptr(xa), rsa, csa, ad_ptr(w), rsb, csb, ad_ptr(y), n, &epi);
    ad_tensor_release(xc);
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
