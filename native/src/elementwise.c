/* elementwise.c - the binary, comparison, unary and tensor-scalar ops:
 * broadcasting, output allocation and threading around the kernels of
 * ew_kernels.h, whose tables for the CPU's ISA level are picked once here
 * (the float32 exp/tanh/sigmoid/silu/gelu/log/erf/gelu_erf entries replaced by the SIMD maps
 * of simd_avx*.c).  An op whose operands outgrow the last-level cache writes
 * its output with non-temporal stores (bin_inner_stream, un_inner_stream):
 * the output would be evicted before anyone reads it, and a plain store would
 * first read every line it overwrites.
 */
#include <math.h>
#include <string.h>

#include <pthread.h>
#include <stdlib.h>

#include "cpu.h"
#include "ew.h"
#include "parallel.h"
#include "simd.h"
#include "strided.h"

/* ---- run-time dispatch ----------------------------------------------------
 * The kernel tables of the level cpu.c picks, and for float32 simd.h's
 * SIMD_MAPS (exp, tanh, sigmoid, silu, gelu, log, erf, gelu_erf) the AVX-512 or AVX2/FMA maps of simd_avx*.c (same
 * results at both levels); PYAUTODIFF_PORTABLE=1 keeps the portable loops. */
typedef void (*f32_map)(int64_t n, const float *x, int64_t sx, float *y);
#define SIMD_PTR(OP, OPU) static f32_map simd_##OP##_f32;
SIMD_MAPS(SIMD_PTR)
static bin_kernel bin_table[AD_OP__COUNT][6];
static un_kernel un_table[AD_OP__COUNT][6];
static void (*stream_copy)(void *dst, const void *src, size_t n);
static void (*stream_fence)(void); /* once after a run of stream_copy calls */
static const bin_nt_kernel *bin_nt_f32; /* ew_bin_nt_f32_avx2 from AVX2 up, else NULL */
typedef void (*f32_map_nt)(int64_t n, const float *x, float *y);
static f32_map_nt simd_nt[AD_OP__COUNT]; /* simd.h's non-temporal maps, by op */
static int64_t stream_min_bytes; /* operands' footprint from which outputs stream */
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

/* The size of one last-level cache instance (cpuid's deterministic cache
   parameters: leaf 4 on Intel, 0x8000001D on AMD), 0 when unknown.  sysconf's
   figure can be the whole package's (all of an EPYC's L3 slices), while a
   core only fills its own slice. */
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
static int64_t llc_bytes(void) {
    unsigned a, b, c, d, best = 0;
    int64_t size = 0;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return 0;
    unsigned leaf = 4;
    if (b == 0x68747541) { /* "AuthenticAMD" */
        unsigned ea;
        if (!__get_cpuid(0x80000000, &ea, &b, &c, &d) || ea < 0x8000001D) return 0;
        leaf = 0x8000001D;
    } else if (a < 4) {
        return 0;
    }
    for (unsigned i = 0; i < 16; i++) {
        __cpuid_count(leaf, i, a, b, c, d);
        unsigned type = a & 31, level = (a >> 5) & 7;
        if (type == 0) break;
        if (type == 2 || level < best) continue; /* 1 data, 2 instruction, 3 unified */
        best = level;
        size = (int64_t)((b >> 22) + 1) * (((b >> 12) & 1023) + 1) * ((b & 4095) + 1) *
               ((int64_t)c + 1);
    }
    return size;
}
#else
static int64_t llc_bytes(void) { return 0; }
#endif

#define DEF_SIMD_UN(OP, OPU)                                                            \
    static void un_##OP##_f32_simd(int64_t n, const void *x, int64_t sx, void *y,       \
                                   const double *s) {                                   \
        (void)s;                                                                        \
        simd_##OP##_f32(n, (const float *)x, sx, (float *)y);                           \
    }
SIMD_MAPS(DEF_SIMD_UN)

static int vec_level; /* ad_ew_kernel's level */
static void (*random_kernel)(const ew_random_job *j, int64_t i0, int64_t i1);
static void (*box_muller_f32)(int64_t blocks, const int32_t *u, const int32_t *v, float *y);
static double (*mse_kernel)(int dt, const void *x, const void *y, void *o, int64_t i0,
                            int64_t i1);

