/* conv.c - conv2d, conv_transpose2d and conv2d's weight gradient, all by
 * im2col / col2im around the packed GEMM (where im2col would outgrow L2, the
 * forward's GEMM packs its blocks from the image instead: gemm_bsrc, gemm.h).
 *
 * At stride 1 the forward's packer reads a padded copy of the image instead,
 * over a wide grid of output columns (conv_dtype.h wide_pack), and so does
 * the weight gradient's, im2col transposed (wide_packt); conv_transpose2d
 * runs there as a conv2d (transpose_as_conv).  A 3x3 kernel at stride 1
 * with 16 channels or more each way runs as Winograd F(2x2, 3x3) instead,
 * forward (wino_item) and weight gradient (wino_wgrad).
 *
 * One geometry serves the three ops: a convolution from an input (n, c, h, w)
 * to an output (n, o, oh, ow) with weight (o, c/groups, kh, kw).
 *   conv2d            input -> output      y_g = W_g @ im2col(x_g)
 *   conv_transpose2d  output -> input      x_g = col2im(W_g^T @ y_g)  (conv2d's input gradient)
 *   conv2d_weight_grad                     dW_g = sum_n y_g @ im2col(x_g)^T
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "cpu.h"
#include "gemm.h"
#include "nnops.h"
#include "opargs.h"
#include "parallel.h"

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
enum { RUN_FWD, RUN_BWD_INPUT, RUN_BWD_WEIGHT };

/* [*x0, *x1): the output columns x whose input column x*sw + off is in [0, w) */
static void valid_cols(const conv_geom *g, int64_t off, int64_t *x0, int64_t *x1) {
    int64_t a = off >= 0 ? 0 : (-off + g->sw - 1) / g->sw;
    int64_t b = g->w - off <= 0 ? 0 : (g->w - off + g->sw - 1) / g->sw;
    *x0 = a < g->ow ? a : g->ow;
    *x1 = b < g->ow ? b : g->ow;
    if (*x1 < *x0) *x1 = *x0;
}

/* A 1x1 kernel with stride 1 and no padding reads the input as it is: its
   im2col is the (cg, h*w) group slice itself. */
static bool pointwise(const conv_geom *g) {
    return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0 &&
           g->oh == g->h && g->ow == g->w; /* not so for conv_transpose2d's output padding */
}

/* Winograd F(2x2, 3x3) (conv_dtype.h wino_item, wino_wgrad) serves the
   forward and the weight gradient of a 3x3 kernel at stride 1, dilation 1,
   with at least WINO_MIN channels in and out a group (the 16 GEMMs' k and m;
   the weight gradient's m and n), whatever the padding and size.  Its tiles
   run in blocks of whole tile rows, about WINO_TB tiles (the forward GEMMs'
   n, the weight gradient's k).
   Zen 4, float32, 64 -> 64 channels unless said, direct -> Winograd, ms:
   (8, 64, 56, 56) 19.3 -> 11.8 at 1 thread (torch 17.0), 9.7 -> 6.7 at 2;
   (16, 64, 32, 32) 12.9 -> 6.85; (8, 128, 28, 28) 18.9 -> 11.3; (64, 16,
   14, 14) to 32 channels 1.81 -> 1.41; (1, 64, 56, 56) 2.41 -> 1.54 (2
   threads 1.31 -> 1.11, the item's blocks split).  The transforms were a
   quarter of the time before the compiler vectorised them (wino_bt,
   wino_at: 12.8 -> 11.8 ms).  Weight gradient, 1 thread: (8, 64, 56, 56)
   19.35 -> 12.4 (torch 20.0), 2 threads 9.85 -> 6.6; (8, 128, 28, 28) 19.4
   -> 11.2; (16, 64, 32, 32) 13.25 -> 8.1; (64, 16, 14, 14) to 32 channels
   2.01 -> 1.92 (1.03 -> 1.10 at 2 threads: 49 tiles, short GEMMs). */
