/* matmul.c - the matmul op: batch dims broadcast numpy-style, operands in
 * any strided layout (transposed views go straight to the packed GEMM). */
#include <string.h>

#include "cpu.h"
#include "ew.h"
#include "gemm.h"
#include "nnops.h"
#include "simd.h"
#include "strided.h"

ad_status fwd_matmul(const op_args *args, ad_tensor **out) {
    const ad_tensor *a = args->in[0], *b = args->in[1];
    if (a->ndim < 2 || b->ndim < 2)
        return ad_fail(AD_ERR_SHAPE, "matmul: operands need at least 2 dims, got %s and %s",
                       ad_tdesc(a), ad_tdesc(b));
    if (a->dtype != b->dtype || !ad_dtype_is_float(a->dtype))
        return ad_fail(AD_ERR_DTYPE,
                       "matmul: operands must share a float dtype, got %s and %s", ad_tdesc(a),
                       ad_tdesc(b));
    int64_t m = T_SHAPE(a)[a->ndim - 2], k = T_SHAPE(a)[a->ndim - 1];
    int64_t k2 = T_SHAPE(b)[b->ndim - 2], n = T_SHAPE(b)[b->ndim - 1];
    if (k != k2)
        return ad_fail(AD_ERR_SHAPE, "matmul: inner dims differ, %s @ %s (%lld vs %lld)",
                       ad_tdesc(a), ad_tdesc(b), (long long)k, (long long)k2);
    int64_t shape[AD_MAX_DIMS];
    int bnd;
    ad_status st = ad_broadcast_shapes("matmul", T_SHAPE(a), a->ndim - 2, T_SHAPE(b), b->ndim - 2, shape,
                                       &bnd);
    if (st)
        return ad_fail(AD_ERR_SHAPE, "matmul: batch dims of %s and %s cannot be broadcast "
                       "together", ad_tdesc(a), ad_tdesc(b));
    if (bnd + 2 > AD_MAX_DIMS) return ad_fail(AD_ERR_SHAPE, "matmul: too many dims");
    shape[bnd] = m;
    shape[bnd + 1] = n;
    ad_tensor *y;
    if ((st = ad_tensor_empty(a->dtype, shape, bnd + 2, &y))) return st;
    int64_t batch = 1;
    for (int i = 0; i < bnd; i++) batch *= shape[i];
    if (y->numel == 0) {
        *out = y;
        return AD_OK;
    }
    /* per-batch element offsets (0-stride where a batch dim broadcasts) */
    int64_t sa[AD_MAX_DIMS], sb[AD_MAX_DIMS];
    {
        /* strides of the batch dims only, right-aligned against shape[0:bnd] */
        int la = bnd - (a->ndim - 2), lb = bnd - (b->ndim - 2);
        for (int i = 0; i < bnd; i++) {
            int ia = i - la, ib = i - lb;
            sa[i] = (ia < 0 || T_SHAPE(a)[ia] == 1) ? 0 : T_STRIDES(a)[ia];
            sb[i] = (ib < 0 || T_SHAPE(b)[ib] == 1) ? 0 : T_STRIDES(b)[ib];
        }
    }
    int64_t small[3 * 16], *offs = small;
    if (batch > 16) {
        offs = ad_malloc((size_t)batch * 3 * sizeof *offs);
        if (!offs) {
            ad_tensor_release(y);
            return ad_fail_nomem("matmul");
        }
    }
    int64_t *ao = offs, *bo = offs + batch, *co = offs + 2 * batch;
    int64_t idx[AD_MAX_DIMS] = {0}, oa = 0, ob = 0;
    for (int64_t i = 0; i < batch; i++) {
        ao[i] = oa;
        bo[i] = ob;
        co[i] = i * m * n;
        for (int d = bnd - 1; d >= 0; d--) {
            oa += sa[d];
            ob += sb[d];
            if (++idx[d] < shape[d]) break;
            oa -= sa[d] * shape[d];
            ob -= sb[d] * shape[d];
            idx[d] = 0;
        }
    }
    int64_t rsa = T_STRIDES(a)[a->ndim - 2], csa = T_STRIDES(a)[a->ndim - 1];
    int64_t rsb = T_STRIDES(b)[b->ndim - 2], csb = T_STRIDES(b)[b->ndim - 1];
    if (a->dtype == AD_FLOAT32)
        gemm_batch_f32(batch, ao, bo, co, m, n, k, ad_ptr(a), rsa, csa, ad_ptr(b), rsb, csb,
                       ad_ptr(y), n, 1);
    else
        gemm_batch_f64(batch, ao, bo, co, m, n, k, ad_ptr(a), rsa, csa, ad_ptr(b), rsb, csb,
                       ad_ptr(y), n, 1);
    if (offs != small) ad_mfree(offs);
    *out = y;
    return AD_OK;
}

