/* reduce.c - sum, mean, max, min, prod over any set of dims (one pass), and
 * argmax/argmin over one dim or the flattened tensor.
 *
 * The input is walked by the n-d iterator against an output whose strides are
 * 0 on the reduced dims: when the innermost loop is a reduced dim the kernel
 * folds a vector into one value (8 lanes, blocks summed in double for
 * float32), otherwise it combines a row into the output row, so reducing the
 * first dim of a matrix streams rows just as reducing the last one does.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "cpu.h"
#include "opargs.h"
#include "parallel.h"
#include "strided.h"

/* The vectorised loops (reduce_kernels.h) are compiled twice, for AVX2 and
   for the baseline, and picked at run time by the level cpu.c chooses, so
   that PYAUTODIFF_ISA / PYAUTODIFF_PORTABLE reach them as they reach GEMM and
   the elementwise kernels (GCC's target_clones would dispatch on the CPU
   alone). */
static atomic_int red_level = -1;
static inline bool red_avx2(void) {
    int l = atomic_load_explicit(&red_level, memory_order_relaxed);
    if (l < 0) {
        l = ad_cpu_isa() >= AD_ISA_AVX2;
        atomic_store_explicit(&red_level, l, memory_order_relaxed);
    }
    return l;
}
AD_API const char *ad_reduce_kernel(void) { return red_avx2() ? "avx2" : "portable"; }

/* the register-block transposes short rows' sums read through (reduce_kernels.h
   sum_short_rows), where the AVX2 level has them */
typedef void (*red_transpose_fn)(int64_t, int64_t, char *, int64_t, const char *, int64_t);
#if defined(__x86_64__) || defined(__i386__)
#define RED_TRANSPOSE_AVX2(es) ((es) == 4 ? ad_transpose4_avx2 : ad_transpose8_avx2)
#else
#define RED_TRANSPOSE_AVX2(es) ((red_transpose_fn)NULL)
#endif

#define RED_CAT_(a, b) a##_##b
#define RED_CAT(a, b) RED_CAT_(a, b)
#if defined(__x86_64__) || defined(__i386__)
#define RED_AVX2_TARGET __attribute__((target("avx2")))
#define RED_DISPATCH(name, ...) \
    (red_avx2() ? RED_CAT(name, avx2)(__VA_ARGS__) : RED_CAT(name, base)(__VA_ARGS__))
#else
#define RED_AVX2_TARGET
#define RED_DISPATCH(name, ...) RED_CAT(name, base)(__VA_ARGS__)
#endif

/* ---- kernels ---------------------------------------------------------------- */
enum { R_SUM, R_MAX, R_MIN, R_PROD };
enum { EXTREME_LANES = 16 }; /* reduce_dtype.h's extreme */

typedef struct {
    int64_t len, stride;
    int dtype;
    bool is_max;
} arg_ctx;

/* The kernels are written once, in the template header reduce_dtype.h (its
   vectorised loops in reduce_kernels.h, once per ISA level), and instantiated
   here per dtype: max, min and argmax/argmin for every dtype, sum, prod and
   the row fold for the dtypes that sum in ACC. */
#define T float
#define S(name) name##_f32
#define ACC double
#define PROD_ACC double
#include "reduce_dtype.h"

#define T double
#define S(name) name##_f64
#define ACC double
#define PROD_ACC double
#include "reduce_dtype.h"

#define T int64_t
#define S(name) name##_i64
#define ACC int64_t
#define PROD_ACC uint64_t
#include "reduce_dtype.h"

#define T int32_t
#define S(name) name##_i32
#include "reduce_dtype.h"

#define T uint8_t
#define S(name) name##_u8
#include "reduce_dtype.h"

