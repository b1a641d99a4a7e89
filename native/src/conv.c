/* conv.c - conv2d, conv_transpose2d and conv2d's weight gradient, all by
 * im2col / col2im around the packed GEMM.
 *
 * One geometry serves the three ops: a convolution from an input (n, c, h, w)
 * to an output (n, o, oh, ow) with weight (o, c/groups, kh, kw).
 *   conv2d            input -> output      y_g = W_g @ im2col(x_g)
 *   conv_transpose2d  output -> input      x_g = col2im(W_g^T @ y_g)  (conv2d's input gradient)
 *   conv2d_weight_grad                     dW_g = sum_n y_g @ im2col(x_g)^T
 */
#include <string.h>

#include "gemm.h"
#include "nnops.h"
#include "opargs.h"

typedef struct conv_geom {
    int op;
    int64_t n, c, h, w;     /* convolution input */
    int64_t o, oh, ow;      /* convolution output */
    int64_t kh, kw, sh, sw, ph, pw, dh, dw, groups;
    int64_t cg, og, k, l;   /* per group: channels in/out, rows of im2col (cg*kh*kw), oh*ow */
} conv_geom;

/* The geometry's arguments from the op's iargs (opargs.c checks them). */
static ad_status params(conv_geom *g, int op, const int64_t *ia, conv_args *c) {
    ad_status st = conv_args_decode(op, ia, c);
    g->op = op;
    g->sh = c->sh, g->sw = c->sw, g->ph = c->ph, g->pw = c->pw;
    g->dh = c->dh, g->dw = c->dw, g->groups = c->groups, g->kh = c->kh, g->kw = c->kw;
    return st;
}

/* Output size of the convolution over input (h, w). */
static ad_status out_size(conv_geom *g, const ad_tensor *x) {
    if (g->kh < 1 || g->kw < 1)
        return ad_fail(AD_ERR_SHAPE, "%s: kernel (%lld, %lld) is empty (input %s)",
                       OP_NAME(g->op), (long long)g->kh, (long long)g->kw, ad_tdesc(x));
    ad_status st = win_out(g->op, "height", g->h, g->kh, g->sh, g->ph, g->dh, x, &g->oh);
    return st ? st : win_out(g->op, "width", g->w, g->kw, g->sw, g->pw, g->dw, x, &g->ow);
}

static void finish(conv_geom *g) {
    g->cg = g->c / g->groups;
    g->og = g->o / g->groups;
    g->k = g->cg * g->kh * g->kw;
    g->l = g->oh * g->ow;
}

static ad_status check_operands(int op, const ad_tensor *a, const ad_tensor *b) {
    if (a->dtype != b->dtype || !ad_dtype_is_float(a->dtype))
        return ad_fail(AD_ERR_DTYPE, "%s: operands must share a float dtype, got %s and %s",
                       OP_NAME(op), ad_tdesc(a), ad_tdesc(b));
    if (a->ndim != 4 || b->ndim != 4)
        return ad_fail(AD_ERR_SHAPE, "%s: operands must be 4-d, got %s and %s", OP_NAME(op),
                       ad_tdesc(a), ad_tdesc(b));
    return AD_OK;
}

static ad_status groups_divide(const conv_geom *g, const ad_tensor *x, const ad_tensor *w) {
    if (g->c % g->groups || g->o % g->groups)
        return ad_fail(AD_ERR_SHAPE, "%s: %lld groups must divide the %lld input and %lld "
                       "output channels (input %s, weight %s)", OP_NAME(g->op),
                       (long long)g->groups, (long long)g->c, (long long)g->o, ad_tdesc(x),
                       ad_tdesc(w));
    return AD_OK;
}

