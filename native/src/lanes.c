/* lanes.c - ops along one dim: logsumexp, softmax, log_softmax, cumsum.
 *
 * Each op walks the input's lanes (every position of the other dims) with the
 * shared n-d iterator and hands each lane (pointer, stride, length) to a typed
 * kernel, so any layout works without a copy.  The softmax family subtracts
 * the lane's maximum before exponentiating (numerically stable) and
 * accumulates in double.
 */
#include <math.h>
#include <string.h>

#include "strided.h"

/* One lane: x[i * sx] for i < len into y (y[0] only for a reduction). */
typedef void (*lane_fn)(const void *x, int64_t sx, void *y, int64_t sy, int64_t len, int flag);

/* max of a lane (NaN skipped: it reaches the result through the sum) */
#define LANE_MAX(T)                                                                     \
    double m = -INFINITY;                                                               \
    for (int64_t i = 0; i < len; i++)                                                   \
        if ((double)X[i * sx] > m) m = (double)X[i * sx];                               \
    double shift = isfinite(m) ? m : 0.0;

#define LANE_KERNELS(T, SUF)                                                            \
    static void lse_##SUF(const void *px, int64_t sx, void *py, int64_t sy, int64_t len, \
                          int flag) {                                                   \
        const T *X = px;                                                                \
        (void)sy, (void)flag;                                                           \
        LANE_MAX(T)                                                                     \
        double acc = 0;                                                                 \
        for (int64_t i = 0; i < len; i++) acc += exp((double)X[i * sx] - shift);        \
        *(T *)py = (T)(isinf(m) ? m : shift + log(acc));                                \
    }                                                                                   \
    /* flag 0: softmax, 1: log_softmax */                                               \
    static void softmax_##SUF(const void *px, int64_t sx, void *py, int64_t sy,          \
                              int64_t len, int flag) {                                  \
        const T *X = px;                                                                \
        T *Y = py;                                                                      \
        LANE_MAX(T)                                                                     \
        double acc = 0;                                                                 \
        for (int64_t i = 0; i < len; i++) acc += exp((double)X[i * sx] - shift);        \
        if (flag) {                                                                     \
            double lz = shift + log(acc);                                               \
            for (int64_t i = 0; i < len; i++) Y[i * sy] = (T)((double)X[i * sx] - lz);  \
        } else {                                                                        \
            for (int64_t i = 0; i < len; i++)                                           \
                Y[i * sy] = (T)(exp((double)X[i * sx] - shift) / acc);                  \
        }                                                                               \
    }                                                                                   \
    /* flag 1: reversed (sums from the end), the backward of cumsum */                  \
    static void cumsum_##SUF(const void *px, int64_t sx, void *py, int64_t sy,           \
                             int64_t len, int flag) {                                   \
        const T *X = px;                                                                \
        T *Y = py;                                                                      \
        double acc = 0;                                                                 \
        for (int64_t k = 0; k < len; k++) {                                             \
            int64_t i = flag ? len - 1 - k : k;                                         \
            acc += (double)X[i * sx];                                                   \
            Y[i * sy] = (T)acc;                                                         \
        }                                                                               \
    }

LANE_KERNELS(float, f32)
LANE_KERNELS(double, f64)

/* integer cumsum stays exact (int64 wraps through uint64 instead of UB) */
static void cumsum_i64(const void *px, int64_t sx, void *py, int64_t sy, int64_t len,
                       int flag) {
    const int64_t *X = px;
    int64_t *Y = py;
    uint64_t acc = 0;
    for (int64_t k = 0; k < len; k++) {
        int64_t i = flag ? len - 1 - k : k;
        acc += (uint64_t)X[i * sx];
        Y[i * sy] = (int64_t)acc;
    }
}

enum { L_LSE, L_SOFTMAX, L_CUMSUM };
static const lane_fn lane_table[3][6] = {
    [L_LSE] = {[AD_FLOAT32] = lse_f32, [AD_FLOAT64] = lse_f64},
    [L_SOFTMAX] = {[AD_FLOAT32] = softmax_f32, [AD_FLOAT64] = softmax_f64},
    [L_CUMSUM] = {[AD_FLOAT32] = cumsum_f32, [AD_FLOAT64] = cumsum_f64, [AD_INT64] = cumsum_i64},
};

