/* strided.c - n-d iteration, strided copies and dtype conversion. */
#include <string.h>

#include "strided.h"

#include "cpu.h"
#include "ew.h"
#include "parallel.h"

void broadcast_strides(const ad_tensor *t, const int64_t *out_shape, int out_ndim,
                       int64_t *strides) {
    int lead = out_ndim - t->ndim;
    for (int i = 0; i < out_ndim; i++) {
        int j = i - lead;
        strides[i] = (j < 0 || (T_SHAPE(t)[j] == 1 && out_shape[i] != 1)) ? 0 : T_STRIDES(t)[j];
    }
}

void nditer_init(nditer *it, int nops, int ndim, const int64_t *shape,
                 const int64_t *const *strides, const size_t *elsize) {
    it->nops = nops;
    for (int k = 0; k < nops; k++) it->elsize[k] = elsize[k];
    int nd = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 1) continue; /* size-1 dims contribute nothing */
        if (nd > 0) {
            /* merge with the previous (outer) dim when every operand steps evenly */
            bool merge = true;
            for (int k = 0; k < nops && merge; k++)
                merge = it->strides[k][nd - 1] == strides[k][i] * shape[i];
            if (merge) {
                it->shape[nd - 1] *= shape[i];
                for (int k = 0; k < nops; k++) it->strides[k][nd - 1] = strides[k][i];
                continue;
            }
        }
        it->shape[nd] = shape[i];
        for (int k = 0; k < nops; k++) it->strides[k][nd] = strides[k][i];
        nd++;
    }
    for (int i = 0; i < ndim; i++)
        if (shape[i] == 0) { /* nothing to iterate */
            nd = 1;
            it->shape[0] = 0;
            for (int k = 0; k < nops; k++) it->strides[k][0] = 0;
            break;
        }
    if (nd == 0) { /* a single element */
        it->shape[0] = 1;
        for (int k = 0; k < nops; k++) it->strides[k][0] = 1;
        nd = 1;
    }
    it->ndim = nd;
    it->any_order = 0;
    it->plane = NULL;
}

/* Tiles of an any_order iteration's last two dims (r, c), when an operand
   walks c with a step past a cache line and r with a smaller one (a
   transposed view): rows of a tile's width, a tile's height at a time, so the
   lines that operand's rows share are read while they are still in cache:
   16 x 64. A step a multiple of 1 KiB (a power-of-two width) puts those lines
   in at most 4 of L1's sets, 8 lines each, so such a tile is 128 x 16. Zen 4,
   1 thread, float32, t().contiguous() / t().exp() / t() + t(), untiled ->
   tiled: 1024 x 1024 (128 x 16) 3.6 / 3.4 / 4.7 ms -> 1.4 / 1.9 / 1.7 (torch's
   copy 0.7-0.9, exp 0.9; 16 x 64 tiles: 3.1 / 3.3 / 3.0); 1000 x 1000 (16 x
   64) 3.8 / 3.4 / 4.5 -> 0.67 / 1.4 / 0.49; 4096 x 256 and 256 x 4096
   (128 x 16) 0.8-1.6 / 1.5-1.8 / 0.7-1.8. */
static bool tile_dims(const nditer *it, int64_t *tr, int64_t *tc) {
    int last = it->ndim - 1;
    bool tiles = false;
    if (!it->any_order || last < 1) return false;
    *tr = 16, *tc = 64;
    for (int k = 0; k < it->nops; k++) {
        int64_t sc = it->strides[k][last], sr = it->strides[k][last - 1];
        sc = (sc < 0 ? -sc : sc) * (int64_t)it->elsize[k];
        sr = (sr < 0 ? -sr : sr) * (int64_t)it->elsize[k];
        if (sc > 64 && sr < sc) {
            tiles = true;
            if (sc % 1024 == 0) *tr = 128, *tc = 16;
        }
    }
    return tiles;
}

