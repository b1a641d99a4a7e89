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
#include "opargs.h"

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

/* ---- elementwise math, reductions, softmax family --------------------------------
   Formulas here are nested expressions of the library's ops.  Each E* helper
   consumes its tensor arguments and returns a new tensor, or NULL after a
   failure (the first failure's status is kept until ex_done); a NULL argument
   propagates, so a formula is one expression checked once at the end.  R(t)
   takes a new reference to a tensor the formula does not own. */
static _Thread_local ad_status ex_status;

static ad_tensor *ex_check(ad_status st, ad_tensor *y) {
    if (!st) return y;
    if (!ex_status) ex_status = st;
    return NULL;
}

static ad_status ex_done(ad_tensor *y, ad_tensor **dst) {
    ad_status st = ex_status;
    ex_status = AD_OK;
    if (y) {
        *dst = y;
        return AD_OK;
    }
    return st ? st : AD_ERR_INTERNAL;
}

static ad_tensor *R(const ad_tensor *t) { return t ? ad_ref(t) : NULL; }

static ad_tensor *E(int op, ad_tensor *const *in, int n, const int64_t *iargs, int ni,
                    double s, int nf) {
    ad_tensor *y = NULL;
    bool ok = true;
    for (int i = 0; i < n; i++) ok = ok && in[i];
    ad_status st = ok ? ad_call(op, (const ad_tensor *const *)in, n, iargs, ni, &s, nf, &y) : AD_OK;
    for (int i = 0; i < n; i++) ad_tensor_release(in[i]);
    return ok ? ex_check(st, y) : NULL;
}
static ad_tensor *E1(int op, ad_tensor *x) { return E(op, &x, 1, NULL, 0, 0, 0); }
static ad_tensor *ES(int op, ad_tensor *x, double s) { return E(op, &x, 1, NULL, 0, s, 1); }
static ad_tensor *E2(int op, ad_tensor *a, ad_tensor *b) {
    ad_tensor *in[2] = {a, b};
    return E(op, in, 2, NULL, 0, 0, 0);
}
/* where(c, a, b): a select, so a non-finite unselected value never leaks */
static ad_tensor *EW(ad_tensor *c, ad_tensor *a, ad_tensor *b) {
    ad_tensor *in[3] = {c, a, b};
    return E(AD_OP_WHERE, in, 3, NULL, 0, 0, 0);
}
/* a 0-d constant of like's dtype */
static ad_tensor *EC(double v, const ad_tensor *like) {
    ad_tensor *y = NULL;
    ad_status st = ad_tensor_full(v, like->dtype, NULL, 0, &y);
    return ex_check(st, y);
}
/* x <op> v for a scalar v (a bool tensor) */
static ad_tensor *ECMP(int op, ad_tensor *x, double v) {
    return x ? E2(op, x, EC(v, x)) : NULL;
}
/* sum over dims (all when nd == 0), keeping them as size 1 */
static ad_tensor *ESUMK(int op, ad_tensor *x, const int64_t *dims, int nd) {
    int64_t ia[1 + AD_MAX_DIMS] = {1};
    if (nd) memcpy(ia + 1, dims, (size_t)nd * sizeof(int64_t));
    return E(op, &x, 1, ia, 1 + nd, 0, 0);
}
/* t reshaped to x's shape with dim kept as size 1 (x 0-d: shape ()) */
static ad_tensor *EKEEP(ad_tensor *t, const ad_tensor *x, int64_t dim) {
    int64_t k[AD_MAX_DIMS];
    memcpy(k, T_SHAPE(x), x->ndim * sizeof(int64_t));
    if (x->ndim) k[dim < 0 ? dim + x->ndim : dim] = 1;
    return E(AD_OP_RESHAPE, &t, 1, k, x->ndim, 0, 0);
}
static ad_status ex_give(const ad_node *n, int i, ad_tensor *t, ad_tensor **gr) {
    ad_tensor *y = NULL;
    TRY(ex_done(t, &y));
    return give(n, i, y, gr);
}

#define X0 (node_in(n)[0])
#define UNUSED (void)n, (void)out

/* d|x| = g sign(x) (0 at 0) */
ad_status bw_abs(const ad_node *n, const ad_tensor *out, const ad_tensor *g, ad_tensor **gr) {
    (void)out;
    return ex_done(E2(AD_OP_MUL, R(g), E1(AD_OP_SIGN, R(X0))), &gr[0]);
}

/* d(1/x) = -g/x^2 = -g out^2 */
ad_status bw_recip(const ad_node *n, const ad_tensor *out, const ad_tensor *g, ad_tensor **gr) {
    (void)n;
    return ex_done(ES(AD_OP_MUL_SCALAR, E2(AD_OP_MUL, R(g), E1(AD_OP_SQR, R(out))), -1.0),
                   &gr[0]);
}

