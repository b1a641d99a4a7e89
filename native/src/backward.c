/* backward.c - every op's gradient, in one place, written with the
 * library's own ops (candle's backprop.rs, burn's binary()/unary() helpers),
 * so that a later create_graph can record them.
 *
 * One style for every formula: BACKWARD(op) opens a scope `s` whose
 * temporaries are released when the formula ends.  Every helper returns a
 * tensor the scope owns, or NULL once a step failed (the first failure is
 * kept); a NULL argument propagates, so a formula is a couple of nested
 * expressions and no error check.  GRAD(i, expr) evaluates expr only when
 * input i is tracked and gives it (summed over its broadcast dims) as input
 * i's gradient.
 *
 * X(i) reads input i's value and Y the output's: a debug build asserts that
 * the op's `needs` mask (ops.def) saved them.  XS(i) is input i for its
 * shape or dtype only (kept because it is tracked), G the incoming gradient.
 */
#include <assert.h>
#include <math.h>
#include <string.h>

#include "internal.h"
#include "opargs.h"
#include "cpu.h"
#include "nnops.h"
#include "parallel.h"
#include "simd.h"
#include "strided.h"

#define BW_MAX_TMP 48

typedef struct bw_scope {
    const ad_node *n;
    const ad_tensor *out, *g;
    ad_tensor **gr;
    ad_status st;
    int ntmp;
    ad_tensor *tmp[BW_MAX_TMP];
} bw_scope;

/* Takes ownership of y, the result of a call that returned st (a separate
   statement: C leaves the order of a call's argument evaluation open). */
static ad_tensor *own(bw_scope *s, ad_status st, ad_tensor *y) {
    if (st) {
        if (!s->st) s->st = st;
        return NULL;
    }
    if (s->ntmp == BW_MAX_TMP) {
        ad_tensor_release(y);
        if (!s->st)
            s->st = ad_fail(AD_ERR_INTERNAL, "%s backward: more than %d temporaries",
                            OP_NAME(s->n->op), BW_MAX_TMP);
        return NULL;
    }
    return s->tmp[s->ntmp++] = y;
}

static ad_status bw_end(bw_scope *s) {
    for (int i = 0; i < s->ntmp; i++) ad_tensor_release(s->tmp[i]);
    return s->st;
}

/* op over n inputs with arguments; NULL when an input is NULL */
static ad_tensor *call(bw_scope *s, int op, int n, const ad_tensor *a, const ad_tensor *b,
                       const ad_tensor *c, const int64_t *ia, int ni, const double *fa,
                       int nf) {
    const ad_tensor *in[3] = {a, b, c};
    for (int i = 0; i < n; i++)
        if (!in[i]) return NULL;
    if (s->st) return NULL;
    ad_tensor *y = NULL;
    ad_status st = ad_call(op, in, n, ia, ni, fa, nf, &y);
    return own(s, st, y);
}

static ad_tensor *scalar(bw_scope *s, int op, const ad_tensor *a, double v) {
    return call(s, op, 1, a, NULL, NULL, NULL, 0, &v, 1);
}

/* a 0-d constant of like's dtype */
static ad_tensor *constant(bw_scope *s, double v, const ad_tensor *like) {
    if (s->st || !like) return NULL;
    ad_tensor *y = NULL;
    ad_status st = ad_tensor_full(v, like->dtype, NULL, 0, &y);
    return own(s, st, y);
}

static ad_tensor *zeros_like(bw_scope *s, const ad_tensor *x) {
    if (s->st || !x) return NULL;
    ad_tensor *y = NULL;
    ad_status st = ad_tensor_zeros(s->g->dtype, T_SHAPE(x), x->ndim, &y);
    return own(s, st, y);
}

static ad_tensor *to_dtype(bw_scope *s, const ad_tensor *a, int64_t dtype) {
    return call(s, AD_OP_TO_DTYPE, 1, a, NULL, NULL, &dtype, 1, NULL, 0);
}

static ad_tensor *reshape(bw_scope *s, const ad_tensor *a, const int64_t *shape, int nd) {
    return call(s, AD_OP_RESHAPE, 1, a, NULL, NULL, shape, nd, NULL, 0);
}

/* op (sum, prod, max) over dims (all when nd == 0), keeping them as size 1 */
static ad_tensor *reduce_keep(bw_scope *s, int op, const ad_tensor *a, const int64_t *dims,
                              int nd) {
    int64_t ia[1 + AD_MAX_DIMS] = {1};
    memcpy(ia + 1, dims, (size_t)nd * sizeof(int64_t));
    return call(s, op, 1, a, NULL, NULL, ia, 1 + nd, NULL, 0);
}

/* t reshaped to x's shape with dim kept as size 1 (x 0-d: shape ()) */
static ad_tensor *keep_dim(bw_scope *s, const ad_tensor *t, const ad_tensor *x, int64_t dim) {
    int64_t k[AD_MAX_DIMS];
    memcpy(k, T_SHAPE(x), x->ndim * sizeof(int64_t));
    if (x->ndim) k[dim < 0 ? dim + x->ndim : dim] = 1;
    return reshape(s, t, k, x->ndim);
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
    ad_tensor *t = NULL;
    ad_status st = n == 1 ? AD_OK : ad_call(AD_OP_SUM, &g, 1, iargs, n, NULL, 0, &t);
    const ad_tensor *src = t ? t : g;
    if (!st) st = ad_call(AD_OP_RESHAPE, &src, 1, shape, nd, NULL, 0, out);
    ad_tensor_release(t);
    return st;
}

/* Gives input i the gradient t, summed over the dims broadcasting added. */
static void give(bw_scope *s, int i, const ad_tensor *t) {
    if (!t || s->st) return;
    const ad_tensor *x = node_in(s->n)[i];
    ad_status st = ad_sum_to_shape(t, T_SHAPE(x), x->ndim, &s->gr[i]);
    if (st && !s->st) s->st = st;
}

static const ad_tensor *input(const bw_scope *s, int i, bool value) {
    (void)value;
    assert((value ? s->n->saved : s->n->tracked | s->n->saved) & (1u << i) &&
           "a backward formula reads an input its needs mask (ops.def) did not save");
    return node_in(s->n)[i];
}

static const ad_tensor *output(const bw_scope *s) {
    assert(s->n->saves_output &&
           "a backward formula reads the output its needs mask (ops.def) did not save");
    return s->out;
}