AD_API const char *ad_gemm_kernel(void) { return gemm_kernel_name(); }
AD_API void ad_gemm_force_portable(int on) { gemm_set_kernel(on ? "portable" : "auto"); }
AD_API ad_status ad_gemm_set_kernel(const char *name) {
    if (gemm_set_kernel(name))
        return ad_fail(AD_ERR_VALUE,
                       "gemm kernel '%s' is not available (use \"auto\", \"avx512\", \"avx2\" "
                       "or \"portable\", at most \"%s\": this CPU's best level, capped by "
                       "PYAUTODIFF_ISA / PYAUTODIFF_PORTABLE)",
                       name ? name : "", ad_isa_name(ad_cpu_isa()));
    return AD_OK;
}

/* ---- linear: act(x @ w^T + b), the bias and the activation in the GEMM's epilogue ----

   linear(x (..., k), w (n, k)[, b (n,) or one element]) and linear_act with
   iargs {act}.  Each element of C gets c + b[j] and then the activation
   while its block is still in cache, by the same expressions (and, for tanh
   and sigmoid, the same SIMD maps) as the add and unary ops, so the result
   has the bits of the unfused act(x @ w.t() + b). */
/* The epilogue's and the backward's loops, compiled for each ISA level (as
   reduce.c's): the same expressions at every level (no FMA: an add, a select,
   products rounded one by one), so the same bits. */
#if defined(__x86_64__) || defined(__i386__)
#define LIN_ATTR_base
#define LIN_ATTR_avx2 __attribute__((target("avx2")))
#define LIN_ATTR_avx512 __attribute__((target("avx512f")))
#else
#define LIN_ATTR_base
#define LIN_ATTR_avx2
#define LIN_ATTR_avx512
#endif

/* rows x cols of C (row stride rsc): + b[j] (b NULL: none; bs 0: one element),
   then relu when asked */
#define LIN_ROWS(T, SFX, ISA)                                                                      LIN_ATTR_##ISA static void lin_rows_##SFX##_##ISA(int64_t rows, int64_t cols, T *c,                                                               int64_t rsc, const T *b, int64_t bs,                                                            int relu) {                                       for (int64_t i = 0; i < rows; i++) {                                                               T *restrict r = c + i * rsc;                                                                   if (b && bs && relu)                                                                               for (int64_t j = 0; j < cols; j++) {                                                               T t = r[j] + b[j];                                                                             r[j] = t > 0 ? t : 0;                                                                      }                                                                                          else if (b && bs)                                                                                  for (int64_t j = 0; j < cols; j++) r[j] = r[j] + b[j];                                     else if (b && relu)                                                                                for (int64_t j = 0; j < cols; j++) {                                                               T t = r[j] + b[0];                                                                             r[j] = t > 0 ? t : 0;                                                                      }                                                                                          else if (b)                                                                                        for (int64_t j = 0; j < cols; j++) r[j] = r[j] + b[0];                                     else if (relu)                                                                                     for (int64_t j = 0; j < cols; j++) r[j] = r[j] > 0 ? r[j] : 0;                         }                                                                                          }

