/* nn.c - fused neural-network ops: mse_loss, cross_entropy, nll_loss,
 * layer_norm, dropout, max_pool2d (forward kernels; their gradients are in
 * backward.c).  Float32 and float64; sums accumulate in double. */
#include <math.h>
#include <string.h>

#include "nnops.h"
#include "opargs.h"
#include "parallel.h"
#include "cpu.h"
#include "ew.h"
#include "simd.h"

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

/* Runs fn over [0, rows) split over the threads when the rows hold enough
   elements (cols each) to repay waking the pool; the rows are independent. */
#define NN_PAR_MIN 32768
static void nn_rows(int64_t rows, int64_t cols, void (*fn)(void *, int64_t, int64_t),
                    void *ctx) {
    if (rows > 1 && rows * cols >= NN_PAR_MIN && par_num_threads() > 1)
        par_for(rows, fn, ctx);
    else if (rows > 0)
        fn(ctx, 0, rows);
}

/* ---- mse_loss --------------------------------------------------------------- */
static ad_status mse_run(int dt, const void *x, const void *y, void *o, int64_t n, double *sum);

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
    double acc = 0;
    if ((st = nn_contig(x, &tx, &px))) return st;
    if ((st = nn_contig(y, &ty, &py))) goto fail1;
    if ((st = ad_tensor_empty(x->dtype, T_SHAPE(x), r ? 0 : x->ndim, &o))) goto fail2;
    if ((st = mse_run(x->dtype, px, py, r ? NULL : o->storage->data, x->numel, &acc))) {
        ad_tensor_release(o);
        goto fail2;
    }
    if (r) stv(o->storage->data, x->dtype, 0, r == 1 ? acc / (double)x->numel : acc);
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

typedef struct cl_job {
    const void *x;
    const int64_t *ix;
    int dt;
    int64_t c;
    bool ce;
    double *loss;   /* the rows' losses, to be reduced (or NULL) */
    void *out;      /* else the unreduced output */
} cl_job;

/* float32 rows through the vector kernels (simd_math.h's row_lse and
   row_softmax_scaled); NULL: the double loops */
typedef int (*lse_row_fn)(const float *, int64_t, double *);
typedef int (*sm_row_fn)(const float *, float *, int64_t, double);
static lse_row_fn lse_row_f32(void) {
    int isa = ad_cpu_isa();
    return isa == AD_ISA_AVX512 ? ad_lse_row_f32_avx512
           : isa == AD_ISA_AVX2 ? ad_lse_row_f32_avx2 : NULL;
}
static sm_row_fn softmax_scaled_row_f32(void) {
    int isa = ad_cpu_isa();
    return isa == AD_ISA_AVX512 ? ad_softmax_scaled_row_f32_avx512
           : isa == AD_ISA_AVX2 ? ad_softmax_scaled_row_f32_avx2 : NULL;
}

/* log sum e^x of the row at element `row` in double: the maximum with NaN
   skipped, an infinite one returned as is (all -inf, or an inf: the loss is
   inf / NaN as torch's) */
static double row_lse_dbl(const void *px, int dt, int64_t row, int64_t c) {
    double m = -INFINITY, s = 0;
    for (int64_t k = 0; k < c; k++) m = fmax(m, ld(px, dt, row + k));
    if (isinf(m)) return m;
    for (int64_t k = 0; k < c; k++) s += exp(ld(px, dt, row + k) - m);
    return m + log(s);
}

/* a float32 row's logsumexp on the vector kernel when it has a finite
   maximum (max, the terms e^(x - m) and their sum in vector registers, the
   sum in 16 double partials in one fixed order: the same bits at AVX2 and
   AVX-512 and for any split of the rows), else the double loop */
static void cl_rows(void *ctx, int64_t i0, int64_t i1) {
    const cl_job *j = ctx;
    const void *px = j->x;
    int dt = j->dt;
    int64_t c = j->c;
    lse_row_fn vrow = j->ce && dt == AD_FLOAT32 ? lse_row_f32() : NULL;
    for (int64_t i = i0; i < i1; i++) {
        const int64_t row = i * c;
        double loss = -ld(px, dt, row + j->ix[i]);
        if (j->ce) {
            double lse;
            if (!vrow || !vrow((const float *)px + row, c, &lse)) lse = row_lse_dbl(px, dt, row, c);
            loss += lse;
        }
        if (j->loss) j->loss[i] = loss;
        else stv(j->out, dt, i, loss);
    }
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
    cl_job jb = {px, ix, x->dtype, c, ce, NULL, NULL};
    if (r) {
        if (!(jb.loss = ad_malloc((size_t)(n ? n : 1) * sizeof(double)))) {
            st = ad_fail_nomem(OP_NAME(a->op));
            goto done;
        }
    } else {
        jb.out = o->storage->data;
    }
    nn_rows(n, ce ? 3 * c : 1, cl_rows, &jb);
    double acc = 0;
    if (r)
        for (int64_t i = 0; i < n; i++) acc += jb.loss[i]; /* in row order, as before */
    ad_mfree(jb.loss);
    int dt = x->dtype;
    if (r) stv(o->storage->data, dt, 0, r == 1 ? acc / (double)n : acc);
done:
    ad_tensor_release(tx);
    ad_mfree(ix);
    if (!st) *out = o;
    else ad_tensor_release(o);
    return st;
}