#define BACKWARD(name)                                                                   \
    static void name##_formula(bw_scope *s);                                            \
    ad_status bw_##name(const ad_node *n, const ad_tensor *out, const ad_tensor *g,     \
                        ad_tensor **gr) {                                                \
        bw_scope s = {.n = n, .out = out, .g = g, .gr = gr};                             \
        name##_formula(&s);                                                              \
        return bw_end(&s);                                                               \
    }                                                                                    \
    static void name##_formula(bw_scope *s)

#define TRACKED(i) (s->n->tracked & (1u << (i)))
#define GRAD(i, expr) \
    do { if (TRACKED(i)) give(s, i, (expr)); } while (0)
#define G (s->g)
#define X(i) input(s, i, true)
#define XS(i) input(s, i, false)
#define Y output(s)
#define IA (node_iargs(s->n))
#define FA (node_fargs(s->n))

#define OP1(op, a) call(s, AD_OP_##op, 1, a, NULL, NULL, NULL, 0, NULL, 0)
#define OP2(op, a, b) call(s, AD_OP_##op, 2, a, b, NULL, NULL, 0, NULL, 0)
#define OPS(op, a, v) scalar(s, AD_OP_##op, a, v)
#define ADD(a, b) OP2(ADD, a, b)
#define SUB(a, b) OP2(SUB, a, b)
#define MUL(a, b) OP2(MUL, a, b)
#define DIV(a, b) OP2(DIV, a, b)
#define NEG(a) OP1(NEG, a)
#define MATMUL(a, b) OP2(MATMUL, a, b)
#define SCALE(a, v) OPS(MUL_SCALAR, a, v)
#define ADDS(a, v) OPS(ADD_SCALAR, a, v)
#define RSUB(v, a) OPS(RSUB_SCALAR, a, v) /* v - a */
#define C(v) constant(s, v, G) /* 0-d, the gradient's dtype */
/* where(c, a, b): a select, so a non-finite unselected value never leaks */
#define WHERE(c, a, b) call(s, AD_OP_WHERE, 3, c, a, b, NULL, 0, NULL, 0)
#define CMP(op, a, v) OP2(op, a, constant(s, v, a)) /* a <op> v, a bool tensor */

/* ---- elementwise binary ---------------------------------------------------------- */
/* d(a+b) = g, g */
BACKWARD(add) {
    GRAD(0, G);
    GRAD(1, G);
}

/* d(a-b) = g, -g */
BACKWARD(sub) {
    GRAD(0, G);
    GRAD(1, NEG(G));
}

/* d(a*b) = g b, g a */
BACKWARD(mul) {
    GRAD(0, MUL(G, X(1)));
    GRAD(1, MUL(G, X(0)));
}

/* d(a/b) = g/b, -g a/b^2 = -(g/b) out */
BACKWARD(div) {
    const ad_tensor *q = DIV(G, X(1));
    GRAD(1, SCALE(MUL(q, Y), -1.0));
    GRAD(0, q);
}

/* maximum (win = GT) / minimum (win = LT): g goes to the winner; a tie splits
   it half and half (candle's rule) */
static void extremum(bw_scope *s, int win) {
    for (int i = 0; i < 2; i++)
        GRAD(i, WHERE(OP2(EQ, X(i), X(1 - i)), SCALE(G, 0.5),
                      WHERE(call(s, win, 2, X(i), X(1 - i), NULL, NULL, 0, NULL, 0), G, C(0))));
}
BACKWARD(maximum) { extremum(s, AD_OP_GT); }
BACKWARD(minimum) { extremum(s, AD_OP_LT); }

/* d a^b = g b a^(b-1) (0 where b = 0), g a^b ln(a) = g out ln(a) (0 where a = 0
   and b >= 0: PyTorch's masks for 0 * inf) */
BACKWARD(pow) {
    const ad_tensor *a = X(0), *b = X(1);
    GRAD(0, WHERE(CMP(EQ, b, 0.0), C(0), MUL(G, MUL(b, OP2(POW, a, ADDS(b, -1.0))))));
    if (TRACKED(1)) {
        const ad_tensor *d = MUL(G, MUL(Y, OP1(LOG, a)));
        give(s, 1, WHERE(CMP(EQ, a, 0.0), WHERE(CMP(GE, b, 0.0), C(0), d), d));
    }
}

/* ---- elementwise unary --------------------------------------------------------------- */
/* g d(x) in one pass (fused_grad), for the ops below that have it */
typedef void (*grad_vec_fn)(int64_t, const float *, const float *, int64_t, float *);
typedef struct {
    const void *x, *g;
    void *dx;
    int dt;
    int64_t n, sg; /* sg: g's element stride, 1 or 0 (one value, a sum's gradient) */
    grad_vec_fn vec;
    double (*d)(double);
} fused_grad_job;

#define FUSED_GRAD_CHUNK 8192
static void fused_grad_chunks(void *ctx, int64_t c0, int64_t c1) {
    const fused_grad_job *j = ctx;
    int64_t i0 = c0 * FUSED_GRAD_CHUNK;
    int64_t i1 = c1 * FUSED_GRAD_CHUNK < j->n ? c1 * FUSED_GRAD_CHUNK : j->n;
    if (j->vec) {
        j->vec(i1 - i0, (const float *)j->x + i0, (const float *)j->g + i0 * j->sg, j->sg,
               (float *)j->dx + i0);
        return;
    }
    for (int64_t i = i0; i < i1; i++) {
        double x, g;
        if (j->dt == AD_FLOAT32) x = ((const float *)j->x)[i], g = ((const float *)j->g)[i * j->sg];
        else x = ((const double *)j->x)[i], g = ((const double *)j->g)[i * j->sg];
        double d = g * j->d(x);
        if (j->dt == AD_FLOAT32) ((float *)j->dx)[i] = (float)d;
        else ((double *)j->dx)[i] = d;
    }
}

static bool all_strides_zero(const ad_tensor *t) {
    for (int i = 0; i < t->ndim; i++)
        if (T_STRIDES(t)[i] != 0 && T_SHAPE(t)[i] != 1) return false;
    return true;
}