/* The backward's elementwise part without create_graph: the gradient at the
   pre-activation, gz = g * act'(y) (act' from the output, by the same
   expressions as the relu / tanh / sigmoid backward ops), and, when gb is
   non-NULL, its column sums (the bias gradient) in the same pass.  g, y, gz
   are m x n contiguous; with no activation gz is g and only gb is written. */
#define LIN_GRADZ(T, SFX, ISA)                                                                     LIN_ATTR_##ISA static void lin_gradz_##SFX##_##ISA(int64_t m, int64_t n, int act,                                                                  const T *g, const T *y, T *gz, T *gb) {          if (gb)                                                                                            for (int64_t j = 0; j < n; j++) gb[j] = 0;                                                 for (int64_t i = 0; i < m; i++) {                                                                  const T *restrict gr = g + i * n, *restrict yr = y ? y + i * n : NULL;                         const T *zr = gr;                                                                              if (act != AD_LINEAR_NONE) {                                                                       T *restrict w = gz + i * n;                                                                    if (act == AD_LINEAR_RELU)                                                                         for (int64_t j = 0; j < n; j++) w[j] = (T)(yr[j] > 0) * gr[j];                             else if (act == AD_LINEAR_TANH)                                                                    for (int64_t j = 0; j < n; j++) w[j] = (1 - yr[j] * yr[j]) * gr[j];                        else                                                                                               for (int64_t j = 0; j < n; j++) w[j] = gr[j] * yr[j] * (1 - yr[j]);                        zr = w;                                                                                    }                                                                                              if (gb)                                                                                            for (int64_t j = 0; j < n; j++) gb[j] += zr[j];                                        }                                                                                          }

#define LIN_ISA(ISA)                                                                               LIN_ROWS(float, f32, ISA)                                                                      LIN_ROWS(double, f64, ISA)                                                                     LIN_GRADZ(float, f32, ISA)                                                                     LIN_GRADZ(double, f64, ISA)
LIN_ISA(base)
LIN_ISA(avx2)
LIN_ISA(avx512)

typedef struct {
    void (*rows32)(int64_t, int64_t, float *, int64_t, const float *, int64_t, int);
    void (*rows64)(int64_t, int64_t, double *, int64_t, const double *, int64_t, int);
    void (*gradz32)(int64_t, int64_t, int, const float *, const float *, float *, float *);
    void (*gradz64)(int64_t, int64_t, int, const double *, const double *, double *, double *);
} lin_kernels;

static lin_kernels lin_pick(void) {
#define LIN_K(ISA)                                                                                 (lin_kernels) { lin_rows_f32_##ISA, lin_rows_f64_##ISA, lin_gradz_f32_##ISA,                                   lin_gradz_f64_##ISA }
#if defined(__x86_64__) || defined(__i386__)
    int isa = ad_cpu_isa();
    if (isa == AD_ISA_AVX512) return LIN_K(avx512);
    if (isa == AD_ISA_AVX2) return LIN_K(avx2);
#endif
    return LIN_K(base);
#undef LIN_K
}

typedef struct {
    const char *bias; /* NULL: none */
    int64_t bstride;  /* elements: 0 for a one-element bias */
    int dtype, act;
    lin_kernels k;
    un_kernel un;     /* tanh / sigmoid for this dtype and ISA */
    void (*simd)(int64_t, const float *, int64_t, float *);
} linear_epi_ctx;

