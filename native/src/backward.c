/* backward.c - every op's gradient, in one place, written with the
 * library's own ops (candle's backprop.rs, burn's binary()/unary() helpers).
 *
 * bw_<op>(node, out, g, grads) fills grads[i] (a new reference) for each
 * input i whose bit is set in node->tracked; the caller releases whatever
 * was filled if a later step fails.  Inputs read here are node_in(node)[i];
 * `out` is the op's output.
 */
#include <math.h>
#include <string.h>

#include "internal.h"

#define TRACKED(n, i) ((n)->tracked & (1u << (i)))
#define TRY(expr)                                                                      \
    do {                                                                               \
        ad_status st_ = (expr);                                                        \
        if (st_) return st_;                                                           \
    } while (0)

static ad_status reshape_to(const ad_tensor *t, const int64_t *shape, int nd, ad_tensor **out) {
    return ad_call(AD_OP_RESHAPE, &t, 1, shape, nd, NULL, 0, out);
}

static ad_status call2_take(int op, ad_tensor *a, const ad_tensor *b, ad_tensor **out) {
    ad_status st = ad_call2(op, a, b, out);
    ad_tensor_release(a);
    return st;
}

static ad_status calls_take(int op, ad_tensor *a, double s, ad_tensor **out) {
    ad_status st = ad_calls(op, a, s, out);
    ad_tensor_release(a);
    return st;
}

ad_status ad_sum_to_shape(const ad_tensor *g, const int64_t *shape, int nd, ad_tensor **out) {
    int64_t iargs[1 + AD_MAX_DIMS];
    int n = 0, lead = g->ndim - nd;
    iargs[n++] = 1; /* keepdim */
    for (int i = 0; i < g->ndim; i++)
        if (i < lead || (shape[i - lead] == 1 && T_SHAPE(g)[i] != 1)) iargs[n++] = i;
    if (n == 1 && lead == 0) {
        *out = ad_ref(g);
        return AD_OK;
    }
    if (n == 1) return reshape_to(g, shape, nd, out);
    ad_tensor *s;
    TRY(ad_call(AD_OP_SUM, &g, 1, iargs, n, NULL, 0, &s));
    ad_status st = reshape_to(s, shape, nd, out);
    ad_tensor_release(s);
    return st;
}

/* Gives input i its gradient t (consumed), summed over broadcast dims. */
static ad_status give(const ad_node *n, int i, ad_tensor *t, ad_tensor **grads) {
    const ad_tensor *x = node_in(n)[i];
    if (t->ndim == x->ndim && !memcmp(T_SHAPE(t), T_SHAPE(x), x->ndim * sizeof(int64_t))) {
        grads[i] = t;
        return AD_OK;
    }
    ad_status st = ad_sum_to_shape(t, T_SHAPE(x), x->ndim, &grads[i]);
    ad_tensor_release(t);
    return st;
}

/* ---- elementwise binary ----------------------------------------------------- */
/* d(a+b) = g, g */
ad_status bw_add(const ad_node *n, const ad_tensor *out, const ad_tensor *g, ad_tensor **gr) {
    (void)out;
    for (int i = 0; i < 2; i++)
        if (TRACKED(n, i)) TRY(give(n, i, ad_ref(g), gr));
    return AD_OK;
}

/* d(a-b) = g, -g */
ad_status bw_sub(const ad_node *n, const ad_tensor *out, const ad_tensor *g, ad_tensor **gr) {
    (void)out;
    if (TRACKED(n, 0)) TRY(give(n, 0, ad_ref(g), gr));
    if (TRACKED(n, 1)) {
        ad_tensor *t;
        TRY(ad_call1(AD_OP_NEG, g, &t));
        TRY(give(n, 1, t, gr));
    }
    return AD_OK;
}

/* d(a*b) = g*b, g*a */
ad_status bw_mul(const ad_node *n, const ad_tensor *out, const ad_tensor *g, ad_tensor **gr) {
    (void)out;
    ad_tensor **in = node_in(n);
    for (int i = 0; i < 2; i++) {
        if (!TRACKED(n, i)) continue;
        ad_tensor *t;
        TRY(ad_call2(AD_OP_MUL, g, in[1 - i], &t));
        TRY(give(n, i, t, gr));
    }
    return AD_OK;
}

/* d(a/b) = g/b, -g*a/b^2 = -(g/b)*out */
ad_status bw_div(const ad_node *n, const ad_tensor *out, const ad_tensor *g, ad_tensor **gr) {
    ad_tensor **in = node_in(n), *q, *t;
    TRY(ad_call2(AD_OP_DIV, g, in[1], &q));
    ad_status st = AD_OK;
    if (TRACKED(n, 1)) {
        st = ad_call2(AD_OP_MUL, q, out, &t);
        if (!st) st = calls_take(AD_OP_MUL_SCALAR, t, -1.0, &t);
        if (!st) st = give(n, 1, t, gr);
    }
    if (!st && TRACKED(n, 0)) return give(n, 0, q, gr);
    ad_tensor_release(q);
    return st;
}