/* ---- kernels, one per float type -------------------------------------------- */
#define DEF_CONV_KERNELS(T, SUF)                                                           \
    /* cols[(c*kh + i)*kw + j][y*ow + x] = in[c][y*sh - ph + i*dh][x*sw - pw + j*dw] */     \
    static void im2col_##SUF(const conv_geom *g, const T *in, T *cols) {                   \
        for (int64_t c = 0; c < g->cg; c++)                                                \
            for (int64_t i = 0; i < g->kh; i++)                                            \
                for (int64_t j = 0; j < g->kw; j++) {                                      \
                    T *row = cols + ((c * g->kh + i) * g->kw + j) * g->l;                  \
                    for (int64_t y = 0; y < g->oh; y++) {                                  \
                        int64_t iy = y * g->sh - g->ph + i * g->dh;                        \
                        T *r = row + y * g->ow;                                            \
                        if (iy < 0 || iy >= g->h) {                                        \
                            for (int64_t x = 0; x < g->ow; x++) r[x] = 0;                  \
                            continue;                                                      \
                        }                                                                  \
                        const T *src = in + (c * g->h + iy) * g->w;                        \
                        for (int64_t x = 0; x < g->ow; x++) {                              \
                            int64_t ix = x * g->sw - g->pw + j * g->dw;                    \
                            r[x] = (ix < 0 || ix >= g->w) ? 0 : src[ix];                   \
                        }                                                                  \
                    }                                                                      \
                }                                                                          \
    }                                                                                      \
    /* the adjoint of im2col: in[...] += cols[...] */                                      \
    static void col2im_##SUF(const conv_geom *g, const T *cols, T *in) {                   \
        for (int64_t c = 0; c < g->cg; c++)                                                \
            for (int64_t i = 0; i < g->kh; i++)                                            \
                for (int64_t j = 0; j < g->kw; j++) {                                      \
                    const T *row = cols + ((c * g->kh + i) * g->kw + j) * g->l;            \
                    for (int64_t y = 0; y < g->oh; y++) {                                  \
                        int64_t iy = y * g->sh - g->ph + i * g->dh;                        \
                        if (iy < 0 || iy >= g->h) continue;                                \
                        const T *r = row + y * g->ow;                                      \
                        T *dst = in + (c * g->h + iy) * g->w;                              \
                        for (int64_t x = 0; x < g->ow; x++) {                              \
                            int64_t ix = x * g->sw - g->pw + j * g->dw;                    \
                            if (ix >= 0 && ix < g->w) dst[ix] += r[x];                     \
                        }                                                                  \
                    }                                                                      \
                }                                                                          \
    }                                                                                      \
    static void conv_fwd_##SUF(const conv_geom *g, const T *x, const T *w, T *y, T *cols) { \
        for (int64_t n = 0; n < g->n; n++)                                                 \
            for (int64_t q = 0; q < g->groups; q++) {                                      \
                im2col_##SUF(g, x + (n * g->c + q * g->cg) * g->h * g->w, cols);           \
                gemm_##SUF(g->og, g->l, g->k, w + q * g->og * g->k, g->k, 1, cols, g->l, 1, \
                           y + (n * g->o + q * g->og) * g->l, g->l, 1);                    \
            }                                                                              \
    }                                                                                      \
    /* x = conv2d's input gradient of y (x zeroed by the caller) */                        \
    static void conv_bwd_input_##SUF(const conv_geom *g, const T *y, const T *w, T *x,     \
                                     T *cols) {                                            \
        for (int64_t n = 0; n < g->n; n++)                                                 \
            for (int64_t q = 0; q < g->groups; q++) {                                      \
                gemm_##SUF(g->k, g->l, g->og, w + q * g->og * g->k, 1, g->k,               \
                           y + (n * g->o + q * g->og) * g->l, g->l, 1, cols, g->l, 1);     \
                col2im_##SUF(g, cols, x + (n * g->c + q * g->cg) * g->h * g->w);           \
            }                                                                              \
    }                                                                                      \
    /* dw (zeroed by the caller) += y_g @ im2col(x_g)^T over the batch */                  \
    static void conv_bwd_weight_##SUF(const conv_geom *g, const T *x, const T *y, T *dw,   \
                                      T *cols, T *tmp) {                                   \
        for (int64_t n = 0; n < g->n; n++)                                                 \
            for (int64_t q = 0; q < g->groups; q++) {                                      \
                im2col_##SUF(g, x + (n * g->c + q * g->cg) * g->h * g->w, cols);           \
                gemm_##SUF(g->og, g->k, g->l, y + (n * g->o + q * g->og) * g->l, g->l, 1,  \
                           cols, 1, g->l, tmp, g->k, 1);                                   \
                T *d = dw + q * g->og * g->k;                                              \
                for (int64_t i = 0; i < g->og * g->k; i++) d[i] += tmp[i];                 \
            }                                                                              \
    }