/* g d(x) in one pass, when G has x's shape and dtype and no graph is being
   recorded (else false: the caller records its formula).  x and g in another
   layout are copied first, except a g of one value (a sum's gradient), read
   once.  vec2 / vec512: the float32 kernels at the AVX2 / AVX-512 levels; d
   the other dtypes' and levels' in double, or NULL (false there).  From
   par_min elements on, chunks split over the threads. */
static bool fused_grad(bw_scope *s, const ad_tensor *x, const ad_tensor *g, const char *op,
                       grad_vec_fn vec2, grad_vec_fn vec512, double (*d)(double),
                       int64_t par_min) {
    if (ad_grad_enabled || g->dtype != x->dtype || g->ndim != x->ndim ||
        memcmp(T_SHAPE(g), T_SHAPE(x), (size_t)x->ndim * sizeof(int64_t)))
        return false;
    int isa = ad_cpu_isa();
    grad_vec_fn vec = x->dtype != AD_FLOAT32 ? NULL
                      : isa == AD_ISA_AVX512 ? vec512
                      : isa == AD_ISA_AVX2 ? vec2 : NULL;
    if (!vec && !d)
        return false;
    if (!TRACKED(0))
        return true;
    ad_tensor *tx = NULL, *tg = NULL, *dx = NULL;
    const void *px, *pg;
    int64_t sg = 1;
    ad_status st = nn_contig(x, &tx, &px);
    if (!st && all_strides_zero(g)) pg = ad_ptr(g), sg = 0;
    else if (!st) st = nn_contig(g, &tg, &pg);
    if (!st && !(dx = ad_tensor_new_like(x->dtype, x)))
        st = ad_fail(AD_ERR_NOMEM, "%s backward: out of memory", op);
    if (!st) {
        fused_grad_job j = {px, pg, dx->storage->data, x->dtype, x->numel, sg, vec, d};
        int64_t chunks = (x->numel + FUSED_GRAD_CHUNK - 1) / FUSED_GRAD_CHUNK;
        if (chunks > 1 && x->numel >= par_min && par_num_threads() > 1)
            par_for(chunks, fused_grad_chunks, &j);
        else if (chunks > 0) fused_grad_chunks(&j, 0, chunks);
    }
    ad_tensor_release(tx);
    ad_tensor_release(tg);
    give(s, 0, own(s, st, dx));
    return true;
}

/* d(-x) = -g */
BACKWARD(neg) { GRAD(0, NEG(G)); }
/* d exp(x) = g exp(x) = g out */
BACKWARD(exp) { GRAD(0, MUL(G, Y)); }
/* d log(x) = g / x */
BACKWARD(log) { GRAD(0, DIV(G, X(0))); }
/* d x^2 = 2 x g */
BACKWARD(sqr) { GRAD(0, SCALE(MUL(G, X(0)), 2.0)); }
/* d sqrt(x) = g / (2 sqrt(x)) = 0.5 g / out */
BACKWARD(sqrt) { GRAD(0, SCALE(DIV(G, Y), 0.5)); }
/* (relu, tanh, sigmoid and silu: float32 in one pass through the SIMD
   gradient maps, fused_grad above, with these formulas' bits; else these.
   Threaded from the size a memory-bound op is, cost the op's work per
   element relative to a copy's) */
#define FUSED_F32(OP, x, cost)                                                        \
    fused_grad(s, (x), G, #OP, ad_##OP##_grad_f32_avx2, ad_##OP##_grad_f32_avx512, NULL, \
               ITER_PAR_MIN / (cost))
/* d relu(x) = g where out > 0, else 0 (0 at 0) */
BACKWARD(relu) {
    if (!FUSED_F32(relu, Y, 1)) GRAD(0, MUL(to_dtype(s, CMP(GT, Y, 0.0), Y->dtype), G));
}
/* d tanh(x) = g (1 - tanh^2) = g (1 - out^2) */
BACKWARD(tanh) {
    if (!FUSED_F32(tanh, Y, 1)) GRAD(0, MUL(RSUB(1.0, OP1(SQR, Y)), G));
}
/* d|x| = g sign(x) (0 at 0) */
BACKWARD(abs) { GRAD(0, MUL(G, OP1(SIGN, X(0)))); }
/* d(1/x) = -g/x^2 = -g out^2 */
BACKWARD(recip) { GRAD(0, SCALE(MUL(G, OP1(SQR, Y)), -1.0)); }
/* d sin(x) = g cos(x) */
BACKWARD(sin) { GRAD(0, MUL(G, OP1(COS, X(0)))); }
/* d cos(x) = -g sin(x) */
BACKWARD(cos) { GRAD(0, NEG(MUL(G, OP1(SIN, X(0))))); }
/* d sigmoid(x) = g out (1 - out) */
BACKWARD(sigmoid) {
    if (!FUSED_F32(sigmoid, Y, 1)) GRAD(0, MUL(MUL(G, Y), RSUB(1.0, Y)));
}

/* gelu's (the tanh form) and gelu_erf's gradients without create_graph: one
   pass over x and g (fused_grad above), float32 through the SIMD kernels,
   else in double by these, the recorded formulas of the BACKWARDs below.
   gelu: d = s + x s (1 - s) 2c (1 + 3k x^2), s = sigmoid(2u) = (1 + tanh u) / 2,
   u = c (x + k x^3), c = sqrt(2/pi), k = 0.044715 (1 or 0 from |x| >= 30 on,
   where s is 1 or 0 in double and x s (1 - s) could be inf * 0);
   gelu_erf: d = Phi(x) + x phi(x), Phi = (1 + erf(x/sqrt 2))/2,
   phi = exp(-x^2/2) / sqrt(2 pi). */
#define GELU_C 0.7978845608028654
#define GELU_K 0.044715
static double gelu_grad_d(double x) {
    if (fabs(x) >= 30) return x > 0 ? 1.0 : 0.0;
    double sg = 1 / (1 + exp(-2 * GELU_C * x * (1 + GELU_K * x * x)));
    return sg + x * sg * (1 - sg) * 2 * GELU_C * (1 + 3 * GELU_K * x * x);
}

static double gelu_erf_grad_d(double x) {
    return 0.5 * (1.0 + erf(x * 0.7071067811865476)) + x * exp(-0.5 * x * x) * 0.3989422804014327;
}

/* gelu(x) = x/2 (1 + t), t = tanh(c (x + k x^3)):
   d = (1 + t)/2 + x/2 (1 - t^2) c (1 + 3 k x^2) */
