/* ew_kernels.h - the elementwise kernels (binary, comparison, unary,
 * tensor-scalar) and their (op, dtype) tables, compiled once per ISA level:
 * ew_portable.c (baseline), ew_avx2.c (-mavx2 -mfma), ew_avx512.c (AVX-512),
 * with mse_loss's pass and random_kernels.h's fills at the end,
 * each defining EW_SFX (and the streaming-copy macros, at the end) before
 * including this file; elementwise.c picks one
 * set of tables at run time (cpu.c).
 *
 * Each kernel family is one template instantiated per dtype; NULL in a table
 * means the op does not support that dtype. Layouts go through the shared n-d
 * iterator, so a kernel only sees a 1-d loop with element strides (contiguous
 * fast paths are the loops the compiler vectorises at each level). In ISO C
 * mode the compiler never contracts a * b + c into an FMA, so every level
 * gives the same bits; the float32 libm calls (exp -> expf through tgmath.h)
 * are the same functions at every level. */
#include <stdint.h>
#include <string.h>
#include <tgmath.h>

#include "ew.h"

#define EW_CAT_(a, b) a##_##b
#define EW_CAT(a, b) EW_CAT_(a, b)
#define EW_NAME(name) EW_CAT(name, EW_SFX)

/* ---- templates ------------------------------------------------------------ */
#define EW_UNROLL _Pragma("GCC unroll 4")
#define DEF_BINARY(NAME, T, EXPR, TY)                                                    \
    static void NAME(int64_t n, const void *pa, int64_t sa, const void *pb, int64_t sb, \
                     void *py) {                                                         \
        const T *A = (const T *)pa, *B = (const T *)pb;                                  \
        TY *Y = (TY *)py;                                                                \
        if (sa == 1 && sb == 1) {                                                        \
            EW_UNROLL                                                                    \
            for (int64_t i = 0; i < n; i++) {                                            \
                T a = A[i], b = B[i];                                                    \
                Y[i] = (TY)(EXPR);                                                       \
            }                                                                            \
        } else if (sa == 1 && sb == 0) {                                                 \
            T b = B[0];                                                                  \
            for (int64_t i = 0; i < n; i++) {                                            \
                T a = A[i];                                                              \
                Y[i] = (TY)(EXPR);                                                       \
            }                                                                            \
        } else if (sa == 0 && sb == 1) {                                                 \
            T a = A[0];                                                                  \
            for (int64_t i = 0; i < n; i++) {                                            \
                T b = B[i];                                                              \
                Y[i] = (TY)(EXPR);                                                       \
            }                                                                            \
        } else {                                                                         \
            for (int64_t i = 0; i < n; i++) {                                            \
                T a = A[i * sa], b = B[i * sb];                                          \
                Y[i] = (TY)(EXPR);                                                       \
            }                                                                            \
        }                                                                                \
    }

#define SCALAR_AS(T, v) ((T)0.5 != 0 ? (T)(v) : (T)ad_sat_i64(v))

#define DEF_UNARY(NAME, T, EXPR)                                                         \
    static void NAME(int64_t n, const void *px, int64_t sx, void *py, const double *s_) { \
        const T *X = (const T *)px;                                                      \
        T *Y = (T *)py;                                                                  \
        const T s = SCALAR_AS(T, s_[0]), s2 = SCALAR_AS(T, s_[1]);                       \
        (void)s, (void)s2;                                                               \
        if (sx == 1) {                                                                   \
            for (int64_t i = 0; i < n; i++) {                                            \
                T x = X[i];                                                              \
                Y[i] = (T)(EXPR);                                                        \
            }                                                                            \
        } else {                                                                         \
            for (int64_t i = 0; i < n; i++) {                                            \
                T x = X[i * sx];                                                         \
                Y[i] = (T)(EXPR);                                                        \
            }                                                                            \
        }                                                                                \
    }

/* dtype lists: the C type and a suffix per dtype */
#define FLOAT_TYPES(X, ...) X(float, f32, __VA_ARGS__) X(double, f64, __VA_ARGS__)
#define INT_TYPES(X, ...) \
    X(int64_t, i64, __VA_ARGS__) X(int32_t, i32, __VA_ARGS__) X(uint8_t, u8, __VA_ARGS__)

/* ---- the kernels of ops.def's BINARY, COMPARE and UNARY rows ----------------- */
/* sigmoid and silu take e^-|x| (no overflow), gelu is 0.5 x (1 + tanh u) as
   x sigmoid(2u) and gelu_erf 0.5 x (1 + erf) as 0.5 x erfc: neither loses its
   digits to cancellation for negative x. */
#define GELU_C 0.7978845608028654 /* sqrt(2 / pi) */
#define GELU_K 0.044715
#define SQRT1_2 0.7071067811865476