/* The next index of dims 0 .. top (the last fastest), ptrs moved by their
   byte steps; false past the last one (at once when top < 0) */
static bool odometer_next(const nditer *it, int top, int64_t *idx, char **ptrs,
                          int64_t step[][ITER_MAX_OPS]) {
    for (int d = top; d >= 0; d--) {
        idx[d]++;
        for (int k = 0; k < ITER_MAX_OPS; k++) ptrs[k] += step[d][k];
        if (idx[d] < it->shape[d]) return true;
        for (int k = 0; k < ITER_MAX_OPS; k++) ptrs[k] -= step[d][k] * it->shape[d];
        idx[d] = 0;
    }
    return false;
}

/* The tiles of run_planes' buffered (transposed) inputs: TILE_MAX elements,
   rows of BUF_COLS */
enum { TILE_MAX = 2048, BUF_COLS = 64 };

/* The inputs (operands from 1) run_planes reads a tile at a time through a
   buffer: a transposed view of 4- or 8-byte elements (contiguous down the
   rows, a step past a cache line along the columns) at the AVX2 level and
   above, copied by the register-block transposes (transpose_avx2.c) and then
   walked along the buffer's contiguous rows, where the kernel reads
   vectors; the elementwise kernels' results do not depend on their operands'
   strides, so the bits are those of the strided walk.  The buffered tiles
   are 32 x 64 (tile_dims' 128 x 16 made a kernel call per 16 elements; 64
   and 128 columns were best).  Zen 4, 1 thread, float32 (256, 64, 64)
   .permute(0, 2, 1), against the same ops on the contiguous tensor (134 /
   85 / 197 us): relu 1156 -> 220-247 us, + a contiguous tensor 1040 ->
   194-237, exp 1828 -> 354-379; (1024, 1024).t().exp() 1.8 -> 0.63 ms
   (numpy, which gives the output the input's layout, 0.47). */
static int buffered_inputs(const nditer *it) {
    int mask = 0;
#if defined(__x86_64__) || defined(__i386__)
    int last = it->ndim - 1;
    if (!it->any_order || last < 1 || ad_cpu_isa() < AD_ISA_AVX2) return 0;
    for (int k = 1; k < it->nops; k++) {
        int64_t es = (int64_t)it->elsize[k];
        if ((es == 4 || es == 8) && it->strides[k][last - 1] == 1 &&
            it->strides[k][last] * es > 64)
            mask |= 1 << k;
    }
#else
    (void)it;
#endif
    return mask;
}

/* The rows of the tiles run_planes walks a plane in, 1 when it walks it row
   by row: nditer_run_par_cost cuts the rows in multiples of it, or a block
   of a few rows would read a transposed input a few elements per cache line
   (1024 x 1024 float32 .t().exp() at 2 threads, blocks of 2 rows: 2.1 ms
   against 0.8 at one thread) */
static int64_t tile_rows(const nditer *it) {
    int64_t tr, tc;
    if (buffered_inputs(it)) return TILE_MAX / BUF_COLS;
    return tile_dims(it, &tr, &tc) ? tr : 1;
}

/* The last two dims, rows x cols, in tiles of tile_r x tile_c (a tile the
   whole plane: row by row), at every index of the outer dims (odometer);
   ptrs and step as in nditer_run */