/* d sin(x) = g cos(x) */
ad_status bw_sin(const ad_node *n, const ad_tensor *out, const ad_tensor *g, ad_tensor **gr) {
    (void)out;
    return ex_done(E2(AD_OP_MUL, R(g), E1(AD_OP_COS, R(X0))), &gr[0]);
}

/* d cos(x) = -g sin(x) */
ad_status bw_cos(const ad_node *n, const ad_tensor *out, const ad_tensor *g, ad_tensor **gr) {
    (void)out;
    return ex_done(E1(AD_OP_NEG, E2(AD_OP_MUL, R(g), E1(AD_OP_SIN, R(X0)))), &gr[0]);
}

/* d sigmoid(x) = g out (1 - out) */
ad_status bw_sigmoid(const ad_node *n, const ad_tensor *out, const ad_tensor *g,
                     ad_tensor **gr) {
    (void)n;
    return ex_done(E2(AD_OP_MUL, E2(AD_OP_MUL, R(g), R(out)),
                      ES(AD_OP_RSUB_SCALAR, R(out), 1.0)),
                   &gr[0]);
}

/* gelu(x) = x/2 (1 + t), t = tanh(c (x + k x^3)), c = sqrt(2/pi), k = 0.044715:
   d = (1 + t)/2 + x/2 (1 - t^2) c (1 + 3 k x^2) */
ad_status bw_gelu(const ad_node *n, const ad_tensor *out, const ad_tensor *g, ad_tensor **gr) {
    (void)out;
    const double c = 0.7978845608028654, k = 0.044715;
    const ad_tensor *x = X0;
    ad_tensor *t = E1(AD_OP_TANH, ES(AD_OP_MUL_SCALAR,
                                     E2(AD_OP_ADD, R(x), ES(AD_OP_MUL_SCALAR,
                                                            ES(AD_OP_POW_SCALAR, R(x), 3.0), k)),
                                     c));
    ad_tensor *d = E2(
        AD_OP_ADD, ES(AD_OP_MUL_SCALAR, ES(AD_OP_ADD_SCALAR, R(t), 1.0), 0.5),
        E2(AD_OP_MUL,
           E2(AD_OP_MUL, ES(AD_OP_MUL_SCALAR, R(x), 0.5 * c),
              ES(AD_OP_RSUB_SCALAR, E1(AD_OP_SQR, R(t)), 1.0)),
           ES(AD_OP_ADD_SCALAR, ES(AD_OP_MUL_SCALAR, E1(AD_OP_SQR, R(x)), 3.0 * k), 1.0)));
    ad_tensor_release(t);
    return ex_done(E2(AD_OP_MUL, R(g), d), &gr[0]);
}

/* gelu_erf(x) = x Phi(x): d = Phi(x) + x phi(x), Phi = (1 + erf(x/sqrt 2))/2,
   phi = exp(-x^2/2) / sqrt(2 pi) */
ad_status bw_gelu_erf(const ad_node *n, const ad_tensor *out, const ad_tensor *g,
                      ad_tensor **gr) {
    (void)out;
    const ad_tensor *x = X0;
    ad_tensor *Phi = ES(AD_OP_MUL_SCALAR,
                        ES(AD_OP_ADD_SCALAR,
                           E1(AD_OP_ERF, ES(AD_OP_MUL_SCALAR, R(x), 0.7071067811865476)), 1.0),
                        0.5);
    ad_tensor *phi = ES(AD_OP_MUL_SCALAR,
                        E1(AD_OP_EXP, ES(AD_OP_MUL_SCALAR, E1(AD_OP_SQR, R(x)), -0.5)),
                        0.3989422804014327);
    return ex_done(E2(AD_OP_MUL, R(g), E2(AD_OP_ADD, Phi, E2(AD_OP_MUL, R(x), phi))), &gr[0]);
}

/* d erf(x) = g 2/sqrt(pi) exp(-x^2) */
ad_status bw_erf(const ad_node *n, const ad_tensor *out, const ad_tensor *g, ad_tensor **gr) {
    (void)out;
    return ex_done(E2(AD_OP_MUL, R(g),
                      ES(AD_OP_MUL_SCALAR, E1(AD_OP_EXP, E1(AD_OP_NEG, E1(AD_OP_SQR, R(X0)))),
                         1.1283791670955126)),
                   &gr[0]);
}

