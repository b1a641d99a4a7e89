/* lanes.c - ops along one dim: logsumexp, softmax, log_softmax, cumsum.
 *
 * Each op walks the input's lanes (every position of the other dims) with the
 * shared n-d iterator and hands each lane (pointer, stride, length) to a typed
 * kernel, so any layout works without a copy.  The softmax family subtracts
 * the lane's maximum before exponentiating (numerically stable) and
 * accumulates in double.  float32 lanes with a finite maximum exponentiate
 * with the SIMD exp map (simd.h) in blocks: d = x - max is rounded to float32,
 * its rounding error dl (TwoSum, exact) restored as e^d (1 + dl), so the terms
 * carry only the map's ~1 ulp; softmax stores the terms in y and scales them
 * by 1 / sum, so each element is exponentiated once.  A contiguous lane runs
 * whole in the SIMD row kernel (simd_math.h's row_softmax: max, terms and
 * scaling in vector registers); strided lanes gather blocks for the exp map.
 * Large inputs split their lanes over the thread pool.
 */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "cpu.h"
#include "opargs.h"
#include "parallel.h"
#include "simd.h"
#include "strided.h"

typedef void (*f32_map)(int64_t n, const float *x, int64_t sx, float *y);
typedef int (*f32_row)(const float *x, float *y, int64_t len, int mode);
typedef int (*f32_cols)(const float *x, int64_t xs, float *y, int64_t ys, int64_t yk,
                        int64_t len, int nl, int mode);
static f32_map simd_exp; /* NULL at the portable level: the double loops */
static f32_row simd_row; /* a whole contiguous lane in vector registers */
static f32_cols simd_cols; /* lanes side by side, a vector of them at a time */
static int simd_cols_width;
static pthread_once_t simd_once = PTHREAD_ONCE_INIT;
static void simd_init(void) {
    int isa = ad_cpu_isa();
    simd_exp = isa == AD_ISA_AVX512 ? ad_exp_f32_avx512 : isa == AD_ISA_AVX2 ? ad_exp_f32_avx2 : NULL;
    simd_row = isa == AD_ISA_AVX512 ? ad_softmax_row_f32_avx512
               : isa == AD_ISA_AVX2 ? ad_softmax_row_f32_avx2 : NULL;
    simd_cols = isa == AD_ISA_AVX512 ? ad_softmax_cols_f32_avx512
                : isa == AD_ISA_AVX2 ? ad_softmax_cols_f32_avx2 : NULL;
    simd_cols_width = isa == AD_ISA_AVX512 ? SIMD_COLS_AVX512 : SIMD_COLS_AVX2;
}

enum { EXP_BLOCK = 512 };

/* the lane's maximum, NaN skipped (x > m is false for NaN); eight running
   maxima on a contiguous lane so the compiler can keep them in a vector */