#define INST_BIN(T, SUF, OP, EXPR) DEF_BINARY(bin_##OP##_##SUF, T, EXPR, T)
#define DEF_BIN_NUM(OP, EXPR) FLOAT_TYPES(INST_BIN, OP, EXPR) INT_TYPES(INST_BIN, OP, EXPR)
#define DEF_BIN_FLOAT(OP, EXPR) FLOAT_TYPES(INST_BIN, OP, EXPR)
#define INST_CMP(T, SUF, OP, SYM) DEF_BINARY(cmp_##OP##_##SUF, T, a SYM b, uint8_t)
#define DEF_CMP(OP, SYM) FLOAT_TYPES(INST_CMP, OP, SYM) INT_TYPES(INST_CMP, OP, SYM)
#define INST_UN(T, SUF, OP, EXPR) DEF_UNARY(un_##OP##_##SUF, T, EXPR)
#define DEF_UN_NUM(OP, EXPR) FLOAT_TYPES(INST_UN, OP, EXPR) INT_TYPES(INST_UN, OP, EXPR)
#define DEF_UN_FLOAT(OP, EXPR) FLOAT_TYPES(INST_UN, OP, EXPR)

/* kdtypes POWS (pow_scalar): FLOAT, with the exponents backward and user code
   use most (0, 1, 2, 3, -1, 0.5) picked once per call instead of a pow per
   element.  x^0, x^1, x^2, x^-1 are exact like pow's; x^3 comes from x^2
   split exactly into hi + lo (FMA; float32 through double), within 1 ulp of
   pow; x^0.5 keeps pow's +0 for -0 and +inf for -inf. */