/* silu(x) = x s, s = sigmoid(x): d = s (1 + x (1 - s)) */
ad_status bw_silu(const ad_node *n, const ad_tensor *out, const ad_tensor *g, ad_tensor **gr) {
    (void)out;
    ad_tensor *s = E1(AD_OP_SIGMOID, R(X0));
    ad_tensor *d = E2(AD_OP_MUL, R(s),
                      ES(AD_OP_ADD_SCALAR,
                         E2(AD_OP_MUL, R(X0), ES(AD_OP_RSUB_SCALAR, R(s), 1.0)), 1.0));
    ad_tensor_release(s);
    return ex_done(E2(AD_OP_MUL, R(g), d), &gr[0]);
}

/* d softplus(x) = d log(1 + e^x) = g sigmoid(x) */
ad_status bw_softplus(const ad_node *n, const ad_tensor *out, const ad_tensor *g,
                      ad_tensor **gr) {
    (void)out;
    return ex_done(E2(AD_OP_MUL, R(g), E1(AD_OP_SIGMOID, R(X0))), &gr[0]);
}

/* d elu(x) = g where x > 0, else g alpha e^x (PyTorch: x = 0 takes alpha) */
ad_status bw_elu(const ad_node *n, const ad_tensor *out, const ad_tensor *g, ad_tensor **gr) {
    (void)out;
    return ex_done(EW(ECMP(AD_OP_GT, R(X0), 0.0), R(g),
                      E2(AD_OP_MUL, R(g),
                         ES(AD_OP_MUL_SCALAR, E1(AD_OP_EXP, R(X0)), node_fargs(n)[0]))),
                   &gr[0]);
}

/* d log1p(x) = g / (1 + x) */
ad_status bw_log1p(const ad_node *n, const ad_tensor *out, const ad_tensor *g,
                   ad_tensor **gr) {
    (void)out;
    return ex_done(E2(AD_OP_DIV, R(g), ES(AD_OP_ADD_SCALAR, R(X0), 1.0)), &gr[0]);
}

/* d expm1(x) = g e^x = g (out + 1) */
ad_status bw_expm1(const ad_node *n, const ad_tensor *out, const ad_tensor *g,
                   ad_tensor **gr) {
    (void)n;
    return ex_done(E2(AD_OP_MUL, R(g), ES(AD_OP_ADD_SCALAR, R(out), 1.0)), &gr[0]);
}

/* floor, ceil, round, sign: piecewise constant, so the gradient is 0
   everywhere (PyTorch's convention; the jumps have no derivative) */
ad_status bw_zero(const ad_node *n, const ad_tensor *out, const ad_tensor *g, ad_tensor **gr) {
    UNUSED;
    return ad_tensor_zeros(g->dtype, T_SHAPE(g), g->ndim, &gr[0]);
}

/* d clamp(x, lo, hi) = g where lo <= x <= hi (inclusive, as PyTorch), else 0 */
ad_status bw_clamp(const ad_node *n, const ad_tensor *out, const ad_tensor *g, ad_tensor **gr) {
    (void)out;
    const double *f = node_fargs(n);
    return ex_done(EW(ECMP(AD_OP_GE, R(X0), f[0]),
                      EW(ECMP(AD_OP_LE, R(X0), f[1]), R(g), EC(0, g)), EC(0, g)),
                   &gr[0]);
}

/* maximum (win = GT) / minimum (win = LT): g goes to the winner; a tie splits
   it half and half (candle's rule) */
static ad_status bw_extremum(const ad_node *n, int win, const ad_tensor *g, ad_tensor **gr) {
    for (int i = 0; i < 2; i++) {
        if (!TRACKED(n, i)) continue;
        const ad_tensor *me = node_in(n)[i], *other = node_in(n)[1 - i];
        TRY(ex_give(n, i,
                    EW(E2(AD_OP_EQ, R(me), R(other)), ES(AD_OP_MUL_SCALAR, R(g), 0.5),
                       EW(E2(win, R(me), R(other)), R(g), EC(0, g))),
                    gr));
    }
    return AD_OK;
}

ad_status bw_maximum(const ad_node *n, const ad_tensor *out, const ad_tensor *g,
                     ad_tensor **gr) {
    (void)out;
    return bw_extremum(n, AD_OP_GT, g, gr);
}

ad_status bw_minimum(const ad_node *n, const ad_tensor *out, const ad_tensor *g,
                     ad_tensor **gr) {
    (void)out;
    return bw_extremum(n, AD_OP_LT, g, gr);
}

/* d a^b = g b a^(b-1) (0 where b = 0), g a^b ln(a) = g out ln(a) (0 where a = 0
   and b >= 0, PyTorch's masks for 0 * inf) */