static void linear_epi(const void *vctx, void *c, int64_t rsc, int64_t i0, int64_t rows,
                       int64_t j0, int64_t cols) {
    const linear_epi_ctx *e = vctx;
    (void)i0;
    int relu = e->act == AD_LINEAR_RELU;
    size_t es = e->dtype == AD_FLOAT32 ? sizeof(float) : sizeof(double);
    const void *b = e->bias ? e->bias + (size_t)(j0 * e->bstride) * es : NULL;
    if (e->dtype == AD_FLOAT32)
        e->k.rows32(rows, cols, c, rsc, b, e->bstride, relu);
    else
        e->k.rows64(rows, cols, c, rsc, b, e->bstride, relu);
    if (!e->simd && !e->un) return;
    for (int64_t i = 0; i < rows; i++) {
        char *r = (char *)c + (size_t)(i * rsc) * es;
        if (e->simd) e->simd(cols, (float *)r, 1, (float *)r);
        else e->un(cols, r, 1, r, (double[2]){0, 0});
    }
}

/* The activation's elementwise kernel, as elementwise.c picks it. */
static void linear_act_kernel(linear_epi_ctx *e) {
    e->un = NULL;
    e->simd = NULL;
    if (e->act != AD_LINEAR_TANH && e->act != AD_LINEAR_SIGMOID) return;
    int op = e->act == AD_LINEAR_TANH ? AD_OP_TANH : AD_OP_SIGMOID;
    int isa = ad_cpu_isa();
    if (e->dtype == AD_FLOAT32 && isa == AD_ISA_AVX512)
        e->simd = op == AD_OP_TANH ? ad_tanh_f32_avx512 : ad_sigmoid_f32_avx512;
    else if (e->dtype == AD_FLOAT32 && isa == AD_ISA_AVX2)
        e->simd = op == AD_OP_TANH ? ad_tanh_f32_avx2 : ad_sigmoid_f32_avx2;
    else
        e->un = (isa == AD_ISA_AVX512 ? ew_un_table_avx512
                 : isa == AD_ISA_AVX2 ? ew_un_table_avx2 : ew_un_table_portable)[op][e->dtype];
}

/* x's leading dims as rows of one row stride, if its layout allows (else -1). */
static int64_t rows_stride(const ad_tensor *x) {
    int nd = x->ndim - 1;
    int64_t rs = -1, span = 0; /* span: the stride the next outer dim must have */
    for (int d = nd - 1; d >= 0; d--) {
        int64_t sz = T_SHAPE(x)[d], st = T_STRIDES(x)[d];
        if (sz == 1) continue;
        if (rs < 0) rs = st;
        else if (st != span) return -1;
        span = st * sz;
    }
    return rs < 0 ? 0 : rs;
}