ad_status fwd_cross_entropy(const op_args *a, ad_tensor **out) { return class_loss(a, true, out); }
ad_status fwd_nll_loss(const op_args *a, ad_tensor **out) { return class_loss(a, false, out); }

/* The class losses' gradient in one pass over the rows: dx_i = (softmax(x_i)
   - onehot(t_i)) gs_i (ce) or -onehot(t_i) gs_i (nll), gs_i = g_i (none), g / N
   (mean) or g (sum).  A float32 row with a finite maximum runs on the vector
   kernel (softmax(x) gs rounded once from double); the others in double (a
   row whose maximum is inf, or all -inf, is NaN, as the composed formula). */
typedef struct clg_job {
    const void *x, *g;
    const int64_t *ix;
    void *dx;
    int dt;
    int64_t c, n, r;
    bool ce;
} clg_job;

static void clg_rows(void *ctx, int64_t i0, int64_t i1) {
    const clg_job *j = ctx;
    int dt = j->dt;
    int64_t c = j->c;
    size_t es = ad_dtype_size_(dt);
    sm_row_fn vrow = j->ce && dt == AD_FLOAT32 ? softmax_scaled_row_f32() : NULL;
    for (int64_t i = i0; i < i1; i++) {
        const int64_t row = i * c;
        double gs = ld(j->g, dt, j->r ? 0 : i);
        if (j->r == 1) gs /= (double)j->n;
        if (!j->ce) {
            memset((char *)j->dx + row * (int64_t)es, 0, (size_t)c * es);
            stv(j->dx, dt, row + j->ix[i], -gs);
            continue;
        }
        if (!vrow || !vrow((const float *)j->x + row, (float *)j->dx + row, c, gs)) {
            double m = -INFINITY, sum = 0;
            for (int64_t k = 0; k < c; k++) m = fmax(m, ld(j->x, dt, row + k));
            for (int64_t k = 0; k < c; k++) sum += exp(ld(j->x, dt, row + k) - m);
            double sc = gs / sum;
            for (int64_t k = 0; k < c; k++) stv(j->dx, dt, row + k, exp(ld(j->x, dt, row + k) - m) * sc);
        }
        int64_t at = row + j->ix[i];
        stv(j->dx, dt, at, ld(j->dx, dt, at) - gs);
    }
}

ad_status ad_class_loss_grad(const ad_tensor *x, const ad_tensor *t, const ad_tensor *g,
                             int64_t r, bool ce, ad_tensor **dx) {
    const char *op = ce ? "cross_entropy backward" : "nll_loss backward";
    int64_t *ix = NULL;
    ad_status st;
    *dx = NULL;
    if ((st = reduction_arg(op, r)) || (st = class_inputs(op, x, t, &ix))) return st;
    int64_t n = T_SHAPE(x)[0], c = T_SHAPE(x)[1];
    if (g->dtype != x->dtype || g->numel != (r ? 1 : n)) {
        st = ad_fail(AD_ERR_SHAPE, "%s: gradient %s does not fit the loss of input %s", op,
                     ad_tdesc(g), ad_tdesc(x));
        ad_mfree(ix);
        return st;
    }
    ad_tensor *tx = NULL, *tg = NULL, *o = NULL;
    const void *px = NULL, *pg;
    if ((ce && (st = nn_contig(x, &tx, &px))) || (st = nn_contig(g, &tg, &pg))) goto done;
    if ((st = ad_tensor_empty(x->dtype, T_SHAPE(x), 2, &o))) goto done;
    clg_job jb = {px, pg, ix, o->storage->data, x->dtype, c, n, r, ce};
    nn_rows(n, ce ? 3 * c : 1, clg_rows, &jb);
done:
    ad_tensor_release(tx);
    ad_tensor_release(tg);
    ad_mfree(ix);
    if (!st) *dx = o;
    else ad_tensor_release(o);
    return st;
}