enum { WINO_MIN = 16, WINO_TB = 96 };
/* The weight gradient's product gy (og x l) @ im2col^T (l x k) with k (the
   input channels times the window) and og both at most this: og x k dot
   products (gemm_dots), each row pair streamed once, instead of the packed
   GEMM, whose panels such a product leaves mostly empty.  Zen 4, float32, 1
   thread, batch 64 unless said, GEMM -> dots, us: 1 -> 16 channels 3x3 on
   28x28 570 -> 315 (AVX2 level 603 -> 332); 2 -> 16 1033 -> 618; 3 -> 32 on
   32x32 4444 -> 2012 (AVX2 level 2355 -> 2572, the one loss); batch 32, 1
   -> 8 5x5 on 64x64 6274 -> 1258; batch 16, 3 -> 32 on 64x64 4500 -> 2000.
   With 64 outputs the GEMM's rows fill its panels: 3 -> 64 on 48x48 4021
   against 4872.  A 1x1 kernel (im2col is x itself) keeps the GEMM. */
#define CONV_DOTS_MAX 32
#define WINO_ROWS(tw) ((tw) >= WINO_TB ? 1 : WINO_TB / (tw))
/* V's and M's 16 planes a cache line more than their elements apart: planes
   a multiple of 4 KiB apart fill one L1 set with the transforms' 16 streams
   ((16, 64, 32, 32): 96 tiles of 64 channels, 24 KiB) */
#define WINO_PLANE(n) ((n) + 64 / (int64_t)sizeof(T))

/* PYAUTODIFF_WINOGRAD=0 keeps every convolution direct */
static bool wino_enabled(void) {
    static atomic_int on = -1;
    return ad_env_switch(&on, "PYAUTODIFF_WINOGRAD");
}

static bool wino_fits(const conv_geom *g, int which) {
    return which != RUN_BWD_INPUT && g->kh == 3 && g->kw == 3 && g->sh == 1 &&
           g->sw == 1 && g->dh == 1 && g->dw == 1 && g->cg >= WINO_MIN && g->og >= WINO_MIN &&
           wino_enabled();
}

/* the padded copy, then a V, an M and two output rows for each of `parts`
   threads (conv_dtype.h wino_item; 16 elements cover WINO_PLANE's line) */
static int64_t wino_scratch(const conv_geom *g, int parts) {
    int64_t th = (g->oh + 1) / 2, tw = (g->ow + 1) / 2, tb = WINO_ROWS(tw) * tw;
    return g->cg * (2 * th + 2) * (2 * tw + 2) +
           parts * (16 * ((g->cg + g->og) * tb + 2 * 16) + 4 * tw);
}

/* The largest biased exponent field among n elements of a float dtype (inf
   and NaN: the field's maximum). */
static int max_exponent(int dtype, const void *p, int64_t n) {
    uint32_t e = 0;
    if (dtype == AD_FLOAT32)
        for (int64_t i = 0; i < n; i++) {
            uint32_t f = ((const uint32_t *)p)[i] >> 23 & 0xff;
            e = f > e ? f : e;
        }
    else
        for (int64_t i = 0; i < n; i++) {
            uint32_t f = (uint32_t)(((const uint64_t *)p)[i] >> 52 & 0x7ff);
            e = f > e ? f : e;
        }
    return (int)e;
}

/* Whether Winograd gives what the direct sum of `terms` products of a and b
   elements gives, up to rounding: no inf or NaN (the transforms add and
   subtract each value, so an inf would come out NaN where the direct sum
   gives +-inf), and products small enough that `terms` of them grown 81
   times (the transforms' largest gain) stay below 2^(emax - 1): no overflow
   on either path (a 1e38 float32 input would overflow in the transforms
   where the direct sum stays finite). */