BACKWARD(gelu) {
    const ad_tensor *x = X(0);
    if (fused_grad(s, x, G, "gelu", ad_gelu_grad_f32_avx2, ad_gelu_grad_f32_avx512, gelu_grad_d,
                   0))
        return;
    const ad_tensor *t = OP1(TANH, SCALE(ADD(x, SCALE(OPS(POW_SCALAR, x, 3.0), GELU_K)), GELU_C));
    GRAD(0, MUL(G, ADD(SCALE(ADDS(t, 1.0), 0.5),
                       MUL(MUL(SCALE(x, 0.5 * GELU_C), RSUB(1.0, OP1(SQR, t))),
                           ADDS(SCALE(OP1(SQR, x), 3.0 * GELU_K), 1.0)))));
}

/* gelu_erf(x) = x Phi(x): d = Phi(x) + x phi(x) */
BACKWARD(gelu_erf) {
    const ad_tensor *x = X(0);
    if (fused_grad(s, x, G, "gelu_erf", ad_gelu_erf_grad_f32_avx2, ad_gelu_erf_grad_f32_avx512,
                   gelu_erf_grad_d, 0))
        return;
    /* under create_graph the composite formula below records its ops */
    const ad_tensor *Phi = SCALE(ADDS(OP1(ERF, SCALE(x, 0.7071067811865476)), 1.0), 0.5);
    const ad_tensor *phi = SCALE(OP1(EXP, SCALE(OP1(SQR, x), -0.5)), 0.3989422804014327);
    GRAD(0, MUL(G, ADD(Phi, MUL(x, phi))));
}

/* d erf(x) = g 2/sqrt(pi) exp(-x^2) */
BACKWARD(erf) { GRAD(0, MUL(G, SCALE(OP1(EXP, NEG(OP1(SQR, X(0)))), 1.1283791670955126))); }

/* silu(x) = x s, s = sigmoid(x): d = s (1 + x (1 - s)) */
BACKWARD(silu) {
    if (FUSED_F32(silu, X(0), 16)) return;
    const ad_tensor *sg = OP1(SIGMOID, X(0));
    GRAD(0, MUL(G, MUL(sg, ADDS(MUL(X(0), RSUB(1.0, sg)), 1.0))));
}

/* d softplus(x) = d log(1 + e^x) = g sigmoid(x) */
BACKWARD(softplus) { GRAD(0, MUL(G, OP1(SIGMOID, X(0)))); }
/* d elu(x) = g where x > 0, else g alpha e^x (PyTorch: x = 0 takes alpha) */
BACKWARD(elu) { GRAD(0, WHERE(CMP(GT, X(0), 0.0), G, MUL(G, SCALE(OP1(EXP, X(0)), FA[0])))); }
/* d log1p(x) = g / (1 + x) */
BACKWARD(log1p) { GRAD(0, DIV(G, ADDS(X(0), 1.0))); }
/* d expm1(x) = g e^x = g (out + 1) */
BACKWARD(expm1) { GRAD(0, MUL(G, ADDS(Y, 1.0))); }
/* floor, ceil, round, sign: piecewise constant, so the gradient is 0
   everywhere (PyTorch's convention; the jumps have no derivative) */
BACKWARD(zero) { GRAD(0, zeros_like(s, G)); }
/* d clamp(x, lo, hi) = g where lo <= x <= hi (inclusive, as PyTorch), else 0 */
BACKWARD(clamp) {
    GRAD(0, WHERE(CMP(GE, X(0), FA[0]), WHERE(CMP(LE, X(0), FA[1]), G, C(0)), C(0)));
}
/* d where(c, a, b) = where(c, g, 0), where(c, 0, g): selects, so an inf or NaN
   gradient path through the unselected branch is never multiplied by 0 */
BACKWARD(where) {
    GRAD(1, WHERE(X(0), G, C(0)));
    GRAD(2, WHERE(X(0), C(0), G));
}

/* ---- tensor-scalar (s = fargs[0]) ---------------------------------------------------- */
/* d(x+s) = g */
BACKWARD(add_scalar) { GRAD(0, G); }
/* d(x*s) = g s */
BACKWARD(mul_scalar) { GRAD(0, SCALE(G, FA[0])); }
/* d(x/s) = g/s */
BACKWARD(div_scalar) { GRAD(0, OPS(DIV_SCALAR, G, FA[0])); }
/* d(s-x) = -g */
BACKWARD(rsub_scalar) { GRAD(0, NEG(G)); }
/* d(s/x) = -s/x^2 g = -(out/x) g */
BACKWARD(rdiv_scalar) { GRAD(0, SCALE(MUL(DIV(Y, X(0)), G), -1.0)); }
/* d x^s = s x^(s-1) g (0 for s = 0, also where x^-1 is inf) */
BACKWARD(pow_scalar) {
    double e = FA[0];
    GRAD(0, e == 0.0 ? SCALE(G, 0.0) : MUL(SCALE(OPS(POW_SCALAR, X(0), e - 1.0), e), G));
}
/* d s^x = s^x ln(s) g = out ln(s) g */
/* d s^x = g s^x log s; at s = 0, 0 where x >= 0 (s^x is 0 or 1 there, and
   0 * log 0 would be NaN: pow's rule for its exponent, and torch's) */
BACKWARD(pow_rscalar) {
    const ad_tensor *d = MUL(SCALE(Y, log(FA[0])), G);
    GRAD(0, FA[0] == 0 ? WHERE(CMP(GE, X(0), 0.0), C(0), d) : d);
}

/* ---- reductions (iargs {keepdim, dims...}) --------------------------------------------- */
/* t reshaped to x's shape with the reduced dims kept as 1 */
static const ad_tensor *keep_reduced(bw_scope *s, const ad_tensor *t) {
    const ad_tensor *x = node_in(s->n)[0];
    reduce_args r;
    ad_status st = reduce_args_decode(s->n->op, IA, s->n->n_iargs, x, &r);
    if (st && !s->st) s->st = st;
    return st ? NULL : reshape(s, t, r.kshape, x->ndim);
}

/* t (reduced) broadcast back over the reduced dims */
static const ad_tensor *unreduce(bw_scope *s, const ad_tensor *t) {
    const ad_tensor *x = XS(0);
    return call(s, AD_OP_BROADCAST, 1, keep_reduced(s, t), NULL, NULL, T_SHAPE(x), x->ndim,
                NULL, 0);
}

