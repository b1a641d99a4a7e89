/* nn.c - fused neural-network ops: mse_loss, cross_entropy, nll_loss,
 * layer_norm, dropout, max_pool2d (forward kernels; their gradients are in
 * backward.c).  Float32 and float64; sums accumulate in double. */
#include <math.h>
#include <string.h>

#include "nnops.h"
#include "opargs.h"

static ad_status need_float(const char *op, const ad_tensor *x, const char *what) {
    if (!ad_dtype_is_float(x->dtype))
        return ad_fail(AD_ERR_DTYPE, "%s: %s must be float32 or float64, got %s", op, what,
                       ad_tdesc(x));
    return AD_OK;
}

static ad_status same_dtype(const char *op, const ad_tensor *x, const ad_tensor *y, const char *what) {
    if (x->dtype != y->dtype)
        return ad_fail(AD_ERR_DTYPE, "%s: %s %s does not match the input %s", op, what,
                       ad_tdesc(y), ad_tdesc(x));
    return AD_OK;
}

static ad_status reduction_arg(const char *op, int64_t r) {
    if (r < 0 || r > 2)
        return ad_fail(AD_ERR_VALUE, "%s: reduction must be 0 (none), 1 (mean) or 2 (sum), got "
                       "%lld", op, (long long)r);
    return AD_OK;
}

/* Element i of a contiguous float buffer as double, and the store back. */
static inline double ld(const void *p, int dt, int64_t i) {
    return dt == AD_FLOAT32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}
static inline void stv(void *p, int dt, int64_t i, double v) {
    if (dt == AD_FLOAT32) ((float *)p)[i] = (float)v;
    else ((double *)p)[i] = v;
}

/* ---- mse_loss --------------------------------------------------------------- */
/* (x - y)^2, then none / mean / sum */
ad_status fwd_mse_loss(const op_args *a, ad_tensor **out) {
    const ad_tensor *x = a->in[0], *y = a->in[1];
    int64_t r = a->iargs[0];
    ad_status st;
    if ((st = reduction_arg(OP_NAME(a->op), r)) || (st = need_float(OP_NAME(a->op), x, "the input")) ||
        (st = same_dtype(OP_NAME(a->op), x, y, "the target")))
        return st;
    if (x->ndim != y->ndim || memcmp(T_SHAPE(x), T_SHAPE(y), x->ndim * sizeof(int64_t)))
        return ad_fail(AD_ERR_SHAPE, "mse_loss: input %s and target %s must have one shape",
                       ad_tdesc(x), ad_tdesc(y));
    ad_tensor *tx, *ty, *o;
    const void *px, *py;
    if ((st = nn_contig(x, &tx, &px))) return st;
    if ((st = nn_contig(y, &ty, &py))) goto fail1;
    if ((st = ad_tensor_empty(x->dtype, T_SHAPE(x), r ? 0 : x->ndim, &o))) goto fail2;
    int dt = x->dtype;
    double acc = 0;
    for (int64_t i = 0; i < x->numel; i++) {
        double d = ld(px, dt, i) - ld(py, dt, i);
        if (r) acc += d * d;
        else stv(o->storage->data, dt, i, d * d);
    }
    if (r) stv(o->storage->data, dt, 0, r == 1 ? acc / (double)x->numel : acc);
    *out = o;
fail2:
    ad_tensor_release(ty);
fail1:
    ad_tensor_release(tx);
    return st;
}

/* ---- cross_entropy / nll_loss ------------------------------------------------ */
static ad_status class_inputs(const char *op, const ad_tensor *x, const ad_tensor *t,
                              int64_t **ix) {
    ad_status st = need_float(op, x, "the input");
    if (st) return st;
    if (x->ndim != 2 || t->ndim != 1 || T_SHAPE(t)[0] != T_SHAPE(x)[0])
        return ad_fail(AD_ERR_SHAPE, "%s: needs input (N, C) and target (N,), got %s and %s",
                       op, ad_tdesc(x), ad_tdesc(t));
    if ((st = nn_index_buf(op, t, "the target", ix))) return st;
    int64_t c = T_SHAPE(x)[1];
    for (int64_t i = 0; i < t->numel; i++)
        if ((*ix)[i] < 0 || (*ix)[i] >= c) {
            st = ad_fail(AD_ERR_INDEX, "%s: target %lld (row %lld) is out of range for %lld "
                         "classes (input %s)", op, (long long)(*ix)[i], (long long)i,
                         (long long)c, ad_tdesc(x));
            ad_mfree(*ix);
            *ix = NULL;
            return st;
        }
    return AD_OK;
}