static float lane_max_f32(const float *X, int64_t sx, int64_t len) {
    float m8[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY,
                   -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    int64_t i = 0;
    if (sx == 1)
        for (; i + 8 <= len; i += 8)
            for (int j = 0; j < 8; j++) m8[j] = X[i + j] > m8[j] ? X[i + j] : m8[j];
    for (; i < len; i++) m8[0] = X[i * sx] > m8[0] ? X[i * sx] : m8[0];
    float m = m8[0];
    for (int j = 1; j < 8; j++) m = m8[j] > m ? m8[j] : m;
    return m;
}

/* d = x - m rounded, dl its exact error (TwoSum; 0 where d is not finite) */
static inline void split_diff(float x, float m, float *d, float *dl) {
    float s = x - m, bv = s - x, err = (x - (s - bv)) + (-m - bv);
    *d = s;
    *dl = s - s == 0.0f ? err : 0.0f; /* s - s: 0 when finite, NaN for inf / NaN */
}

/* sum over the lane of e^(x - m) (m finite), the terms also written to Y when
   Y is not NULL; each term is e^d (1 + dl) with d + dl = x - m exactly, in
   one FMA, and the sum is the row kernel's (simd_math.h row_exp_sum): 16
   double partials, partial j taking the elements i = j (mod 16), folded j +
   8, then + 4, + 2, + 1.  So a lane a stride apart (or a contiguous lane
   whose output is strided) gets the contiguous lane's bits; with e + e dl
   rounded twice and 8 partials summed in turn, 1 in about 4000 elements of
   softmax / log_softmax over dim 0 of a (4, 64, 3) view differed by an ulp. */
static double exp_terms_f32(const float *X, int64_t sx, float *Y, int64_t sy, int64_t len,
                            float m) {
    float d[EXP_BLOCK], dl[EXP_BLOCK], e[EXP_BLOCK];
    double acc[16] = {0};
    for (int64_t b = 0; b < len; b += EXP_BLOCK) { /* b a multiple of 16 */
        int n = len - b < EXP_BLOCK ? (int)(len - b) : EXP_BLOCK;
        const float *xb = X + b * sx;
        if (sx == 1)
            for (int i = 0; i < n; i++) split_diff(xb[i], m, &d[i], &dl[i]);
        else
            for (int i = 0; i < n; i++) split_diff(xb[i * sx], m, &d[i], &dl[i]);
        simd_exp(n, d, 1, e);
        for (int i = 0; i < n; i++) e[i] = fmaf(e[i], dl[i], e[i]);
        int i = 0;
        for (; i + 16 <= n; i += 16)
            for (int j = 0; j < 16; j++) acc[j] += (double)e[i + j];
        for (; i < n; i++) acc[i & 15] += (double)e[i];
        if (Y) {
            if (sy == 1)
                memcpy(Y + b, e, (size_t)n * sizeof(float));
            else
                for (i = 0; i < n; i++) Y[(b + i) * sy] = e[i];
        }
    }
    for (int w = 8; w >= 1; w /= 2)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    return acc[0];
}

/* float32 lanes on the SIMD exp; 0 when the lane needs the double loop (the
   portable level, or a lane whose maximum is not finite: its inf / NaN
   arithmetic stays the double loop's) */
static int lse_simd(const float *X, int64_t sx, float *y, int64_t len) {
    pthread_once(&simd_once, simd_init);
    if (!simd_exp) return 0;
    if (sx == 1) return simd_row(X, y, len, 2);
    float m = lane_max_f32(X, sx, len);
    if (!isfinite(m)) return 0;
    *y = (float)((double)m + log(exp_terms_f32(X, sx, NULL, 0, len, m)));
    return 1;
}

static int softmax_simd(const float *X, int64_t sx, float *Y, int64_t sy, int64_t len,
                        int flag) {
    pthread_once(&simd_once, simd_init);
    if (!simd_exp) return 0;
    if (sx == 1 && sy == 1) return simd_row(X, Y, len, flag);
    float m = lane_max_f32(X, sx, len);
    if (!isfinite(m)) return 0;
    /* the finish of row_softmax (simd_math.h) one element at a time, so that
       a lane a stride apart gets a contiguous lane's bits: x - lz as (x - hi)
       - lo, and y / sum as y hi + y lo in one FMA (row_scale), lz and 1 / sum
       split into two floats (a double x - lz rounded once differed by an ulp) */
    if (flag) {
        double lz = (double)m + log(exp_terms_f32(X, sx, NULL, 0, len, m));
        const float hi = (float)lz, lo = (float)(lz - hi);
        for (int64_t i = 0; i < len; i++) Y[i * sy] = (X[i * sx] - hi) - lo;
    } else {
        double inv = 1.0 / exp_terms_f32(X, sx, Y, sy, len, m);
        const float hi = (float)inv, lo = (float)(inv - hi);
        if (inv >= 0x1p-60 && inv <= 0x1p60)
            for (int64_t i = 0; i < len; i++) Y[i * sy] = fmaf(Y[i * sy], hi, Y[i * sy] * lo);
        else
            for (int64_t i = 0; i < len; i++) Y[i * sy] = (float)((double)Y[i * sy] * inv);
    }
    return 1;
}

/* lanes_dtype.h's cumsum_cols: lanes side by side summed a strip of this
   many at a time, a row of the strip per step */
enum { CUMSUM_COLS = 64 };

/* One lane: x[i * sx] for i < len into y (y[0] only for a reduction). */
typedef void (*lane_fn)(const void *x, int64_t sx, void *y, int64_t sy, int64_t len, int flag);

/* the float32 lanes try the SIMD path first; float64 stays double libm */
#define T float
#define S(name) name##_f32
#define ACC double
#define SIMD_LANE(call) (call)
#include "lanes_dtype.h"
#define T double
#define S(name) name##_f64
#define ACC double
#define SIMD_LANE(call) 0
#include "lanes_dtype.h"
/* integer cumsum stays exact */
#define T int64_t
#define S(name) name##_i64
#define ACC uint64_t
#include "lanes_dtype.h"

enum { L_LSE, L_SOFTMAX, L_CUMSUM };
static const lane_fn lane_table[3][6] = {
    [L_LSE] = {[AD_FLOAT32] = lse_f32, [AD_FLOAT64] = lse_f64},
    [L_SOFTMAX] = {[AD_FLOAT32] = softmax_f32, [AD_FLOAT64] = softmax_f64},
    [L_CUMSUM] = {[AD_FLOAT32] = cumsum_f32, [AD_FLOAT64] = cumsum_f64, [AD_INT64] = cumsum_i64},
};

/* lanes_dtype.h's cumsum_cols by dtype (the dtypes of lane_table's cumsum row) */
typedef void (*cumsum_cols_fn)(const void *x, int64_t sx, int64_t sk, void *y, int64_t sy,
                               int64_t yk, int64_t len, int nl, int flag);
static const cumsum_cols_fn cumsum_cols_table[6] = {
    [AD_FLOAT32] = cumsum_cols_f32, [AD_FLOAT64] = cumsum_cols_f64, [AD_INT64] = cumsum_cols_i64};

typedef struct {
    lane_fn fn;
    int64_t len, xs, ys; /* lane length and strides along the dim */
    size_t es;
    int flag;
    int dtype;
} lane_ctx;

/* Lanes side by side in memory (a step of +-1 from lane to lane) but strided
   along the dim, as softmax over dim 0 of a matrix: up to LANE_GROUP of them
   at a time are copied into a buffer a row at a time (reads of adjacent
   elements), run there as contiguous lanes (the float32 softmax family in
   the SIMD row kernel, as a contiguous dim's lanes: the same bits as the
   transposed input's contiguous lanes), and their results copied out the
   same way.  Walked one by one, each element of such a lane was a cache line
   of its own, and a power-of-two row put all of a lane's lines in one L1 set:
   Zen 4, 1 thread, float32 softmax(dim=0) of (64, 4096) 6.0 ms -> 0.3 (torch
   0.36). */
enum { LANE_GROUP = 16, LANE_BUF = 4096 /* elements */ };

/* a group's lanes, each len long, one after another: 32 KiB, twice on the
   stack (pool workers have 1 MiB), read and written as the lanes' own type */
typedef union {
    float f32[LANE_BUF];
    double f64[LANE_BUF];
    int64_t i64[LANE_BUF];
} lane_buf;

#define LANE_COPY(T, dst, dsr, dsk, src, ssr, ssk, rows, lanes)                   \
    for (int64_t r_ = 0; r_ < (rows); r_++)                                      \
        for (int64_t k_ = 0; k_ < (lanes); k_++)                                 \
            ((T *)(dst))[r_ * (dsr) + k_ * (dsk)] = ((const T *)(src))[r_ * (ssr) + k_ * (ssk)];

/* rows x lanes elements of the dtype (one of lane_buf's): dst[r dsr + k dsk]
   = src[r ssr + k ssk] */
static void lane_copy(int dtype, void *dst, int64_t dsr, int64_t dsk, const void *src,
                      int64_t ssr, int64_t ssk, int64_t rows, int64_t lanes) {
    if (dtype == AD_FLOAT32)
        LANE_COPY(float, dst, dsr, dsk, src, ssr, ssk, rows, lanes)
    else if (dtype == AD_FLOAT64)
        LANE_COPY(double, dst, dsr, dsk, src, ssr, ssk, rows, lanes)
    else
        LANE_COPY(int64_t, dst, dsr, dsk, src, ssr, ssk, rows, lanes)
}
#undef LANE_COPY

/* float32 softmax-family lanes a step of +1 apart (and so their outputs, or
   one output a lane), a vector of lanes at a time (cols_softmax: each lane
   row_softmax's bits, as the grouped lanes below get); returns the lanes
   done, stopping before a group the row kernel must take.  Zen 4, 1 thread,
   float32 (32, C, 64, 64) over dim 1, through the buffer below -> here
   (torch): log_softmax C = 10 5.1 -> 1.8 ms (1.2), C = 3 4.7 -> 0.9 (0.33),
   C = 21 8.3 -> 3.4 (2.6-3.2); softmax C = 10 4.9 -> 1.6 (1.35), C = 3 3.7 ->
   0.48 (0.36).  The per-lane log of log_softmax and logsumexp (libm, as the
   row kernel's) is most of what is left at C = 3. */
static int64_t lanes_cols(const lane_ctx *c, int64_t n, char **p, const int64_t *s) {
    int mode = c->fn == lse_f32 ? 2 : c->fn == softmax_f32 ? c->flag : -1;
    bool reduce = c->ys == 0;
    if (mode < 0 || s[1] != 1 || (!reduce && s[0] != 1)) return 0;
    pthread_once(&simd_once, simd_init);
    if (!simd_cols) return 0;
    int64_t i = 0, w = simd_cols_width;
    for (; i < n; i += w) {
        int nl = (int)(n - i < w ? n - i : w);
        float *y = (float *)p[0] + i * s[0];
        if (!simd_cols((const float *)p[1] + i, c->xs, y, c->ys, s[0], c->len, nl, mode)) break;
    }
    return i < n ? i : n;
}

static void lane_inner(void *ctx, int64_t n, char **p, const int64_t *s) {
    const lane_ctx *c = ctx;
    int64_t es = (int64_t)c->es, len = c->len, i = 0;
    int64_t g = LANE_BUF / (len > 0 ? len : 1);
    g = g > LANE_GROUP ? LANE_GROUP : g;
    bool reduce = c->ys == 0; /* one output element a lane (logsumexp) */
    bool side_by_side = (s[1] == 1 || s[1] == -1) && c->xs != 1;
    if (side_by_side && !reduce && c->fn == lane_table[L_CUMSUM][c->dtype]) {
        /* cumsum over dim 0 of a matrix: whole rows of a strip of lanes, not
           a cache line per element of a lane (a tall matrix's lines were read
           and written from beyond the caches).  (Contiguous lanes interleaved
           this way lost: rows a power of two apart share cache sets.) */
        for (; i < n; i += CUMSUM_COLS)
            cumsum_cols_table[c->dtype](p[1] + i * s[1] * es, c->xs, s[1], p[0] + i * s[0] * es,
                                        c->ys, s[0], len,
                                        (int)(n - i < CUMSUM_COLS ? n - i : CUMSUM_COLS), c->flag);
        return;
    }
    /* (the column kernel needs no buffer: lanes of any length) */
    if (side_by_side && c->dtype == AD_FLOAT32) i = lanes_cols(c, n, p, s);
    if (side_by_side && g >= 2 &&
        (c->dtype == AD_FLOAT32 || c->dtype == AD_FLOAT64 || c->dtype == AD_INT64)) {
        lane_buf in, out;
        for (; i < n; i += g) {
            int64_t m = n - i < g ? n - i : g;
            lane_copy(c->dtype, &in, 1, len, p[1] + i * s[1] * es, c->xs, s[1], len, m);
            for (int64_t k = 0; k < m; k++)
                c->fn((char *)&in + k * len * es, 1,
                      reduce ? p[0] + (i + k) * s[0] * es : (char *)&out + k * len * es,
                      reduce ? 0 : 1, len, c->flag);
            if (!reduce) lane_copy(c->dtype, p[0] + i * s[0] * es, c->ys, s[0], &out, 1, len, len, m);
        }
        return;
    }
    for (; i < n; i++)
        c->fn(p[1] + i * s[1] * es, c->xs, p[0] + i * s[0] * es, c->ys, len, c->flag);
}

typedef struct {
    const nditer *it;
    char *const *base;
    lane_ctx *c;
    int d;
    int64_t unit;
} lanes_job;

static void lanes_block(void *ctx, int64_t k) {
    const lanes_job *j = ctx;
    int64_t b = k * j->unit, e = b + j->unit < j->it->shape[j->d] ? b + j->unit : j->it->shape[j->d];
    nditer sub;
    char *sb[ITER_MAX_OPS];
    nditer_slice(j->it, j->base, j->d, b, e, &sub, sb);
    nditer_run(&sub, sb, lane_inner, j->c);
}

/* The lanes split over threads when there is enough work (len elements a
   lane, `cost` times a copy's work each): the outermost dim the output moves
   along is cut into blocks of whole lanes, so every lane is one kernel call
   and the result does not depend on the thread count. */
static void run_lanes_par(const nditer *it, char **base, lane_ctx *c, int cost) {
    int d = 0;
    while (d < it->ndim && (it->strides[0][d] == 0 || it->shape[d] < 2)) d++;
    int64_t lanes = nditer_numel(it), work = lanes * c->len;
    if (d == it->ndim || work < ITER_PAR_MIN / cost || par_num_threads() < 2) {
        nditer_run(it, base, lane_inner, c);
        return;
    }
    int64_t per_index = lanes / it->shape[d] * c->len;
    int64_t unit = (ITER_PAR_BLOCK / cost + per_index - 1) / per_index;
    /* lanes side by side in the output (softmax over dim 0 of a matrix): blocks
       of whole cache lines of them, so that no two threads write one line and
       the column kernel gets whole vectors.  Blocks of 3 columns made float32
       softmax(dim=0) of (1000, 1000) 3.2x slower at 2 threads than at 1. */
    if (it->strides[0][d] == 1 || it->strides[0][d] == -1) {
        int64_t line = 64 / (int64_t)c->es;
        unit = (unit + line - 1) / line * line;
    }
    lanes_job j = {it, base, c, d, unit};
    par_blocks((it->shape[d] + unit - 1) / unit, lanes_block, &j);
}

/* A copy's threshold for run_lanes' transposed lanes (below: the strided
   lanes; the copy's allocation and second pass do not pay) */
#define LANES_COPY_MIN 4096

/* whether x's last dim steps a cache line or more, while some dim is
   contiguous (a transposed view, not a broadcast or a strided slice) */
static bool xstr_last_far(const ad_tensor *x) {
    int64_t sl = T_STRIDES(x)[x->ndim - 1], es = (int64_t)ad_dtype_size_(x->dtype);
    if ((sl < 0 ? -sl : sl) * es < 64) return false;
    for (int d = 0; d < x->ndim - 1; d++)
        if (T_STRIDES(x)[d] == 1 && T_SHAPE(x)[d] > 1) return true;
    return false;
}

static ad_status run_lanes(const op_args *a, int kind, bool reduce, ad_tensor **out);

/* run_lanes on a contiguous copy of a's input in dtype */
static ad_status run_lanes_copied(const op_args *a, int dtype, int kind, bool reduce,
                                  ad_tensor **out) {
    const ad_tensor *x = a->in[0];
    ad_tensor *xc;
    ad_status st = ad_tensor_empty(dtype, T_SHAPE(x), x->ndim, &xc);
    if (st) return st;
    ad_convert_strided(x, xc->storage->data, dtype); /* a plain copy in x's own dtype */
    op_args ac = *a;
    const ad_tensor *in[1] = {xc};
    ac.in = in;
    st = run_lanes(&ac, kind, reduce, out);
    ad_tensor_release(xc);
    return st;
}

/* Runs kind along dim of x.  reduce: the output has size 1 on dim (dropped
   unless keepdim), else x's shape.  A 0-d input is one lane of length 1. */
static ad_status run_lanes(const op_args *a, int kind, bool reduce, ad_tensor **out) {
    const ad_tensor *x = a->in[0];
    lane_args la;
    ad_status st;
    if ((st = lane_args_decode(a->op, a->iargs, x, &la))) return st;
    /* cumsum of int32, uint8 and bool sums in int64, as sum does (torch's
       and numpy's promotion): on an int64 copy */
    if (kind == L_CUMSUM && (x->dtype == AD_INT32 || x->dtype == AD_UINT8 || x->dtype == AD_BOOL))
        return run_lanes_copied(a, AD_INT64, kind, reduce, out);
    lane_fn fn = lane_table[kind][x->dtype];
    if (!fn)
        return ad_fail(AD_ERR_DTYPE, "%s: not supported for %s (input %s)", OP_NAME(a->op),
                       ad_dtype_name_(x->dtype), ad_tdesc(x));
    int nd = x->ndim ? x->ndim : 1, dim = la.dim;
    /* Lanes of an x whose last dim steps far while another is contiguous (a
       transposed or permuted x) run on a contiguous copy made by the tile
       transposes (strided.c copy_plane), where the kernels read whole vectors
       and write the output's lanes side by side: float32 (256, 64,
       64).permute(0, 2, 1), Zen 4, 1 thread, softmax(-1) 3258 -> 925 us,
       log_softmax(-1) 3472 -> 1008 (the contiguous tensor's: 748-960,
       849-1112); (32, 64, 28, 28).permute(0, 2, 3, 1) softmax(1) 7269 ->
       1830 us (torch 3457-3620), .permute(3, 2, 1, 0) 27546 -> 3669 (torch
       6481-6815).  The same bits as the strided lanes, which give the
       contiguous input's. */
    if (x->ndim && xstr_last_far(x) && x->numel >= LANES_COPY_MIN)
        return run_lanes_copied(a, x->dtype, kind, reduce, out);
    /* the flag is keepdim for the reduction (logsumexp), the kernel's own
       otherwise (cumsum's reverse, log_softmax's log) */
    bool keepdim = reduce && la.flag;
    int flag = reduce ? 0 : la.flag;
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
    if ((st = ad_tensor_empty(x->dtype, oshape, on, &y))) return st;
    /* contiguous strides of the output over x's shape (dim kept as 1 or len) */
    int64_t s = 1;
    for (int i = nd - 1; i >= 0; i--) {
        ostr[i] = i == dim ? 0 : s;
        s *= (reduce && i == dim) ? 1 : xshape[i];
    }
    lane_ctx c = {fn, xshape[dim], xstr[dim], reduce ? 0 : ostr[dim], ad_dtype_size_(x->dtype),
                  flag, x->dtype};
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
    run_lanes_par(&it, base, &c, kind == L_CUMSUM ? 1 : 16);
    *out = y;
    return AD_OK;
}

/* the layouts: lane_args (opargs.h) */
ad_status fwd_logsumexp(const op_args *a, ad_tensor **out) {
    return run_lanes(a, L_LSE, true, out);
}

ad_status fwd_softmax(const op_args *a, ad_tensor **out) {
    return run_lanes(a, L_SOFTMAX, false, out);
}

ad_status fwd_cumsum(const op_args *a, ad_tensor **out) {
    return run_lanes(a, L_CUMSUM, false, out);
}