/* d sum(x) = g broadcast back over the reduced dims */
BACKWARD(sum) { GRAD(0, unreduce(s, G)); }
/* d mean(x) = g / count, broadcast back */
BACKWARD(mean) {
    double count = s->out->numel ? (double)XS(0)->numel / (double)s->out->numel : 0.0;
    GRAD(0, unreduce(s, OPS(DIV_SCALAR, G, count)));
}
/* d max(x) = g at the maxima; ties split it evenly (candle's rule) */
BACKWARD(maxmin) {
    const ad_tensor *hit = to_dtype(s, OP2(EQ, X(0), keep_reduced(s, Y)), X(0)->dtype);
    const ad_tensor *count = reduce_keep(s, AD_OP_SUM, hit, IA + 1, s->n->n_iargs - 1);
    GRAD(0, MUL(hit, DIV(keep_reduced(s, G), count)));
}
/* d prod(x) = g * (product of the others), exact with zeros: with z the zeros
   of a slice and p the product of its non-zeros, the product of the others is
   p/x when the slice has no zero, p at its only zero (0 elsewhere), and 0 when
   it has two or more */
BACKWARD(prod) {
    const ad_tensor *x = X(0), *z = CMP(EQ, x, 0.0);
    const int64_t *dims = IA + 1;
    int nd = s->n->n_iargs - 1;
    const ad_tensor *cnt = reduce_keep(s, AD_OP_SUM, to_dtype(s, z, x->dtype), dims, nd);
    const ad_tensor *xs = WHERE(z, C(1), x);
    const ad_tensor *p = reduce_keep(s, AD_OP_PROD, xs, dims, nd);
    const ad_tensor *d = WHERE(CMP(EQ, cnt, 0.0), DIV(p, xs),
                               WHERE(CMP(EQ, cnt, 1.0), WHERE(z, p, C(0)), C(0)));
    GRAD(0, MUL(d, keep_reduced(s, G)));
}

/* ---- softmax family ---------------------------------------------------------------------- */
/* d logsumexp(x) = g exp(x - out) = g softmax(x), out and g kept on dim */
BACKWARD(logsumexp) {
    const ad_tensor *x = X(0);
    GRAD(0, MUL(keep_dim(s, G, x, IA[0]), OP1(EXP, SUB(x, keep_dim(s, Y, x, IA[0])))));
}
/* softmax's and log_softmax's gradient in one native pass over each lane
   (nn.c), when G has out's shape and dtype and no graph is being recorded
   (else false: the caller records its formula) */
static bool softmax_grad_fused(bw_scope *s, bool log) {
    const ad_tensor *y = Y, *g = G;
    if (ad_grad_enabled || g->dtype != y->dtype || g->ndim != y->ndim ||
        memcmp(T_SHAPE(g), T_SHAPE(y), (size_t)y->ndim * sizeof(int64_t)))
        return false;
    if (!TRACKED(0)) return true;
    ad_tensor *dx = NULL;
    ad_status st = ad_softmax_grad(y, g, IA[0], log, &dx);
    give(s, 0, own(s, st, dx));
    return true;
}
/* d softmax(x) = out (g - sum(g out, dim)) */
BACKWARD(softmax) {
    if (softmax_grad_fused(s, false)) return;
    GRAD(0, MUL(Y, SUB(G, reduce_keep(s, AD_OP_SUM, MUL(G, Y), IA, 1))));
}
/* d log_softmax(x) = g - exp(out) sum(g, dim) */
BACKWARD(log_softmax) {
    if (softmax_grad_fused(s, true)) return;
    GRAD(0, SUB(G, MUL(OP1(EXP, Y), reduce_keep(s, AD_OP_SUM, G, IA, 1))));
}
/* d cumsum(x) = cumsum of g in the other direction */
BACKWARD(cumsum) {
    int64_t ia[2] = {IA[0], !IA[1]};
    GRAD(0, call(s, AD_OP_CUMSUM, 1, G, NULL, NULL, ia, 2, NULL, 0));
}

/* ---- layout -------------------------------------------------------------------------- */
/* d reshape(x) = g reshaped back */
BACKWARD(reshape) { GRAD(0, reshape(s, G, T_SHAPE(XS(0)), XS(0)->ndim)); }
/* d permute(x, p) = permute(g, inverse p) */
BACKWARD(permute) {
    int64_t inv[AD_MAX_DIMS], nd = s->n->n_iargs;
    for (int i = 0; i < nd; i++) inv[IA[i] < 0 ? IA[i] + nd : IA[i]] = i;
    GRAD(0, call(s, AD_OP_PERMUTE, 1, G, NULL, NULL, inv, (int)nd, NULL, 0));
}
/* d slice(x) = zeros like x with g written into the sliced positions.  Under
   create_graph (g tracks and grad mode is on) the write must be recorded, so
   it is index_add(zeros, start + step * arange(len), g) along dim instead of
   the in-place copy, which is faster but leaves no graph. */
BACKWARD(slice) {
    const ad_tensor *z = zeros_like(s, XS(0));
    if (ad_grad_enabled && ad_tracks(G)) {
        slice_args sl;
        ad_status st = slice_args_decode(IA, XS(0), &sl);
        if (st) {
            if (!s->st) s->st = st;
            return;
        }
        ad_tensor *idx = NULL;
        st = ad_tensor_arange((double)sl.start, (double)sl.step, sl.len, AD_INT64, &idx);
        const ad_tensor *at = own(s, st, idx);
        int64_t dim = sl.dim;
        GRAD(0, call(s, AD_OP_INDEX_ADD, 3, z, at, G, &dim, 1, NULL, 0));
        return;
    }
    const ad_tensor *window = call(s, AD_OP_SLICE, 1, z, NULL, NULL, IA, 4, NULL, 0);
    if (window) ad_assign((ad_tensor *)window, G);
    GRAD(0, z);
}
/* d broadcast_to(x) = g summed over the broadcast dims */
BACKWARD(broadcast) { GRAD(0, G); }
/* contiguous, copy: g */
BACKWARD(identity) { GRAD(0, G); }
/* d to_dtype(x) = g converted back to x's dtype */
BACKWARD(to_dtype) { GRAD(0, to_dtype(s, G, XS(0)->dtype)); }