/* ---- elementwise unary ------------------------------------------------------- */
/* d(-x) = -g */
ad_status bw_neg(const ad_node *n, const ad_tensor *out, const ad_tensor *g, ad_tensor **gr) {
    (void)n, (void)out;
    return ad_call1(AD_OP_NEG, g, &gr[0]);
}

/* d exp(x) = g * exp(x) = g * out */
ad_status bw_exp(const ad_node *n, const ad_tensor *out, const ad_tensor *g, ad_tensor **gr) {
    (void)n;
    return ad_call2(AD_OP_MUL, g, out, &gr[0]);
}

/* d log(x) = g / x */
ad_status bw_log(const ad_node *n, const ad_tensor *out, const ad_tensor *g, ad_tensor **gr) {
    (void)out;
    return ad_call2(AD_OP_DIV, g, node_in(n)[0], &gr[0]);
}

/* d x^2 = 2 x g */
ad_status bw_sqr(const ad_node *n, const ad_tensor *out, const ad_tensor *g, ad_tensor **gr) {
    (void)out;
    ad_tensor *t;
    TRY(ad_call2(AD_OP_MUL, g, node_in(n)[0], &t));
    return calls_take(AD_OP_MUL_SCALAR, t, 2.0, &gr[0]);
}

/* d sqrt(x) = g / (2 sqrt(x)) = 0.5 g / out */
ad_status bw_sqrt(const ad_node *n, const ad_tensor *out, const ad_tensor *g, ad_tensor **gr) {
    (void)n;
    ad_tensor *t;
    TRY(ad_call2(AD_OP_DIV, g, out, &t));
    return calls_take(AD_OP_MUL_SCALAR, t, 0.5, &gr[0]);
}

/* d relu(x) = g where out > 0, else 0 (0 at 0) */
ad_status bw_relu(const ad_node *n, const ad_tensor *out, const ad_tensor *g, ad_tensor **gr) {
    (void)n;
    ad_tensor *zero, *mask, *fmask;
    int64_t dt = out->dtype;
    TRY(ad_tensor_full(0.0, out->dtype, NULL, 0, &zero));
    ad_status st = ad_call2(AD_OP_GT, out, zero, &mask);
    ad_tensor_release(zero);
    if (st) return st;
    st = ad_call(AD_OP_TO_DTYPE, (const ad_tensor *const *)&mask, 1, &dt, 1, NULL, 0,
                           &fmask);
    ad_tensor_release(mask);
    if (st) return st;
    return call2_take(AD_OP_MUL, fmask, g, &gr[0]);
}

/* d tanh(x) = g (1 - tanh^2) = g (1 - out^2) */
ad_status bw_tanh(const ad_node *n, const ad_tensor *out, const ad_tensor *g, ad_tensor **gr) {
    (void)n;
    ad_tensor *t;
    TRY(ad_call1(AD_OP_SQR, out, &t));
    TRY(calls_take(AD_OP_RSUB_SCALAR, t, 1.0, &t));
    return call2_take(AD_OP_MUL, t, g, &gr[0]);
}

/* ---- tensor-scalar ------------------------------------------------------------- */
#define SCALAR(n) (node_fargs(n)[0])

/* d(x+s) = g */
ad_status bw_add_scalar(const ad_node *n, const ad_tensor *out, const ad_tensor *g,
                        ad_tensor **gr) {
    (void)n, (void)out;
    gr[0] = ad_ref(g);
    return AD_OK;
}

/* d(x*s) = g*s */
ad_status bw_mul_scalar(const ad_node *n, const ad_tensor *out, const ad_tensor *g,
                        ad_tensor **gr) {
    (void)out;
    return ad_calls(AD_OP_MUL_SCALAR, g, SCALAR(n), &gr[0]);
}

/* d(x/s) = g/s */
ad_status bw_div_scalar(const ad_node *n, const ad_tensor *out, const ad_tensor *g,
                        ad_tensor **gr) {
    (void)out;
    return ad_calls(AD_OP_DIV_SCALAR, g, SCALAR(n), &gr[0]);
}

/* d(s-x) = -g */
ad_status bw_rsub_scalar(const ad_node *n, const ad_tensor *out, const ad_tensor *g,
                         ad_tensor **gr) {
    (void)n, (void)out;
    return ad_call1(AD_OP_NEG, g, &gr[0]);
}