/* ---- the softmax family's gradients ---------------------------------------------
 * dx = y (g - s), s = sum(g y) along dim (softmax), or dx = g - e^y s, s =
 * sum(g) (log_softmax), y the forward's output: one pass over each lane
 * instead of the recorded formula's four over the whole tensor.  The sums in
 * double.  float32 runs on the vector row kernel (simd_math.h's
 * row_softmax_grad: the products g y exact in double, the same bits at AVX2
 * and AVX-512 and for any split of the rows), with dim the last one a row at
 * a time, else (cols_softmax_grad) a vector of the lanes side by side at a
 * time, SMG_BLOCK of them per unit, each with a contiguous lane's bits (Zen
 * 4, 1 thread, float32 (32, C, 64, 64), log_softmax(1) forward and backward,
 * each lane in double before: C = 10 12.2 -> 4.2 ms, torch 3.3-3.8; C = 21
 * 25.9 -> 9.9, torch 8.7-9.3); float64 and the portable level in double,
 * rows with eight partial sums, the lanes of a dim with others after it
 * SMG_BLOCK positions of those at a time. */
enum { SMG_BLOCK = 256 };
/* the float32 kernels per ISA level (none at the portable level) */
typedef void (*smg_f32_fn)(const float *, const float *, float *, int64_t, int64_t, int64_t,
                           int);
static const struct {
    smg_f32_fn rows, cols;
} smg_f32[] = {
    [AD_ISA_AVX2] = {ad_softmax_grad_rows_f32_avx2, ad_softmax_grad_cols_f32_avx2},
    [AD_ISA_AVX512] = {ad_softmax_grad_rows_f32_avx512, ad_softmax_grad_cols_f32_avx512},
};

typedef struct smg_job {
    const void *y, *g;
    void *dx;
    int dt;
    bool log;
    int64_t len, inner, nblk; /* the lane's length, the size of the dims after it, its blocks */
} smg_job;

/* element i's term of the lane's sum, and its dx from the sum s */
static inline double smg_term(const smg_job *j, int64_t i) {
    double g = ld(j->g, j->dt, i);
    return j->log ? g : g * ld(j->y, j->dt, i);
}
static inline void smg_store(const smg_job *j, int64_t i, double s) {
    double g = ld(j->g, j->dt, i), y = ld(j->y, j->dt, i);
    stv(j->dx, j->dt, i, j->log ? g - exp(y) * s : y * (g - s));
}

/* units [u0, u1): rows when inner is 1, else (outer index, block of inner) */
static void smg_units(void *ctx, int64_t u0, int64_t u1) {
    const smg_job *j = ctx;
    const int64_t len = j->len, inner = j->inner;
    if (inner == 1) {
        smg_f32_fn vrows = j->dt == AD_FLOAT32 ? smg_f32[ad_cpu_isa()].rows : NULL;
        if (vrows) {
            vrows(j->y, j->g, j->dx, u0, u1, len, j->log);
            return;
        }
        for (int64_t r = u0; r < u1; r++) {
            double acc[8] = {0};
            int64_t b = r * len, k = 0;
            for (; k + 8 <= len; k += 8)
                for (int q = 0; q < 8; q++) acc[q] += smg_term(j, b + k + q);
            for (; k < len; k++) acc[0] += smg_term(j, b + k);
            double s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) +
                       ((acc[4] + acc[5]) + (acc[6] + acc[7]));
            for (k = 0; k < len; k++) smg_store(j, b + k, s);
        }
        return;
    }
    double acc[SMG_BLOCK];
    smg_f32_fn vcols = j->dt == AD_FLOAT32 ? smg_f32[ad_cpu_isa()].cols : NULL;
    for (int64_t u = u0; u < u1; u++) {
        int64_t j0 = u % j->nblk * SMG_BLOCK, b = u / j->nblk * len * inner + j0;
        int w = inner - j0 < SMG_BLOCK ? (int)(inner - j0) : SMG_BLOCK;
        if (vcols) {
            vcols((const float *)j->y + b, (const float *)j->g + b, (float *)j->dx + b, inner,
                  len, w, j->log);
            continue;
        }
        for (int q = 0; q < w; q++) acc[q] = 0;
        for (int64_t k = 0; k < len; k++)
            for (int q = 0; q < w; q++) acc[q] += smg_term(j, b + k * inner + q);
        for (int64_t k = 0; k < len; k++)
            for (int q = 0; q < w; q++) smg_store(j, b + k * inner + q, acc[q]);
    }
}