/* the last two dims swapped (a view: the GEMM packs it from its strides);
   NULL for NULL, like call (t is unit_dim's result, NULL when it failed) */
static const ad_tensor *swap_last2(bw_scope *s, const ad_tensor *t) {
    if (!t) return NULL;
    int64_t p[AD_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) p[i] = i;
    p[t->ndim - 2] = t->ndim - 1;
    p[t->ndim - 1] = t->ndim - 2;
    return call(s, AD_OP_PERMUTE, 1, t, NULL, NULL, p, t->ndim, NULL, 0);
}
/* t with a size-1 dim inserted before its last d dims (d = 0: appended), or
   (insert 0) its dim d from the end removed (d = 1: the last) */
static const ad_tensor *unit_dim(bw_scope *s, const ad_tensor *t, int d, int insert) {
    if (!t) return NULL;
    int64_t sh[AD_MAX_DIMS];
    int nd = t->ndim, pos = nd - d, j = 0;
    for (int i = 0; i <= nd; i++) {
        if (insert && i == pos) sh[j++] = 1;
        if (i == nd) break;
        if (!insert && i == pos) continue;
        sh[j++] = T_SHAPE(t)[i];
    }
    return reshape(s, t, sh, j);
}
/* d(a@b) = g @ b^T, a^T @ g, each summed over broadcast batch dims; a 1-d
   operand (numpy's rule: a row a, a column b) takes part as that matrix, and
   g gets back the dim its result dropped */
BACKWARD(matmul) {
    bool a1 = XS(0)->ndim == 1, b1 = XS(1)->ndim == 1;
    if (!a1 && !b1) {
        GRAD(0, MATMUL(G, swap_last2(s, X(1))));
        GRAD(1, MATMUL(swap_last2(s, X(0)), G));
        return;
    }
    const ad_tensor *g = G;
    if (a1) g = unit_dim(s, g, b1 ? 0 : 1, 1); /* the row dim, before n (if any) */
    if (b1) g = unit_dim(s, g, 0, 1);         /* the column dim, last */
    if (TRACKED(0)) {
        const ad_tensor *bm = b1 ? unit_dim(s, X(1), 0, 1) : X(1);
        const ad_tensor *ga = MATMUL(g, swap_last2(s, bm));
        GRAD(0, a1 ? unit_dim(s, ga, 2, 0) : ga);
    }
    if (TRACKED(1)) {
        const ad_tensor *am = a1 ? unit_dim(s, X(0), 1, 1) : X(0);
        const ad_tensor *gb = MATMUL(swap_last2(s, am), g);
        GRAD(1, b1 ? unit_dim(s, gb, 1, 0) : gb);
    }
}

/* ---- indexing and joining ---------------------------------------------------------------- */
/* d cat(x_0, ..., x_n; dim) = the slice of g each input occupied (views of g) */
BACKWARD(cat) {
    int64_t d = IA[0] < 0 ? IA[0] + s->out->ndim : IA[0], off = 0;
    for (int i = 0; i < s->n->n_in; i++) {
        int64_t args[4] = {d, off, 1, IA[1 + i]};
        off += IA[1 + i];
        GRAD(i, call(s, AD_OP_SLICE, 1, G, NULL, NULL, args, 4, NULL, 0));
    }
}
/* d pad(x, p) = pad(g, -p): the window x occupied (negative amounts cropped
   x, so its cropped border gets zeros) */
BACKWARD(pad) {
    int64_t neg[2 * AD_MAX_DIMS];
    double zero = 0;
    for (int i = 0; i < s->n->n_iargs; i++) neg[i] = -IA[i];
    GRAD(0, call(s, AD_OP_PAD, 1, G, NULL, NULL, neg, s->n->n_iargs, &zero, 1));
}
/* d index_select(x, idx) = index_add(zeros like x, idx, g): repeated indices
   accumulate */
BACKWARD(index_select) {
    GRAD(0, call(s, AD_OP_INDEX_ADD, 3, zeros_like(s, XS(0)), X(1), G, IA, 1, NULL, 0));
}
/* d index_add(x, idx, src) = g, index_select(g, idx) */
BACKWARD(index_add) {
    GRAD(0, G);
    GRAD(2, call(s, AD_OP_INDEX_SELECT, 2, G, X(1), NULL, IA, 1, NULL, 0));
}
/* d gather(x, idx) = scatter_add(zeros like x, idx, g) */
BACKWARD(gather) {
    GRAD(0, call(s, AD_OP_SCATTER_ADD, 3, zeros_like(s, XS(0)), X(1), G, IA, 1, NULL, 0));
}
/* d scatter_add(x, idx, src) = g, gather(g, idx) zero-padded to src's shape
   (src may be larger than idx; its extra elements are unused) */
BACKWARD(scatter_add) {
    GRAD(0, G);
    if (!TRACKED(2)) return;
    const ad_tensor *idx = X(1), *src = XS(2);
    int64_t p[2 * AD_MAX_DIMS];
    double zero = 0;
    bool same = true;
    for (int j = 0; j < src->ndim; j++) {
        p[2 * j] = 0;
        p[2 * j + 1] = T_SHAPE(src)[src->ndim - 1 - j] - T_SHAPE(idx)[src->ndim - 1 - j];
        same = same && p[2 * j + 1] == 0;
    }
    const ad_tensor *t = call(s, AD_OP_GATHER, 2, G, idx, NULL, IA, 1, NULL, 0);
    give(s, 2, same ? t : call(s, AD_OP_PAD, 1, t, NULL, NULL, p, 2 * src->ndim, &zero, 1));
}

/* ---- neural-network ops ----------------------------------------------------------------- */
/* d mse(x, y) = 2 (x - y) g (/ count for mean), and its negation for y */
BACKWARD(mse_loss) {
    const ad_tensor *t;
    if (!ad_grad_enabled && IA[0] != 0) { /* the one-pass native gradient (nn.c) */
        ad_tensor *dx = NULL;
        ad_status st = ad_mse_loss_grad(X(0), X(1), G, IA[0], &dx);
        t = own(s, st, dx);
        GRAD(1, NEG(t));
        GRAD(0, t);
        return;
    }
    double scale = IA[0] == 1 ? 2.0 / (double)XS(0)->numel : 2.0;
    t = MUL(SCALE(SUB(X(0), X(1)), scale), G);
    GRAD(1, NEG(t));
    GRAD(0, t);
}