/* d(s/x) = -s/x^2 g = -(out/x) g */
ad_status bw_rdiv_scalar(const ad_node *n, const ad_tensor *out, const ad_tensor *g,
                         ad_tensor **gr) {
    ad_tensor *t;
    TRY(ad_call2(AD_OP_DIV, out, node_in(n)[0], &t));
    TRY(call2_take(AD_OP_MUL, t, g, &t));
    return calls_take(AD_OP_MUL_SCALAR, t, -1.0, &gr[0]);
}

/* d x^s = s x^(s-1) g */
ad_status bw_pow_scalar(const ad_node *n, const ad_tensor *out, const ad_tensor *g,
                        ad_tensor **gr) {
    (void)out;
    double s = SCALAR(n);
    ad_tensor *t;
    if (s == 0.0) return ad_calls(AD_OP_MUL_SCALAR, g, 0.0, &gr[0]);
    TRY(ad_calls(AD_OP_POW_SCALAR, node_in(n)[0], s - 1.0, &t));
    TRY(calls_take(AD_OP_MUL_SCALAR, t, s, &t));
    return call2_take(AD_OP_MUL, t, g, &gr[0]);
}

/* d s^x = s^x ln(s) g = out ln(s) g */
ad_status bw_pow_rscalar(const ad_node *n, const ad_tensor *out, const ad_tensor *g,
                         ad_tensor **gr) {
    ad_tensor *t;
    TRY(ad_calls(AD_OP_MUL_SCALAR, out, log(SCALAR(n)), &t));
    return call2_take(AD_OP_MUL, t, g, &gr[0]);
}

/* ---- reductions --------------------------------------------------------------- */
/* The output's shape with the reduced dims kept as 1 (iargs: keepdim, dims). */
static int keepdim_shape(const ad_node *n, const ad_tensor *x, int64_t *kshape) {
    const int64_t *ia = node_iargs(n);
    int nd = n->n_iargs - 1;
    for (int i = 0; i < x->ndim; i++) kshape[i] = nd ? T_SHAPE(x)[i] : 1;
    for (int i = 0; i < nd; i++) kshape[ia[1 + i] < 0 ? ia[1 + i] + x->ndim : ia[1 + i]] = 1;
    return x->ndim;
}

/* g reshaped to the keepdim shape (a view, no copy) */
static ad_status g_keepdim(const ad_node *n, const ad_tensor *g, ad_tensor **out) {
    int64_t k[AD_MAX_DIMS];
    int nd = keepdim_shape(n, node_in(n)[0], k);
    return reshape_to(g, k, nd, out);
}

/* d sum(x) = g broadcast back over the reduced dims */
ad_status bw_sum(const ad_node *n, const ad_tensor *out, const ad_tensor *g, ad_tensor **gr) {
    (void)out;
    const ad_tensor *x = node_in(n)[0];
    ad_tensor *gk;
    TRY(g_keepdim(n, g, &gk));
    ad_status st = ad_call(AD_OP_BROADCAST, (const ad_tensor *const *)&gk, 1, T_SHAPE(x),
                           x->ndim, NULL, 0, &gr[0]);
    ad_tensor_release(gk);
    return st;
}

/* d mean(x) = g / count, broadcast back */
ad_status bw_mean(const ad_node *n, const ad_tensor *out, const ad_tensor *g, ad_tensor **gr) {
    const ad_tensor *x = node_in(n)[0];
    double count = out->numel ? (double)x->numel / (double)out->numel : 0.0;
    ad_tensor *t;
    TRY(ad_calls(AD_OP_DIV_SCALAR, g, count, &t));
    ad_status st = bw_sum(n, out, t, gr);
    ad_tensor_release(t);
    return st;
}

/* d max(x) = g at the maxima; ties split it evenly (candle's rule) */
ad_status bw_maxmin(const ad_node *n, const ad_tensor *out, const ad_tensor *g, ad_tensor **gr) {
    const ad_tensor *x = node_in(n)[0];
    int64_t k[AD_MAX_DIMS];
    int nd = keepdim_shape(n, x, k);
    ad_tensor *outk = NULL, *mask = NULL, *fmask = NULL, *count = NULL, *gk = NULL, *share = NULL;
    int64_t dt = x->dtype;
    int64_t sum_args[1 + AD_MAX_DIMS];
    ad_status st;
    sum_args[0] = 1;
    memcpy(sum_args + 1, node_iargs(n) + 1, (n->n_iargs - 1) * sizeof(int64_t));
    if ((st = reshape_to(out, k, nd, &outk))) goto done;
    if ((st = ad_call2(AD_OP_EQ, x, outk, &mask))) goto done;
    if ((st = ad_call(AD_OP_TO_DTYPE, (const ad_tensor *const *)&mask, 1, &dt, 1, NULL, 0,
                      &fmask)))
        goto done;
    if ((st = ad_call(AD_OP_SUM, (const ad_tensor *const *)&fmask, 1, sum_args, n->n_iargs,
                      NULL, 0, &count)))
        goto done;
    if ((st = g_keepdim(n, g, &gk))) goto done;
    if ((st = ad_call2(AD_OP_DIV, gk, count, &share))) goto done;
    st = ad_call2(AD_OP_MUL, fmask, share, &gr[0]);
done:
    ad_tensor_release(outk);
    ad_tensor_release(mask);
    ad_tensor_release(fmask);
    ad_tensor_release(count);
    ad_tensor_release(gk);
    ad_tensor_release(share);
    return st;
}