ad_status bw_pow(const ad_node *n, const ad_tensor *out, const ad_tensor *g, ad_tensor **gr) {
    const ad_tensor *a = node_in(n)[0], *b = node_in(n)[1];
    if (TRACKED(n, 0))
        TRY(ex_give(n, 0,
                    EW(ECMP(AD_OP_EQ, R(b), 0.0), EC(0, g),
                       E2(AD_OP_MUL, R(g),
                          E2(AD_OP_MUL, R(b),
                             E2(AD_OP_POW, R(a), ES(AD_OP_ADD_SCALAR, R(b), -1.0))))),
                    gr));
    if (TRACKED(n, 1)) {
        ad_tensor *d = E2(AD_OP_MUL, R(g), E2(AD_OP_MUL, R(out), E1(AD_OP_LOG, R(a))));
        ad_tensor *sel = EW(ECMP(AD_OP_EQ, R(a), 0.0),
                            EW(ECMP(AD_OP_GE, R(b), 0.0), EC(0, g), R(d)), R(d));
        ad_tensor_release(d);
        TRY(ex_give(n, 1, sel, gr));
    }
    return AD_OK;
}

/* d where(c, a, b) = where(c, g, 0), where(c, 0, g): selects, so an inf or NaN
   gradient path through the unselected branch is never multiplied by 0 */
ad_status bw_where(const ad_node *n, const ad_tensor *out, const ad_tensor *g, ad_tensor **gr) {
    (void)out;
    const ad_tensor *c = node_in(n)[0];
    if (TRACKED(n, 1)) TRY(ex_give(n, 1, EW(R(c), R(g), EC(0, g)), gr));
    if (TRACKED(n, 2)) TRY(ex_give(n, 2, EW(R(c), EC(0, g), R(g)), gr));
    return AD_OK;
}

/* d prod(x) = g * (product of the others), exact with zeros: with z the zeros
   of a slice and p the product of its non-zeros, the product of the others is
   p/x when the slice has no zero, p at its only zero (0 elsewhere), and 0 when
   it has two or more */
ad_status bw_prod(const ad_node *n, const ad_tensor *out, const ad_tensor *g, ad_tensor **gr) {
    (void)out;
    const ad_tensor *x = X0;
    const int64_t *dims = node_iargs(n) + 1;
    int nd = n->n_iargs - 1;
    int64_t dt = x->dtype;
    ad_tensor *z = ECMP(AD_OP_EQ, R(x), 0.0);
    ad_tensor *zf = z ? E(AD_OP_TO_DTYPE, (ad_tensor *[]){R(z)}, 1, &dt, 1, 0, 0) : NULL;
    ad_tensor *cnt = ESUMK(AD_OP_SUM, zf, dims, nd);
    ad_tensor *xs = EW(R(z), EC(1, x), R(x));
    ad_tensor *p = ESUMK(AD_OP_PROD, R(xs), dims, nd);
    ad_tensor *d = EW(ECMP(AD_OP_EQ, R(cnt), 0.0), E2(AD_OP_DIV, R(p), xs),
                      EW(ECMP(AD_OP_EQ, R(cnt), 1.0), EW(R(z), R(p), EC(0, x)), EC(0, x)));
    ad_tensor_release(z);
    ad_tensor_release(cnt);
    ad_tensor_release(p);
    ad_tensor *gk = NULL;
    if (d) {
        ad_status st = g_keepdim(n, g, &gk);
        ex_check(st, NULL);
    }
    return ex_done(E2(AD_OP_MUL, d, gk), &gr[0]);
}

/* d logsumexp(x) = g exp(x - out) = g softmax(x), out and g kept on dim */
ad_status bw_logsumexp(const ad_node *n, const ad_tensor *out, const ad_tensor *g,
                       ad_tensor **gr) {
    const ad_tensor *x = X0;
    int64_t dim = node_iargs(n)[0];
    return ex_done(E2(AD_OP_MUL, EKEEP(R(g), x, dim),
                      E1(AD_OP_EXP, E2(AD_OP_SUB, R(x), EKEEP(R(out), x, dim)))),
                   &gr[0]);
}

/* d softmax(x) = out (g - sum(g out, dim)) */
ad_status bw_softmax(const ad_node *n, const ad_tensor *out, const ad_tensor *g,
                     ad_tensor **gr) {
    const int64_t *dim = node_iargs(n);
    return ex_done(E2(AD_OP_MUL, R(out),
                      E2(AD_OP_SUB, R(g),
                         ESUMK(AD_OP_SUM, E2(AD_OP_MUL, R(g), R(out)), dim, 1))),
                   &gr[0]);
}