/* The class losses' gradient: base (N, C) with -gs added at (i, target_i) for
   each row (the one-hot term), gs the per-row scale of g, (N, 1) or (1, 1):
   g itself (none), g / N (mean) or g (sum). */
static const ad_tensor *class_scale(bw_scope *s) {
    int64_t r = IA[0], rows = T_SHAPE(XS(0))[0], shape[2] = {r ? 1 : rows, 1};
    return reshape(s, r == 1 ? OPS(DIV_SCALAR, G, (double)rows) : G, shape, 2);
}
static const ad_tensor *minus_onehot(bw_scope *s, const ad_tensor *base, const ad_tensor *gs) {
    int64_t col[2] = {T_SHAPE(X(1))[0], 1}, dim = 1;
    const ad_tensor *negb = call(s, AD_OP_BROADCAST, 1, NEG(gs), NULL, NULL, col, 2, NULL, 0);
    return call(s, AD_OP_SCATTER_ADD, 3, base, reshape(s, X(1), col, 2), negb, &dim, 1, NULL, 0);
}
/* d ce(x, t) = (softmax(x) - onehot(t)) g (/ N for mean); softmax from
   exp(x - max) / sum, which never overflows */
/* the one-pass native gradient (nn.c), when no create_graph records the formula */
static const ad_tensor *class_grad(bw_scope *s, bool ce) {
    ad_tensor *dx = NULL;
    ad_status st = ad_class_loss_grad(ce ? X(0) : XS(0), X(1), G, IA[0], ce, &dx);
    return own(s, st, dx);
}
BACKWARD(cross_entropy) {
    if (!ad_grad_enabled) {
        GRAD(0, class_grad(s, true));
        return;
    }
    int64_t row[1] = {1};
    const ad_tensor *gs = class_scale(s);
    const ad_tensor *p = OP1(EXP, SUB(X(0), reduce_keep(s, AD_OP_MAX, X(0), row, 1)));
    GRAD(0, minus_onehot(s, MUL(DIV(p, reduce_keep(s, AD_OP_SUM, p, row, 1)), gs), gs));
}
/* d nll(x, t) = -onehot(t) g (/ N for mean) */
BACKWARD(nll_loss) {
    if (!ad_grad_enabled) GRAD(0, class_grad(s, false));
    else GRAD(0, minus_onehot(s, zeros_like(s, XS(0)), class_scale(s)));
}

/* layer_norm over the last k dims, with xhat = (x - mean) rstd,
   rstd = 1 / sqrt(var + eps), gw = g weight (g without weight):
     dx = rstd (gw - mean(gw) - xhat mean(gw xhat))
     dweight = g xhat summed over the leading dims,  dbias = g summed */
BACKWARD(layer_norm) {
    const ad_tensor *x = X(0);
    int k = (int)IA[0];
    if (!ad_grad_enabled) { /* one native pass; under create_graph the recorded ops below */
        bool want_w = s->n->n_in > 1 && TRACKED(1), want_b = s->n->n_in > 2 && TRACKED(2);
        ad_tensor *dx = NULL, *dw = NULL, *db = NULL;
        ad_status st = ad_layer_norm_grad(x, s->n->n_in > 1 ? X(1) : NULL, G, k, FA[0], want_w,
                                          want_b, &dx, &dw, &db);
        const ad_tensor *tx = own(s, st, dx), *tw = dw ? own(s, AD_OK, dw) : NULL;
        const ad_tensor *tb = db ? own(s, AD_OK, db) : NULL;
        if (st) return;
        if (TRACKED(0)) give(s, 0, tx);
        if (tw) give(s, 1, tw);
        if (tb) give(s, 2, tb);
        return;
    }
    int64_t dims[AD_MAX_DIMS];
    for (int i = 0; i < k; i++) dims[i] = x->ndim - k + i;
#define MEAN_K(t) reduce_keep(s, AD_OP_MEAN, t, dims, k)
    const ad_tensor *xc = SUB(x, MEAN_K(x));
    const ad_tensor *rstd = OPS(RDIV_SCALAR, OP1(SQRT, ADDS(MEAN_K(OP1(SQR, xc)), FA[0])), 1.0);
    const ad_tensor *xhat = MUL(xc, rstd);
    if (TRACKED(0)) {
        const ad_tensor *gw = s->n->n_in > 1 ? MUL(G, X(1)) : G;
        give(s, 0, MUL(SUB(SUB(gw, MEAN_K(gw)), MUL(xhat, MEAN_K(MUL(gw, xhat)))), rstd));
    }
#undef MEAN_K
    if (s->n->n_in > 1) GRAD(1, MUL(G, xhat));
    if (s->n->n_in > 2) GRAD(2, G);
}

/* d dropout(x) = dropout(g) with the same seed and p: the same mask and
   scale, since the mask depends only on the seed and the position */
BACKWARD(dropout) { GRAD(0, call(s, AD_OP_DROPOUT, 1, G, NULL, NULL, IA, 1, FA, 1)); }

/* d act(x @ w^T + b): gz = g act'(out) (relu: g where out > 0; tanh:
   g (1 - out^2); sigmoid: g out (1 - out); none: g), then x gets gz @ w, w
   gets gz^T @ x (x's leading dims as rows) and b the sums of gz over the
   leading dims.  Without create_graph the mask and the bias sums are one
   native pass over g (ad_linear_gradz); under it, the same formulas as
   recorded ops, also for an untracked g when act' depends on the output
   (tanh, sigmoid): gz then still depends on x, w and b through it. */