static inline float cube_f32(float x) {
    double d = x;
    return (float)(d * d * d);
}
static inline double cube_f64(double x) {
    if (!(fabs(x) < 0x1p340)) return x * x * x; /* overflows anyway; NaN, inf */
    double hi = x * x, lo = fma(x, x, -hi);
    return fma(hi, x, lo * x);
}
#define INST_POWS(T, SUF, OP, EXPR)                                                     \
    DEF_UNARY(un_##OP##_any_##SUF, T, EXPR)                                             \
    DEF_UNARY(un_##OP##_p2_##SUF, T, x * x)                                             \
    DEF_UNARY(un_##OP##_p3_##SUF, T, cube_##SUF(x))                                     \
    DEF_UNARY(un_##OP##_m1_##SUF, T, 1 / x)                                             \
    DEF_UNARY(un_##OP##_half_##SUF, T, x == -INFINITY ? INFINITY : sqrt(x) + 0)         \
    DEF_UNARY(un_##OP##_p1_##SUF, T, x)                                                 \
    DEF_UNARY(un_##OP##_p0_##SUF, T, ((void)x, 1))                                               \
    static void un_##OP##_##SUF(int64_t n, const void *px, int64_t sx, void *py,         \
                                const double *s_) {                                     \
        double e = s_[0];                                                               \
        un_kernel k = e == 2     ? un_##OP##_p2_##SUF                                   \
                      : e == 3   ? un_##OP##_p3_##SUF                                   \
                      : e == -1  ? un_##OP##_m1_##SUF                                   \
                      : e == 0.5 ? un_##OP##_half_##SUF                                 \
                      : e == 1   ? un_##OP##_p1_##SUF                                   \
                      : e == 0   ? un_##OP##_p0_##SUF                                   \
                                 : un_##OP##_any_##SUF;                                 \
        k(n, px, sx, py, s_);                                                           \
    }
#define DEF_UN_POWS(OP, EXPR) FLOAT_TYPES(INST_POWS, OP, EXPR)

/* unsigned negation and relu comparisons are intended (uint8 wraps) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtype-limits"
#define OP(...)
#define BINARY(ID, NUM, name, expr, kd, ...) DEF_BIN_##kd(ID, expr)
#define COMPARE(ID, NUM, name, sym, doc) DEF_CMP(ID, sym)
#define UNARY(ID, NUM, name, nf, fwd, expr, kd, ...) DEF_UN_##kd(ID, expr)
#include "ops.def"
#pragma GCC diagnostic pop

/* ---- tables ------------------------------------------------------------------- */
#define ROW_FLOAT(P, OP) {[AD_FLOAT32] = P##OP##_f32, [AD_FLOAT64] = P##OP##_f64}
#define ROW_POWS ROW_FLOAT
#define ROW_NUM(P, OP)                                                          \
    {[AD_FLOAT32] = P##OP##_f32, [AD_FLOAT64] = P##OP##_f64, [AD_INT64] = P##OP##_i64, \
     [AD_INT32] = P##OP##_i32, [AD_UINT8] = P##OP##_u8}
#define ROW_ALL(P, OP)                                                          \
    {[AD_FLOAT32] = P##OP##_f32, [AD_FLOAT64] = P##OP##_f64, [AD_INT64] = P##OP##_i64, \
     [AD_INT32] = P##OP##_i32, [AD_UINT8] = P##OP##_u8, [AD_BOOL] = P##OP##_u8}

const bin_kernel EW_NAME(ew_bin_table)[AD_OP__COUNT][6] = {
#define OP(...)
#define UNARY(...)
#define BINARY(ID, NUM, name, expr, kd, ...) [AD_OP_##ID] = ROW_##kd(bin_, ID),
#define COMPARE(ID, ...) [AD_OP_##ID] = ROW_ALL(cmp_, ID),
#include "ops.def"
};

const un_kernel EW_NAME(ew_un_table)[AD_OP__COUNT][6] = {
#define OP(...)
#define BINARY(...)
#define COMPARE(...)
#define UNARY(ID, NUM, name, nf, fwd, expr, kd, ...) [AD_OP_##ID] = ROW_##kd(un_, ID),
#include "ops.def"
};

/* ---- streaming copy --------------------------------------------------------
 * dst <- src with non-temporal stores past dst's first EW_STREAM_BYTES
 * boundary (memcpy for the ends).  No fence: a caller copying many chunks
 * fences once after the last (ew_stream_fence) to order them before its later
 * stores, such as the thread pool's completion flag; an sfence per 4 KiB
 * chunk waits for the write-combining buffers each time (1.0 of 2.5 ms for
 * a 1e7-element float32 exp on the AVX-512 machine).  The including file
 * defines EW_STREAM_BYTES (0: no streaming stores at this level) and
 * EW_STREAM_COPY1(d, s), one vector's non-temporal copy. */
void EW_NAME(ew_stream_copy)(void *dst, const void *src, size_t n) {
#if EW_STREAM_BYTES
    enum { V = EW_STREAM_BYTES };
    char *d = dst;
    const char *s = src;
    size_t head = (size_t)(-(uintptr_t)d & (V - 1));
    if (head > n) head = n;
    memcpy(d, s, head);
    d += head, s += head, n -= head;
    for (; n >= 4 * V; n -= 4 * V, d += 4 * V, s += 4 * V) {
        EW_STREAM_COPY1(d, s);
        EW_STREAM_COPY1(d + V, s + V);
        EW_STREAM_COPY1(d + 2 * V, s + 2 * V);
        EW_STREAM_COPY1(d + 3 * V, s + 3 * V);
    }
    for (; n >= V; n -= V, d += V, s += V) EW_STREAM_COPY1(d, s);
    memcpy(d, s, n);
#else
    memcpy(dst, src, n);
#endif
}

void EW_NAME(ew_stream_fence)(void) {
#if EW_STREAM_BYTES
    _mm_sfence();
#endif
}

/* ---- float32 arithmetic streamed from the registers ------------------------
 * y = a op b over contiguous float32, the result vectors stored
 * non-temporally as they are computed (the ends, up to y's first vector
 * boundary and the ragged tail, through plain stores).  The chunked path
 * (the kernel into an L1 buffer, then ew_stream_copy) spent a quarter of a
 * 1e7-element add in the copy: 4.2 -> 3.3 ms alone on the Zen 4 machine.
 * IEEE operations, so the bits are the plain kernels'.  No fence (as
 * ew_stream_copy).  Compiled where the including file defines
 * EW_STREAM_F32(d, v), one vector's non-temporal store: ew_avx2.c only, whose
 * kernels the AVX-512 level takes too (256-bit non-temporal stores wrote a
 * 1e7-element sum in 3.3 ms there, 512-bit ones in 3.75 ms). */
#ifdef EW_STREAM_F32
typedef float EW_NAME(vf32) __attribute__((vector_size(EW_STREAM_BYTES)));
#define DEF_BIN_NT(ID, EXPR)                                                              \
    static void EW_NAME(bin_nt_##ID)(int64_t n, const float *A, const float *B, float *Y) { \
        enum { L = EW_STREAM_BYTES / (int)sizeof(float) };                                \
        int64_t i = 0, head = (int64_t)((-(uintptr_t)Y & (EW_STREAM_BYTES - 1)) / sizeof(float)); \
        if (head > n) head = n;                                                           \
        for (; i < head; i++) {                                                           \
            float a = A[i], b = B[i];                                                     \
            Y[i] = EXPR;                                                                  \
        }                                                                                 \
        for (; i + L <= n; i += L) {                                                      \
            EW_NAME(vf32) a, b;                                                           \
            memcpy(&a, A + i, sizeof a);                                                  \
            memcpy(&b, B + i, sizeof b);                                                  \
            EW_STREAM_F32(Y + i, EXPR);                                                   \
        }                                                                                 \
        for (; i < n; i++) {                                                              \
            float a = A[i], b = B[i];                                                     \
            Y[i] = EXPR;                                                                  \
        }                                                                                 \
    }
DEF_BIN_NT(ADD, a + b)
DEF_BIN_NT(SUB, a - b)
DEF_BIN_NT(MUL, a * b)
DEF_BIN_NT(DIV, a / b)
const bin_nt_kernel EW_NAME(ew_bin_nt_f32)[AD_OP__COUNT] = {
    [AD_OP_ADD] = EW_NAME(bin_nt_ADD), [AD_OP_SUB] = EW_NAME(bin_nt_SUB),
    [AD_OP_MUL] = EW_NAME(bin_nt_MUL), [AD_OP_DIV] = EW_NAME(bin_nt_DIV)};
#endif

/* ---- mse_loss's pass ---------------------------------------------------------
 * Over the elements [i0, i1) of contiguous x and y (float32 or float64, dt):
 * (x - y)^2 in double into o (reduction none), else their sum, returned;
 * sixteen double accumulators as four vectors of four (lane k takes the
 * elements k mod 16 in order), folded in a fixed order, so every level gives
 * the same bits.  The x86 levels widen four floats with one instruction
 * (EW_CVT4_F32; GCC splits the generic conversion in two halves and an
 * insert) and four addition chains are in flight, not two.  Zen 4, 1 thread,
 * float32: 65536 (in cache) 16.8 -> 10.0 us, 1048576 260 -> 148 (torch 230). */
typedef double EW_NAME(vd4) __attribute__((vector_size(32)));
typedef float EW_NAME(vf4) __attribute__((vector_size(16)));
#ifndef EW_CVT4_F32
#define EW_CVT4_F32(v, p)                                                                \
    do {                                                                                 \
        EW_NAME(vf4) f_;                                                                 \
        memcpy(&f_, (p), sizeof f_);                                                     \
        (v) = __builtin_convertvector(f_, EW_NAME(vd4));                                 \
    } while (0)
#endif
#define MSE_LOAD4_float(v, p) EW_CVT4_F32(v, p)
#define MSE_LOAD4_double(v, p) memcpy(&(v), (p), sizeof(v))
#define MSE_STEP(T, s, j)                                                                \
    do {                                                                                 \
        EW_NAME(vd4) a_, b_;                                                             \
        MSE_LOAD4_##T(a_, x + i + 4 * (j));                                              \
        MSE_LOAD4_##T(b_, y + i + 4 * (j));                                              \
        (s)[j] += (a_ - b_) * (a_ - b_);                                                 \
    } while (0)
#define DEF_MSE(T, SFX)                                                                  \
    static double EW_NAME(mse_##SFX)(const T *restrict x, const T *restrict y,           \
                                     T *restrict o, int64_t i0, int64_t i1) {            \
        if (o) {                                                                         \
            for (int64_t i = i0; i < i1; i++) {                                          \
                double d = (double)x[i] - (double)y[i];                                  \
                o[i] = (T)(d * d);                                                       \
            }                                                                            \
            return 0;                                                                    \
        }                                                                                \
        EW_NAME(vd4) s[4] = {{0}, {0}, {0}, {0}};                                        \
        int64_t i = i0;                                                                  \
        for (; i + 16 <= i1; i += 16) {                                                  \
            MSE_STEP(T, s, 0);                                                           \
            MSE_STEP(T, s, 1);                                                           \
            MSE_STEP(T, s, 2);                                                           \
            MSE_STEP(T, s, 3);                                                           \
        }                                                                                \
        double acc[16];                                                                  \
        for (int k = 0; k < 16; k++) acc[k] = s[k / 4][k % 4];                           \
        for (int k = 0; i < i1; i++, k++) {                                              \
            double d = (double)x[i] - (double)y[i];                                      \
            acc[k] += d * d;                                                             \
        }                                                                                \
        for (int w = 8; w >= 1; w /= 2)                                                  \
            for (int k = 0; k < w; k++) acc[k] += acc[k + w];                            \
        return acc[0];                                                                   \
    }
DEF_MSE(float, f32)
DEF_MSE(double, f64)
#undef DEF_MSE
#undef MSE_STEP
#undef MSE_LOAD4_float
#undef MSE_LOAD4_double

double EW_NAME(ew_mse)(int dt, const void *x, const void *y, void *o, int64_t i0, int64_t i1) {
    return dt == AD_FLOAT32 ? EW_NAME(mse_f32)(x, y, o, i0, i1) : EW_NAME(mse_f64)(x, y, o, i0, i1);
}

#include "random_kernels.h"