/* d log_softmax(x) = g - exp(out) sum(g, dim) */
ad_status bw_log_softmax(const ad_node *n, const ad_tensor *out, const ad_tensor *g,
                         ad_tensor **gr) {
    const int64_t *dim = node_iargs(n);
    return ex_done(E2(AD_OP_SUB, R(g),
                      E2(AD_OP_MUL, E1(AD_OP_EXP, R(out)), ESUMK(AD_OP_SUM, R(g), dim, 1))),
                   &gr[0]);
}

/* d cumsum(x) = cumsum of g in the other direction */
ad_status bw_cumsum(const ad_node *n, const ad_tensor *out, const ad_tensor *g,
                    ad_tensor **gr) {
    (void)out;
    int64_t ia[2] = {node_iargs(n)[0], !node_iargs(n)[1]};
    return ex_done(E(AD_OP_CUMSUM, (ad_tensor *[]){R(g)}, 1, ia, 2, 0, 0), &gr[0]);
}

/* ---- indexing, joining, neural-network ops ----------------------------------------- */
/* d cat(x_0, ..., x_n; dim) = the slice of g each input occupied (views of g) */
ad_status bw_cat(const ad_node *n, const ad_tensor *out, const ad_tensor *g, ad_tensor **gr) {
    const int64_t *ia = node_iargs(n);
    int64_t d = ia[0] < 0 ? ia[0] + out->ndim : ia[0], off = 0;
    for (int i = 0; i < n->n_in; i++) {
        int64_t args[4] = {d, off, 1, ia[1 + i]};
        off += ia[1 + i];
        if (TRACKED(n, i)) TRY(ad_call(AD_OP_SLICE, &g, 1, args, 4, NULL, 0, &gr[i]));
    }
    return AD_OK;
}

/* d pad(x, p) = pad(g, -p): the window x occupied (negative amounts cropped
   x, so its cropped border gets zeros) */
ad_status bw_pad(const ad_node *n, const ad_tensor *out, const ad_tensor *g, ad_tensor **gr) {
    (void)out;
    int64_t neg[2 * AD_MAX_DIMS];
    double zero = 0;
    for (int i = 0; i < n->n_iargs; i++) neg[i] = -node_iargs(n)[i];
    return ad_call(AD_OP_PAD, &g, 1, neg, n->n_iargs, &zero, 1, &gr[0]);
}

/* zeros shaped like input i of n, in g's dtype */
static ad_status zeros_like_in(const ad_node *n, int i, const ad_tensor *g, ad_tensor **out) {
    const ad_tensor *x = node_in(n)[i];
    return ad_tensor_zeros(g->dtype, T_SHAPE(x), x->ndim, out);
}

/* d index_select(x, idx) = index_add(zeros like x, idx, g): repeated indices
   accumulate */
ad_status bw_index_select(const ad_node *n, const ad_tensor *out, const ad_tensor *g,
                          ad_tensor **gr) {
    (void)out;
    ad_tensor *z;
    TRY(zeros_like_in(n, 0, g, &z));
    const ad_tensor *in[3] = {z, node_in(n)[1], g};
    ad_status st = ad_call(AD_OP_INDEX_ADD, in, 3, node_iargs(n), 1, NULL, 0, &gr[0]);
    ad_tensor_release(z);
    return st;
}

/* d index_add(x, idx, src) = g, index_select(g, idx) */
ad_status bw_index_add(const ad_node *n, const ad_tensor *out, const ad_tensor *g,
                       ad_tensor **gr) {
    (void)out;
    if (TRACKED(n, 0)) gr[0] = ad_ref(g);
    if (TRACKED(n, 2)) {
        const ad_tensor *in[2] = {g, node_in(n)[1]};
        TRY(ad_call(AD_OP_INDEX_SELECT, in, 2, node_iargs(n), 1, NULL, 0, &gr[2]));
    }
    return AD_OK;
}

/* d gather(x, idx) = scatter_add(zeros like x, idx, g) */
ad_status bw_gather(const ad_node *n, const ad_tensor *out, const ad_tensor *g,
                    ad_tensor **gr) {
    (void)out;
    ad_tensor *z;
    TRY(zeros_like_in(n, 0, g, &z));
    const ad_tensor *in[3] = {z, node_in(n)[1], g};
    ad_status st = ad_call(AD_OP_SCATTER_ADD, in, 3, node_iargs(n), 1, NULL, 0, &gr[0]);
    ad_tensor_release(z);
    return st;
}

/* d scatter_add(x, idx, src) = g, gather(g, idx) zero-padded to src's shape
   (src may be larger than idx; its extra elements are unused) */