static void run_planes(const nditer *it, int64_t tile_r, int64_t tile_c, char **ptrs,
                       inner_fn fn, void *ctx, const int64_t *inner,
                       int64_t step[][ITER_MAX_OPS]) {
    int last = it->ndim - 1;
    int64_t rows = it->shape[last - 1], cols = it->shape[last];
    int64_t sc[ITER_MAX_OPS], binner[ITER_MAX_OPS];
    int bufd = buffered_inputs(it);
    if (bufd) /* rows of BUF_COLS for the kernel (tile_dims' 16-wide tiles: a call per 16) */
        tile_r = TILE_MAX / BUF_COLS, tile_c = BUF_COLS;
    _Alignas(64) char buf[ITER_MAX_OPS - 1][TILE_MAX * 8]; /* untouched unless bufd */
    char *bp[ITER_MAX_OPS] = {NULL};                          /* input k's: buf[k - 1] */
    for (int k = 0; k < ITER_MAX_OPS; k++) {
        sc[k] = k < it->nops ? inner[k] * (int64_t)it->elsize[k] : 0;
        binner[k] = bufd >> k & 1 ? 1 : inner[k];
        if (k) bp[k] = buf[k - 1];
    }
    int64_t idx[AD_MAX_DIMS] = {0};
    for (;;) {
        if (it->plane && it->plane(ctx, rows, cols, ptrs, step[last - 1], inner)) {
            if (!odometer_next(it, last - 2, idx, ptrs, step)) return;
            continue;
        }
        for (int64_t r0 = 0; r0 < rows; r0 += tile_r)
            for (int64_t c0 = 0; c0 < cols; c0 += tile_c) {
                int64_t r1 = r0 + tile_r < rows ? r0 + tile_r : rows;
                int64_t n = cols - c0 < tile_c ? cols - c0 : tile_c;
#if defined(__x86_64__) || defined(__i386__)
                for (int k = 1; k < it->nops; k++) /* the tile as rows of n in bp[k] */
                    if (bufd >> k & 1)
                        (it->elsize[k] == 4 ? ad_transpose4_avx2 : ad_transpose8_avx2)(
                            r1 - r0, n, bp[k], n * (int64_t)it->elsize[k],
                            ptrs[k] + r0 * step[last - 1][k] + c0 * sc[k], sc[k]);
#endif
                for (int64_t r = r0; r < r1; r++) {
                    char *p[ITER_MAX_OPS];
                    for (int k = 0; k < ITER_MAX_OPS; k++)
                        p[k] = bufd >> k & 1
                                   ? bp[k] + (r - r0) * n * (int64_t)it->elsize[k]
                                   : ptrs[k] + r * step[last - 1][k] + c0 * sc[k];
                    fn(ctx, n, p, binner);
                }
            }
        if (!odometer_next(it, last - 2, idx, ptrs, step)) return; /* the dims outside */
    }
}

/* An any_order iteration whose last dim an input crosses a cache line or more
   a step while it is contiguous along another dim, not the one before (a
   permuted input, such as a 4-d tensor's permute(3, 2, 1, 0) or (0, 3, 1,
   2)): that dim, moved next to the last (move_to_plane), makes the plane
   run_planes tiles (and buffers) the one where both that input and the
   output are contiguous (float32 (32, 64, 28, 28).permute(3, 2, 1, 0), Zen
   4, 1 thread: contiguous() 3.8-4.1 -> 1.6-1.7 ms, relu 3.4 -> 2.6).  -1
   when there is none. */
static int transposed_dim(const nditer *it) {
    int last = it->ndim - 1;
    if (!it->any_order || last < 2) return -1;
    for (int k = 1; k < it->nops; k++) {
        int64_t sl = it->strides[k][last];
        if ((sl < 0 ? -sl : sl) * (int64_t)it->elsize[k] <= 64 || it->strides[k][last - 1] == 1)
            continue;
        for (int d = 0; d < last - 1; d++)
            if (it->strides[k][d] == 1 && it->shape[d] > 1) return d;
    }
    return -1;
}

/* it, or its copy in *moved with transposed_dim moved to position ndim - 2
   (the other dims kept in order) */
static const nditer *move_to_plane(const nditer *it, nditer *moved) {
    int v = transposed_dim(it), to = it->ndim - 2;
    if (v < 0) return it;
    *moved = *it;
    for (int d = v; d < to; d++) {
        moved->shape[d] = it->shape[d + 1];
        for (int k = 0; k < it->nops; k++) moved->strides[k][d] = it->strides[k][d + 1];
    }
    moved->shape[to] = it->shape[v];
    for (int k = 0; k < it->nops; k++) moved->strides[k][to] = it->strides[k][v];
    return moved;
}

