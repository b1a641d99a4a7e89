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

#include "strided.h"

typedef void (*bin_kernel)(int64_t n, const void *a, int64_t sa, const void *b, int64_t sb,
                           void *y);
typedef void (*un_kernel)(int64_t n, const void *x, int64_t sx, void *y, double s);

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

#define DEF_UNARY(NAME, T, EXPR)                                                         \
    static void NAME(int64_t n, const void *px, int64_t sx, void *py, double s_) {      \
        const T *X = (const T *)px;                                                      \
        T *Y = (T *)py;                                                                  \
        const T s = (T)s_;                                                               \
        (void)s;                                                                         \
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
    X(div, a / b, FLOAT)

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
    X(pow_rscalar, pow(s, x), FLOAT)

#define INST_UN(T, SUF, OP, EXPR) DEF_UNARY(un_##OP##_##SUF, T, EXPR)
#define DEF_UN_NUM(OP, EXPR) FLOAT_TYPES(INST_UN, OP, EXPR) INT_TYPES(INST_UN, OP, EXPR)
#define DEF_UN_FLOAT(OP, EXPR) FLOAT_TYPES(INST_UN, OP, EXPR)
#define DEF_UN(OP, EXPR, KIND) DEF_UN_##KIND(OP, EXPR)
/* unsigned negation and relu comparisons are intended (uint8 wraps) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtype-limits"
UN_OPS(DEF_UN)
#pragma GCC diagnostic pop

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
    [AD_OP_EXP] = ROW_FLOAT(un_, exp),
    [AD_OP_LOG] = ROW_FLOAT(un_, log),
    [AD_OP_SQRT] = ROW_FLOAT(un_, sqrt),
    [AD_OP_TANH] = ROW_FLOAT(un_, tanh),
    [AD_OP_DIV_SCALAR] = ROW_FLOAT(un_, div_scalar),
    [AD_OP_RDIV_SCALAR] = ROW_FLOAT(un_, rdiv_scalar),
    [AD_OP_POW_SCALAR] = ROW_FLOAT(un_, pow_scalar),
    [AD_OP_POW_RSCALAR] = ROW_FLOAT(un_, pow_rscalar),
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
    nditer_run(&it, base, bin_inner, &k);
    *out = y;
    return AD_OK;
}

ad_status fwd_binary(const op_args *a, ad_tensor **out) {
    return run_binary(a, a->in[0]->dtype, out);
}

ad_status fwd_compare(const op_args *a, ad_tensor **out) { return run_binary(a, AD_BOOL, out); }

typedef struct {
    un_kernel k;
    double s;
} un_ctx;

static void un_inner(void *ctx, int64_t n, char **p, const int64_t *s) {
    un_ctx *c = ctx;
    c->k(n, p[1], s[1], p[0], c->s);
}

static ad_status run_unary(const ad_tensor *x, double s, ad_tensor **out) {
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
    un_ctx c = {k, s};
    nditer_run(&it, base, un_inner, &c);
    *out = y;
    return AD_OK;
}

ad_status fwd_unary(const op_args *a, ad_tensor **out) { return run_unary(a->in[0], 0, out); }

ad_status fwd_scalar(const op_args *a, ad_tensor **out) {
    const ad_tensor *x = a->in[0];
    double s = a->fargs[0];
    if (!ad_dtype_is_float(x->dtype) && (s != s || s != (double)(int64_t)s))
        return ad_fail(AD_ERR_DTYPE,
                       "%s: scalar %g is not an integer and the tensor is %s (a scalar never "
                       "changes a tensor's dtype; convert with to_dtype)",
                       OPNAME, s, ad_tdesc(x));
    return run_unary(x, s, out);
}