ad_status bw_scatter_add(const ad_node *n, const ad_tensor *out, const ad_tensor *g,
                         ad_tensor **gr) {
    (void)out;
    if (TRACKED(n, 0)) gr[0] = ad_ref(g);
    if (TRACKED(n, 2)) {
        const ad_tensor *idx = node_in(n)[1], *src = node_in(n)[2];
        const ad_tensor *in[2] = {g, idx};
        ad_tensor *t;
        TRY(ad_call(AD_OP_GATHER, in, 2, node_iargs(n), 1, NULL, 0, &t));
        int64_t p[2 * AD_MAX_DIMS];
        bool same = true;
        for (int j = 0; j < src->ndim; j++) {
            p[2 * j] = 0;
            p[2 * j + 1] = T_SHAPE(src)[src->ndim - 1 - j] - T_SHAPE(idx)[src->ndim - 1 - j];
            same = same && p[2 * j + 1] == 0;
        }
        if (same) {
            gr[2] = t;
            return AD_OK;
        }
        double zero = 0;
        const ad_tensor *tc = t;
        ad_status st = ad_call(AD_OP_PAD, &tc, 1, p, 2 * src->ndim, &zero, 1, &gr[2]);
        ad_tensor_release(t);
        return st;
    }
    return AD_OK;
}

/* d mse(x, y) = 2 (x - y) g (/ count for mean), and its negation for y */
ad_status bw_mse_loss(const ad_node *n, const ad_tensor *out, const ad_tensor *g,
                      ad_tensor **gr) {
    (void)out;
    ad_tensor **in = node_in(n), *t;
    int64_t r = node_iargs(n)[0];
    double scale = r == 1 ? 2.0 / (double)in[0]->numel : 2.0;
    TRY(ad_call2(AD_OP_SUB, in[0], in[1], &t));
    TRY(calls_take(AD_OP_MUL_SCALAR, t, scale, &t));
    TRY(call2_take(AD_OP_MUL, t, g, &t));
    if (TRACKED(n, 1)) {
        ad_tensor *m;
        ad_status st = ad_call1(AD_OP_NEG, t, &m);
        if (st) {
            ad_tensor_release(t);
            return st;
        }
        st = give(n, 1, m, gr);
        if (st) {
            ad_tensor_release(t);
            return st;
        }
    }
    if (TRACKED(n, 0)) return give(n, 0, t, gr);
    ad_tensor_release(t);
    return AD_OK;
}

/* The per-row scale of a class loss's gradient as an (N, 1) or (1, 1) tensor:
   g itself (none), g / N (mean) or g (sum). */
static ad_status class_grad_scale(const ad_node *n, const ad_tensor *g, ad_tensor **out) {
    const ad_tensor *x = node_in(n)[0];
    int64_t r = node_iargs(n)[0], nrows = T_SHAPE(x)[0];
    int64_t shape[2] = {r ? 1 : nrows, 1};
    if (r != 1) return reshape_to(g, shape, 2, out);
    ad_tensor *t;
    TRY(ad_calls(AD_OP_DIV_SCALAR, g, (double)nrows, &t));
    ad_status st = reshape_to(t, shape, 2, out);
    ad_tensor_release(t);
    return st;
}

/* base with -gs added at (i, target_i) for each row i: the one-hot term of
   the class losses' gradient, as a scatter_add (consumes base) */
static ad_status minus_onehot(const ad_node *n, ad_tensor *base, const ad_tensor *gs,
                              ad_tensor **out) {
    const ad_tensor *t = node_in(n)[1];
    int64_t rows = T_SHAPE(t)[0];
    int64_t col[2] = {rows, 1}, dim = 1;
    ad_tensor *idx = NULL, *neg = NULL, *negb = NULL;
    ad_status st = reshape_to(t, col, 2, &idx);
    if (!st) st = ad_call1(AD_OP_NEG, gs, &neg);
    if (!st) st = ad_call(AD_OP_BROADCAST, (const ad_tensor *const *)&neg, 1, col, 2, NULL, 0,
                          &negb);
    if (!st) {
        const ad_tensor *in[3] = {base, idx, negb};
        st = ad_call(AD_OP_SCATTER_ADD, in, 3, &dim, 1, NULL, 0, out);
    }
    ad_tensor_release(base);
    ad_tensor_release(idx);
    ad_tensor_release(neg);
    ad_tensor_release(negb);
    return st;
}

/* d ce(x, t) = (softmax(x) - onehot(t)) * g (/ N for mean); softmax from
   exp(x - max) / sum, which never overflows */