DEF_CONV_KERNELS(float, f32)
DEF_CONV_KERNELS(double, f64)

enum { RUN_FWD, RUN_BWD_INPUT, RUN_BWD_WEIGHT };

/* Runs one of the three kernels: a, b are the two operands (made
   contiguous), y the result (zeroed for the accumulating kernels). */
static ad_status run(int which, const conv_geom *g, const ad_tensor *a, const ad_tensor *b,
                     const int64_t *yshape, ad_tensor **out) {
    ad_tensor *ta = NULL, *tb = NULL, *y = NULL;
    const void *pa, *pb;
    ad_status st;
    size_t es = ad_dtype_size_(a->dtype);
    void *cols = NULL;
    size_t ncols = (size_t)(g->k * g->l) + (which == RUN_BWD_WEIGHT ? (size_t)(g->og * g->k) : 0);
    if ((st = nn_contig(a, &ta, &pa)) || (st = nn_contig(b, &tb, &pb))) goto done;
    if ((st = ad_tensor_zeros(a->dtype, yshape, 4, &y))) goto done;
    if (y->numel == 0 || a->numel == 0 || b->numel == 0) goto done;
    if (!(cols = ad_malloc((ncols ? ncols : 1) * es))) {
        st = ad_fail_nomem(OP_NAME(g->op));
        goto done;
    }
    void *py = y->storage->data;
    if (a->dtype == AD_FLOAT32) {
        if (which == RUN_FWD) conv_fwd_f32(g, pa, pb, py, cols);
        else if (which == RUN_BWD_INPUT) conv_bwd_input_f32(g, pa, pb, py, cols);
        else conv_bwd_weight_f32(g, pa, pb, py, cols, (float *)cols + g->k * g->l);
    } else {
        if (which == RUN_FWD) conv_fwd_f64(g, pa, pb, py, cols);
        else if (which == RUN_BWD_INPUT) conv_bwd_input_f64(g, pa, pb, py, cols);
        else conv_bwd_weight_f64(g, pa, pb, py, cols, (double *)cols + g->k * g->l);
    }
done:
    ad_mfree(cols);
    ad_tensor_release(ta);
    ad_tensor_release(tb);
    if (st) ad_tensor_release(y);
    else *out = y;
    return st;
}

/* ---- ops ---------------------------------------------------------------------- */
ad_status fwd_conv2d(const op_args *a, ad_tensor **out) {
    const ad_tensor *x = a->in[0], *w = a->in[1];
    conv_geom g;
    conv_args c;
    ad_status st = check_operands(a->op, x, w);
    if (st || (st = params(&g, a->op, a->iargs, &c))) return st;
    g.n = T_SHAPE(x)[0], g.c = T_SHAPE(x)[1], g.h = T_SHAPE(x)[2], g.w = T_SHAPE(x)[3];
    g.o = T_SHAPE(w)[0], g.kh = T_SHAPE(w)[2], g.kw = T_SHAPE(w)[3];
    if ((st = groups_divide(&g, x, w))) return st;
    if (T_SHAPE(w)[1] != g.c / g.groups)
        return ad_fail(AD_ERR_SHAPE, "conv2d: weight %s needs %lld input channels per group "
                       "for input %s with %lld groups", ad_tdesc(w), (long long)(g.c / g.groups),
                       ad_tdesc(x), (long long)g.groups);
    if ((st = out_size(&g, x))) return st;
    finish(&g);
    int64_t shape[4] = {g.n, g.o, g.oh, g.ow};
    return run(RUN_FWD, &g, x, w, shape, out);
}

/* One spatial size of conv_transpose2d's output:
   (in - 1) stride - 2 pad + dil (k - 1) + out_pad + 1, each term checked. */