ad_status ad_softmax_grad(const ad_tensor *y, const ad_tensor *g, int64_t dim, bool log,
                          ad_tensor **dx) {
    const char *op = log ? "log_softmax backward" : "softmax backward";
    int nd = y->ndim;
    *dx = NULL;
    if (!ad_dtype_is_float(y->dtype) || g->dtype != y->dtype || g->ndim != nd ||
        memcmp(T_SHAPE(g), T_SHAPE(y), (size_t)nd * sizeof(int64_t)))
        return ad_fail(AD_ERR_SHAPE, "%s: gradient %s does not fit the output %s", op,
                       ad_tdesc(g), ad_tdesc(y));
    int64_t d = dim < 0 ? dim + (nd ? nd : 1) : dim;
    if (d < 0 || d >= (nd ? nd : 1))
        return ad_fail(AD_ERR_VALUE, "%s: dim %lld out of range for %s", op, (long long)dim,
                       ad_tdesc(y));
    int64_t len = nd ? T_SHAPE(y)[d] : 1, inner = 1, outer = 1;
    for (int i = 0; i < nd; i++) {
        if (i < d) outer *= T_SHAPE(y)[i];
        if (i > d) inner *= T_SHAPE(y)[i];
    }
    ad_tensor *ty = NULL, *tg = NULL, *o = NULL;
    const void *py, *pg;
    ad_status st;
    if ((st = nn_contig(y, &ty, &py)) || (st = nn_contig(g, &tg, &pg)) ||
        (st = ad_tensor_empty(y->dtype, T_SHAPE(y), nd, &o)))
        goto done;
    int64_t nblk = (inner + SMG_BLOCK - 1) / SMG_BLOCK;
    smg_job jb = {py, pg, o->storage->data, y->dtype, log, len, inner, nblk};
    if (inner == 1) nn_rows(outer, 3 * len, smg_units, &jb);
    else nn_rows(outer * nblk, 3 * len * (inner < SMG_BLOCK ? inner : SMG_BLOCK), smg_units, &jb);
done:
    ad_tensor_release(ty);
    ad_tensor_release(tg);
    if (!st) *dx = o;
    else ad_tensor_release(o);
    return st;
}

/* ---- layer_norm ---------------------------------------------------------------- */
typedef struct ln_job {
    const void *x, *w, *b;
    void *y;
    int dt;
    int64_t cols;
    double eps;
} ln_job;

/* float32 rows through the vector kernels (simd_math.h); NULL: portable */
static void (*ln_rows_f32(void))(const float *, const float *, const float *, float *, int64_t,
                                 int64_t, int64_t, double) {
    int isa = ad_cpu_isa();
    return isa == AD_ISA_AVX512 ? ad_layer_norm_rows_f32_avx512
           : isa == AD_ISA_AVX2 ? ad_layer_norm_rows_f32_avx2 : NULL;
}

/* the sum of ((x - m) sc)^2 over the n elements of x from base */
static double ln_sum_sq(const void *x, int dt, int64_t base, int64_t n, double m, double sc) {
    double ss = 0;
    for (int64_t c = 0; c < n; c++) {
        double d = (ld(x, dt, base + c) - m) * sc;
        ss += d * d;
    }
    return ss;
}

/* The mean and 1 / sqrt(var + eps) of the n elements of x from base, in
   double, the variance from the deviations.  Deviations past 2^511, whose
   squares overflow (rstd would be 0 and the row 0, silently), are summed
   again scaled by 2^-600: layer_norm does not depend on the scale, and
   beside them the small ones' squares underflow harmlessly (the float32
   vector rows do the same at 2^64, simd_math.h row_moments). */
static void ln_moments(const void *x, int dt, int64_t base, int64_t n, double eps, double *mean,
                       double *rstd) {
    double m = 0, sc = 1.0;
    for (int64_t c = 0; c < n; c++) m += ld(x, dt, base + c);
    m /= (double)n;
    double ss = ln_sum_sq(x, dt, base, n, m, sc);
    if (isinf(ss) && isfinite(m)) {
        sc = 0x1p-600;
        ss = ln_sum_sq(x, dt, base, n, m, sc);
    }
    *mean = m;
    *rstd = sc / sqrt(ss / (double)n + eps * sc * sc);
}

static void ln_rows(void *ctx, int64_t r0, int64_t r1) {
    const ln_job *j = ctx;
    const void *px = j->x, *pw = j->w, *pb = j->b;
    int dt = j->dt;
    int64_t dcols = j->cols;
    if (dt == AD_FLOAT32 && ln_rows_f32()) {
        ln_rows_f32()(px, pw, pb, j->y, r0, r1, dcols, j->eps);
        return;
    }
    for (int64_t r = r0; r < r1; r++) {
        int64_t base = r * dcols;
        double mean, rstd;
        ln_moments(px, dt, base, dcols, j->eps, &mean, &rstd);
        for (int64_t c = 0; c < dcols; c++) {
            double v = (ld(px, dt, base + c) - mean) * rstd;
            if (pw) v *= ld(pw, dt, c);
            if (pb) v += ld(pb, dt, c);
            stv(j->y, dt, base + c, v);
        }
    }
}

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
    ln_job jb = {px, pw, pb, o->storage->data, x->dtype, dcols, eps};
    nn_rows(rows, dcols, ln_rows, &jb);