static bool wino_safe(int dtype, const void *a, int64_t na, const void *b, int64_t nb,
                      int64_t terms) {
    const int top = dtype == AD_FLOAT32 ? 0xff : 0x7ff, bias = top / 2;
    int ea = max_exponent(dtype, a, na), eb = max_exponent(dtype, b, nb);
    if (ea == top || eb == top) return false;
    uint64_t t = (uint64_t)(terms > 1 ? terms : 1) * 81 - 1;
    int grow = 64 - __builtin_clzll(t | 1); /* >= log2(81 terms) */
    /* |a| < 2^(ea - bias + 1), |b| < 2^(eb - bias + 1) */
    return (ea - bias + 1) + (eb - bias + 1) + grow < bias;
}

/* BODY for x in [x0, x1) with the stride STEP, compiled apart for stride 1 (a
   plain copy or add the compiler vectorises). */
#define CONV_COLS(x0, x1, sw, ...)                                                         \
    do {                                                                                   \
        if ((sw) == 1) {                                                                   \
            const int64_t STEP = 1;                                                        \
            for (int64_t x = (x0); x < (x1); x++) __VA_ARGS__                              \
        } else {                                                                           \
            const int64_t STEP = (sw);                                                     \
            for (int64_t x = (x0); x < (x1); x++) __VA_ARGS__                              \
        }                                                                                  \
    } while (0)

/* the forward's B packer's context: one (sample, group)'s input */
typedef struct conv_bsrc {
    const conv_geom *g;
    const void *x;
    int64_t hp, wp; /* wide_pack: the padded image's planes (else 0) */
} conv_bsrc;

/* wide_pack and wide_packt read this far past the padded image's last
   plane: the last row of its window, shifted (kw - 1) dw, ends there */
#define WIDE_SLACK(g) (((g)->kw - 1) * (g)->dw)

typedef struct conv_job {
    const conv_geom *g;
    int which, dt;
    const void *a, *b;      /* the two operands, contiguous */
    void *y;                /* the result */
    char *scratch;          /* `slots` slots of `slot` bytes */
    size_t slot;
    int64_t slots, ncols;   /* ncols: the im2col buffer's elements, 0 when pointwise */
    bool packs;             /* the forward's GEMM packs im2col from the image */
    bool wide;              /* ... from a padded copy of it, over the wide grid (wide_pack) */
    bool wino_w;            /* the weight gradient by Winograd (conv_dtype.h wino_wgrad) */
    void *wino;             /* Winograd: the filters' transforms (16 x o x cg) */
    int wino_parts;         /* ... and the threads an item's tile blocks are spread over */
    atomic_llong next;      /* the next unclaimed item (forward and input gradient) */
} conv_job;

/* The kernels are written once, in the template header conv_dtype.h, and
   instantiated here per float dtype. */
#if defined(__x86_64__) || defined(__i386__)
#define packbt_avx2_f32 gemm_packbt_f32_avx2
#define packbt_avx2_f64 gemm_packbt_f64_avx2
#endif

#define T float
#define S(name) name##_f32
#include "conv_dtype.h"

#define T double
#define S(name) name##_f64
#include "conv_dtype.h"

static void conv_slots(void *ctx, int64_t s0, int64_t s1) {
    conv_job *jb = ctx;
    for (int64_t s = s0; s < s1; s++) {
        if (jb->dt == AD_FLOAT32) conv_slot_f32(jb, s);
        else conv_slot_f64(jb, s);
    }
}

/* The weight gradient's accumulators of slots 1.. (n elements at byte
   offset off in each slot) added to dst, in slot order. */
static void add_slots(const conv_job *jb, size_t off, int64_t n, void *dst) {
    for (int64_t s = 1; s < jb->slots; s++) {
        const char *acc = jb->scratch + (size_t)s * jb->slot + off;
        if (jb->dt == AD_FLOAT32)
            for (int64_t i = 0; i < n; i++) ((float *)dst)[i] += ((const float *)acc)[i];
        else
            for (int64_t i = 0; i < n; i++) ((double *)dst)[i] += ((const double *)acc)[i];
    }
}