static ad_status tr_size(const conv_geom *g, const char *axis, int64_t in, int64_t k,
                         int64_t stride, int64_t pad, int64_t dil, int64_t opad,
                         const ad_tensor *x, const ad_tensor *w, int64_t *out) {
    int64_t grown, span, v;
    if (in == 0) { /* an empty input gives an empty output whatever the padding */
        *out = 0;
        return AD_OK;
    }
    if (__builtin_mul_overflow(in - 1, stride, &grown))
        return ad_fail(AD_ERR_VALUE, "conv_transpose2d: stride %lld makes the output %s too "
                       "large for input %s", (long long)stride, axis, ad_tdesc(x));
    if (k < 1 || __builtin_mul_overflow(dil, k - 1, &span) ||
        __builtin_add_overflow(grown, span + opad + 1, &v))
        return ad_fail(AD_ERR_VALUE, "conv_transpose2d: dilation %lld and kernel %s %lld make "
                       "the output too large (input %s, weight %s)", (long long)dil, axis,
                       (long long)k, ad_tdesc(x), ad_tdesc(w));
    if ((v -= 2 * pad) < 0)
        return ad_fail(AD_ERR_SHAPE, "conv_transpose2d: padding %lld leaves no output %s for "
                       "input %s and weight %s", (long long)pad, axis, ad_tdesc(x), ad_tdesc(w));
    (void)g;
    *out = v;
    return AD_OK;
}

/* x (n, cin, hi, wi), w (cin, cout/groups, kh, kw): conv2d's input gradient,
   cin playing o */
ad_status fwd_conv_transpose2d(const op_args *a, ad_tensor **out) {
    const ad_tensor *x = a->in[0], *w = a->in[1];
    conv_geom g;
    conv_args c;
    ad_status st = check_operands(a->op, x, w);
    if (st || (st = params(&g, a->op, a->iargs, &c))) return st;
    g.n = T_SHAPE(x)[0], g.o = T_SHAPE(x)[1], g.oh = T_SHAPE(x)[2], g.ow = T_SHAPE(x)[3];
    g.c = T_SHAPE(w)[1], g.kh = T_SHAPE(w)[2], g.kw = T_SHAPE(w)[3];
    if (__builtin_mul_overflow(g.c, g.groups, &g.c))
        return ad_fail(AD_ERR_SHAPE, "conv_transpose2d: weight %s has too many channels for "
                       "%lld groups", ad_tdesc(w), (long long)g.groups);
    if ((st = groups_divide(&g, x, w))) return st;
    if (T_SHAPE(w)[0] != g.o)
        return ad_fail(AD_ERR_SHAPE, "conv_transpose2d: weight %s needs %lld input channels "
                       "(input %s)", ad_tdesc(w), (long long)g.o, ad_tdesc(x));
    if ((st = tr_size(&g, "height", g.oh, g.kh, g.sh, g.ph, g.dh, c.oph, x, w, &g.h)) ||
        (st = tr_size(&g, "width", g.ow, g.kw, g.sw, g.pw, g.dw, c.opw, x, w, &g.w)))
        return st;
    if (g.oh == 0 || g.ow == 0) g.h = g.w = 0;
    finish(&g);
    int64_t shape[4] = {g.n, g.c, g.h, g.w};
    return run(RUN_BWD_INPUT, &g, x, w, shape, out);
}

/* x (n, c, h, w), gy (n, o, oh, ow) -> dW (o, c/groups, kh, kw) */
ad_status fwd_conv2d_weight_grad(const op_args *a, ad_tensor **out) {
    const ad_tensor *x = a->in[0], *gy = a->in[1];
    conv_geom g;
    conv_args c;
    ad_status st = check_operands(a->op, x, gy);
    if (st || (st = params(&g, a->op, a->iargs, &c))) return st;
    g.n = T_SHAPE(x)[0], g.c = T_SHAPE(x)[1], g.h = T_SHAPE(x)[2], g.w = T_SHAPE(x)[3];
    g.o = T_SHAPE(gy)[1];
    if ((st = groups_divide(&g, x, gy)) || (st = out_size(&g, x))) return st;
    if (T_SHAPE(gy)[0] != g.n || T_SHAPE(gy)[2] != g.oh || T_SHAPE(gy)[3] != g.ow)
        return ad_fail(AD_ERR_SHAPE, "conv2d_weight_grad: gradient %s does not match input %s",
                       ad_tdesc(gy), ad_tdesc(x));
    finish(&g);
    int64_t shape[4] = {g.o, g.cg, g.kh, g.kw};
    return run(RUN_BWD_WEIGHT, &g, x, gy, shape, out);
}