done:
    ad_tensor_release(tx);
    ad_tensor_release(tw);
    ad_tensor_release(tb);
    if (!st) *out = o;
    return st;
}

/* layer_norm's gradient without create_graph: dx, and the sums of g xhat
   (dw) and g (db) over the rows, each row's mean and rstd recomputed as the
   forward does.  The rows go in blocks of LN_BLOCK, each block summing into
   its own dw / db row (float32 terms, double sums at portable), folded in
   block order: the result does not depend on the thread count. */
#define LN_BLOCK 64
typedef struct ln_grad_job {
    const void *x, *g, *w;
    void *dx;
    double *pw, *pb; /* per block partials of dw, db (cols each; NULL to skip) */
    float *fw, *fb;  /* the same in float32 for the vector kernels */
    int dt;
    int64_t rows, cols;
    double eps;
} ln_grad_job;

static void (*ln_grad_rows_f32(void))(const float *, const float *, const float *, float *, float *,
                                      float *, int64_t, int64_t, int64_t, double) {
    int isa = ad_cpu_isa();
    return isa == AD_ISA_AVX512 ? ad_layer_norm_grad_rows_f32_avx512
           : isa == AD_ISA_AVX2 ? ad_layer_norm_grad_rows_f32_avx2 : NULL;
}

static void ln_grad_blocks(void *ctx, int64_t b0, int64_t b1) {
    const ln_grad_job *j = ctx;
    int dt = j->dt;
    int64_t n = j->cols;
    for (int64_t blk = b0; blk < b1; blk++) {
        int64_t r0 = blk * LN_BLOCK, r1 = r0 + LN_BLOCK < j->rows ? r0 + LN_BLOCK : j->rows;
        if (dt == AD_FLOAT32 && ln_grad_rows_f32()) {
            float *fw = j->fw ? j->fw + blk * n : NULL, *fb = j->fb ? j->fb + blk * n : NULL;
            if (fw) memset(fw, 0, (size_t)n * sizeof(float));
            if (fb) memset(fb, 0, (size_t)n * sizeof(float));
            ln_grad_rows_f32()(j->x, j->g, j->w, j->dx, fw, fb, r0, r1, n, j->eps);
            continue;
        }
        double *pw = j->pw ? j->pw + blk * n : NULL, *pb = j->pb ? j->pb + blk * n : NULL;
        for (int64_t c = 0; c < n; c++) {
            if (pw) pw[c] = 0;
            if (pb) pb[c] = 0;
        }
        for (int64_t r = r0; r < r1; r++) {
            int64_t base = r * n;
            double mean, rstd, s1 = 0, s2 = 0;
            ln_moments(j->x, dt, base, n, j->eps, &mean, &rstd);
            for (int64_t c = 0; c < n; c++) {
                double xh = (ld(j->x, dt, base + c) - mean) * rstd, g = ld(j->g, dt, base + c);
                double gw = j->w ? g * ld(j->w, dt, c) : g;
                s1 += gw;
                s2 += gw * xh;
                if (pw) pw[c] += g * xh;
                if (pb) pb[c] += g;
            }
            s1 /= (double)n;
            s2 /= (double)n;
            for (int64_t c = 0; c < n; c++) {
                double xh = (ld(j->x, dt, base + c) - mean) * rstd, g = ld(j->g, dt, base + c);
                double gw = j->w ? g * ld(j->w, dt, c) : g;
                stv(j->dx, dt, base + c, (gw - s1 - xh * s2) * rstd);
            }
        }
    }
}