/* The pointer copies handed to fn are of all ITER_MAX_OPS slots, a size the
   compiler knows: copied for nops operands, GCC made each row's copy a
   memcpy call (28% of the time of a float32 (16384, 64) + (64,) add). */
void nditer_run(const nditer *it, char **base, inner_fn fn, void *ctx) {
    nditer moved;
    it = move_to_plane(it, &moved);
    int nd = it->ndim, nops = it->nops, last = nd - 1;
    int64_t n = it->shape[last];
    if (n == 0) return;
    int64_t inner[ITER_MAX_OPS];
    char *ptrs[ITER_MAX_OPS]; /* the slots past nops: operand 0's, never moved */
    for (int k = 0; k < ITER_MAX_OPS; k++) {
        inner[k] = k < nops ? it->strides[k][last] : 0;
        ptrs[k] = base[k < nops ? k : 0];
    }
    if (nd == 1) {
        fn(ctx, n, ptrs, inner);
        return;
    }
    int64_t step[AD_MAX_DIMS][ITER_MAX_OPS]; /* byte steps of the outer dims */
    for (int d = 0; d < last; d++)
        for (int k = 0; k < ITER_MAX_OPS; k++)
            step[d][k] = k < nops ? it->strides[k][d] * (int64_t)it->elsize[k] : 0;
    int64_t tile_r, tile_c;
    if (!tile_dims(it, &tile_r, &tile_c)) tile_r = it->shape[last - 1], tile_c = n;
    run_planes(it, tile_r, tile_c, ptrs, fn, ctx, inner, step);
}

int64_t nditer_numel(const nditer *it) {
    int64_t n = 1;
    for (int d = 0; d < it->ndim; d++) n *= it->shape[d];
    return n;
}

void nditer_slice(const nditer *it, char *const *base, int d, int64_t begin, int64_t end,
                  nditer *sub, char **sub_base) {
    *sub = *it;
    sub->shape[d] = end - begin;
    for (int k = 0; k < it->nops; k++)
        sub_base[k] = base[k] + begin * it->strides[k][d] * (int64_t)it->elsize[k];
}

/* par_blocks' shares: share i is blocks [next, end) of one contiguous range,
   its counter on a cache line of its own */
enum { BLOCK_SHARES = 64 };
typedef struct {
    _Alignas(64) atomic_llong next;
    int64_t end;
} block_share;

typedef struct {
    void (*fn)(void *ctx, int64_t k);
    void *ctx;
    int nshares;
    block_share share[BLOCK_SHARES];
} blocks_job;

/* A thread runs its own share (the one its chunk index names) from the
   front, then helps with the others' in turn */
static void blocks_worker(void *ctx, int64_t begin, int64_t end) {
    blocks_job *j = ctx;
    (void)end;
    for (int i = 0; i < j->nshares; i++) {
        block_share *s = &j->share[(begin + i) % j->nshares];
        for (;;) {
            int64_t k = atomic_fetch_add_explicit(&s->next, 1, memory_order_relaxed);
            if (k >= s->end) break;
            j->fn(j->ctx, k);
        }
    }
}

void par_blocks(int64_t nblocks, void (*fn)(void *ctx, int64_t k), void *ctx) {
    int threads = par_num_threads();
    if (nblocks <= 1 || threads < 2) {
        for (int64_t k = 0; k < nblocks; k++) fn(ctx, k);
        return;
    }
    int64_t nthr = threads < nblocks ? threads : nblocks;
    blocks_job j; /* only the shares in use are set (not all 64 lines zeroed per call) */
    j.fn = fn;
    j.ctx = ctx;
    j.nshares = (int)(nthr < BLOCK_SHARES ? nthr : BLOCK_SHARES);
    for (int i = 0; i < j.nshares; i++) {
        atomic_init(&j.share[i].next, nblocks * i / j.nshares);
        j.share[i].end = nblocks * (i + 1) / j.nshares;
    }
    par_for(nthr, blocks_worker, &j);
}