/* loss_i = logsumexp(x_i) - x_i[t_i] (ce), or -x_i[t_i] (nll) */
static ad_status class_loss(const op_args *a, bool ce, ad_tensor **out) {
    const ad_tensor *x = a->in[0], *t = a->in[1];
    int64_t r = a->iargs[0], *ix = NULL;
    ad_status st;
    if ((st = reduction_arg(OP_NAME(a->op), r)) || (st = class_inputs(OP_NAME(a->op), x, t, &ix))) return st;
    int64_t n = T_SHAPE(x)[0], c = T_SHAPE(x)[1];
    ad_tensor *tx = NULL, *o = NULL;
    const void *px;
    if ((st = nn_contig(x, &tx, &px))) goto done;
    if ((st = ad_tensor_empty(x->dtype, &n, r ? 0 : 1, &o))) goto done;
    int dt = x->dtype;
    double acc = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t row = i * c;
        double loss = -ld(px, dt, row + ix[i]);
        if (ce) {
            double m = -INFINITY, s = 0;
            for (int64_t j = 0; j < c; j++) m = fmax(m, ld(px, dt, row + j));
            if (isinf(m)) {
                s = 1; /* all -inf (or an inf): keep the result inf/nan as torch does */
            } else {
                for (int64_t j = 0; j < c; j++) s += exp(ld(px, dt, row + j) - m);
            }
            loss += m + log(s);
        }
        if (r) acc += loss;
        else stv(o->storage->data, dt, i, loss);
    }
    if (r) stv(o->storage->data, dt, 0, r == 1 ? acc / (double)n : acc);
done:
    ad_tensor_release(tx);
    ad_mfree(ix);
    if (!st) *out = o;
    return st;
}

ad_status fwd_cross_entropy(const op_args *a, ad_tensor **out) { return class_loss(a, true, out); }
ad_status fwd_nll_loss(const op_args *a, ad_tensor **out) { return class_loss(a, false, out); }

/* ---- layer_norm ---------------------------------------------------------------- */
/* (x - mean) / sqrt(var + eps) * weight + bias over the last k dims (biased
   variance, as PyTorch) */
ad_status fwd_layer_norm(const op_args *a, ad_tensor **out) {
    const ad_tensor *x = a->in[0];
    const ad_tensor *w = a->n_in > 1 ? a->in[1] : NULL, *b = a->n_in > 2 ? a->in[2] : NULL;
    int64_t k = a->iargs[0];
    double eps = a->fargs[0];
    ad_status st;
    if (a->n_in > 3)
        return ad_fail(AD_ERR_VALUE, "layer_norm: takes x, weight and bias, got %d inputs",
                       a->n_in);
    if ((st = need_float(OP_NAME(a->op), x, "the input"))) return st;
    if (k < 1 || k > x->ndim)
        return ad_fail(AD_ERR_SHAPE, "layer_norm: cannot normalize the last %lld dims of %s",
                       (long long)k, ad_tdesc(x));
    for (int i = 1; i < a->n_in; i++) {
        const ad_tensor *p = a->in[i];
        if ((st = same_dtype(OP_NAME(a->op), x, p, i == 1 ? "weight" : "bias"))) return st;
        if (p->ndim != k || memcmp(T_SHAPE(p), T_SHAPE(x) + x->ndim - k, k * sizeof(int64_t)))
            return ad_fail(AD_ERR_SHAPE, "layer_norm: %s %s must have the normalized shape %s",
                           i == 1 ? "weight" : "bias", ad_tdesc(p),
                           ad_fmt_shape(T_SHAPE(x) + x->ndim - k, (int)k));
    }
    if (!(eps >= 0)) return ad_fail(AD_ERR_VALUE, "layer_norm: eps must be >= 0, got %g", eps);
    int64_t dcols = 1;
    for (int i = x->ndim - (int)k; i < x->ndim; i++) dcols *= T_SHAPE(x)[i];
    int64_t rows = dcols ? x->numel / dcols : 0;
    ad_tensor *tx = NULL, *tw = NULL, *tb = NULL, *o = NULL;
    const void *px, *pw = NULL, *pb = NULL;
    if ((st = nn_contig(x, &tx, &px))) goto done;
    if (w && (st = nn_contig(w, &tw, &pw))) goto done;
    if (b && (st = nn_contig(b, &tb, &pb))) goto done;
    if ((st = ad_tensor_empty(x->dtype, T_SHAPE(x), x->ndim, &o))) goto done;
    int dt = x->dtype;
    for (int64_t r = 0; r < rows; r++) {
        int64_t base = r * dcols;
        double mean = 0, var = 0;
        for (int64_t j = 0; j < dcols; j++) mean += ld(px, dt, base + j);
        mean /= (double)dcols;
        for (int64_t j = 0; j < dcols; j++) {
            double d = ld(px, dt, base + j) - mean;
            var += d * d;
        }
        var /= (double)dcols;
        double rstd = 1.0 / sqrt(var + eps);
        for (int64_t j = 0; j < dcols; j++) {
            double v = (ld(px, dt, base + j) - mean) * rstd;
            if (pw) v *= ld(pw, dt, j);
            if (pb) v += ld(pb, dt, j);
            stv(o->storage->data, dt, base + j, v);
        }
    }
done:
    ad_tensor_release(tx);
    ad_tensor_release(tw);
    ad_tensor_release(tb);
    if (!st) *out = o;
    return st;
}