static const inner_fn red_table[4][6] = {
    [R_SUM] = {[AD_FLOAT32] = sum_f32, [AD_FLOAT64] = sum_f64, [AD_INT64] = sum_i64},
    [R_MAX] = {[AD_FLOAT32] = max_f32, [AD_FLOAT64] = max_f64, [AD_INT64] = max_i64,
               [AD_INT32] = max_i32, [AD_UINT8] = max_u8, [AD_BOOL] = max_u8},
    [R_MIN] = {[AD_FLOAT32] = min_f32, [AD_FLOAT64] = min_f64, [AD_INT64] = min_i64,
               [AD_INT32] = min_i32, [AD_UINT8] = min_u8, [AD_BOOL] = min_u8},
    [R_PROD] = {[AD_FLOAT32] = prod_f32, [AD_FLOAT64] = prod_f64, [AD_INT64] = prod_i64},
};

/* A float32 sum into double outputs (x float32, o double): the inner
   reduced run as S(sum) folds it, added to its output in double instead of
   rounded to float32 there (run_wide). */
static void sum_f32_wide(void *ctx, int64_t n, char **p, const int64_t *s) {
    (void)ctx;
    double *o = (double *)p[0];
    const float *x = (const float *)p[1];
    if (s[0] == 0) {
        double total = 0;
        int64_t i = 0;
        if (s[1] == 1) {
            i = n & ~(int64_t)31;
            total = sum_lanes_f32(x, i);
        }
        for (; i < n; i++) total += (double)x[i * s[1]];
        *o += total;
    } else {
        for (int64_t i = 0; i < n; i++) o[i * s[0]] += (double)x[i * s[1]];
    }
}

static void fill_identity(ad_tensor *y, int kind) {
    void *d = y->storage->data;
    int64_t n = y->numel;
    if (kind == R_SUM) {
        memset(d, 0, (size_t)n * ad_dtype_size_(y->dtype));
        return;
    }
    if (kind == R_PROD) {
        for (int64_t i = 0; i < n; i++) switch (y->dtype) {
            case AD_FLOAT32: ((float *)d)[i] = 1; break;
            case AD_FLOAT64: ((double *)d)[i] = 1; break;
            default: ((int64_t *)d)[i] = 1; break;
            }
        return;
    }
    bool mx = kind == R_MAX;
    for (int64_t i = 0; i < n; i++) switch (y->dtype) {
        case AD_FLOAT32: ((float *)d)[i] = mx ? -INFINITY : INFINITY; break;
        case AD_FLOAT64: ((double *)d)[i] = mx ? -INFINITY : INFINITY; break;
        case AD_INT64: ((int64_t *)d)[i] = mx ? INT64_MIN : INT64_MAX; break;
        case AD_INT32: ((int32_t *)d)[i] = mx ? INT32_MIN : INT32_MAX; break;
        default: ((uint8_t *)d)[i] = mx ? 0 : (y->dtype == AD_BOOL ? 1 : 255); break;
        }
}

enum { PAR_MAX_CHUNKS = 64 }; /* most blocks with their own partial result */

typedef void (*fold_fn)(char *, const char *, int64_t, int64_t, int64_t, int64_t);

typedef struct {
    fold_fn fn;
    char *o;
    const char *x;
    int64_t rows, row_bytes, cols, unit, es;
    char *partials; /* row blocks: one zeroed output row per block */
} fold_job;

static void fold_cols(void *ctx, int64_t k) {
    const fold_job *j = ctx;
    int64_t c1 = (k + 1) * j->unit < j->cols ? (k + 1) * j->unit : j->cols;
    j->fn(j->o, j->x, j->rows, j->row_bytes, k * j->unit, c1);
}

static void fold_rows(void *ctx, int64_t k) {
    const fold_job *j = ctx;
    int64_t r0 = k * j->unit, r1 = r0 + j->unit < j->rows ? r0 + j->unit : j->rows;
    j->fn(j->partials + k * j->cols * j->es, j->x + r0 * j->row_bytes,
          r1 - r0, j->row_bytes, 0, j->cols);
}

/* Sums that reduce the outer dim of a 2-d iteration with contiguous rows (sum
   over a matrix's first dim); false when the iteration is not of that form.
   A large one is cut into blocks of rows fixed by the shape, each summed into
   its own partial row (threads stream whole rows), and the partial rows are
   then folded into the output in order: the result does not depend on the
   thread count.  *st is AD_ERR_NOMEM when the partials cannot be allocated. */