ad_status ad_layer_norm_grad(const ad_tensor *x, const ad_tensor *w, const ad_tensor *g,
                             int64_t k, double eps, bool want_w, bool want_b, ad_tensor **dx,
                             ad_tensor **dw, ad_tensor **db) {
    int dt = x->dtype;
    int64_t n = 1;
    for (int i = x->ndim - (int)k; i < x->ndim; i++) n *= T_SHAPE(x)[i];
    int64_t rows = n ? x->numel / n : 0, nblk = (rows + LN_BLOCK - 1) / LN_BLOCK;
    bool vec = dt == AD_FLOAT32 && ln_grad_rows_f32();
    ad_tensor *tx = NULL, *tg = NULL, *tw = NULL, *o = NULL, *ow = NULL, *ob = NULL;
    void *part = NULL;
    const void *px, *pg, *pw = NULL;
    ad_status st;
    *dx = *dw = *db = NULL;
    if ((st = nn_contig(x, &tx, &px)) || (st = nn_contig(g, &tg, &pg)) ||
        (w && (st = nn_contig(w, &tw, &pw))))
        goto done;
    if ((st = ad_tensor_empty(dt, T_SHAPE(x), x->ndim, &o))) goto done;
    if (want_w && (st = ad_tensor_empty(dt, T_SHAPE(x) + x->ndim - k, (int)k, &ow))) goto done;
    if (want_b && (st = ad_tensor_empty(dt, T_SHAPE(x) + x->ndim - k, (int)k, &ob))) goto done;
    size_t es = vec ? sizeof(float) : sizeof(double);
    size_t plen = (size_t)(nblk * n);
    if ((want_w || want_b) && plen &&
        !(part = ad_malloc(es * plen * ((want_w ? 1 : 0) + (want_b ? 1 : 0))))) {
        st = ad_fail(AD_ERR_NOMEM, "layer_norm backward: out of memory");
        goto done;
    }
    ln_grad_job jb = {px, pg, pw, o->storage->data, NULL, NULL, NULL, NULL, dt, rows, n, eps};
    char *pp = part;
    if (want_w) {
        if (vec) jb.fw = (float *)pp;
        else jb.pw = (double *)pp;
        pp += es * plen;
    }
    if (want_b) {
        if (vec) jb.fb = (float *)pp;
        else jb.pb = (double *)pp;
    }
    if (nblk > 1 && rows * n >= NN_PAR_MIN && par_num_threads() > 1)
        par_for(nblk, ln_grad_blocks, &jb);
    else if (nblk > 0)
        ln_grad_blocks(&jb, 0, nblk);
    for (int t = 0; t < 2; t++) {
        ad_tensor *ot = t ? ob : ow;
        if (!ot) continue;
        const float *f = t ? jb.fb : jb.fw;
        const double *d = t ? jb.pb : jb.pw;
        for (int64_t c = 0; c < n; c++) {
            double acc = 0;
            for (int64_t blk = 0; blk < nblk; blk++) acc += vec ? f[blk * n + c] : d[blk * n + c];
            stv(ot->storage->data, dt, c, acc);
        }
    }
done:
    ad_mfree(part);
    ad_tensor_release(tx);
    ad_tensor_release(tg);
    ad_tensor_release(tw);
    if (st) {
        ad_tensor_release(o);
        ad_tensor_release(ow);
        ad_tensor_release(ob);
        return st;
    }
    *dx = o;
    *dw = ow;
    *db = ob;
    return AD_OK;
}

/* ---- dropout --------------------------------------------------------------------- */
/* Element i (row-major) is kept when draw i + 1 of the seed, a uniform in
   [0, 1) of 53 bits, is >= p, and scaled by 1 / (1 - p) (random_kernels.h):
   the mask depends only on seed and position, so the backward is dropout of
   the gradient with the same seed. */
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
    /* u 2^-53 >= p <=> u >= ceil(p 2^53) for the integer u (p 2^53 is exact) */
    ew_random_job j = {.kind = EW_RAND_DROPOUT, .dtype = x->dtype, .seed = seed,
                       .thr = (uint64_t)ceil(p * 0x1p53), .scale = p < 1 ? 1.0 / (1.0 - p) : 0.0,
                       .x = px, .y = o->storage->data};
    ew_random(&j, x->numel);
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

/* The kernels walk one output row (i) of one plane at a time: for every
   window offset (ki, kj) that is inside the input, the output columns j
   whose input column j*sw + off is inside form one contiguous range, so the
   inner loops are branch-free strided reads the compiler vectorises. */
static int64_t ceil_div_nonneg(int64_t a, int64_t b) { return a <= 0 ? 0 : (a + b - 1) / b; }

/* [*j0, *j1): the output columns whose input column j*sw + off is in [0, w) */
static void pool_cols(const pool_geom *g, int64_t off, int64_t *j0, int64_t *j1) {
    int64_t a = ceil_div_nonneg(-off, g->sw), b = ceil_div_nonneg(g->w - off, g->sw);
    *j0 = a < g->ow ? a : g->ow;
    *j1 = b < g->ow ? b : g->ow;
    if (*j1 < *j0) *j1 = *j0;
}

typedef struct pool_walk_job {
    const pool_geom *g;
    int kind, dt;
    bool is2x2;        /* the window of pool_2x2 */
    const void *x, *gy;
    void *y;
    char *scratch;     /* one slot of `slot` bytes per chunk */
    size_t slot;
    int64_t chunks;
} pool_walk_job;

/* BODY for j in [j0, j1) with the stride STEP: compiled apart for the common
   strides 1 and 2, where STEP is a constant and the strided reads vectorise. */
