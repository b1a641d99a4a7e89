/* elementwise.c - binary, comparison, unary and tensor-scalar kernels.
 *
 * Each kernel family is one template instantiated per dtype; the tables at
 * the bottom map (op, dtype) to a kernel, and NULL means the op does not
 * support that dtype.  Layouts go through the shared n-d iterator, so a
 * kernel only sees a 1-d loop with element strides (contiguous fast paths
 * are the loops the compiler vectorises).
 */
#include <tgmath.h> /* exp(x) is expf for a float x */
#include <string.h>

#include <pthread.h>
#include <stdlib.h>

#include "cpu.h"
#include "simd.h"
#include "strided.h"

typedef void (*bin_kernel)(int64_t n, const void *a, int64_t sa, const void *b, int64_t sb,
                           void *y);
/* s: the op's float arguments (up to two; zeros when it has none) */
typedef void (*un_kernel)(int64_t n, const void *x, int64_t sx, void *y, const double *s);

/* ---- templates ------------------------------------------------------------ */
#define DEF_BINARY(NAME, T, EXPR, TY)                                                    \
    static void NAME(int64_t n, const void *pa, int64_t sa, const void *pb, int64_t sb, \
                     void *py) {                                                         \
        const T *A = (const T *)pa, *B = (const T *)pb;                                  \
        TY *Y = (TY *)py;                                                                \
        if (sa == 1 && sb == 1) {                                                        \
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

/* A double argument in an integer kernel goes through a saturating int64
   conversion (a direct out-of-range cast is undefined behaviour in C). */
static inline int64_t sat_i64(double v) {
    if (v != v) return 0;
    if (v >= 9.2233720368547758e18) return INT64_MAX;
    if (v <= -9.2233720368547758e18) return INT64_MIN;
    return (int64_t)v;
}
#define SCALAR_AS(T, v) ((T)0.5 != 0 ? (T)(v) : (T)sat_i64(v))

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

/* ---- binary arithmetic: add sub mul div ----------------------------------- */
#define BIN_ARITH(X)            \
    X(add, a + b, NUM)          \
    X(sub, a - b, NUM)          \
    X(mul, a * b, NUM)          \
    X(div, a / b, FLOAT)        \
    X(maximum, a > b || a != a ? a : b, NUM) \
    X(minimum, a < b || a != a ? a : b, NUM) \
    X(pow, pow(a, b), FLOAT)

#define INST_BIN(T, SUF, OP, EXPR) DEF_BINARY(bin_##OP##_##SUF, T, EXPR, T)
#define DEF_BIN_NUM(OP, EXPR) FLOAT_TYPES(INST_BIN, OP, EXPR) INT_TYPES(INST_BIN, OP, EXPR)
#define DEF_BIN_FLOAT(OP, EXPR) FLOAT_TYPES(INST_BIN, OP, EXPR)
#define DEF_BIN(OP, EXPR, KIND) DEF_BIN_##KIND(OP, EXPR)
BIN_ARITH(DEF_BIN)

/* ---- comparisons: any dtype in, bool out ----------------------------------- */
#define CMP_OPS(X) X(eq, ==) X(ne, !=) X(lt, <) X(le, <=) X(gt, >) X(ge, >=)
#define INST_CMP(T, SUF, OP, SYM) DEF_BINARY(cmp_##OP##_##SUF, T, a SYM b, uint8_t)
#define DEF_CMP(OP, SYM) FLOAT_TYPES(INST_CMP, OP, SYM) INT_TYPES(INST_CMP, OP, SYM)
CMP_OPS(DEF_CMP)

/* ---- unary and tensor-scalar ------------------------------------------------ */
/* (op, expression in x and s, dtypes).  FLOAT ops use fn. */
#define UN_OPS(X)                                        \
    X(neg, -x, NUM)                                      \
    X(sqr, x * x, NUM)                                   \
    X(relu, x > 0 ? x : 0, NUM)                          \
    X(add_scalar, x + s, NUM)                            \
    X(mul_scalar, x * s, NUM)                            \
    X(rsub_scalar, s - x, NUM)                           \
    X(exp, exp(x), FLOAT)                       \
    X(log, log(x), FLOAT)                       \
    X(sqrt, sqrt(x), FLOAT)                     \
    X(tanh, tanh(x), FLOAT)                     \
    X(div_scalar, x / s, FLOAT)                          \
    X(rdiv_scalar, s / x, FLOAT)                         \
    X(pow_scalar, pow(x, s), FLOAT)             \
    X(pow_rscalar, pow(s, x), FLOAT)            \
    X(abs, x < 0 ? -x : x, NUM)                          \
    X(sign, x > 0 ? 1 : (x < 0 ? -1 : x), NUM)           \
    X(clamp, (x < s ? s : x) > s2 ? s2 : (x < s ? s : x), NUM) \
    X(recip, 1 / x, FLOAT)                               \
    X(sin, sin(x), FLOAT)                                \
    X(cos, cos(x), FLOAT)                                \
    X(sigmoid, x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x)), FLOAT) \
    X(gelu, 0.5 * x * (1 + tanh(GELU_C * (x + GELU_K * x * x * x))), FLOAT) \
    X(gelu_erf, 0.5 * x * (1 + erf(x * SQRT1_2)), FLOAT) \
    X(erf, erf(x), FLOAT)                                \
    X(silu, x / (1 + exp(-x)), FLOAT)                    \
    X(softplus, x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)), FLOAT) \
    X(elu, x > 0 ? x : s * expm1(x), FLOAT)              \
    X(log1p, log1p(x), FLOAT)                            \
    X(expm1, expm1(x), FLOAT)                            \
    X(floor, floor(x), FLOAT)                            \
    X(ceil, ceil(x), FLOAT)                              \
    X(round, nearbyint(x), FLOAT)