static fold_fn sum_fold(int kind, int dtype) {
    return kind != R_SUM ? NULL : dtype == AD_FLOAT32 ? fold_f32 : dtype == AD_FLOAT64 ? fold_f64
           : dtype == AD_INT64 ? fold_i64 : NULL;
}

/* A plane of the same form (its rows reduced into one contiguous output row)
   at each index of the outer dims, such as a (b, m, n) tensor's sum(1): the
   fold's four rows a pass over the output row instead of one (float32 (64,
   128, 128) sum(1), Zen 4, 1 thread: 207 -> 59 us, torch 80).  ctx: the
   fold_fn. */
static bool fold_plane(void *ctx, int64_t rows, int64_t cols, char **p, const int64_t *rstep,
                       const int64_t *cstep) {
    if (rstep[0] != 0 || cstep[0] != 1 || cstep[1] != 1) return false;
    (*(fold_fn *)ctx)(p[0], p[1], rows, rstep[1], 0, cols);
    return true;
}

static bool run_fold(const char *op, const nditer *it, char **base, int kind, int dtype, ad_status *st) {
    fold_fn fn = sum_fold(kind, dtype);
    if (!fn || it->ndim != 2 || it->strides[0][0] != 0 ||
        it->strides[0][1] != 1 || it->strides[1][1] != 1)
        return false;
    int64_t rows = it->shape[0], cols = it->shape[1];
    size_t es = it->elsize[0];
    fold_job j = {fn, base[0], base[1], rows, it->strides[1][0] * (int64_t)it->elsize[1], cols,
                  cols, (int64_t)es, NULL};
    if (nditer_numel(it) >= ITER_PAR_MIN) {
        int64_t unit = (ITER_PAR_BLOCK + cols - 1) / cols;
        unit = (unit + 3) & ~(int64_t)3;
        if ((rows + unit - 1) / unit > PAR_MAX_CHUNKS)
            unit = (((rows + PAR_MAX_CHUNKS - 1) / PAR_MAX_CHUNKS) + 3) & ~(int64_t)3;
        int64_t nblocks = (rows + unit - 1) / unit;
        if (nblocks >= 2) {
            if (!(j.partials = ad_calloc((size_t)(nblocks * cols) * es))) {
                *st = ad_fail(AD_ERR_NOMEM, "%s: out of memory for partial sums of %s", op,
                              ad_fmt_shape(it->shape, it->ndim));
                return true;
            }
            j.unit = unit;
            par_blocks(nblocks, fold_rows, &j);
            fn(base[0], j.partials, nblocks, cols * (int64_t)es, 0, cols);
            ad_mfree(j.partials);
            return true;
        }
    }
    fold_cols(&j, 0);
    return true;
}

/* Sums over the inner dim of a 2-d iteration with contiguous rows and a kept
   outer dim (a matrix's row sums): sum_rows takes several rows per call, each
   row's sum in the order S(sum) gives a row alone, so the bits are those of
   the row-by-row iteration; false when the iteration is not of that form.
   Large ones split over threads in blocks of rows. */
typedef void (*rows_fn)(char *, int64_t, const char *, int64_t, int64_t, int64_t);

typedef struct {
    rows_fn fn;
    char *o;
    const char *x;
    int64_t os, rs, cols, unit, rows;
    size_t es;
} rows_job;

static void rows_block(void *ctx, int64_t k) {
    const rows_job *j = ctx;
    int64_t r0 = k * j->unit, r1 = r0 + j->unit < j->rows ? r0 + j->unit : j->rows;
    j->fn(j->o + r0 * j->os * (int64_t)j->es, j->os, j->x + r0 * j->rs * (int64_t)j->es, j->rs,
          r1 - r0, j->cols);
}