/* A slot's scratch above this size runs the items one at a time, each
   GEMM threaded by itself, rather than a buffer per thread. */
#define CONV_SLOT_MAX ((size_t)32 << 20)

/* Runs one of the three kernels: a, b are the two operands (made
   contiguous), y the result. The (sample, group) items are spread over the
   threads, each with its own im2col buffer (and, for the weight gradient,
   its own accumulator, summed in slot order at the end); with fewer items
   than threads they run one by one and each GEMM uses the threads. */
static ad_status run(int which, const conv_geom *g, const ad_tensor *a, const ad_tensor *b,
                     const int64_t *yshape, ad_tensor **out) {
    ad_tensor *ta = NULL, *tb = NULL, *y = NULL;
    const void *pa, *pb;
    ad_status st;
    size_t es = ad_dtype_size_(a->dtype);
    conv_job jb = {.g = g, .which = which, .dt = a->dtype};
    int64_t items = g->n * g->groups;
    /* The forward's GEMM packs its B straight from the image (im2col_pack)
       where im2col would outgrow L2: its buffer, written out and read back
       to be packed, costs more there than the packer's short runs.  Zen 4,
       float32, 64 3x3 filters, padding 1, 1 thread (old and new builds in
       alternating processes, medians of three rounds): input (8, 64, 56,
       56) 25.0-26.5 -> 21.9-23.3 ms, (16, 64, 32, 32) 14.8-18.2 ->
       14.1-14.2, (8, 128, 16, 16) (1.2 MB, just past L2) level.  Below L2,
       where im2col stays in cache and a small B is read in place, packing
       lost: (64, 16, 14, 14) with 32 filters 2.0-3.0 -> 3.2-4.2 ms, (16, 64,
       32, 32) at stride 2 4.3-5.3 -> 5.1-6.4. */
    bool big = !pointwise(g) && (size_t)(g->k * g->l) * es > (size_t)ad_cpu_caches()->l2;
    jb.packs = which == RUN_FWD && big;
    /* At stride 1 the forward's packer copies rows of a padded image instead
       (wide_pack: one copy of nr elements a panel row, against a few runs
       and their bounds each), for the wide grid's (kw - 1) dw extra columns
       an output row, so only where those are at most a sixth of ow.  Zen 4,
       float32, 1 thread, old and new builds alternating, min of 7 blocks:
       (8, 64, 56, 56) * 64 3x3 21.5 -> 19.4 ms (2 threads 13.3 -> 10.5),
       (4, 64, 112, 112) 44 -> 40, (8, 64, 28, 28) 5x5 15.5 -> 14.4,
       (8, 256, 14, 14) 20.1 -> 19.7, (16, 64, 32, 32) 13.6 -> 13.1;
       (8, 256, 10, 10), 2 extra columns of 10, level, and (8, 512, 8, 8),
       2 of 8, 22.9 -> 27.4: left to im2col_pack.
       The weight gradient, past L2 too, packs the wide im2col transposed
       from the padded image (wide_packt) instead of writing im2col and
       transposing it, where the extra columns, which its products sum over,
       are at most an eighth: (8, 64, 56, 56) 22.7 -> 19.2-20.5 ms (2
       threads 12.7-14.1 -> 10.5-11.2), (8, 32, 64, 64) 5x5 32 -> 19.4-20.4
       (17.0 -> 9.9-10.4), (16, 64, 32, 32) 14.7 -> 13.0-14.5, (8, 64, 56,
       56) dilation 2 22.2 -> 20.2-21.0; (8, 256, 14, 14), 2 of 14, lost
       19.5 -> 21.3-22.5. */
    jb.wide = g->sh == 1 && g->sw == 1 &&
              ((jb.packs && 6 * (g->kw - 1) * g->dw <= g->ow) ||
               (which == RUN_BWD_WEIGHT && big && 8 * (g->kw - 1) * g->dw <= g->ow));
    /* im2col (or the padded image, its slack and the wide product), then for
       the weight gradient one GEMM result and an accumulator */
    jb.ncols = pointwise(g) || jb.packs ? 0 : g->k * g->l;
    if (jb.wide) {
        int64_t hp = g->h + 2 * g->ph, wp = g->w + 2 * g->pw;
        jb.ncols = g->cg * hp * wp + WIDE_SLACK(g) + g->og * g->oh * wp;
    }
    if ((st = nn_contig(a, &ta, &pa)) || (st = nn_contig(b, &tb, &pb))) goto done;
    int threads = par_num_threads();
    bool wino = wino_fits(g, which) &&
                wino_safe(a->dtype, pa, a->numel, pb, b->numel,
                          which == RUN_FWD ? g->k : g->n * g->oh * g->ow);
    /* the weight gradient's position sums: one set a slot, so only where the
       items spread over the threads */
    if (wino && which == RUN_BWD_WEIGHT && (threads == 1 || items >= threads)) {
        jb.wino_w = true;
        jb.packs = jb.wide = false;
        jb.ncols = wino_scratch(g, 1);
    }
    if (wino && which == RUN_FWD) {
        if (!(jb.wino = ad_malloc((size_t)(16 * g->o * g->cg) * es))) {
            st = ad_fail_nomem(OP_NAME(g->op));
            goto done;
        }
        if (a->dtype == AD_FLOAT32) wino_weights_f32(g, pb, jb.wino);
        else wino_weights_f64(g, pb, jb.wino);
        jb.packs = jb.wide = false;
        jb.wino_parts = 1;
        jb.ncols = wino_scratch(g, 1);
    }
    size_t slot = (size_t)jb.ncols;
    if (which == RUN_BWD_WEIGHT) /* a GEMM result and an accumulator */
        slot += (size_t)(jb.wino_w ? (g->og + 16 * g->o) * g->cg : (g->og + g->o) * g->k);
    slot = (slot * es + 63) / 64 * 64;
    jb.slot = slot;
    /* every item writes its whole part of the forward and input-gradient
       results; the weight gradient accumulates */
    bool empty = a->numel == 0 || b->numel == 0;
    if ((st = (which == RUN_BWD_WEIGHT || empty ? ad_tensor_zeros : ad_tensor_empty)(
             a->dtype, yshape, 4, &y)))
        goto done;
    if (y->numel == 0 || empty) goto done;
    /* fewer items than threads: one at a time, each GEMM threaded */
    jb.slots = threads > 1 && items >= threads && slot <= CONV_SLOT_MAX ? threads : 1;
    if (jb.wino && jb.slots == 1 && threads > 1) { /* Winograd: the threads share each item */
        jb.wino_parts = threads;
        jb.ncols = wino_scratch(g, threads);
        jb.slot = slot = ((size_t)jb.ncols * es + 63) / 64 * 64;
    }
    if (!(jb.scratch = ad_malloc(slot * (size_t)jb.slots + 64))) {
        st = ad_fail_nomem(OP_NAME(g->op));
        goto done;
    }
    jb.a = pa, jb.b = pb, jb.y = y->storage->data;
    atomic_init(&jb.next, 0);
    if (jb.slots > 1) par_for(jb.slots, conv_slots, &jb);
    else conv_slots(&jb, 0, 1);
    if (jb.wino_w) { /* the slots' position sums in slot order, then dW = G^T dU G */
        size_t off = (size_t)(jb.ncols + g->og * g->cg) * es;
        void *du = jb.scratch + off;
        add_slots(&jb, off, 16 * g->o * g->cg, du);
        if (a->dtype == AD_FLOAT32) wino_wgrad_finish_f32(g, du, jb.y);
        else wino_wgrad_finish_f64(g, du, jb.y);
    } else if (which == RUN_BWD_WEIGHT) {
        add_slots(&jb, (size_t)(jb.ncols + g->og * g->k) * es, g->o * g->k, jb.y);
    }
done:
    ad_mfree(jb.wino);
    ad_mfree(jb.scratch);
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
    if ((v -= 2 * pad) <= 0) /* as torch: an output of no rows is an error too */
        return ad_fail(AD_ERR_SHAPE, "conv_transpose2d: padding %lld leaves no output %s for "
                       "input %s and weight %s", (long long)pad, axis, ad_tdesc(x), ad_tdesc(w));
    (void)g;
    *out = v;
    return AD_OK;
}