#define GELU_C 0.7978845608028654 /* sqrt(2 / pi) */
#define GELU_K 0.044715
#define SQRT1_2 0.7071067811865476

#define INST_UN(T, SUF, OP, EXPR) DEF_UNARY(un_##OP##_##SUF, T, EXPR)
#define DEF_UN_NUM(OP, EXPR) FLOAT_TYPES(INST_UN, OP, EXPR) INT_TYPES(INST_UN, OP, EXPR)
#define DEF_UN_FLOAT(OP, EXPR) FLOAT_TYPES(INST_UN, OP, EXPR)
#define DEF_UN(OP, EXPR, KIND) DEF_UN_##KIND(OP, EXPR)
/* unsigned negation and relu comparisons are intended (uint8 wraps) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtype-limits"
UN_OPS(DEF_UN)
#pragma GCC diagnostic pop

/* ---- run-time dispatch: float32 exp, tanh, sigmoid, silu, gelu --------------
 * AVX-512 or AVX2/FMA kernels (simd_avx*.c, same results) at the level cpu.c
 * picks; the portable loops below it (PYAUTODIFF_PORTABLE=1). */
typedef void (*f32_map)(int64_t n, const float *x, int64_t sx, float *y);
#define SIMD_PTR(OP) static f32_map simd_##OP##_f32;
SIMD_MAPS(SIMD_PTR)
static pthread_once_t simd_once = PTHREAD_ONCE_INIT;

static void simd_detect(void) {
    int isa = ad_cpu_isa();
    if (isa == AD_ISA_PORTABLE) return;
#define SIMD_PICK(OP) \
    simd_##OP##_f32 = isa == AD_ISA_AVX512 ? ad_##OP##_f32_avx512 : ad_##OP##_f32_avx2;
    SIMD_MAPS(SIMD_PICK)
}