static bool run_rows(const nditer *it, char **base, int kind, int dtype) {
    rows_fn fn = dtype == AD_FLOAT32 ? sum_rows_f32 : dtype == AD_FLOAT64 ? sum_rows_f64
                 : dtype == AD_INT64 ? sum_rows_i64 : NULL;
    if (kind != R_SUM || !fn || it->ndim != 2 || it->strides[0][1] != 0 ||
        it->strides[0][0] == 0 || it->strides[1][1] != 1)
        return false;
    rows_job j = {fn, base[0], base[1], it->strides[0][0], it->strides[1][0], it->shape[1],
                  it->shape[0], it->shape[0], it->elsize[0]};
    if (nditer_numel(it) >= ITER_PAR_MIN && it->shape[0] > 1) {
        j.unit = (ITER_PAR_BLOCK + j.cols - 1) / j.cols;
        par_blocks((j.rows + j.unit - 1) / j.unit, rows_block, &j);
    } else {
        rows_block(&j, 0);
    }
    return true;
}

/* ---- threads ------------------------------------------------------------------
 * A reduction that keeps some dim is split by nditer_run_par along a kept dim
 * (threads write disjoint outputs).  A large full reduction (one output
 * element) is cut along its outermost dim into blocks fixed by the shape, each
 * folded into its own partial, and the partials are combined in block order:
 * the result never depends on the thread count or on scheduling. */

typedef struct {
    const nditer *it;
    char *const *base;
    inner_fn fn;
    int64_t nchunks;
    char *partials;
    size_t es;
} full_job;

static void full_block(void *ctx, int64_t c) {
    const full_job *j = ctx;
    int64_t len = j->it->shape[0];
    nditer sub;
    char *b[ITER_MAX_OPS];
    nditer_slice(j->it, j->base, 0, len * c / j->nchunks, len * (c + 1) / j->nchunks, &sub, b);
    b[0] = j->partials + c * (int64_t)j->es;
    nditer_run(&sub, b, j->fn, NULL);
}

/* Runs a large full reduction in blocks (over threads when there are several);
   false when it is not one or is small.  The blocks depend only on the shape,
   so the result is the same for any thread count.  combine adds a block's
   partial (of the output's type) into the output: fn itself, or sum_f64 for
   run_wide's double partials. */
static bool run_full_par(const nditer *it, char **base, inner_fn fn, inner_fn combine) {
    for (int d = 0; d < it->ndim; d++)
        if (it->strides[0][d] != 0) return false;
    int64_t numel = nditer_numel(it);
    int64_t nchunks = (numel + ITER_PAR_BLOCK - 1) / ITER_PAR_BLOCK;
    if (nchunks > PAR_MAX_CHUNKS) nchunks = PAR_MAX_CHUNKS;
    if (nchunks > it->shape[0]) nchunks = it->shape[0];
    if (nchunks < 2 || numel < ITER_PAR_MIN) return false;
    /* partials start from the identity already in the output element */
    double partials[PAR_MAX_CHUNKS]; /* 8 bytes each: every dtype fits */
    size_t es = it->elsize[0];
    for (int64_t c = 0; c < nchunks; c++) memcpy((char *)partials + c * (int64_t)es, base[0], es);
    full_job j = {it, base, fn, nchunks, (char *)partials, es};
    par_blocks(nchunks, full_block, &j);
    int64_t zero[2] = {0, 0};
    for (int64_t c = 0; c < nchunks; c++) {
        char *p[2] = {base[0], (char *)partials + c * (int64_t)es};
        combine(NULL, 1, p, zero);
    }
    return true;
}

/* A sum's result times `copies` in place, rounded once (float32 through double:
   the product of a float32 and a count below 2^29 is exact there), int64
   wrapping as `copies` additions would. */
static void sum_copies(ad_tensor *y, int64_t copies) {
    void *d = y->storage->data;
    int64_t n = y->numel;
    if (y->dtype == AD_FLOAT32)
        for (int64_t i = 0; i < n; i++)
            ((float *)d)[i] = (float)((double)((float *)d)[i] * (double)copies);
    else if (y->dtype == AD_FLOAT64)
        for (int64_t i = 0; i < n; i++) ((double *)d)[i] *= (double)copies;
    else
        for (int64_t i = 0; i < n; i++)
            ((int64_t *)d)[i] = (int64_t)((uint64_t)((int64_t *)d)[i] * (uint64_t)copies);
}