typedef struct {
    const nditer *it;
    char *const *base;
    inner_fn fn;
    void *ctx;
    int dim;
    int64_t unit; /* indices of dim per block */
} par_job;

static void par_block(void *ctx, int64_t k) {
    const par_job *j = ctx;
    int64_t begin = k * j->unit, end = begin + j->unit;
    if (end > j->it->shape[j->dim]) end = j->it->shape[j->dim];
    nditer sub;
    char *b[ITER_MAX_OPS];
    nditer_slice(j->it, j->base, j->dim, begin, end, &sub, b);
    nditer_run(&sub, b, j->fn, j->ctx);
}

void nditer_run_par(const nditer *it, char **base, inner_fn fn, void *ctx) {
    nditer_run_par_cost(it, base, fn, ctx, 1);
}

void nditer_run_par_cost(const nditer *it, char **base, inner_fn fn, void *ctx, int cost) {
    nditer moved; /* the dims nditer_run will walk, so that the cut is outside its planes */
    it = move_to_plane(it, &moved);
    int d = 0;
    while (d < it->ndim && (it->strides[0][d] == 0 || it->shape[d] < 2)) d++;
    int64_t numel = nditer_numel(it);
    int64_t threads = par_num_threads();
    if (cost < 1) cost = 1;
    if (d == it->ndim || numel < ITER_PAR_MIN / cost || threads < 2) {
        nditer_run(it, base, fn, ctx);
        return;
    }
    /* blocks of at most about ITER_PAR_BLOCK / cost elements, as many as a
       multiple of the threads and of near-equal size; cutting the innermost
       dim, whole cache lines (and SIMD blocks) per block.  Full-size blocks
       and a short last one left 1e5 float32 elements at 2 threads as 65536 +
       34464 (blocks of 32768, 32768 | 32768, 1696): an add took 12.1 us
       against 10.3 for 131072 elements (Zen 4). */
    int64_t block = ITER_PAR_BLOCK / cost > 1024 ? ITER_PAR_BLOCK / cost : 1024;
    int64_t nblocks = (numel + block - 1) / block;
    nblocks = (nblocks + threads - 1) / threads * threads;
    int64_t unit = (it->shape[d] + nblocks - 1) / nblocks;
    if (d == it->ndim - 1) unit = (unit + 63) & ~(int64_t)63;
    if (d == it->ndim - 2) { /* whole tiles (tile_rows), while each thread gets one */
        int64_t tr = tile_rows(it);
        if (it->shape[d] >= tr * threads) unit = (unit + tr - 1) / tr * tr;
    }
    par_job j = {it, base, fn, ctx, d, unit};
    par_blocks((it->shape[d] + unit - 1) / unit, par_block, &j);
}

/* ---- copy and convert ------------------------------------------------------ */
/* The kernels are written once, in the template header strided_dtype.h, and
   instantiated here per dtype (each_dtype.h). */
#define DTYPE_TEMPLATE "strided_dtype.h"
#include "each_dtype.h"

static void copy_inner(void *ctx, int64_t n, char **p, const int64_t *s) {
    size_t es = *(size_t *)ctx;
    if (s[0] == 1 && s[1] == 1) {
        memcpy(p[0], p[1], (size_t)n * es);
        return;
    }
    switch (es) {
    case 1: copy_u8(n, p, s); break;
    case 4: copy_i32(n, p, s); break;
    case 8: copy_i64(n, p, s); break;
    }
}