#define POOL_COLS(j0, j1, sw, ...)                                                      \
    do {                                                                                   \
        if ((sw) == 1) {                                                                   \
            const int64_t STEP = 1;                                                        \
            for (int64_t j = (j0); j < (j1); j++) __VA_ARGS__                                  \
        } else if ((sw) == 2) {                                                            \
            const int64_t STEP = 2;                                                        \
            for (int64_t j = (j0); j < (j1); j++) __VA_ARGS__                                  \
        } else {                                                                           \
            const int64_t STEP = (sw);                                                     \
            for (int64_t j = (j0); j < (j1); j++) __VA_ARGS__                                  \
        }                                                                                  \
    } while (0)

/* The backward and the gather find a window's argmax without an index per
   lane: with the window's maximum m known, the argmax is the first element
   in (ki, kj) order equal to m, or the first NaN (m is NaN exactly when the
   window holds one); done[j] (0 or 1, in T so that the loop stays one lane
   width) marks the windows already matched. The loops are branch-free (every
   operand loaded, the match selected) so that they vectorise. For a window of -infs the first
   element matches, as the first valid element is the maximum there. */
/* pool_2x2's window (a b / c d) at column j: its maximum m with the NaN rule,
   and h0..h3 flagging the first element equal to it (0 or 1 in T: the loop
   stays one lane width and vectorises) */
#define POOL_2X2_FLAGS(T)                                                                  \
    T a = r0[2 * j], b = r0[2 * j + 1], c = r1[2 * j], d = r1[2 * j + 1], m = a;           \
    m = (b > m || b != b) ? b : m;                                                         \
    m = (c > m || c != c) ? c : m;                                                         \
    m = (d > m || d != d) ? d : m;                                                         \
    m = (a != a) ? a : m;                                                                  \
    T h0 = (T)((a == m) | (a != a));                                                       \
    T h1 = (1 - h0) * (T)((b == m) | (b != b));                                            \
    T h2 = (1 - h0 - h1) * (T)((c == m) | (c != c));                                       \
    T h3 = 1 - h0 - h1 - h2

/* The kernels are written once, in the template header nn_dtype.h, and
   instantiated here per float dtype. */
#define T float
#define S(name) name##_f32
#include "nn_dtype.h"

#define T double
#define S(name) name##_f64
#include "nn_dtype.h"

/* mse_loss's pass: chunks of MSE_CHUNK elements (a static split, so the sum
   is the same at any thread count), each summed by ew_mse, the chunks'
   sums added in order; o != NULL: (x - y)^2 elementwise, no sum */
#define MSE_CHUNK ((int64_t)1 << 14)
typedef struct mse_job {
    int dt;
    const void *x, *y;
    void *o;
    int64_t n;
    double *part; /* one per chunk */
} mse_job;

static void mse_chunks(void *ctx, int64_t c0, int64_t c1) {
    const mse_job *j = ctx;
    for (int64_t c = c0; c < c1; c++) {
        int64_t i0 = c * MSE_CHUNK, i1 = i0 + MSE_CHUNK < j->n ? i0 + MSE_CHUNK : j->n;
        j->part[c] = ew_mse(j->dt, j->x, j->y, j->o, i0, i1);
    }
}

static ad_status mse_run(int dt, const void *x, const void *y, void *o, int64_t n, double *sum) {
    int64_t chunks = (n + MSE_CHUNK - 1) / MSE_CHUNK;
    double one;
    mse_job j = {dt, x, y, o, n, chunks > 1 ? ad_malloc((size_t)chunks * sizeof(double)) : &one};
    if (!j.part) return ad_fail_nomem("mse_loss");
    nn_rows(chunks, MSE_CHUNK, mse_chunks, &j);
    *sum = 0;
    for (int64_t c = 0; c < chunks; c++) *sum += j.part[c];
    if (j.part != &one) ad_mfree(j.part);
    return AD_OK;
}

/* mse_loss's gradient for the input, reduced to one value (r = 1 mean, 2
   sum) with g that value's gradient: 2 (x - y) g (/ count) in one pass into
   a new tensor, where the formula takes three (x - y, its scale, the product
   with g) and two temporaries: 1024 x 1024 float32, forward and backward,
   Zen 4, 1 thread, 635-990 -> 320-380 us (torch 1200-1530 in the same
   runs).  The same loop at every level. */
typedef struct mse_grad_job {
    int dt;
    const void *x, *y;
    void *dx;
    int64_t n;
    double c;
} mse_grad_job;

static void mse_grad_chunks(void *ctx, int64_t c0, int64_t c1) {
    const mse_grad_job *j = ctx;
    int64_t i0 = c0 * MSE_CHUNK, i1 = c1 * MSE_CHUNK < j->n ? c1 * MSE_CHUNK : j->n;
    if (j->dt == AD_FLOAT32) {
        const float *x = j->x, *y = j->y, c = (float)j->c;
        float *d = j->dx;
        for (int64_t i = i0; i < i1; i++) d[i] = (x[i] - y[i]) * c;
    } else {
        const double *x = j->x, *y = j->y, c = j->c;
        double *d = j->dx;
        for (int64_t i = i0; i < i1; i++) d[i] = (x[i] - y[i]) * c;
    }
}