/* float32 sums whose output elements each take several inner runs (the
   walk's inner dim reduced, under another reduced dim it could not merge
   with: a sliced or permuted x's full sum, a sum over dims (0, 2)) add the
   runs' double totals up in double, into acc (y's elements, the walk's
   layout), rounded to float32 once at the end, as one run's are: rounded
   after each run, the sum of a (31992, 2) view of one value (0.9155607) was
   3.5e-4 off, the contiguous copy's 4e-7.  false when the walk is not of
   that form. */
static bool run_wide(const char *op, nditer *it, char **base, ad_tensor *out, int kind,
                     ad_status *st) {
    int last = it->ndim - 1;
    bool repeated = false;
    for (int d = 0; d < last; d++) repeated |= it->strides[0][d] == 0 && it->shape[d] > 1;
    if (kind != R_SUM || out->dtype != AD_FLOAT32 || it->strides[0][last] != 0 || !repeated)
        return false;
    double *acc = ad_calloc((size_t)out->numel * sizeof(double));
    if (!acc) {
        *st = ad_fail(AD_ERR_NOMEM, "%s: out of memory for the double sums of %s", op,
                      ad_fmt_shape(it->shape, it->ndim));
        return true;
    }
    it->elsize[0] = sizeof(double);
    char *b[2] = {(char *)acc, base[1]};
    if (!run_full_par(it, b, sum_f32_wide, sum_f64)) nditer_run_par(it, b, sum_f32_wide, NULL);
    float *o = (float *)out->storage->data; /* holds the identity, 0 */
    for (int64_t i = 0; i < out->numel; i++) o[i] = (float)acc[i];
    ad_mfree(acc);
    return true;
}

/* The walk's order of x's dims, walk[0] outermost: by x's strides, the
   largest outermost (numpy's order), so the inner loop reads x's contiguous
   runs whichever dims are reduced; dims x does not move along (extent 1, or
   a broadcast kept dim) go outermost, where they cost nothing.  Stable: a
   contiguous x walks in index order.  Each output's terms are then summed in
   the order of the reduced dims' strides (in index order, for one). */
static void walk_order(int nd, const int64_t *shape, const int64_t *xstr, int *walk) {
    int64_t key[AD_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        key[d] = shape[d] <= 1 || xstr[d] == 0 ? INT64_MAX : xstr[d] < 0 ? -xstr[d] : xstr[d];
        int j = d;
        for (; j > 0 && key[walk[j - 1]] < key[d]; j--) walk[j] = walk[j - 1];
        walk[j] = d;
    }
}