ad_status bw_cross_entropy(const ad_node *n, const ad_tensor *out, const ad_tensor *g,
                           ad_tensor **gr) {
    (void)out;
    const ad_tensor *x = node_in(n)[0];
    int64_t red[2] = {1, 1};
    ad_tensor *gs = NULL, *m = NULL, *e = NULL, *s = NULL, *p = NULL;
    ad_status st = class_grad_scale(n, g, &gs);
    if (!st) st = ad_call(AD_OP_MAX, &x, 1, red, 2, NULL, 0, &m);
    if (!st) st = ad_call2(AD_OP_SUB, x, m, &e);
    if (!st) st = ad_call1(AD_OP_EXP, e, &p);
    if (!st) st = ad_call(AD_OP_SUM, (const ad_tensor *const *)&p, 1, red, 2, NULL, 0, &s);
    if (!st) {
        ad_tensor_release(e);
        e = NULL;
        st = ad_call2(AD_OP_DIV, p, s, &e);
    }
    if (!st) {
        ad_tensor *base;
        st = ad_call2(AD_OP_MUL, e, gs, &base);
        if (!st) st = minus_onehot(n, base, gs, &gr[0]);
    }
    ad_tensor_release(gs);
    ad_tensor_release(m);
    ad_tensor_release(e);
    ad_tensor_release(s);
    ad_tensor_release(p);
    return st;
}

/* d nll(x, t) = -onehot(t) * g (/ N for mean) */
ad_status bw_nll_loss(const ad_node *n, const ad_tensor *out, const ad_tensor *g,
                      ad_tensor **gr) {
    (void)out;
    const ad_tensor *x = node_in(n)[0];
    ad_tensor *gs, *z;
    TRY(class_grad_scale(n, g, &gs));
    ad_status st = ad_tensor_zeros(g->dtype, T_SHAPE(x), 2, &z);
    if (!st) st = minus_onehot(n, z, gs, &gr[0]);
    ad_tensor_release(gs);
    return st;
}

/* layer_norm over the last k dims, with xhat = (x - mean) * rstd,
   rstd = 1 / sqrt(var + eps), gw = g * weight (g without weight):
     dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat))
     dweight = sum over the leading dims of g * xhat,  dbias = sum of g */
ad_status bw_layer_norm(const ad_node *n, const ad_tensor *out, const ad_tensor *g,
                        ad_tensor **gr) {
    (void)out;
    ad_tensor **in = node_in(n);
    const ad_tensor *x = in[0];
    int64_t k = node_iargs(n)[0], red[1 + AD_MAX_DIMS];
    double eps = node_fargs(n)[0];
    red[0] = 1; /* keepdim */
    for (int i = 0; i < k; i++) red[1 + i] = x->ndim - k + i;
    enum { MU, XC, SQ, VAR, STD, RSTD, XHAT, GW, M1, GX, M2, T1, T2, NT };
    ad_tensor *t[NT] = {NULL};
    ad_status st = AD_OK;
#define RUN(expr) if (!st) st = (expr)
#define MEAN_OF(src, dst) ad_call(AD_OP_MEAN, (const ad_tensor *const *)&(src), 1, red, \
                                  (int)k + 1, NULL, 0, &(dst))
    RUN(ad_call(AD_OP_MEAN, &x, 1, red, (int)k + 1, NULL, 0, &t[MU]));
    RUN(ad_call2(AD_OP_SUB, x, t[MU], &t[XC]));
    RUN(ad_call1(AD_OP_SQR, t[XC], &t[SQ]));
    RUN(MEAN_OF(t[SQ], t[VAR]));
    RUN(ad_calls(AD_OP_ADD_SCALAR, t[VAR], eps, &t[STD]));
    if (!st) {
        ad_tensor *s = t[STD];
        st = ad_call1(AD_OP_SQRT, s, &t[STD]);
        ad_tensor_release(s);
    }
    RUN(ad_calls(AD_OP_RDIV_SCALAR, t[STD], 1.0, &t[RSTD]));
    RUN(ad_call2(AD_OP_MUL, t[XC], t[RSTD], &t[XHAT]));
    if (!st && TRACKED(n, 0)) {
        if (n->n_in > 1) st = ad_call2(AD_OP_MUL, g, in[1], &t[GW]);
        else t[GW] = ad_ref(g);
        RUN(MEAN_OF(t[GW], t[M1]));
        RUN(ad_call2(AD_OP_MUL, t[GW], t[XHAT], &t[T1]));
        RUN(MEAN_OF(t[T1], t[M2]));
        RUN(ad_call2(AD_OP_MUL, t[XHAT], t[M2], &t[T2]));
        RUN(ad_call2(AD_OP_SUB, t[GW], t[M1], &t[GX]));
        if (!st) {
            ad_tensor *d;
            st = ad_call2(AD_OP_SUB, t[GX], t[T2], &d);
            if (!st) st = call2_take(AD_OP_MUL, d, t[RSTD], &gr[0]);
        }
    }
    if (!st && n->n_in > 1 && TRACKED(n, 1)) {
        ad_tensor *d;
        st = ad_call2(AD_OP_MUL, g, t[XHAT], &d);
        if (!st) st = give(n, 1, d, gr);
    }
    if (!st && n->n_in > 2 && TRACKED(n, 2)) st = give(n, 2, ad_ref(g), gr);