ad_status fwd_linear(const op_args *args, ad_tensor **out) {
    const char *op = OP_NAME(args->op);
    if (args->n_in != 2 && args->n_in != 3)
        return ad_fail(AD_ERR_VALUE, "%s: takes (x, weight) or (x, weight, bias), got %d inputs",
                       op, args->n_in);
    const ad_tensor *x = args->in[0], *w = args->in[1], *b = args->n_in == 3 ? args->in[2] : NULL;
    int act = args->op == AD_OP_LINEAR_ACT ? (int)args->iargs[0] : AD_LINEAR_NONE;
    if (act < AD_LINEAR_NONE || act > AD_LINEAR_SIGMOID)
        return ad_fail(AD_ERR_VALUE, "%s: activation %d is not 0 (none), 1 (relu), 2 (tanh) or "
                       "3 (sigmoid)", op, act);
    if (!ad_dtype_is_float(x->dtype) || w->dtype != x->dtype || (b && b->dtype != x->dtype))
        return ad_fail(AD_ERR_DTYPE, "%s: x, weight%s must share a float dtype, got %s, %s%s%s",
                       op, b ? " and bias" : "", ad_tdesc(x), ad_tdesc(w), b ? ", " : "",
                       b ? ad_tdesc(b) : "");
    if (x->ndim < 1 || w->ndim != 2 || T_SHAPE(x)[x->ndim - 1] != T_SHAPE(w)[1])
        return ad_fail(AD_ERR_SHAPE, "%s: x %s (..., in_features) does not match weight %s "
                       "(out_features, in_features)", op, ad_tdesc(x), ad_tdesc(w));
    int64_t n = T_SHAPE(w)[0], k = T_SHAPE(w)[1];
    if (b && (b->ndim > 1 || (b->numel != n && b->numel != 1)))
        return ad_fail(AD_ERR_SHAPE, "%s: bias %s must have shape (%lld,) for weight %s", op,
                       ad_tdesc(b), (long long)n, ad_tdesc(w));
    int64_t shape[AD_MAX_DIMS];
    memcpy(shape, T_SHAPE(x), (size_t)x->ndim * sizeof *shape);
    shape[x->ndim - 1] = n;
    ad_tensor *y, *xc = NULL;
    ad_status st = ad_tensor_empty(x->dtype, shape, x->ndim, &y);
    if (st) return st;
    int64_t m = y->numel / (n ? n : 1);
    if (n == 0 || m == 0 || y->numel == 0) {
        *out = y;
        return AD_OK;
    }
    const ad_tensor *xa = x;
    int64_t rsa = rows_stride(x);
    if (rsa < 0) { /* leading dims that do not merge: one contiguous copy */
        if ((st = ad_tensor_empty(x->dtype, T_SHAPE(x), x->ndim, &xc))) {
            ad_tensor_release(y);
            return st;
        }
        ad_copy_strided(x, ad_ptr(xc));
        xa = xc;
        rsa = k;
    }
    linear_epi_ctx e = {b ? ad_ptr(b) : NULL, b && b->numel == n && b->ndim ? T_STRIDES(b)[0] : 0,
                        x->dtype, act, lin_pick(), NULL, NULL};
    linear_act_kernel(&e);
    gemm_epi epi = {linear_epi, &e};
    int64_t csa = T_STRIDES(xa)[xa->ndim - 1];
    int64_t rsb = T_STRIDES(w)[1], csb = T_STRIDES(w)[0]; /* B = w^T */
    if (x->dtype == AD_FLOAT32)
        gemm_epi_f32(m, n, k, ad_ptr(xa), rsa, csa, ad_ptr(w), rsb, csb, ad_ptr(y), n, &epi);
    else
        gemm_epi_f64(m, n, k, ad_ptr(xa), rsa, csa, ad_ptr(w), rsb, csb, ad_ptr(y), n, &epi);
    ad_tensor_release(xc);
    *out = y;
    return AD_OK;
}

ad_status ad_linear_gradz(int act, const ad_tensor *g, const ad_tensor *y, bool want_b,
                          ad_tensor **gz, ad_tensor **gb) {
    *gz = *gb = NULL;
    int64_t n = g->ndim ? T_SHAPE(g)[g->ndim - 1] : 1, m = n ? g->numel / n : 0;
    ad_tensor *gc = NULL, *yc = NULL;
    const void *pg = NULL, *py = NULL;
    ad_status st = nn_contig(g, &gc, &pg);
    if (!st && act != AD_LINEAR_NONE) st = nn_contig(y, &yc, &py);
    if (!st) {
        if (act == AD_LINEAR_NONE) {
            *gz = gc ? ad_ref(gc) : ad_ref(g);
        } else {
            st = ad_tensor_empty(g->dtype, T_SHAPE(g), g->ndim, gz);
        }
    }
    if (!st && want_b) st = ad_tensor_empty(g->dtype, &n, 1, gb);
    if (!st) {
        void *pz = act == AD_LINEAR_NONE ? NULL : ad_ptr(*gz), *pb = want_b ? ad_ptr(*gb) : NULL;
        lin_kernels k = lin_pick();
        if (g->dtype == AD_FLOAT32)
            k.gradz32(m, n, act, pg, py, pz, pb);
        else
            k.gradz64(m, n, act, pg, py, pz, pb);
    }
    if (st) {
        ad_tensor_release(*gz);
        ad_tensor_release(*gb);
        *gz = *gb = NULL;
    }
    ad_tensor_release(gc);
    ad_tensor_release(yc);
    return st;
}