static ad_status reduce_into(int op, const ad_tensor *x, const reduce_args *p, int kind,
                             ad_tensor **out) {
    ad_tensor *y;
    ad_status st = ad_tensor_empty(x->dtype, p->shape, p->ndim, &y);
    if (st) return st;
    const int nd = x->ndim;
    /* output strides over the input's shape: 0 on reduced dims */
    int64_t ostr[AD_MAX_DIMS], s = 1;
    for (int i = nd - 1; i >= 0; i--) {
        ostr[i] = p->reduced[i] ? 0 : s;
        s *= p->kshape[i];
    }
    /* A reduced dim along which x does not move (stride 0: a broadcast, such
       as the gradient of a sum or a mean) repeats one element: max and min
       over it are that element, and a sum over it that element times the
       count, so the walk leaves such dims out (size 1) and a sum is scaled
       once after it.  Walked, a broadcast gradient's bias sum took 0.8 ns an
       element in the strided kernel: 12x the contiguous sum.  Not for an
       empty x (its sum is 0, and inf times 0 would be NaN) nor prod. */
    int64_t shape[AD_MAX_DIMS], copies = 1;
    for (int i = 0; i < nd; i++) {
        shape[i] = T_SHAPE(x)[i];
        if (p->reduced[i] && T_STRIDES(x)[i] == 0 && x->numel > 0 && kind != R_PROD) {
            copies *= shape[i];
            shape[i] = 1;
        }
    }
    /* The walk (walk_order) with the output's kept dims laid out in its
       order: when that is not their index order (a transposed x keeping two
       dims), the walk sums into such a buffer, copied into y after (the
       output's elements, few beside x's), so that x's contiguous run and the
       output row it adds into are both the inner loop.  float32, Zen 4, 1
       thread: (256, 64, 64).permute(0, 2, 1) sum(-1) 661 -> 174-205 us (the
       unit-stride dim inner, as since 581adef); (64, 128, 128).permute(2, 1,
       0) sum(1) 4288 -> 61 us (with fold_plane), sum(2) 1093 -> 101 (numpy
       207 / 104, torch 1120 / 1650). */
    int walk[AD_MAX_DIMS];
    int64_t wshape[AD_MAX_DIMS], wo[AD_MAX_DIMS], wx[AD_MAX_DIMS], bstr[AD_MAX_DIMS];
    walk_order(nd, shape, T_STRIDES(x), walk);
    bool buffered = false;
    s = 1;
    for (int w = nd - 1; w >= 0; w--) {
        int d = walk[w];
        bstr[d] = p->reduced[d] ? 0 : s;
        s *= p->kshape[d];
        buffered |= p->kshape[d] > 1 && bstr[d] != ostr[d];
    }
    ad_tensor *buf = NULL;
    if (buffered && x->numel > 0) {
        if ((st = ad_tensor_empty(x->dtype, p->shape, p->ndim, &buf))) {
            ad_tensor_release(y);
            return st;
        }
    }
    fill_identity(buf ? buf : y, kind); /* y, when buffered, is all copied from buf */
    for (int w = 0; w < nd; w++) {
        int d = walk[w];
        wshape[w] = shape[d], wx[w] = T_STRIDES(x)[d], wo[w] = buf ? bstr[d] : ostr[d];
    }
    const int64_t *strides[2] = {wo, wx};
    size_t es[2] = {ad_dtype_size_(x->dtype), ad_dtype_size_(x->dtype)};
    nditer it;
    nditer_init(&it, 2, nd, wshape, strides, es);
    char *base[2] = {(buf ? buf : y)->storage->data, ad_ptr(x)};
    inner_fn fn = red_table[kind][x->dtype];
    /* prod stays one walk in index order: blocks' partial products could
       overflow to inf in one and to 0 in another, and inf * 0 made a NaN of
       a finite product (numpy's walk gives inf) */
    if (!run_wide(OP_NAME(op), &it, base, buf ? buf : y, kind, &st) &&
        !run_fold(OP_NAME(op), &it, base, kind, x->dtype, &st) &&
        !run_rows(&it, base, kind, x->dtype) &&
        (kind == R_PROD || !run_full_par(&it, base, fn, fn))) {
        fold_fn ff = sum_fold(kind, x->dtype);
        if (ff) it.plane = fold_plane;
        nditer_run_par(&it, base, fn, &ff);
    }
    if (buf && !st) { /* y over x's dims (kept ones), from buf's layout */
        ad_tensor *dv, *sv;
        if (!(st = ad_tensor_view(y, p->kshape, ostr, nd, 0, &dv))) {
            if (!(st = ad_tensor_view(buf, p->kshape, bstr, nd, 0, &sv))) {
                ad_assign(dv, sv);
                ad_tensor_release(sv);
            }
            ad_tensor_release(dv);
        }
    }
    ad_tensor_release(buf);
    if (st) {
        ad_tensor_release(y);
        return st;
    }
    if (kind == R_SUM && copies > 1) sum_copies(y, copies);
    *out = y;
    return AD_OK;
}

static int reduce_kind(int op) {
    return op == AD_OP_MAX ? R_MAX : op == AD_OP_MIN ? R_MIN : op == AD_OP_PROD ? R_PROD : R_SUM;
}

/* mean's sums divided by the count (NaN for none), in place */
static void mean_scale(ad_tensor *y, int64_t count) {
    double scale = count ? 1.0 / (double)count : NAN;
    if (y->dtype == AD_FLOAT32)
        for (int64_t i = 0; i < y->numel; i++) ((float *)y->storage->data)[i] *= (float)scale;
    else
        for (int64_t i = 0; i < y->numel; i++) ((double *)y->storage->data)[i] *= scale;
}