BACKWARD(linear) {
    int act = s->n->op == AD_OP_LINEAR_ACT ? (int)IA[0] : AD_LINEAR_NONE;
    bool want_b = s->n->n_in == 3 && TRACKED(2);
    bool smooth = act == AD_LINEAR_TANH || act == AD_LINEAR_SIGMOID;
    const ad_tensor *gz, *gb;
    if (ad_grad_enabled && (ad_tracks(G) || smooth)) {
        gz = act == AD_LINEAR_RELU ? MUL(to_dtype(s, CMP(GT, Y, 0.0), Y->dtype), G)
             : act == AD_LINEAR_TANH ? MUL(RSUB(1.0, OP1(SQR, Y)), G)
             : act == AD_LINEAR_SIGMOID ? MUL(MUL(G, Y), RSUB(1.0, Y))
             : G;
        gb = gz; /* give() sums it to b's shape */
    } else {
        ad_tensor *z = NULL, *bs = NULL;
        ad_status st = ad_linear_gradz(act, G, act != AD_LINEAR_NONE ? Y : NULL, want_b, &z, &bs);
        gz = own(s, st, z);
        gb = bs ? own(s, AD_OK, bs) : NULL;
    }
    GRAD(2, gb);
    if (!TRACKED(0) && !TRACKED(1)) return;
    const ad_tensor *x = X(0), *w = X(1);
    int64_t m = 1, k = T_SHAPE(w)[1], xs[2], zs[2] = {0, T_SHAPE(w)[0]};
    for (int i = 0; i < x->ndim - 1; i++) m *= T_SHAPE(x)[i];
    xs[0] = zs[0] = m;
    xs[1] = k;
    const ad_tensor *gz2 = reshape(s, gz, zs, 2);
    GRAD(0, reshape(s, MATMUL(gz2, w), T_SHAPE(x), x->ndim));
    GRAD(1, MATMUL(swap_last2(s, gz2), reshape(s, x, xs, 2)));
}

/* conv_args with the kernel size of weight w, in op's layout, into ia */
static int conv_layout(int op, conv_args c, const ad_tensor *w, int64_t *ia) {
    c.kh = T_SHAPE(w)[2], c.kw = T_SHAPE(w)[3];
    return conv_args_encode(op, &c, ia);
}
#define CONV(op, a, b, c, w) \
    call(s, AD_OP_##op, 2, a, b, NULL, ia, conv_layout(AD_OP_##op, c, w, ia), NULL, 0)

/* d conv2d(x, w) = conv_transpose2d(g, w) with the output padding that
   restores x's size (the rows the last window did not reach),
   conv2d_weight_grad(x, g) */
BACKWARD(conv2d) {
    conv_args c;
    int64_t ia[9];
    if ((s->st = conv_args_decode(AD_OP_CONV2D, IA, &c))) return;
    const ad_tensor *x = XS(0), *w = XS(1);
    c.oph = (T_SHAPE(x)[2] + 2 * c.ph - c.dh * (T_SHAPE(w)[2] - 1) - 1) % c.sh;
    c.opw = (T_SHAPE(x)[3] + 2 * c.pw - c.dw * (T_SHAPE(w)[3] - 1) - 1) % c.sw;
    GRAD(0, CONV(CONV_TRANSPOSE2D, G, X(1), c, w));
    GRAD(1, CONV(CONV2D_WEIGHT_GRAD, X(0), G, c, w));
}
/* d conv_transpose2d(x, w) = conv2d(g, w), conv2d_weight_grad(g, x).  An
   output padding of a stride or more (allowed below the dilation) gives g
   whole strides more rows or columns than x's, so conv2d over g has `more`
   outputs than x: the input gradient drops them, and the weight gradient
   pairs g with x padded by zeros to that size (zeros add nothing). */
BACKWARD(conv_transpose2d) {
    conv_args c;
    int64_t ia[9];
    if ((s->st = conv_args_decode(AD_OP_CONV_TRANSPOSE2D, IA, &c))) return;
    const int64_t more[2] = {c.oph / c.sh, c.opw / c.sw};
    if (TRACKED(0)) {
        const ad_tensor *gx = CONV(CONV2D, G, X(1), c, XS(1));
        for (int i = 0; i < 2 && gx; i++)
            if (more[i]) {
                int64_t sl[4] = {2 + i, 0, 1, T_SHAPE(XS(0))[2 + i]};
                gx = call(s, AD_OP_SLICE, 1, gx, NULL, NULL, sl, 4, NULL, 0);
            }
        give(s, 0, gx);
    }
    if (TRACKED(1)) {
        const ad_tensor *x = X(0);
        if (more[0] || more[1]) {
            const int64_t pads[4] = {0, more[1], 0, more[0]}; /* the last dim's first */
            const double zero = 0;
            x = call(s, AD_OP_PAD, 1, x, NULL, NULL, pads, 4, &zero, 1);
        }
        give(s, 1, CONV(CONV2D_WEIGHT_GRAD, G, x, c, XS(1)));
    }
}
/* d max_pool2d(x) = g routed to the first maximum of each window
   (overlapping windows accumulate) */
BACKWARD(max_pool2d) {
    GRAD(0, call(s, AD_OP_MAX_POOL2D_BACKWARD, 2, X(0), G, NULL, IA, 8, NULL, 0));
}

/* conv2d_weight_grad(a, b) is bilinear: <gw, wg(a, b)> = <b, conv2d(a, gw)>,
   so d/da = conv_transpose2d(b, gw) (output padding restoring a's size, as
   conv2d's input gradient) and d/db = conv2d(a, gw) */
BACKWARD(conv2d_weight_grad) {
    conv_args c;
    int64_t ia[9];
    if ((s->st = conv_args_decode(AD_OP_CONV2D_WEIGHT_GRAD, IA, &c))) return;
    const ad_tensor *a = XS(0);
    c.oph = (T_SHAPE(a)[2] + 2 * c.ph - c.dh * (c.kh - 1) - 1) % c.sh;
    c.opw = (T_SHAPE(a)[3] + 2 * c.pw - c.dw * (c.kw - 1) - 1) % c.sw;
    GRAD(0, CONV(CONV_TRANSPOSE2D, X(1), G, c, G));
    GRAD(1, CONV(CONV2D, X(0), G, c, G));
}
/* max_pool2d_backward(x, gy) is linear in gy and piecewise constant in x
   (x only chooses the routes), so x gets no gradient and gy the adjoint:
   g read back at each window's first maximum */
BACKWARD(max_pool2d_backward) {
    GRAD(1, call(s, AD_OP_MAX_POOL2D_GATHER, 2, X(0), G, NULL, IA, 8, NULL, 0));
}
/* max_pool2d_gather(x, t): the same, the adjoint being max_pool2d_backward */
BACKWARD(max_pool2d_gather) {
    GRAD(1, call(s, AD_OP_MAX_POOL2D_BACKWARD, 2, X(0), G, NULL, IA, 8, NULL, 0));
}