/* ---- layout --------------------------------------------------------------------- */
/* d reshape(x) = g reshaped back */
ad_status bw_reshape(const ad_node *n, const ad_tensor *out, const ad_tensor *g,
                     ad_tensor **gr) {
    (void)out;
    const ad_tensor *x = node_in(n)[0];
    return reshape_to(g, T_SHAPE(x), x->ndim, &gr[0]);
}

/* d permute(x, p) = permute(g, inverse p) */
ad_status bw_permute(const ad_node *n, const ad_tensor *out, const ad_tensor *g,
                     ad_tensor **gr) {
    (void)out;
    const int64_t *p = node_iargs(n);
    int64_t inv[AD_MAX_DIMS];
    for (int i = 0; i < n->n_iargs; i++) inv[p[i] < 0 ? p[i] + n->n_iargs : p[i]] = i;
    return ad_call(AD_OP_PERMUTE, &g, 1, inv, n->n_iargs, NULL, 0, &gr[0]);
}

/* d slice(x) = zeros like x with g written into the sliced positions */
ad_status bw_slice(const ad_node *n, const ad_tensor *out, const ad_tensor *g, ad_tensor **gr) {
    (void)out;
    const ad_tensor *x = node_in(n)[0];
    ad_tensor *z, *window;
    TRY(ad_tensor_zeros(g->dtype, T_SHAPE(x), x->ndim, &z));
    const ad_tensor *zc = z;
    ad_status st = ad_call(AD_OP_SLICE, &zc, 1, node_iargs(n), 4, NULL, 0, &window);
    if (st) {
        ad_tensor_release(z);
        return st;
    }
    ad_assign(window, g);
    ad_tensor_release(window);
    gr[0] = z;
    return AD_OK;
}

/* d broadcast_to(x) = g summed over the broadcast dims */
ad_status bw_broadcast(const ad_node *n, const ad_tensor *out, const ad_tensor *g,
                       ad_tensor **gr) {
    (void)out;
    const ad_tensor *x = node_in(n)[0];
    return ad_sum_to_shape(g, T_SHAPE(x), x->ndim, &gr[0]);
}

/* contiguous, copy: g */
ad_status bw_identity(const ad_node *n, const ad_tensor *out, const ad_tensor *g,
                      ad_tensor **gr) {
    (void)n, (void)out;
    gr[0] = ad_ref(g);
    return AD_OK;
}

/* d to_dtype(x) = g converted back to x's dtype */
ad_status bw_to_dtype(const ad_node *n, const ad_tensor *out, const ad_tensor *g,
                      ad_tensor **gr) {
    (void)out;
    int64_t dt = node_in(n)[0]->dtype;
    return ad_call(AD_OP_TO_DTYPE, &g, 1, &dt, 1, NULL, 0, &gr[0]);
}

/* ---- matmul ----------------------------------------------------------------------- */
static ad_status swap_last2(const ad_tensor *t, ad_tensor **out) {
    int64_t p[AD_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) p[i] = i;
    p[t->ndim - 2] = t->ndim - 1;
    p[t->ndim - 1] = t->ndim - 2;
    return ad_call(AD_OP_PERMUTE, &t, 1, p, t->ndim, NULL, 0, out);
}

/* d(a@b) = g @ b^T, a^T @ g, each summed over broadcast batch dims.  The
   transposes are views: the GEMM packs them straight from their strides. */
ad_status bw_matmul(const ad_node *n, const ad_tensor *out, const ad_tensor *g,
                    ad_tensor **gr) {
    (void)out;
    ad_tensor **in = node_in(n), *tr, *t;
    if (TRACKED(n, 0)) {
        TRY(swap_last2(in[1], &tr));
        ad_status st = ad_call2(AD_OP_MATMUL, g, tr, &t);
        ad_tensor_release(tr);
        if (st) return st;
        TRY(give(n, 0, t, gr));
    }
    if (TRACKED(n, 1)) {
        TRY(swap_last2(in[0], &tr));
        ad_status st = ad_call2(AD_OP_MATMUL, tr, g, &t);
        ad_tensor_release(tr);
        if (st) return st;
        TRY(give(n, 1, t, gr));
    }
    return AD_OK;
}