/* Below ITER_PAR_MIN elements, a contiguous x is one dim to nditer and none of
   the blocked forms above applies: reduce_into makes this one kernel call. */
ad_tensor *ad_reduce_quick_all(int op, const ad_tensor *x) {
    int kind = reduce_kind(op);
    inner_fn fn = red_table[kind][x->dtype];
    bool float_only = op == AD_OP_MEAN, nonempty = kind == R_MAX || kind == R_MIN;
    if (!fn || x->dtype == AD_BOOL || (float_only && !ad_dtype_is_float(x->dtype)) || x->ndim == 0 ||
        x->numel >= ITER_PAR_MIN || (nonempty && x->numel == 0) || !ad_is_contiguous(x))
        return NULL;
    ad_tensor *y = ad_tensor_new_0d(x->dtype);
    if (!y) return NULL;
    fill_identity(y, kind);
    char *p[ITER_MAX_OPS] = {y->storage->data, ad_ptr(x), y->storage->data, y->storage->data};
    int64_t s[ITER_MAX_OPS] = {0, 1, 0, 0};
    if (x->numel) fn(NULL, x->numel, p, s);
    if (op == AD_OP_MEAN) mean_scale(y, x->numel);
    return y;
}

ad_status fwd_reduce(const op_args *a, ad_tensor **out) {
    const ad_tensor *x = a->in[0];
    int op = a->op;
    reduce_args p;
    ad_status st = reduce_args_decode(op, a->iargs, a->n_iargs, x, &p);
    if (st) return st;
    if (x->dtype == AD_BOOL && op != AD_OP_SUM && op != AD_OP_PROD)
        return ad_fail(AD_ERR_DTYPE, "%s: not supported for bool (input %s)", OP_NAME(op),
                       ad_tdesc(x));
    if (op == AD_OP_MEAN && !ad_dtype_is_float(x->dtype))
        return ad_fail(AD_ERR_DTYPE, "mean: needs a float tensor, got %s (use to_dtype)",
                       ad_tdesc(x));
    if ((op == AD_OP_MAX || op == AD_OP_MIN) && p.reduce_numel == 0)
        return ad_fail(AD_ERR_VALUE, "%s: reduction over a zero-size dim of %s has no identity",
                       OP_NAME(op), ad_tdesc(x));
    if ((op == AD_OP_SUM || op == AD_OP_PROD) && !ad_dtype_is_float(x->dtype) &&
        x->dtype != AD_INT64) {
        /* small integers sum and multiply in int64, as numpy does */
        ad_tensor *wide;
        if ((st = ad_tensor_empty(AD_INT64, T_SHAPE(x), x->ndim, &wide))) return st;
        ad_convert_strided(x, wide->storage->data, AD_INT64);
        st = reduce_into(op, wide, &p, op == AD_OP_PROD ? R_PROD : R_SUM, out);
        ad_tensor_release(wide);
        return st;
    }
    if ((st = reduce_into(op, x, &p, reduce_kind(op), out))) return st;
    if (op == AD_OP_MEAN) mean_scale(*out, p.reduce_numel);
    return AD_OK;
}

/* ---- argmax / argmin ---------------------------------------------------------- */
static void arg_inner(void *ctx, int64_t n, char **p, const int64_t *s) {
    const arg_ctx *c = ctx;
    int64_t *o = (int64_t *)p[0];
    size_t es = ad_dtype_size_(c->dtype);
    for (int64_t i = 0; i < n; i++) {
        const char *x = p[1] + i * s[1] * (int64_t)es;
        int64_t bi = 0;
        switch (c->dtype) {
        case AD_FLOAT32: bi = arg_scan_f32(c, x); break;
        case AD_FLOAT64: bi = arg_scan_f64(c, x); break;
        case AD_INT64: bi = arg_scan_i64(c, x); break;
        case AD_INT32: bi = arg_scan_i32(c, x); break;
        default: bi = arg_scan_u8(c, x); break;
        }
        o[i * s[0]] = bi;
    }
}