/* conv_transpose2d at stride 1 without output padding, its padding at most
   the window's reach, is the conv2d of its input x with the weight flipped
   (flip_weight) and padding dilation (k - 1) - padding.  Where that conv2d
   takes the wide packer with at most an eighth of extra columns, it runs as
   one: no GEMM into im2col's k x l shape and col2im's scatter of it.  Zen 4,
   float32, old and new builds alternating, min of 7 blocks, 64 3x3 filters,
   padding 1: (8, 64, 56, 56) 20.4-21.1 -> 19.4-19.6 ms at 1 thread (torch
   17.8), 11.6-13.4 -> 9.9-11.1 at 2; (16, 64, 32, 32) 13.3-13.6 -> 13.0-13.2.
   Elsewhere it lost: (64, 32, 7, 7) 0.62 -> 0.95 ms, (8, 256, 14, 14) and
   (8, 64, 28, 28) 5x5 3-4% at 1 thread.  It also runs as one wherever that
   conv2d is a Winograd one (wino_fits), past L2 or not: 3x3, 32 -> 32
   channels, (64, 32, 7, 7) 1.28 -> 0.82 ms, 256 -> 256 (8, 256, 14, 14) 19.4
   -> 14.8, 32 -> 16 (64, 32, 14, 14) 1.72 -> 1.62. */