#undef RUN
#undef MEAN_OF
    for (int i = 0; i < NT; i++) ad_tensor_release(t[i]);
    return st;
}

/* d dropout(x) = dropout(g) with the same seed and p: the same mask and
   scale, since the mask depends only on the seed and the position */
ad_status bw_dropout(const ad_node *n, const ad_tensor *out, const ad_tensor *g,
                     ad_tensor **gr) {
    (void)out;
    return ad_call(AD_OP_DROPOUT, &g, 1, node_iargs(n), 1, node_fargs(n), 1, &gr[0]);
}

/* d conv2d(x, w) = conv_transpose2d(g, w) (output padding restoring x's
   size), conv2d_weight_grad(x, g) */
ad_status bw_conv2d(const ad_node *n, const ad_tensor *out, const ad_tensor *g,
                    ad_tensor **gr) {
    (void)out;
    ad_tensor **in = node_in(n);
    const ad_tensor *x = in[0], *w = in[1];
    conv_args c;
    int64_t args[9];
    TRY(conv_args_decode(AD_OP_CONV2D, node_iargs(n), &c));
    c.kh = T_SHAPE(w)[2], c.kw = T_SHAPE(w)[3];
    if (TRACKED(n, 0)) { /* the rows and columns of x the last window did not reach */
        c.oph = (T_SHAPE(x)[2] + 2 * c.ph - c.dh * (c.kh - 1) - 1) % c.sh;
        c.opw = (T_SHAPE(x)[3] + 2 * c.pw - c.dw * (c.kw - 1) - 1) % c.sw;
        const ad_tensor *ops[2] = {g, w};
        int na = conv_args_encode(AD_OP_CONV_TRANSPOSE2D, &c, args);
        TRY(ad_call(AD_OP_CONV_TRANSPOSE2D, ops, 2, args, na, NULL, 0, &gr[0]));
    }
    if (TRACKED(n, 1)) {
        const ad_tensor *ops[2] = {x, g};
        int na = conv_args_encode(AD_OP_CONV2D_WEIGHT_GRAD, &c, args);
        TRY(ad_call(AD_OP_CONV2D_WEIGHT_GRAD, ops, 2, args, na, NULL, 0, &gr[1]));
    }
    return AD_OK;
}

/* d conv_transpose2d(x, w) = conv2d(g, w), conv2d_weight_grad(g, x) */
ad_status bw_conv_transpose2d(const ad_node *n, const ad_tensor *out, const ad_tensor *g,
                              ad_tensor **gr) {
    (void)out;
    ad_tensor **in = node_in(n);
    conv_args c;
    int64_t args[9];
    TRY(conv_args_decode(AD_OP_CONV_TRANSPOSE2D, node_iargs(n), &c));
    c.kh = T_SHAPE(in[1])[2], c.kw = T_SHAPE(in[1])[3];
    if (TRACKED(n, 0)) {
        const ad_tensor *ops[2] = {g, in[1]};
        int na = conv_args_encode(AD_OP_CONV2D, &c, args);
        TRY(ad_call(AD_OP_CONV2D, ops, 2, args, na, NULL, 0, &gr[0]));
    }
    if (TRACKED(n, 1)) {
        const ad_tensor *ops[2] = {g, in[0]};
        int na = conv_args_encode(AD_OP_CONV2D_WEIGHT_GRAD, &c, args);
        TRY(ad_call(AD_OP_CONV2D_WEIGHT_GRAD, ops, 2, args, na, NULL, 0, &gr[1]));
    }
    return AD_OK;
}

/* d max_pool2d(x) = g routed to the first maximum of each window
   (overlapping windows accumulate) */
ad_status bw_max_pool2d(const ad_node *n, const ad_tensor *out, const ad_tensor *g,
                        ad_tensor **gr) {
    (void)out;
    const ad_tensor *ops[2] = {node_in(n)[0], g};
    return ad_call(AD_OP_MAX_POOL2D_BACKWARD, ops, 2, node_iargs(n), 8, NULL, 0, &gr[0]);
}