/* iargs: {keepdim} (flattened) or {keepdim, dim} */
ad_status fwd_argreduce(const op_args *a, ad_tensor **out) {
    const ad_tensor *x = a->in[0];
    bool keepdim = a->iargs[0] != 0;
    ad_status st;
    if (a->n_iargs > 2)
        return ad_fail(AD_ERR_VALUE, "%s: takes one dim or none, got %d", OP_NAME(a->op), a->n_iargs - 1);
    if (a->n_iargs == 1 || x->ndim == 0) {
        if (a->n_iargs == 2 && a->iargs[1] != 0 && a->iargs[1] != -1)
            return ad_fail(AD_ERR_INDEX, "%s: dim %lld out of range for %s", OP_NAME(a->op),
                           (long long)a->iargs[1], ad_tdesc(x));
        if (x->numel == 0)
            return ad_fail(AD_ERR_VALUE, "%s: empty tensor %s has no extremum", OP_NAME(a->op),
                           ad_tdesc(x));
        /* over the flattened tensor: a contiguous copy is one 1-d scan */
        ad_tensor *flat = NULL;
        const ad_tensor *src = x;
        if (!ad_is_contiguous(x)) {
            if ((st = ad_tensor_empty(x->dtype, T_SHAPE(x), x->ndim, &flat))) return st;
            ad_copy_strided(x, flat->storage->data);
            src = flat;
        }
        int64_t ones[AD_MAX_DIMS];
        for (int i = 0; i < x->ndim; i++) ones[i] = 1;
        ad_tensor *y;
        if ((st = ad_tensor_empty(AD_INT64, ones, keepdim ? x->ndim : 0, &y))) {
            ad_tensor_release(flat);
            return st;
        }
        arg_ctx c = {x->numel, 1, x->dtype, a->op == AD_OP_ARGMAX};
        int64_t s[2] = {0, 0};
        char *p[2] = {y->storage->data, ad_ptr(src)};
        arg_inner(&c, 1, p, s);
        ad_tensor_release(flat);
        *out = y;
        return AD_OK;
    }
    int64_t d = a->iargs[1];
    if (d < -x->ndim || d >= x->ndim)
        return ad_fail(AD_ERR_INDEX, "%s: dim %lld out of range for %s (%d dims)", OP_NAME(a->op),
                       (long long)d, ad_tdesc(x), x->ndim);
    if (d < 0) d += x->ndim;
    if (T_SHAPE(x)[d] == 0)
        return ad_fail(AD_ERR_VALUE, "%s: dim %lld of %s is empty", OP_NAME(a->op), (long long)d,
                       ad_tdesc(x));
    int64_t kshape[AD_MAX_DIMS], oshape[AD_MAX_DIMS], xstr[AD_MAX_DIMS];
    int on = 0;
    for (int i = 0; i < x->ndim; i++) {
        kshape[i] = i == d ? 1 : T_SHAPE(x)[i];
        xstr[i] = i == d ? 0 : T_STRIDES(x)[i];
        if (i != d || keepdim) oshape[on++] = kshape[i];
    }
    ad_tensor *y;
    if ((st = ad_tensor_empty(AD_INT64, oshape, on, &y))) return st;
    int64_t ostr[AD_MAX_DIMS], s = 1;
    for (int i = x->ndim - 1; i >= 0; i--) {
        ostr[i] = s;
        s *= kshape[i];
    }
    const int64_t *strides[2] = {ostr, xstr};
    size_t es[2] = {8, ad_dtype_size_(x->dtype)};
    nditer it;
    nditer_init(&it, 2, x->ndim, kshape, strides, es);
    arg_ctx c = {T_SHAPE(x)[d], T_STRIDES(x)[d], x->dtype, a->op == AD_OP_ARGMAX};
    char *base[2] = {y->storage->data, ad_ptr(x)};
    nditer_run_par(&it, base, arg_inner, &c);
    *out = y;
    return AD_OK;
}