static void tables_init(void) {
    int isa = ad_cpu_isa();
    /* the compiler-vectorised tables' level: AVX2's (256-bit, the same bits)
       at the AVX-512 level too where ad_cpu_vec_bits says so */
    int vec = vec_level = isa == AD_ISA_AVX512 && ad_cpu_vec_bits() == 256 ? AD_ISA_AVX2 : isa;
    memcpy(bin_table, vec == AD_ISA_AVX512 ? ew_bin_table_avx512
                      : vec == AD_ISA_AVX2 ? ew_bin_table_avx2 : ew_bin_table_portable,
           sizeof bin_table);
    memcpy(un_table, vec == AD_ISA_AVX512 ? ew_un_table_avx512
                     : vec == AD_ISA_AVX2 ? ew_un_table_avx2 : ew_un_table_portable,
           sizeof un_table);
    stream_copy = isa == AD_ISA_AVX512 ? ew_stream_copy_avx512
                  : isa == AD_ISA_AVX2 ? ew_stream_copy_avx2 : ew_stream_copy_portable;
    stream_fence = isa == AD_ISA_AVX512 ? ew_stream_fence_avx512
                   : isa == AD_ISA_AVX2 ? ew_stream_fence_avx2 : ew_stream_fence_portable;
    bin_nt_f32 = isa == AD_ISA_PORTABLE ? NULL : ew_bin_nt_f32_avx2;
    random_kernel = vec == AD_ISA_AVX512 ? ew_random_avx512
                    : vec == AD_ISA_AVX2 ? ew_random_avx2 : ew_random_portable;
    box_muller_f32 = isa == AD_ISA_AVX512 ? ad_box_muller_f32_avx512
                     : isa == AD_ISA_AVX2 ? ad_box_muller_f32_avx2 : NULL;
    mse_kernel = vec == AD_ISA_AVX512 ? ew_mse_avx512
                 : vec == AD_ISA_AVX2 ? ew_mse_avx2 : ew_mse_portable;
    /* PYAUTODIFF_STREAM_BYTES overrides the cache size (tests stream small
       arrays with it; 0 streams every output of at least STREAM_CHUNK bytes) */
    const char *env = getenv("PYAUTODIFF_STREAM_BYTES");
    int64_t llc = llc_bytes();
    stream_min_bytes = env && *env ? (int64_t)strtoll(env, NULL, 10)
                       : llc > 0 ? llc : (int64_t)32 << 20;
    if (isa == AD_ISA_PORTABLE) return;
#define SIMD_PICK(OP, OPU)                                                              \
    simd_##OP##_f32 = isa == AD_ISA_AVX512 ? ad_##OP##_f32_avx512 : ad_##OP##_f32_avx2; \
    un_table[AD_OP_##OPU][AD_FLOAT32] = un_##OP##_f32_simd;                            \
    simd_nt[AD_OP_##OPU] = isa == AD_ISA_AVX512 ? ad_##OP##_f32_avx512_nt : ad_##OP##_f32_avx2_nt;
    SIMD_MAPS(SIMD_PICK)
}

AD_API const char *ad_ew_kernel(void) {
    pthread_once(&tables_once, tables_init);
    return ad_isa_name(vec_level);
}

/* ---- random fills and dropout ---------------------------------------------------- */
/* Chunks of RANDOM_CHUNK elements (even: a normal pair never straddles two),
   claimed by the threads from RANDOM_PAR_MIN elements on; the values depend
   only on the positions (random_kernels.h). */
#define RANDOM_CHUNK ((int64_t)1 << 13)
#define RANDOM_PAR_MIN ((int64_t)1 << 15)
typedef struct random_ctx {
    const ew_random_job *j;
    int64_t n;
} random_ctx;

static void random_chunks(void *p, int64_t c0, int64_t c1) {
    const random_ctx *c = p;
    int64_t i1 = c1 * RANDOM_CHUNK;
    random_kernel(c->j, c0 * RANDOM_CHUNK, i1 < c->n ? i1 : c->n);
}

void ew_random(const ew_random_job *job, int64_t n) {
    pthread_once(&tables_once, tables_init);
    ew_random_job j = *job;
    j.box_muller_f32 = box_muller_f32;
    random_ctx c = {&j, n};
    int64_t chunks = (n + RANDOM_CHUNK - 1) / RANDOM_CHUNK;
    if (chunks > 1 && n >= RANDOM_PAR_MIN && par_num_threads() > 1)
        par_for_dyn(chunks, random_chunks, &c);
    else if (n > 0)
        random_chunks(&c, 0, chunks);
}

double ew_mse(int dt, const void *x, const void *y, void *o, int64_t i0, int64_t i1) {
    pthread_once(&tables_once, tables_init);
    return mse_kernel(dt, x, y, o, i0, i1);
}

/* ---- bulk copies -------------------------------------------------------------------
   Blocks of COPY_BLOCK bytes (the elementwise ops' ITER_PAR_MIN float32
   elements), spread over the threads from two blocks on; past the cache each
   block streams and fences itself.  A float32 1e7-element clone, Zen 4, 1
   thread: memcpy 3.0 ms, streamed 2.1 (the exp of it 2.0). */
enum { COPY_BLOCK = (int)(ITER_PAR_MIN * 4) };

typedef struct {
    char *d;
    const char *s;
    size_t n;
    bool nt;
} copy_ctx;

static void copy_blocks(void *p, int64_t b0, int64_t b1) {
    const copy_ctx *c = p;
    size_t i0 = (size_t)b0 * COPY_BLOCK, i1 = (size_t)b1 * COPY_BLOCK;
    if (i1 > c->n) i1 = c->n;
    if (c->nt) {
        stream_copy(c->d + i0, c->s + i0, i1 - i0);
        stream_fence();
    } else {
        memcpy(c->d + i0, c->s + i0, i1 - i0);
    }
}

void ew_copy(void *dst, const void *src, size_t n) {
    pthread_once(&tables_once, tables_init);
    copy_ctx c = {dst, src, n, 2 * (int64_t)n >= stream_min_bytes};
    int64_t blocks = (int64_t)((n + COPY_BLOCK - 1) / COPY_BLOCK);
    if (blocks > 1 && par_num_threads() > 1)
        par_for(blocks, copy_blocks, &c);
    else if (n)
        copy_blocks(&c, 0, blocks);
}

/* ---- forward functions ----------------------------------------------------------- */
ad_status ad_broadcast_shapes(const char *op, const int64_t *a, int an, const int64_t *b,
                              int bn, int64_t *out, int *out_ndim) {
    int n = an > bn ? an : bn;
    for (int i = 0; i < n; i++) {
        int64_t x = i - (n - an) >= 0 ? a[i - (n - an)] : 1;
        int64_t y = i - (n - bn) >= 0 ? b[i - (n - bn)] : 1;
        if (x != y && x != 1 && y != 1)
            return ad_fail(AD_ERR_SHAPE, "%s: shapes %s and %s cannot be broadcast together",
                           op, ad_fmt_shape(a, an), ad_fmt_shape(b, bn));
        out[i] = x == 1 ? y : x;
    }
    *out_ndim = n;
    return AD_OK;
}

typedef struct {
    bin_kernel k;
    int64_t es, out_es; /* bytes per input and per output element */
    bin_nt_kernel nt;   /* streamed float32 arithmetic: the op's ew_bin_nt_f32_avx2 row, or NULL */
} bin_ctx;

static void bin_inner(void *ctx, int64_t n, char **p, const int64_t *s) {
    ((bin_ctx *)ctx)->k(n, p[1], s[1], p[2], s[2], p[0]);
}

/* Outputs streamed past the cache (stream_min_bytes): a contiguous inner loop
   computes STREAM_CHUNK bytes at a time into a buffer that stays in L1 and
   stream_copy writes them out; the kernels are elementwise, so the chunks
   give the same bits as one call. */
enum { STREAM_CHUNK = 4096 };

static void bin_inner_stream(void *ctx, int64_t n, char **p, const int64_t *s) {
    const bin_ctx *c = ctx;
    if (s[0] != 1) {
        c->k(n, p[1], s[1], p[2], s[2], p[0]);
        return;
    }
    if (c->nt && s[1] == 1 && s[2] == 1) {
        c->nt(n, (const float *)p[1], (const float *)p[2], (float *)p[0]);
        stream_fence();
        return;
    }
    _Alignas(64) char buf[STREAM_CHUNK];
    int64_t step = STREAM_CHUNK / c->out_es;
    for (int64_t i = 0; i < n; i += step) {
        int64_t m = n - i < step ? n - i : step;
        c->k(m, p[1] + i * s[1] * c->es, s[1], p[2] + i * s[2] * c->es, s[2], buf);
        stream_copy(p[0] + i * c->out_es, buf, (size_t)(m * c->out_es));
    }
    stream_fence();
}

/* whether an op over these operands streams its output: the footprint
   (inputs and output, broadcast inputs counted once) outgrows the cache */
static bool streams(int64_t out_bytes, int64_t in_bytes) {
    return out_bytes >= STREAM_CHUNK && out_bytes + in_bytes >= stream_min_bytes;
}

static ad_status run_binary(const op_args *args, int out_dtype, ad_tensor **out) {
    const ad_tensor *a = args->in[0], *b = args->in[1];
    const char *name = OP_NAME(args->op);
    if (a->dtype != b->dtype)
        return ad_fail(AD_ERR_DTYPE, "%s: dtype mismatch, %s and %s (convert one with to_dtype)",
                       name, ad_tdesc(a), ad_tdesc(b));
    pthread_once(&tables_once, tables_init);
    bin_kernel k = bin_table[args->op][a->dtype];
    if (!k)
        return ad_fail(AD_ERR_DTYPE, "%s: not supported for %s operands (%s, %s)", name,
                       ad_dtype_name_(a->dtype), ad_tdesc(a), ad_tdesc(b));
    int64_t shape[AD_MAX_DIMS];
    int nd;
    ad_status st = ad_broadcast_shapes(name, T_SHAPE(a), a->ndim, T_SHAPE(b), b->ndim, shape, &nd);
    if (st) return st;
    ad_tensor *y;
    if ((st = ad_tensor_empty(out_dtype, shape, nd, &y))) return st;
    int64_t sa[AD_MAX_DIMS], sb[AD_MAX_DIMS];
    broadcast_strides(a, shape, nd, sa);
    broadcast_strides(b, shape, nd, sb);
    const int64_t *strides[3] = {T_STRIDES(y), sa, sb};
    size_t es[3] = {ad_dtype_size_(out_dtype), ad_dtype_size_(a->dtype), ad_dtype_size_(a->dtype)};
    nditer it;
    nditer_init(&it, 3, nd, shape, strides, es);
    char *base[3] = {ad_ptr(y), ad_ptr(a), ad_ptr(b)};
    bool nt = streams(y->numel * (int64_t)es[0], (a->numel + b->numel) * (int64_t)es[1]);
    it.any_order = !nt; /* a streamed chunk is fenced per call: no short tile rows */
    bin_ctx c = {k, (int64_t)es[1], (int64_t)es[0],
                 nt && bin_nt_f32 && out_dtype == AD_FLOAT32 ? bin_nt_f32[args->op] : NULL};
    nditer_run_par(&it, base, nt ? bin_inner_stream : bin_inner, &c);
    *out = y;
    return AD_OK;
}

ad_status fwd_binary(const op_args *a, ad_tensor **out) {
    return run_binary(a, a->in[0]->dtype, out);
}

ad_status fwd_compare(const op_args *a, ad_tensor **out) { return run_binary(a, AD_BOOL, out); }

typedef struct {
    un_kernel k;
    f32_map_nt nt; /* a float32 SIMD map's non-temporal form, or NULL */
    double s[2];
    int64_t es;
} un_ctx;

static void un_inner(void *ctx, int64_t n, char **p, const int64_t *s) {
    un_ctx *c = ctx;
    c->k(n, p[1], s[1], p[0], c->s);
}

static void un_inner_stream(void *ctx, int64_t n, char **p, const int64_t *s) {
    un_ctx *c = ctx;
    if (s[0] != 1) {
        c->k(n, p[1], s[1], p[0], c->s);
        return;
    }
    if (c->nt && s[1] == 1) { /* straight from the map's registers, no buffer */
        c->nt(n, (const float *)p[1], (float *)p[0]);
        stream_fence();
        return;
    }
    _Alignas(64) char buf[STREAM_CHUNK];
    int64_t step = STREAM_CHUNK / c->es;
    for (int64_t i = 0; i < n; i += step) {
        int64_t m = n - i < step ? n - i : step;
        c->k(m, p[1] + i * s[1] * c->es, s[1], buf, c->s);
        stream_copy(p[0] + i * c->es, buf, (size_t)(m * c->es));
    }
    stream_fence();
}

/* Work per element relative to a copy, for the threading threshold, from
   ops.def's cost column: the arithmetic one-liners (and sqrt, one
   instruction) are memory bound, the float32 SIMD maps are polynomials,
   every other float op is a libm call per element. */
static int un_cost(int op, int dtype) {
    switch (ad_ops[op].cost) {
    case COST_MEM:
        return 1;
    case COST_SIMD:
        return dtype == AD_FLOAT32 && simd_exp_f32 ? 16 : 64;
    default:
        return ad_dtype_is_float(dtype) ? 64 : 1;
    }
}

/* A SIMD map replaces the kernel of an op whose cost says SIMD, or the
   threading threshold would not know it is cheaper. */
enum {
#define OP(ID, NUM, name, n_in, n_iargs, n_fargs, fam, fwd, bw, needs, cost, ...) \
    cost_of_##ID = COST_##cost,
#include "ops.def"
};
#define SIMD_COST(OP, OPU) \
    _Static_assert((int)cost_of_##OPU == (int)COST_SIMD, "simd.h maps " #OP ": ops.def must say SIMD");
SIMD_MAPS(SIMD_COST)

unsigned ad_ew_dtypes(int op) {
    pthread_once(&tables_once, tables_init);
    unsigned m = 0;
    for (int d = 0; d < 6; d++)
        if (un_table[op][d] || bin_table[op][d]) m |= 1u << d;
    return m;
}

static ad_status run_unary(int op, const ad_tensor *x, double s, double s2, ad_tensor **out);

/* x broadcast (a dim of stride 0 and extent > 1): the op runs once per
   distinct element, on x without the repeats, and y is that result
   broadcast back (ad_copy_strided: a stride-0 source is a fill or a row
   copy), the same bits, as an elementwise result does not depend on where
   its element sits.  Zen 4, 1 thread, float32 expanded to (1024, 1024): from
   (1024, 1), exp 1266 -> 106 us (the strided walk called the scalar kernel
   per element); from (1, 1024), 196 -> 59 (the contiguous tensor's: 193). */
static ad_status run_unary_broadcast(int op, const ad_tensor *x, double s, double s2,
                                     ad_tensor **out) {
    int64_t shape[AD_MAX_DIMS], strides[AD_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) {
        bool rep = T_STRIDES(x)[d] == 0;
        shape[d] = rep ? 1 : T_SHAPE(x)[d];
        strides[d] = rep ? 0 : T_STRIDES(x)[d];
    }
    ad_tensor *xc, *yc, *yb, *y;
    ad_status st = ad_tensor_view(x, shape, strides, x->ndim, x->offset, &xc);
    if (st) return st;
    st = run_unary(op, xc, s, s2, &yc);
    ad_tensor_release(xc);
    if (st) return st;
    int64_t step = 1; /* yc's strides, 0 along the repeated dims */
    for (int d = x->ndim - 1; d >= 0; step *= shape[d], d--)
        strides[d] = T_STRIDES(x)[d] == 0 ? 0 : step;
    st = ad_tensor_view(yc, T_SHAPE(x), strides, x->ndim, yc->offset, &yb);
    ad_tensor_release(yc); /* yb keeps the storage */
    if (st) return st;
    st = ad_tensor_empty(yb->dtype, T_SHAPE(x), x->ndim, &y);
    if (!st) ad_copy_strided(yb, ad_ptr(y));
    ad_tensor_release(yb);
    if (!st) *out = y;
    return st;
}

static bool broadcast_dims(const ad_tensor *x) {
    if (x->numel == 0) return false;
    for (int d = 0; d < x->ndim; d++)
        if (T_STRIDES(x)[d] == 0 && T_SHAPE(x)[d] > 1) return true;
    return false;
}

static ad_status run_unary(int op, const ad_tensor *x, double s, double s2, ad_tensor **out) {
    pthread_once(&tables_once, tables_init);
    un_kernel k = un_table[op][x->dtype];
    if (!k)
        return ad_fail(AD_ERR_DTYPE, "%s: not supported for %s (input %s)", OP_NAME(op),
                       ad_dtype_name_(x->dtype), ad_tdesc(x));
    if (broadcast_dims(x)) return run_unary_broadcast(op, x, s, s2, out);
    ad_tensor *y;
    ad_status st = ad_tensor_empty(x->dtype, T_SHAPE(x), x->ndim, &y);
    if (st) return st;
    const int64_t *strides[2] = {T_STRIDES(y), T_STRIDES(x)};
    size_t es[2] = {ad_dtype_size_(x->dtype), ad_dtype_size_(x->dtype)};
    nditer it;
    nditer_init(&it, 2, x->ndim, T_SHAPE(x), strides, es);
    char *base[2] = {ad_ptr(y), ad_ptr(x)};
    un_ctx c = {k, x->dtype == AD_FLOAT32 ? simd_nt[op] : NULL, {s, s2}, (int64_t)es[0]};
    bool nt = streams(y->numel * c.es, x->numel * c.es);
    it.any_order = !nt;
    /* a streamed output is threaded in a copy's blocks (cost 1), not in the
       op's smaller ones: each block ends with a store fence, which drains the
       write-combining buffers (2048-element blocks made a 1e7-element exp take
       2.4-3.0 ms at 2 threads against 1.7 at one; 32768: 1.0-1.1) */
    nditer_run_par_cost(&it, base, nt ? un_inner_stream : un_inner, &c,
                        nt ? 1 : un_cost(op, x->dtype));
    *out = y;
    return AD_OK;
}

ad_status fwd_unary(const op_args *a, ad_tensor **out) {
    return run_unary(a->op, a->in[0], 0, 0, out);
}

ad_status fwd_scalar(const op_args *a, ad_tensor **out) {
    const ad_tensor *x = a->in[0];
    double s = a->fargs[0];
    if (!ad_dtype_is_float(x->dtype) && (s != s || s != (double)ad_sat_i64(s)))
        return ad_fail(AD_ERR_DTYPE,
                       "%s: scalar %g is not an integer and the tensor is %s (a scalar never "
                       "changes a tensor's dtype; convert with to_dtype)",
                       OP_NAME(a->op), s, ad_tdesc(x));
    return run_unary(a->op, x, s, 0, out);
}

/* ---- quick calls (ops.c: ad_binary_quick, ad_unary_quick, ad_scalar_quick) ----
 * Contiguous operands of one shape, few enough elements that the ordinary
 * path runs the kernel once over all of them on the calling thread (below the
 * pool's threshold for the op's cost, not streamed): the kernel is called
 * directly on the whole range, which is what the ordinary path computes, to
 * the bit.  NULL when that does not apply or memory runs out: the caller
 * then takes the ordinary path, which does the work or reports the error.
 * QUICK_MAX_NUMEL bounds the time the caller's interpreter lock is kept:
 * 131072 float32 elements of a memory-bound op take 10 - 15 us (the costlier
 * ops stop earlier, at the pool's threshold), while handing the lock over and
 * back and the ordinary call's analysis cost about 1 us (callgrind: 4250
 * instructions more for an add of 16385 elements than of 16384, when this
 * bound was 16384), a tenth of a 1e5-element add. */
enum { QUICK_MAX_NUMEL = 1 << 17 };
/* ... and QUICK_MAX_WORK / cost bounds the costlier ops' (at one thread too,
   where the ordinary path never splits; with more, the pool's threshold,
   ITER_PAR_MIN / cost, is lower) */
enum { QUICK_MAX_WORK = 1 << 18 };

static bool quick_size(int64_t numel, int cost, int64_t out_bytes, int64_t in_bytes) {
    return numel <= QUICK_MAX_NUMEL && numel < QUICK_MAX_WORK / cost &&
           (numel < ITER_PAR_MIN / cost || par_num_threads() < 2) &&
           !streams(out_bytes, in_bytes);
}

ad_tensor *ad_ew_quick_binary(int op, int out_dtype, const ad_tensor *a, const ad_tensor *b) {
    int dt = a->dtype;
    if (dt != b->dtype || a->ndim != b->ndim || a->numel != b->numel) return NULL;
    pthread_once(&tables_once, tables_init);
    bin_kernel k = bin_table[op][dt];
    size_t es = ad_dtype_size_(dt), oes = ad_dtype_size_(out_dtype);
    if (!k || !quick_size(a->numel, 1, a->numel * (int64_t)oes, 2 * a->numel * (int64_t)es) ||
        memcmp(T_SHAPE(a), T_SHAPE(b), a->ndim * sizeof(int64_t)) != 0 ||
        !ad_is_contiguous(a) || !ad_is_contiguous(b))
        return NULL;
    ad_tensor *y = ad_tensor_new_like(out_dtype, a);
    if (y && y->numel) k(y->numel, ad_ptr(a), 1, ad_ptr(b), 1, ad_ptr(y));
    return y;
}

ad_tensor *ad_ew_quick_unary(int op, const ad_tensor *x, double s) {
    pthread_once(&tables_once, tables_init);
    un_kernel k = un_table[op][x->dtype];
    int64_t bytes = x->numel * (int64_t)ad_dtype_size_(x->dtype);
    if (!k || !quick_size(x->numel, un_cost(op, x->dtype), bytes, bytes) || !ad_is_contiguous(x))
        return NULL;
    ad_tensor *y = ad_tensor_new_like(x->dtype, x);
    double sv[2] = {s, 0};
    if (y && y->numel) k(y->numel, ad_ptr(x), 1, ad_ptr(y), sv);
    return y;
}

/* clamp: fargs {min, max}, -inf / inf for an absent bound.  Integer tensors
   take integer bounds, saturated to the dtype's range before the kernel
   converts them. */
ad_status fwd_clamp(const op_args *a, ad_tensor **out) {
    const ad_tensor *x = a->in[0];
    double lo = a->fargs[0], hi = a->fargs[1];
    if (lo != lo || hi != hi)
        return ad_fail(AD_ERR_VALUE, "clamp: a bound is NaN (min %g, max %g)", lo, hi);
    if (!ad_dtype_is_float(x->dtype) && x->dtype != AD_BOOL) {
        if ((isfinite(lo) && lo != floor(lo)) || (isfinite(hi) && hi != floor(hi)))
            return ad_fail(AD_ERR_DTYPE,
                           "clamp: bounds %g, %g are not integers and the tensor is %s", lo, hi,
                           ad_tdesc(x));
        double tmin = x->dtype == AD_INT64 ? -9223372036854775808.0
                      : x->dtype == AD_INT32 ? -2147483648.0 : 0.0;
        double tmax = x->dtype == AD_INT64 ? 9223372036854774784.0
                      : x->dtype == AD_INT32 ? 2147483647.0 : 255.0;
        lo = lo < tmin ? tmin : lo > tmax ? tmax : lo;
        hi = hi < tmin ? tmin : hi > tmax ? tmax : hi;
    }
    return run_unary(a->op, x, lo, hi, out);
}

/* where(cond, a, b): the kernel is written once, in the template header
   where_dtype.h, and instantiated here per dtype (each_dtype.h). */
#define DTYPE_TEMPLATE "where_dtype.h"
#include "each_dtype.h"

static void where_inner(void *ctx, int64_t n, char **p, const int64_t *s) {
    switch (*(size_t *)ctx) {
    case 1: where_u8(n, p, s); break;
    case 4: where_i32(n, p, s); break;
    case 8: where_i64(n, p, s); break;
    }
}

ad_status fwd_where(const op_args *args, ad_tensor **out) {
    const ad_tensor *c = args->in[0], *a = args->in[1], *b = args->in[2];
    if (c->dtype != AD_BOOL)
        return ad_fail(AD_ERR_DTYPE, "where: condition must be bool, got %s", ad_tdesc(c));
    if (a->dtype != b->dtype)
        return ad_fail(AD_ERR_DTYPE, "where: dtype mismatch, %s and %s (convert one with to_dtype)",
                       ad_tdesc(a), ad_tdesc(b));
    int64_t ab[AD_MAX_DIMS], shape[AD_MAX_DIMS];
    int nab, nd;
    ad_status st = ad_broadcast_shapes("where", T_SHAPE(a), a->ndim, T_SHAPE(b), b->ndim, ab, &nab);
    if (!st) st = ad_broadcast_shapes("where", T_SHAPE(c), c->ndim, ab, nab, shape, &nd);
    if (st) return st;
    ad_tensor *y;
    if ((st = ad_tensor_empty(a->dtype, shape, nd, &y))) return st;
    int64_t sc[AD_MAX_DIMS], sa[AD_MAX_DIMS], sb[AD_MAX_DIMS];
    broadcast_strides(c, shape, nd, sc);
    broadcast_strides(a, shape, nd, sa);
    broadcast_strides(b, shape, nd, sb);
    const int64_t *strides[4] = {T_STRIDES(y), sc, sa, sb};
    size_t es = ad_dtype_size_(a->dtype);
    size_t sizes[4] = {es, 1, es, es};
    nditer it;
    nditer_init(&it, 4, nd, shape, strides, sizes);
    it.any_order = 1;
    char *base[4] = {ad_ptr(y), ad_ptr(c), ad_ptr(a), ad_ptr(b)};
    nditer_run_par(&it, base, where_inner, &es);
    *out = y;
    return AD_OK;
}