typedef struct {
    lane_fn fn;
    int64_t len, xs, ys; /* lane length and strides along the dim */
    size_t es;
    int flag;
} lane_ctx;

static void lane_inner(void *ctx, int64_t n, char **p, const int64_t *s) {
    const lane_ctx *c = ctx;
    for (int64_t i = 0; i < n; i++)
        c->fn(p[1] + i * s[1] * (int64_t)c->es, c->xs, p[0] + i * s[0] * (int64_t)c->es, c->ys,
              c->len, c->flag);
}

/* Runs kind along dim of x.  reduce: the output has size 1 on dim (dropped
   unless keepdim), else x's shape.  A 0-d input is one lane of length 1. */
static ad_status run_lanes(const char *op, const ad_tensor *x, int64_t dim, int kind, bool reduce, bool keepdim,
                           int flag, ad_tensor **out) {
    lane_fn fn = lane_table[kind][x->dtype];
    if (!fn)
        return ad_fail(AD_ERR_DTYPE, "%s: not supported for %s (input %s)", op,
                       ad_dtype_name_(x->dtype), ad_tdesc(x));
    int nd = x->ndim ? x->ndim : 1;
    if (dim < -nd || dim >= nd)
        return ad_fail(AD_ERR_INDEX, "%s: dim %lld out of range for %s (%d dims)", op,
                       (long long)dim, ad_tdesc(x), x->ndim);
    if (dim < 0) dim += nd;
    int64_t one = 1;
    const int64_t *xshape = x->ndim ? T_SHAPE(x) : &one, *xstr = x->ndim ? T_STRIDES(x) : &one;
    int64_t kshape[AD_MAX_DIMS], oshape[AD_MAX_DIMS], ostr[AD_MAX_DIMS], istr[AD_MAX_DIMS];
    int on = 0;
    for (int i = 0; i < nd; i++) {
        kshape[i] = i == dim ? 1 : xshape[i];
        istr[i] = i == dim ? 0 : xstr[i];
        if (!reduce || i != dim || keepdim) oshape[on++] = reduce ? kshape[i] : xshape[i];
    }
    if (!x->ndim) on = 0;
    ad_tensor *y;
    ad_status st = ad_tensor_empty(x->dtype, oshape, on, &y);
    if (st) return st;
    /* contiguous strides of the output over x's shape (dim kept as 1 or len) */
    int64_t s = 1;
    for (int i = nd - 1; i >= 0; i--) {
        ostr[i] = i == dim ? 0 : s;
        s *= (reduce && i == dim) ? 1 : xshape[i];
    }
    lane_ctx c = {fn, xshape[dim], xstr[dim], reduce ? 0 : ostr[dim], ad_dtype_size_(x->dtype),
                  flag};
    if (!reduce) { /* the output's stride along dim */
        int64_t t = 1;
        for (int i = nd - 1; i > dim; i--) t *= xshape[i];
        c.ys = t;
    }
    const int64_t *strides[2] = {ostr, istr};
    size_t es[2] = {c.es, c.es};
    nditer it;
    nditer_init(&it, 2, nd, kshape, strides, es);
    char *base[2] = {ad_ptr(y), ad_ptr(x)};
    nditer_run(&it, base, lane_inner, &c);
    *out = y;
    return AD_OK;
}

/* logsumexp: iargs {dim, keepdim} */
ad_status fwd_logsumexp(const op_args *a, ad_tensor **out) {
    return run_lanes(OP_NAME(a->op), a->in[0], a->iargs[0], L_LSE, true, a->iargs[1] != 0, 0, out);
}

/* softmax, log_softmax: iargs {dim} */
ad_status fwd_softmax(const op_args *a, ad_tensor **out) {
    return run_lanes(OP_NAME(a->op), a->in[0], a->iargs[0], L_SOFTMAX, false, false,
                     a->op == AD_OP_LOG_SOFTMAX, out);
}

/* cumsum: iargs {dim, reverse} */
ad_status fwd_cumsum(const op_args *a, ad_tensor **out) {
    return run_lanes(OP_NAME(a->op), a->in[0], a->iargs[0], L_CUMSUM, false, false, a->iargs[1] != 0, out);
}