static bool transpose_is_conv(const conv_geom *g, const conv_args *c, size_t es) {
    if (g->sh != 1 || g->sw != 1 || c->oph || c->opw || g->ph > g->dh * (g->kh - 1) ||
        g->pw > g->dw * (g->kw - 1))
        return false;
    conv_geom f = *g; /* the conv2d's channels a group, for wino_fits */
    f.cg = g->og, f.og = g->cg;
    return wino_fits(&f, RUN_FWD) ||
           ((size_t)(g->og * g->kh * g->kw * g->h * g->w) * es > (size_t)ad_cpu_caches()->l2 &&
            8 * (g->kw - 1) * g->dw <= g->w);
}

static ad_status transpose_as_conv(const conv_geom *g, const ad_tensor *x, const ad_tensor *w,
                                   const int64_t *shape, ad_tensor **out) {
    conv_geom f = *g;
    f.c = g->o, f.h = g->oh, f.w = g->ow, f.o = g->c, f.oh = g->h, f.ow = g->w;
    f.ph = g->dh * (g->kh - 1) - g->ph, f.pw = g->dw * (g->kw - 1) - g->pw;
    finish(&f);
    int64_t fshape[4] = {f.o, f.cg, f.kh, f.kw};
    ad_tensor *tw = NULL, *fw = NULL;
    const void *pw;
    ad_status st = nn_contig(w, &tw, &pw);
    if (!st) st = ad_tensor_empty(w->dtype, fshape, 4, &fw);
    if (!st) {
        /* a non-finite weight would meet the padding's zeros (0 * inf is NaN)
           where the scatter never adds it: such a weight takes the scatter */
        bool finite = w->dtype == AD_FLOAT32 ? flip_weight_f32(g, pw, fw->storage->data)
                                             : flip_weight_f64(g, pw, fw->storage->data);
        st = finite ? run(RUN_FWD, &f, x, fw, shape, out)
                    : run(RUN_BWD_INPUT, g, x, w, shape, out);
    }
    ad_tensor_release(tw);
    ad_tensor_release(fw);
    return st;
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
    if (transpose_is_conv(&g, &c, ad_dtype_size_(x->dtype)))
        return transpose_as_conv(&g, x, w, shape, out);
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