/* ---- dropout --------------------------------------------------------------------- */
/* Element i (row-major) is kept when a hash of (seed, i) drawn uniform in
   [0, 1) is >= p, and scaled by 1 / (1 - p): the mask depends only on seed
   and position, so the backward is dropout of the gradient with the same
   seed. */
static inline double drop_u(uint64_t seed, int64_t i) {
    uint64_t z = seed + (uint64_t)(i + 1) * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

ad_status fwd_dropout(const op_args *a, ad_tensor **out) {
    const ad_tensor *x = a->in[0];
    double p = a->fargs[0];
    uint64_t seed = (uint64_t)a->iargs[0];
    ad_status st;
    if ((st = need_float(OP_NAME(a->op), x, "the input"))) return st;
    if (!(p >= 0 && p <= 1))
        return ad_fail(AD_ERR_VALUE, "dropout: p must be in [0, 1], got %g", p);
    ad_tensor *tx, *o;
    const void *px;
    if ((st = nn_contig(x, &tx, &px))) return st;
    if ((st = ad_tensor_empty(x->dtype, T_SHAPE(x), x->ndim, &o))) {
        ad_tensor_release(tx);
        return st;
    }
    double scale = p < 1 ? 1.0 / (1.0 - p) : 0.0;
    int dt = x->dtype;
    for (int64_t i = 0; i < x->numel; i++)
        stv(o->storage->data, dt, i, drop_u(seed, i) >= p ? ld(px, dt, i) * scale : 0.0);
    ad_tensor_release(tx);
    *out = o;
    return AD_OK;
}

/* ---- max_pool2d ---------------------------------------------------------------------- */
typedef struct pool_geom {
    int64_t n, c, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw;
} pool_geom;

static ad_status pool_geometry(int op, const ad_tensor *x, const int64_t *ia, pool_geom *g) {
    ad_status st = need_float(OP_NAME(op), x, "the input");
    if (st) return st;
    if (x->ndim != 4)
        return ad_fail(AD_ERR_SHAPE, "%s: needs an input (N, C, H, W), got %s", OP_NAME(op),
                       ad_tdesc(x));
    pool_args p;
    if ((st = pool_args_decode(op, ia, &p))) return st;
    g->n = T_SHAPE(x)[0], g->c = T_SHAPE(x)[1], g->h = T_SHAPE(x)[2], g->w = T_SHAPE(x)[3];
    g->kh = p.kh, g->kw = p.kw, g->sh = p.sh, g->sw = p.sw;
    g->ph = p.ph, g->pw = p.pw, g->dh = p.dh, g->dw = p.dw;
    if ((st = win_out(op, "height", g->h, g->kh, g->sh, g->ph, g->dh, x, &g->oh))) return st;
    return win_out(op, "width", g->w, g->kw, g->sw, g->pw, g->dw, x, &g->ow);
}

/* The flat index (in the h*w plane) of the first maximum of window (i, j),
   NaN counting as the maximum; -1 when the window sees only padding. */
static int64_t pool_argmax(const pool_geom *g, const void *plane, int dt, int64_t i,
                           int64_t j) {
    int64_t best = -1;
    double m = 0;
    for (int64_t ki = 0; ki < g->kh; ki++) {
        int64_t y = i * g->sh - g->ph + ki * g->dh;
        if (y < 0 || y >= g->h) continue;
        for (int64_t kj = 0; kj < g->kw; kj++) {
            int64_t x = j * g->sw - g->pw + kj * g->dw;
            if (x < 0 || x >= g->w) continue;
            double v = ld(plane, dt, y * g->w + x);
            if (best < 0 || v > m || (isnan(v) && !isnan(m))) {
                best = y * g->w + x;
                m = v;
            }
        }
    }
    return best;
}

/* Every max-pooling window of the contiguous x: forward (gy NULL) stores
   its maximum (-inf for a window wholly in the padding) at the window's
   output index of y; backward adds gy there into y (x's shape) at the
   window's argmax; gather (gy x-shaped) stores gy's value at the argmax (0
   for a window wholly in the padding) at the window's output index. */
static void pool_max_walk(const pool_geom *g, const void *px, const void *gy, bool gather,
                          int dt, void *y) {
    size_t es = ad_dtype_size_(dt);
    for (int64_t p = 0; p < g->n * g->c; p++) {
        const char *plane = (const char *)px + (size_t)(p * g->h * g->w) * es;
        for (int64_t i = 0; i < g->oh; i++)
            for (int64_t j = 0; j < g->ow; j++) {
                int64_t at = pool_argmax(g, plane, dt, i, j), o = (p * g->oh + i) * g->ow + j;
                if (!gy) {
                    stv(y, dt, o, at < 0 ? -INFINITY : ld(plane, dt, at));
                } else if (gather) {
                    stv(y, dt, o, at < 0 ? 0.0 : ld(gy, dt, p * g->h * g->w + at));
                } else if (at >= 0) {
                    int64_t t = p * g->h * g->w + at;
                    stv(y, dt, t, ld(y, dt, t) + ld(gy, dt, o));
                }
            }
    }
}

ad_status fwd_max_pool2d(const op_args *a, ad_tensor **out) {
    const ad_tensor *x = a->in[0];
    pool_geom g;
    ad_status st = pool_geometry(a->op, x, a->iargs, &g);
    if (st) return st;
    int64_t shape[4] = {g.n, g.c, g.oh, g.ow};
    ad_tensor *tx, *o;
    const void *px;
    if ((st = nn_contig(x, &tx, &px))) return st;
    if ((st = ad_tensor_empty(x->dtype, shape, 4, &o))) {
        ad_tensor_release(tx);
        return st;
    }
    pool_max_walk(&g, px, NULL, false, x->dtype, o->storage->data);
    ad_tensor_release(tx);
    *out = o;
    return AD_OK;
}

/* gx[argmax of each window] += gy (the first maximum takes a tie) */
ad_status fwd_max_pool2d_backward(const op_args *a, ad_tensor **out) {
    const ad_tensor *x = a->in[0], *gy = a->in[1];
    pool_geom g;
    ad_status st = pool_geometry(a->op, x, a->iargs, &g);
    if (st || (st = same_dtype(OP_NAME(a->op), x, gy, "the gradient"))) return st;
    int64_t shape[4] = {g.n, g.c, g.oh, g.ow};
    if (gy->ndim != 4 || memcmp(T_SHAPE(gy), shape, sizeof shape))
        return ad_fail(AD_ERR_SHAPE, "max_pool2d_backward: gradient %s should be %s",
                       ad_tdesc(gy), ad_fmt_shape(shape, 4));
    ad_tensor *tx = NULL, *tg = NULL, *o = NULL;
    const void *px, *pg;
    if ((st = nn_contig(x, &tx, &px)) || (st = nn_contig(gy, &tg, &pg)) ||
        (st = ad_tensor_zeros(x->dtype, T_SHAPE(x), 4, &o)))
        goto done;
    pool_max_walk(&g, px, pg, false, x->dtype, o->storage->data);
done:
    ad_tensor_release(tx);
    ad_tensor_release(tg);
    if (!st) *out = o;
    return st;
}

/* out[window] = t[first maximum of x in the window]: the adjoint of
   max_pool2d_backward in its gradient argument (t has x's shape) */
ad_status fwd_max_pool2d_gather(const op_args *a, ad_tensor **out) {
    const ad_tensor *x = a->in[0], *t = a->in[1];
    pool_geom g;
    ad_status st = pool_geometry(a->op, x, a->iargs, &g);
    if (st || (st = same_dtype(OP_NAME(a->op), x, t, "the gathered tensor"))) return st;
    if (t->ndim != 4 || memcmp(T_SHAPE(t), T_SHAPE(x), 4 * sizeof(int64_t)))
        return ad_fail(AD_ERR_SHAPE, "max_pool2d_gather: the gathered tensor %s should have the "
                       "input's shape %s", ad_tdesc(t), ad_fmt_shape(T_SHAPE(x), 4));
    int64_t shape[4] = {g.n, g.c, g.oh, g.ow};
    ad_tensor *tx = NULL, *tt = NULL, *o = NULL;
    const void *px, *pt;
    if ((st = nn_contig(x, &tx, &px)) || (st = nn_contig(t, &tt, &pt)) ||
        (st = ad_tensor_empty(x->dtype, shape, 4, &o)))
        goto done;
    pool_max_walk(&g, px, pt, true, x->dtype, o->storage->data);
done:
    ad_tensor_release(tx);
    ad_tensor_release(tt);
    if (!st) *out = o;
    return st;
}