#define DEF_DISPATCH(OP)                                                                \
    static void un_##OP##_f32_any(int64_t n, const void *x, int64_t sx, void *y,        \
                                  const double *s) {                                    \
        pthread_once(&simd_once, simd_detect);                                          \
        if (simd_##OP##_f32) simd_##OP##_f32(n, (const float *)x, sx, (float *)y);      \
        else un_##OP##_f32(n, x, sx, y, s);                                             \
    }
SIMD_MAPS(DEF_DISPATCH)

/* ---- tables ------------------------------------------------------------------- */
#define ROW_FLOAT(P, OP) {[AD_FLOAT32] = P##OP##_f32, [AD_FLOAT64] = P##OP##_f64}
#define ROW_NUM(P, OP)                                                          \
    {[AD_FLOAT32] = P##OP##_f32, [AD_FLOAT64] = P##OP##_f64, [AD_INT64] = P##OP##_i64, \
     [AD_INT32] = P##OP##_i32, [AD_UINT8] = P##OP##_u8}
#define ROW_ALL(P, OP)                                                          \
    {[AD_FLOAT32] = P##OP##_f32, [AD_FLOAT64] = P##OP##_f64, [AD_INT64] = P##OP##_i64, \
     [AD_INT32] = P##OP##_i32, [AD_UINT8] = P##OP##_u8, [AD_BOOL] = P##OP##_u8}

static const bin_kernel bin_table[AD_OP__COUNT][6] = {
    [AD_OP_ADD] = ROW_NUM(bin_, add), [AD_OP_SUB] = ROW_NUM(bin_, sub),
    [AD_OP_MUL] = ROW_NUM(bin_, mul), [AD_OP_DIV] = ROW_FLOAT(bin_, div),
    [AD_OP_MAXIMUM] = ROW_NUM(bin_, maximum), [AD_OP_MINIMUM] = ROW_NUM(bin_, minimum),
    [AD_OP_POW] = ROW_FLOAT(bin_, pow),
    [AD_OP_EQ] = ROW_ALL(cmp_, eq),   [AD_OP_NE] = ROW_ALL(cmp_, ne),
    [AD_OP_LT] = ROW_ALL(cmp_, lt),   [AD_OP_LE] = ROW_ALL(cmp_, le),
    [AD_OP_GT] = ROW_ALL(cmp_, gt),   [AD_OP_GE] = ROW_ALL(cmp_, ge),
};

static const un_kernel un_table[AD_OP__COUNT][6] = {
    [AD_OP_NEG] = ROW_NUM(un_, neg),
    [AD_OP_SQR] = ROW_NUM(un_, sqr),
    [AD_OP_RELU] = ROW_NUM(un_, relu),
    [AD_OP_ADD_SCALAR] = ROW_NUM(un_, add_scalar),
    [AD_OP_MUL_SCALAR] = ROW_NUM(un_, mul_scalar),
    [AD_OP_RSUB_SCALAR] = ROW_NUM(un_, rsub_scalar),
    [AD_OP_EXP] = {[AD_FLOAT32] = un_exp_f32_any, [AD_FLOAT64] = un_exp_f64},
    [AD_OP_LOG] = ROW_FLOAT(un_, log),
    [AD_OP_SQRT] = ROW_FLOAT(un_, sqrt),
    [AD_OP_TANH] = {[AD_FLOAT32] = un_tanh_f32_any, [AD_FLOAT64] = un_tanh_f64},
    [AD_OP_DIV_SCALAR] = ROW_FLOAT(un_, div_scalar),
    [AD_OP_RDIV_SCALAR] = ROW_FLOAT(un_, rdiv_scalar),
    [AD_OP_POW_SCALAR] = ROW_FLOAT(un_, pow_scalar),
    [AD_OP_POW_RSCALAR] = ROW_FLOAT(un_, pow_rscalar),
    [AD_OP_ABS] = ROW_NUM(un_, abs),
    [AD_OP_SIGN] = ROW_NUM(un_, sign),
    [AD_OP_CLAMP] = ROW_NUM(un_, clamp),
    [AD_OP_RECIP] = ROW_FLOAT(un_, recip),
    [AD_OP_SIN] = ROW_FLOAT(un_, sin),
    [AD_OP_COS] = ROW_FLOAT(un_, cos),
    [AD_OP_SIGMOID] = {[AD_FLOAT32] = un_sigmoid_f32_any, [AD_FLOAT64] = un_sigmoid_f64},
    [AD_OP_GELU] = {[AD_FLOAT32] = un_gelu_f32_any, [AD_FLOAT64] = un_gelu_f64},
    [AD_OP_GELU_ERF] = ROW_FLOAT(un_, gelu_erf),
    [AD_OP_ERF] = ROW_FLOAT(un_, erf),
    [AD_OP_SILU] = {[AD_FLOAT32] = un_silu_f32_any, [AD_FLOAT64] = un_silu_f64},
    [AD_OP_SOFTPLUS] = ROW_FLOAT(un_, softplus),
    [AD_OP_ELU] = ROW_FLOAT(un_, elu),
    [AD_OP_LOG1P] = ROW_FLOAT(un_, log1p),
    [AD_OP_EXPM1] = ROW_FLOAT(un_, expm1),
    [AD_OP_FLOOR] = ROW_FLOAT(un_, floor),
    [AD_OP_CEIL] = ROW_FLOAT(un_, ceil),
    [AD_OP_ROUND] = ROW_FLOAT(un_, round),
};

/* ---- forward functions ----------------------------------------------------------- */
ad_status ad_broadcast_shapes(const int64_t *a, int an, const int64_t *b, int bn, int64_t *out,
                              int *out_ndim) {
    int n = an > bn ? an : bn;
    for (int i = 0; i < n; i++) {
        int64_t x = i - (n - an) >= 0 ? a[i - (n - an)] : 1;
        int64_t y = i - (n - bn) >= 0 ? b[i - (n - bn)] : 1;
        if (x != y && x != 1 && y != 1)
            return ad_fail(AD_ERR_SHAPE, "%s: shapes %s and %s cannot be broadcast together",
                           OPNAME, ad_fmt_shape(a, an), ad_fmt_shape(b, bn));
        out[i] = x == 1 ? y : x;
    }
    *out_ndim = n;
    return AD_OK;
}

static void bin_inner(void *ctx, int64_t n, char **p, const int64_t *s) {
    (*(bin_kernel *)ctx)(n, p[1], s[1], p[2], s[2], p[0]);
}

static ad_status run_binary(const op_args *args, int out_dtype, ad_tensor **out) {
    const ad_tensor *a = args->in[0], *b = args->in[1];
    if (a->dtype != b->dtype)
        return ad_fail(AD_ERR_DTYPE, "%s: dtype mismatch, %s and %s (convert one with to_dtype)",
                       OPNAME, ad_tdesc(a), ad_tdesc(b));
    bin_kernel k = bin_table[ad_current_op][a->dtype];
    if (!k)
        return ad_fail(AD_ERR_DTYPE, "%s: not supported for %s operands (%s, %s)", OPNAME,
                       ad_dtype_name_(a->dtype), ad_tdesc(a), ad_tdesc(b));
    int64_t shape[AD_MAX_DIMS];
    int nd;
    ad_status st = ad_broadcast_shapes(T_SHAPE(a), a->ndim, T_SHAPE(b), b->ndim, shape, &nd);
    if (st) return st;
    ad_tensor *y;
    if ((st = ad_tensor_empty(out_dtype, shape, nd, &y))) return st;
    int64_t sa[AD_MAX_DIMS], sb[AD_MAX_DIMS];
    broadcast_strides(a, shape, nd, sa);
    broadcast_strides(b, shape, nd, sb);
    const int64_t *strides[3] = {T_STRIDES(y), sa, sb};
    size_t es[3] = {ad_dtype_size_(out_dtype), ad_dtype_size_(a->dtype), ad_dtype_size_(a->dtype)};
    nditer it;
    nditer_init(&it, 3, nd, shape, strides, es);
    char *base[3] = {ad_ptr(y), ad_ptr(a), ad_ptr(b)};
    nditer_run_par(&it, base, bin_inner, &k);
    *out = y;
    return AD_OK;
}

ad_status fwd_binary(const op_args *a, ad_tensor **out) {
    return run_binary(a, a->in[0]->dtype, out);
}

ad_status fwd_compare(const op_args *a, ad_tensor **out) { return run_binary(a, AD_BOOL, out); }

typedef struct {
    un_kernel k;
    double s[2];
} un_ctx;

static void un_inner(void *ctx, int64_t n, char **p, const int64_t *s) {
    un_ctx *c = ctx;
    c->k(n, p[1], s[1], p[0], c->s);
}

/* Work per element relative to a copy, for the threading threshold: the
   arithmetic one-liners are memory bound, float32 exp/tanh are SIMD
   polynomials, every other float op is a libm call per element. */
static int un_cost(int op, int dtype) {
    switch (op) {
    case AD_OP_NEG: case AD_OP_SQR: case AD_OP_RELU: case AD_OP_ADD_SCALAR:
    case AD_OP_MUL_SCALAR: case AD_OP_RSUB_SCALAR: case AD_OP_ABS: case AD_OP_SIGN:
    case AD_OP_CLAMP: case AD_OP_DIV_SCALAR: case AD_OP_RDIV_SCALAR: case AD_OP_RECIP:
    case AD_OP_FLOOR: case AD_OP_CEIL: case AD_OP_ROUND:
        return 1;
    case AD_OP_EXP: case AD_OP_TANH: case AD_OP_SIGMOID: case AD_OP_SILU: case AD_OP_GELU:
        pthread_once(&simd_once, simd_detect);
        return dtype == AD_FLOAT32 && simd_exp_f32 ? 16 : 64;
    default:
        return ad_dtype_is_float(dtype) ? 64 : 1;
    }
}

static ad_status run_unary(const ad_tensor *x, double s, double s2, ad_tensor **out) {
    un_kernel k = un_table[ad_current_op][x->dtype];
    if (!k)
        return ad_fail(AD_ERR_DTYPE, "%s: not supported for %s (input %s)", OPNAME,
                       ad_dtype_name_(x->dtype), ad_tdesc(x));
    ad_tensor *y;
    ad_status st = ad_tensor_empty(x->dtype, T_SHAPE(x), x->ndim, &y);
    if (st) return st;
    const int64_t *strides[2] = {T_STRIDES(y), T_STRIDES(x)};
    size_t es[2] = {ad_dtype_size_(x->dtype), ad_dtype_size_(x->dtype)};
    nditer it;
    nditer_init(&it, 2, x->ndim, T_SHAPE(x), strides, es);
    char *base[2] = {ad_ptr(y), ad_ptr(x)};
    un_ctx c = {k, {s, s2}};
    nditer_run_par_cost(&it, base, un_inner, &c, un_cost(ad_current_op, x->dtype));
    *out = y;
    return AD_OK;
}

ad_status fwd_unary(const op_args *a, ad_tensor **out) { return run_unary(a->in[0], 0, 0, out); }

ad_status fwd_scalar(const op_args *a, ad_tensor **out) {
    const ad_tensor *x = a->in[0];
    double s = a->fargs[0];
    if (!ad_dtype_is_float(x->dtype) && (s != s || s != (double)sat_i64(s)))
        return ad_fail(AD_ERR_DTYPE,
                       "%s: scalar %g is not an integer and the tensor is %s (a scalar never "
                       "changes a tensor's dtype; convert with to_dtype)",
                       OPNAME, s, ad_tdesc(x));
    return run_unary(x, s, 0, out);
}

/* clamp: fargs {min, max}, -inf / inf for an absent bound.  Integer tensors
   take integer bounds, saturated to the dtype's range before the kernel
   converts them. */
ad_status fwd_clamp(const op_args *a, ad_tensor **out) {
    const ad_tensor *x = a->in[0];
    double lo = a->fargs[0], hi = a->fargs[1];
    if (lo != lo || hi != hi)
        return ad_fail(AD_ERR_VALUE, "clamp: a bound is NaN (min %g, max %g)", lo, hi);
    if (!ad_dtype_is_float(x->dtype) && x->dtype != AD_BOOL) {
        if ((isfinite(lo) && lo != floor(lo)) || (isfinite(hi) && hi != floor(hi)))
            return ad_fail(AD_ERR_DTYPE,
                           "clamp: bounds %g, %g are not integers and the tensor is %s", lo, hi,
                           ad_tdesc(x));
        double tmin = x->dtype == AD_INT64 ? -9223372036854775808.0
                      : x->dtype == AD_INT32 ? -2147483648.0 : 0.0;
        double tmax = x->dtype == AD_INT64 ? 9223372036854774784.0
                      : x->dtype == AD_INT32 ? 2147483647.0 : 255.0;
        lo = lo < tmin ? tmin : lo > tmax ? tmax : lo;
        hi = hi < tmin ? tmin : hi > tmax ? tmax : hi;
    }
    return run_unary(x, lo, hi, out);
}

/* where(cond, a, b): a select (never a blend), so a non-finite value in the
   unselected branch never reaches the output. */
static void where_inner(void *ctx, int64_t n, char **p, const int64_t *s) {
    size_t es = *(size_t *)ctx;
    const uint8_t *c = (const uint8_t *)p[1];
    switch (es) {
#define WHERE_CASE(T)                                                                   \
    case sizeof(T): {                                                                   \
        T *y = (T *)p[0];                                                               \
        const T *A = (const T *)p[2], *B = (const T *)p[3];                             \
        for (int64_t i = 0; i < n; i++) y[i * s[0]] = c[i * s[1]] ? A[i * s[2]] : B[i * s[3]]; \
        break;                                                                          \
    }
        WHERE_CASE(uint8_t)
        WHERE_CASE(int32_t)
        WHERE_CASE(int64_t)
#undef WHERE_CASE
    }
}

ad_status fwd_where(const op_args *args, ad_tensor **out) {
    const ad_tensor *c = args->in[0], *a = args->in[1], *b = args->in[2];
    if (c->dtype != AD_BOOL)
        return ad_fail(AD_ERR_DTYPE, "where: condition must be bool, got %s", ad_tdesc(c));
    if (a->dtype != b->dtype)
        return ad_fail(AD_ERR_DTYPE, "where: dtype mismatch, %s and %s (convert one with to_dtype)",
                       ad_tdesc(a), ad_tdesc(b));
    int64_t ab[AD_MAX_DIMS], shape[AD_MAX_DIMS];
    int nab, nd;
    ad_status st = ad_broadcast_shapes(T_SHAPE(a), a->ndim, T_SHAPE(b), b->ndim, ab, &nab);
    if (!st) st = ad_broadcast_shapes(T_SHAPE(c), c->ndim, ab, nab, shape, &nd);
    if (st) return st;
    ad_tensor *y;
    if ((st = ad_tensor_empty(a->dtype, shape, nd, &y))) return st;
    int64_t sc[AD_MAX_DIMS], sa[AD_MAX_DIMS], sb[AD_MAX_DIMS];
    broadcast_strides(c, shape, nd, sc);
    broadcast_strides(a, shape, nd, sa);
    broadcast_strides(b, shape, nd, sb);
    const int64_t *strides[4] = {T_STRIDES(y), sc, sa, sb};
    size_t es = ad_dtype_size_(a->dtype);
    size_t sizes[4] = {es, 1, es, es};
    nditer it;
    nditer_init(&it, 4, nd, shape, strides, sizes);
    char *base[4] = {ad_ptr(y), ad_ptr(c), ad_ptr(a), ad_ptr(b)};
    nditer_run_par(&it, base, where_inner, &es);
    *out = y;
    return AD_OK;
}