/* A plane of the copies: rows contiguous in both, a memcpy per row without
   an inner_fn call each (the attention heads' permute(0, 2, 1, 3) of a (32,
   64, 4, 32) float32, rows of 32: 58 -> 33-38 us, torch 34-48); transposed
   (dst's columns contiguous, src's rows), 4- or 8-byte elements at AVX2 and
   above, by register blocks (transpose_avx2.c) */
static bool copy_plane(void *ctx, int64_t rows, int64_t cols, char **p, const int64_t *rstep,
                       const int64_t *cstep) {
    size_t es = *(size_t *)ctx;
    if (cstep[0] == 1 && cstep[1] == 1) {
        for (int64_t r = 0; r < rows; r++)
            memcpy(p[0] + r * rstep[0], p[1] + r * rstep[1], (size_t)cols * es);
        return true;
    }
    if (cstep[0] != 1 || rstep[1] != (int64_t)es || (es != 4 && es != 8) ||
        ad_cpu_isa() < AD_ISA_AVX2)
        return false;
    (es == 4 ? ad_transpose4_avx2 : ad_transpose8_avx2)(rows, cols, p[0], rstep[0], p[1],
                                                        cstep[1] * (int64_t)es);
    return true;
}

static void run_unary_layout(const ad_tensor *src, void *dst, size_t dst_es, inner_fn fn,
                             plane_fn plane, void *ctx) {
    int64_t dst_strides[AD_MAX_DIMS];
    int64_t s = 1;
    for (int i = src->ndim - 1; i >= 0; i--) {
        dst_strides[i] = s;
        s *= T_SHAPE(src)[i];
    }
    const int64_t *strides[2] = {dst_strides, T_STRIDES(src)};
    size_t es[2] = {dst_es, ad_dtype_size_(src->dtype)};
    nditer it;
    nditer_init(&it, 2, src->ndim, T_SHAPE(src), strides, es);
    it.any_order = 1;
    it.plane = plane;
    char *base[2] = {dst, ad_ptr(src)};
    nditer_run_par(&it, base, fn, ctx);
}

void ad_copy_strided(const ad_tensor *src, void *dst) {
    size_t es = ad_dtype_size_(src->dtype);
    if (ad_is_contiguous(src)) {
        ew_copy(dst, ad_ptr(src), (size_t)src->numel * es);
        return;
    }
    run_unary_layout(src, dst, es, copy_inner, copy_plane, &es);
}

void ad_convert_strided(const ad_tensor *src, void *dst, int dtype) {
    if (dtype == src->dtype) {
        ad_copy_strided(src, dst);
        return;
    }
    static const inner_fn from[] = {
        [AD_FLOAT32] = cvt_f32, [AD_FLOAT64] = cvt_f64, [AD_INT64] = cvt_i64,
        [AD_INT32] = cvt_i32,   [AD_UINT8] = cvt_u8,    [AD_BOOL] = cvt_u8,
    };
    run_unary_layout(src, dst, ad_dtype_size_(dtype), from[src->dtype], NULL, &dtype);
}

/* dst[...] = src[...] for two tensors of one shape and dtype, any layouts,
   dst not overlapping src (every caller's is a new tensor): in any order,
   so a plane goes by copy_plane (cat of a transposed float32 (256, 64, 64)
   and another, Zen 4, 1 thread: 807 -> 307 us; of two contiguous: 189-203). */
void ad_assign(ad_tensor *dst, const ad_tensor *src) {
    size_t es = ad_dtype_size_(src->dtype);
    const int64_t *strides[2] = {T_STRIDES(dst), T_STRIDES(src)};
    size_t sizes[2] = {es, es};
    nditer it;
    nditer_init(&it, 2, src->ndim, T_SHAPE(src), strides, sizes);
    it.any_order = 1;
    it.plane = copy_plane;
    char *base[2] = {ad_ptr(dst), ad_ptr(src)};
    nditer_run_par(&it, base, copy_inner, &es);
}