ad_status ad_mse_loss_grad(const ad_tensor *x, const ad_tensor *y, const ad_tensor *g,
                           int64_t r, ad_tensor **dx) {
    ad_tensor *tx, *ty, *o;
    const void *px, *py;
    ad_status st;
    if ((st = nn_contig(x, &tx, &px))) return st;
    if ((st = nn_contig(y, &ty, &py))) goto fail1;
    if ((st = ad_tensor_empty(x->dtype, T_SHAPE(x), x->ndim, &o))) goto fail2;
    double scale = r == 1 ? 2.0 / (double)x->numel : 2.0;
    mse_grad_job j = {x->dtype, px, py, o->storage->data, x->numel,
                      scale * ld(ad_ptr(g), g->dtype, 0)};
    nn_rows((x->numel + MSE_CHUNK - 1) / MSE_CHUNK, MSE_CHUNK, mse_grad_chunks, &j);
    *dx = o;
fail2:
    ad_tensor_release(ty);
fail1:
    ad_tensor_release(tx);
    return st;
}

/* chunk c of the planes: a static split, so any thread may run any chunk */
static void pool_chunks(void *ctx, int64_t c0, int64_t c1) {
    const pool_walk_job *jb = ctx;
    int64_t planes = jb->g->n * jb->g->c;
    for (int64_t c = c0; c < c1; c++) {
        int64_t p0 = planes * c / jb->chunks, p1 = planes * (c + 1) / jb->chunks;
        void *scr = jb->scratch + (size_t)c * jb->slot;
        if (jb->dt == AD_FLOAT32) pool_planes_f32(jb, p0, p1, scr);
        else pool_planes_f64(jb, p0, p1, scr);
    }
}

/* Below this many window reads a loop is not worth waking the pool for. */
#define POOL_PAR_MIN 32768

/* Every max-pooling window of the contiguous x, planes split over the
   threads (a plane's windows read and write only that plane): POOL_FWD
   stores each window's maximum in y; POOL_BWD zeroes y (x-shaped) and adds
   gy (output-shaped) into it at each window's argmax; POOL_GATHER stores gy's
   (x-shaped) value at each window's argmax (0 for a window wholly in the
   padding) in y. */
static ad_status pool_walk(int op, const pool_geom *g, int kind, int dt, const void *x,
                           const void *gy, void *y) {
    int64_t planes = g->n * g->c, work = planes * g->oh * g->ow * g->kh * g->kw;
    if (planes == 0 || g->oh == 0 || g->ow == 0) {
        if (kind == POOL_BWD) memset(y, 0, (size_t)(planes * g->h * g->w) * ad_dtype_size_(dt));
        return AD_OK;
    }
    int64_t chunks = work < POOL_PAR_MIN ? 1 : par_num_threads();
    if (chunks > planes) chunks = planes;
    size_t es = ad_dtype_size_(dt);
    bool is2x2 = g->kh == 2 && g->kw == 2 && g->sh == 2 && g->sw == 2 && g->ph == 0 &&
                 g->pw == 0 && g->dh == 1 && g->dw == 1;
    /* the window maxima and the matched flags of one output row (the general
       walk's backward and gather) */
    size_t slot = kind == POOL_FWD || is2x2 ? 0 : 2 * (size_t)g->ow * es;
    pool_walk_job jb = {g, kind, dt, is2x2, x, gy, y, NULL, slot, chunks};
    if (slot && !(jb.scratch = ad_malloc(slot * (size_t)chunks))) return ad_fail_nomem(OP_NAME(op));
    if (chunks > 1) par_for(chunks, pool_chunks, &jb);
    else pool_chunks(&jb, 0, 1);
    ad_mfree(jb.scratch);
    return AD_OK;
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
    st = pool_walk(a->op, &g, POOL_FWD, x->dtype, px, NULL, o->storage->data);
    ad_tensor_release(tx);
    if (st) ad_tensor_release(o);
    else *out = o;
    return st;
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
        (st = ad_tensor_empty(x->dtype, T_SHAPE(x), 4, &o)))  /* zeroed by pool_walk */
        goto done;
    st = pool_walk(a->op, &g, POOL_BWD, x->dtype, px, pg, o->storage->data);
done:
    ad_tensor_release(tx);
    ad_tensor_release(tg);
    if (!st) *out = o;
    else ad_tensor_release(o);
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
    st = pool_walk(a->op, &g, POOL_GATHER, x->dtype, px, pt, o->storage->data);
done:
    ad_tensor_release(tx);
    ad_tensor_release(tt);
    if (!st) *out = o;
    else ad_tensor_release(o);
    return st;
}
