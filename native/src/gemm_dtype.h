/* gemm.c's per-dtype code: included once per dtype by gemm.c, which defines
   T (the element type), S(name) (the dtype suffix) and the ISA kernel lists
   UKR_AVX512, UKR_AVX2, GEMV, PACKBT_AVX2, TAILS_AVX512, TAILS_AVX2 and
   SMALL_AVX512 first.
   No include guard: including it twice is the point. */
/* Portable micro-kernels: an MR x NC tile in plain C the compiler vectorises
   for the baseline ISA, with the same family as the SIMD levels (full width,
   half width, row tails that read only their rows), so that every driver path
   runs, and is tested, on every machine: the template header
   gemm_ukr_portable.h once per tile shape. */
#define UKR_NAME S(ukr_portable)
#define UKR_MR PORT_MR
#define UKR_NC PORT_NR
#include "gemm_ukr_portable.h"
#define UKR_NAME S(ukrh_portable)
#define UKR_MR PORT_MR
#define UKR_NC (PORT_NR / 2)
#include "gemm_ukr_portable.h"
#define UKR_NAME S(ukr1_portable)
#define UKR_MR 1
#define UKR_NC PORT_NR
#include "gemm_ukr_portable.h"
#define UKR_NAME S(ukr2_portable)
#define UKR_MR 2
#define UKR_NC PORT_NR
#include "gemm_ukr_portable.h"
#define UKR_NAME S(ukr3_portable)
#define UKR_MR 3
#define UKR_NC PORT_NR
#include "gemm_ukr_portable.h"
#define UKR_NAME S(ukrh1_portable)
#define UKR_MR 1
#define UKR_NC (PORT_NR / 2)
#include "gemm_ukr_portable.h"
#define UKR_NAME S(ukrh2_portable)
#define UKR_MR 2
#define UKR_NC (PORT_NR / 2)
#include "gemm_ukr_portable.h"
#define UKR_NAME S(ukrh3_portable)
#define UKR_MR 3
#define UKR_NC (PORT_NR / 2)
#include "gemm_ukr_portable.h"

typedef void (*S(ukr_fn))(int64_t, const T *, int64_t, int64_t, const T *, int64_t, T *, int64_t,
                          int64_t, int64_t, int);

static const S(ukr_fn) S(tails_portable)[PORT_MR] = {NULL, S(ukr1_portable), S(ukr2_portable),
                                                     S(ukr3_portable)};
static const S(ukr_fn) S(tails_half_portable)[PORT_MR] = {NULL, S(ukrh1_portable),
                                                          S(ukrh2_portable), S(ukrh3_portable)};

/* The transposing pack (see gemm_packbt_f32_avx2) in plain C. */
static void S(packbt_portable)(int64_t kb, const T *src, int64_t csb, T *bp, int nr)
{
    for (int j = 0; j < nr; j++)
        for (int64_t p = 0; p < kb; p++)
            bp[p * nr + j] = src[j * csb + p];
}

typedef void (*S(whole_fn))(int64_t, int64_t, int64_t, const T *, int64_t, const T *, int64_t,
                           T *, int64_t, int);

struct S(kernel) {
    S(ukr_fn) ukr;
    S(ukr_fn) half; /* NULL, or an MR x NR/2 kernel for a last micro-panel at most half full */
    int mr, nr;
    int64_t kc, mc, nc; /* mc a multiple of mr, nc of nr */
    void (*dotrows)(int64_t, int64_t, const T *, int64_t, const T *, T *, int64_t);
    void (*axpyrows)(int64_t, int64_t, const T *, int64_t, const T *, int64_t, T *);
    void (*packbt)(int64_t, const T *, int64_t, T *, int); /* NULL: scalar */
    const S(ukr_fn) *tails; /* NULL, or tails[r]: a kernel for exactly r < mr rows */
    const S(ukr_fn) *half_tails; /* the same for the half kernel (NULL when tails is) */
    int apanels; /* > 0: a unit-row-stride A is packed row by row, this many panels at once */
    int bpanels; /* a row-major B is packed row by row, this many panels at once */
    int imr;     /* 0, or rows per tile (< mr) of an A read in place, by the tail kernels */
    /* NULL, or a whole small row-major product read in place (gemm_small_avx512.h);
       narrow: the same at most one 256-bit vector wide (gemm_narrow, gemm.h),
       taken over from small where both apply */
    S(whole_fn) small, narrow;
    /* 1: the kernels read a packed A panel's column stride at run time, so a
       block's row tiles need not be mr tall (S(block_rows)) */
    int split;
};

/* Rows of the tile at the start of the last `rem` rows of a block, and with
   A packed, of its panel (a panel of h rows: column p at p * h, so the panel
   of row i starts at i * kb): gemm_tile_rows with tiles and cap of mr rows,
   except that with kn->split the last mr + 1 .. mr + 3 rows are two near-equal
   tiles, not mr and 1-3 rows, whose 2-6 accumulators (AVX2, 6 x 16) leave the
   two FMA pipes idle on latency: 128 rows as 20 x 6 + 4 + 4, not 21 x 6 + 2.
   PYAUTODIFF_ISA=avx2, Zen 4, float32, 1 thread: (128x784)@(784x512) +3.9%,
   (128x512)@(512x784) +4.2%, 128^3 +1.3%. */
static int64_t S(block_rows)(const struct S(kernel) *kn, int64_t rem)
{
    int64_t mr = kn->mr;
    return kn->split && rem > mr && rem < mr + 4 ? (rem + 1) / 2 : gemm_tile_rows(mr, mr, rem);
}

/* AVX-512 block sizes, measured on Zen 5 (L1 48 KiB, L2 1 MiB, L3 32 MiB)
   against numpy's AVX-512 OpenBLAS. A long kc (fewer passes over C) won over
   keeping the kc x NR B micro-panel strictly inside L1: L2 streams it fast
   enough (f32: kc 1024 beat 512 by 5% at n = 2048, with a 96-row A block,
   384 KiB, in L2; f64: 576 KiB). The kc x nc B panel is in L3, kept to 4 MiB:
   on a VM sharing its L3 with other tenants an 8-16 MiB panel lost up to 8%
   (f32 1 thread, nc 1024 vs 4096: 2048^3 232 vs 222 GFLOP/s, 3000^3 234 vs
   218; 1536^3 equal). */
#define GEMM_AVX512_F32_BLOCKS 1024, 96, 1024
#define GEMM_AVX512_F64_BLOCKS 512, 144, 1024

/* AVX2 machines range from Haswell (L1 32 KiB, L2 256 KiB) to Zen 4/5 (48 KiB,
   1 MiB), so their block sizes come from the caches cpu.c reports:
     kc: the kc x NR B micro-panel fills 2/3 of L1, beside the A micro-panel
         streaming through (48 KiB: kc 512, which matched or beat 256 and 384
         on Zen 5 under PYAUTODIFF_ISA=avx2, both dtypes);
     mc: the mc x kc A block fills 9/16 of L2 (1 MiB, f64: 144 rows; 60 rows
         lost 3-5% at 1024^3, 144-252 were level; f32 was level from 144 to 288);
     nc: the kc x nc B panel takes half the core's L3 share, from 1 MiB (a
         cpuid sharing count can overstate the cores) to 4 MiB (see above). */
static void S(avx2_blocks)(int mr, int nr, int64_t *kc, int64_t *mc, int64_t *nc)
{
    const struct ad_caches *ca = ad_cpu_caches();
    int64_t s = (int64_t)sizeof(T);
    int64_t k = ca->l1d * 2 / 3 / (nr * s) / 16 * 16;
    k = k < 128 ? 128 : k > 1024 ? 1024 : k;
    int64_t m = ca->l2 * 9 / 16 / (k * s) / mr * mr;
    m = m < 4 * mr ? 4 * mr : m > 96 * mr ? 96 * mr : m;
    int64_t panel = ca->l3 / 2;
    panel = panel < (1 << 20) ? (1 << 20) : panel > (4 << 20) ? (4 << 20) : panel;
    int64_t n = panel / (k * s) / nr * nr;
    *kc = k;
    *mc = m;
    *nc = n < 8 * nr ? 8 * nr : n;
}

static struct S(kernel) S(pick_kernel)(void)
{
    int sel = kernel_sel();
    int f32 = sizeof(T) == 4;
    (void)f32;
#if defined(__x86_64__) || defined(__i386__)
    if (sel == KSEL_AVX512) {
        struct S(kernel) kn = f32 ? (struct S(kernel)){UKR_AVX512, GEMM_AVX512_F32_BLOCKS,
                                                       GEMV(avx512), PACKBT_AVX2, TAILS_AVX512,
                                                       0, GEMM_BROWS_PANELS, GEMM_AVX512_IMR,
                                                       SMALL_AVX512, NULL, 0}
                                  : (struct S(kernel)){UKR_AVX512, GEMM_AVX512_F64_BLOCKS,
                                                       GEMV(avx512), PACKBT_AVX2, TAILS_AVX512,
                                                       0, GEMM_BROWS_PANELS, GEMM_AVX512_IMR,
                                                       SMALL_AVX512, NULL, 0};
        if (ad_cpu_vec_bits() == 256)
            kn.narrow = NARROW_AVX2;
        return kn;
    }
    if (sel == KSEL_AVX2) {
        struct S(kernel) kn = {UKR_AVX2, 0, 0, 0, GEMV(avx2), PACKBT_AVX2, TAILS_AVX2,
                               GEMM_AVX2_APANELS, GEMM_AVX2_BPANELS, 0, NULL, NARROW_AVX2, 1};
        S(avx2_blocks)(kn.mr, kn.nr, &kn.kc, &kn.mc, &kn.nc);
        return kn;
    }
#endif
    (void)sel;
    return (struct S(kernel)){S(ukr_portable), S(ukrh_portable), PORT_MR, PORT_NR, 256, 128,
                              2048, GEMV(portable), S(packbt_portable), S(tails_portable),
                              S(tails_half_portable), 0, GEMM_BROWS_PANELS, 0, NULL, NULL, 1};
}

/* kb runs of w contiguous elements, src + p*ld -> dst + p*w: the packing of
   one panel of a unit-row-stride A at the AVX-512 level. The widths the
   kernels use get a constant-size copy the compiler inlines (a memcpy call
   per 24-64 byte run, when B was packed this way too, cost up to 10% of an
   MLP-sized product, 128 x 784 @ 784 x 512). */
static void S(copy_runs)(int64_t kb, const T *src, int64_t ld, T *dst, int w)
{
#define COPY_RUNS_(W)                                                                       \
    case W:                                                                                 \
        for (int64_t p = 0; p < kb; p++)                                                    \
            memcpy(dst + p * (W), src + p * ld, (W) * sizeof(T));                           \
        return;
    switch (w) {
        COPY_RUNS_(4)
        COPY_RUNS_(6)
        COPY_RUNS_(8)
        COPY_RUNS_(12)
        COPY_RUNS_(16)
        COPY_RUNS_(32)
    default:
        for (int64_t p = 0; p < kb; p++)
            memcpy(dst + p * w, src + p * ld, (size_t)w * sizeof(T));
    }
#undef COPY_RUNS_
}

/* The full w-wide panels of a unit-stride operand packed a row at a time: a
   unit-row-stride A (a transposed operand: column p of A, i.e. row p of its
   buffer, contiguous) into MR-tall panels, or a row-major B into NR-wide
   ones, a group of g panels at a time, row p of the buffer front to back,
   each row's run of g * w elements read in order and scattered to the g
   panels.  Panel by panel (each buffer row read w elements at a time, line
   by line down a column of the buffer) the packing
     - of A took 11% of a transformer weight gradient G^T @ X (tokens 2048,
       d 384 -> 128) under PYAUTODIFF_ISA=avx2 on Zen 5, mostly waiting on
       loads; row by row, 8% (kernel.apanels, set only at the AVX2 level);
     - of B (GEMM_BROWS_PANELS) made 128 x 784 @ 784 x 512 float32, whose
       1.6 MiB B is packed for only 128 rows, 20-30% slower on Zen 4 at both
       levels (1 thread, CPU time, interleaved in one process: AVX-512 1292
       vs 999 us, AVX2 1347 vs 1129 us); n = 256 .. 1024 were level or a few
       % faster row by row. */
static inline __attribute__((always_inline)) void S(pack_rows_w)(int w, int g, int64_t panels,
                                                                int64_t kb, const T *src,
                                                                int64_t ld, T *dst)
{
    for (int64_t q0 = 0; q0 < panels; q0 += g) {
        int64_t nq = min64(g, panels - q0);
        const T *s = src + q0 * w;
        T *d = dst + q0 * w * kb;
        const int64_t run = nq * w * (int64_t)sizeof(T);
        for (int64_t p = 0; p < kb; p++) {
            if (run <= GEMM_PACK_PF_RUN && p + GEMM_PACK_PF < kb) {
                const char *f = (const char *)(s + (p + GEMM_PACK_PF) * ld);
                for (int64_t l = 0; l < run; l += 64) __builtin_prefetch(f + l, 0, 2); /* to L2 */
            }
            for (int64_t q = 0; q < nq; q++)
                memcpy(d + q * w * kb + p * w, s + p * ld + q * w, (size_t)w * sizeof(T));
        }
    }
}

static void S(pack_rows)(int w, int g, int64_t panels, int64_t kb, const T *src, int64_t ld,
                         T *dst)
{
    /* the widths the kernels use (AVX2 MR; NR at every level): a constant-size
       copy the compiler inlines */
    switch (w) {
    case 6: S(pack_rows_w)(6, g, panels, kb, src, ld, dst); return;
    case 8: S(pack_rows_w)(8, g, panels, kb, src, ld, dst); return;
    case 16: S(pack_rows_w)(16, g, panels, kb, src, ld, dst); return;
    case 32: S(pack_rows_w)(32, g, panels, kb, src, ld, dst); return;
    default: S(pack_rows_w)(w, g, panels, kb, src, ld, dst);
    }
}

/* A[mb, kb] -> micro-panels of the block's row tiles (S(block_rows)), column
   p of a panel contiguous; a panel of fewer than mr rows is zero-padded to mr
   unless kn->split. */
static void S(pack_a)(const struct S(kernel) *kn, int64_t mb, int64_t kb, const T *a,
                      int64_t rsa, int64_t csa, T *ap)
{
    const int mr = kn->mr;
    if (rsa == 1 && kn->apanels > 0 && mb >= mr) {
        int64_t full = mb / mr;
        if (S(block_rows)(kn, mb - (full - 1) * mr) < mr) /* the last one split with the rest */
            full--;
        S(pack_rows)(mr, kn->apanels, full, kb, a, csa, ap);
        a += full * mr;
        ap += full * mr * kb;
        mb -= full * mr;
    }
    for (int64_t i0 = 0, ib; i0 < mb; i0 += ib) {
        ib = S(block_rows)(kn, mb - i0);
        const int64_t h = kn->split ? ib : mr; /* the panel's height */
        const T *src = a + i0 * rsa;
        if (ib == h && rsa == 1) {
            S(copy_runs)(kb, src, csa, ap, (int)h);
        } else if (ib == h && csa == 1 && kn->packbt && (h == mr || h % 4 == 0)) {
            kn->packbt(kb, src, rsa, ap, (int)h);
        } else if (ib == h && csa == 1) {
            for (int64_t i = 0; i < h; i++) {
                const T *row = src + i * rsa;
                for (int64_t p = 0; p < kb; p++)
                    ap[p * h + i] = row[p];
            }
        } else {
            for (int64_t p = 0; p < kb; p++) {
                int64_t i = 0;
                for (; i < ib; i++)
                    ap[p * h + i] = src[i * rsa + p * csa];
                for (; i < h; i++)
                    ap[p * h + i] = 0;
            }
        }
        ap += h * kb;
    }
}

/* B[kb, nb] -> NR-wide micro-panels, row p of a panel contiguous. */
static void S(pack_b)(const struct S(kernel) *kn, int64_t kb, int64_t nb, const T *b,
                      int64_t rsb, int64_t csb, T *bp)
{
    const int nr = kn->nr;
    if (csb == 1 && nb >= nr) { /* the full panels of a row-major B, row by row */
        int64_t full = nb / nr;
        S(pack_rows)(nr, kn->bpanels, full, kb, b, rsb, bp);
        b += full * nr;
        bp += full * nr * kb;
        nb -= full * nr;
    }
    for (int64_t j0 = 0; j0 < nb; j0 += nr) {
        int64_t jb = min64(nr, nb - j0);
        const T *src = b + j0 * csb;
        if (jb == nr && rsb == 1 && kn->packbt) {
            kn->packbt(kb, src, csb, bp, nr);
        } else if (jb == nr && rsb == 1) {
            for (int j = 0; j < nr; j++) {
                const T *col = src + j * csb;
                for (int64_t p = 0; p < kb; p++)
                    bp[p * nr + j] = col[p];
            }
        } else {
            for (int64_t p = 0; p < kb; p++) {
                int64_t j = 0;
                for (; j < jb; j++)
                    bp[p * nr + j] = src[p * rsb + j * csb];
                for (; j < nr; j++)
                    bp[p * nr + j] = 0;
            }
        }
        bp += (int64_t)nr * kb;
    }
}

/* Macro-kernel: C[mb, cols j0..j1 of the panel] (+)= A block @ packed B panel.
   The A block is packed (micro-panel i at ap + i*kb) or, when `inplace`, read
   in place from row-major A with row stride rsa, its last partial micro-panel
   then read in place by a tail kernel or, without tail kernels, packed at ap.
   B is the packed panel, or with `bdir` read in place (row stride rsbd). */
static void S(macro)(const struct S(kernel) *kn, int64_t mb, int64_t nb, int64_t j0, int64_t j1,
                     int64_t kb, int inplace, const T *a, int64_t rsa, const T *ap,
                     const T *bp, const T *bdir, int64_t rsbd, T *c, int64_t rsc, int64_t csc,
                     int accum)
{
    const int mr = kn->mr, nr = kn->nr;
    T tile[GEMM_MAX_TILE] __attribute__((aligned(GEMM_ALIGN)));
    /* rows per full-width tile: mr, or kn->imr for an A read in place */
    const int64_t th = inplace && kn->tails && kn->imr ? kn->imr : mr;
    for (int64_t j = j0; j < j1; j += nr) {
        int64_t jb = min64(nr, nb - j);
        /* B in place (full panels of a row-major B), else packed (a partial
           panel of an in-place B is packed alone at bp) */
        const T *bpj = bdir ? (jb == nr ? bdir + j : bp) : bp + j * kb;
        int64_t rsb = bdir && jb == nr ? rsbd : nr;
        int half = kn->half && 2 * jb <= nr;
        for (int64_t i = 0, ib; i < mb; i += ib) {
            ib = half || th == mr ? S(block_rows)(kn, mb - i) : gemm_tile_rows(th, mr, mb - i);
            T *cij = c + i * rsc + j * csc;
            S(ukr_fn) ukr = half ? (ib < mr && kn->half_tails ? kn->half_tails[ib] : kn->half)
                                 : (ib < mr && kn->tails ? kn->tails[ib] : kn->ukr);
            int direct = inplace && (ib == mr || kn->tails);
            const T *ai = direct ? a + i * rsa : inplace ? ap : ap + i * kb;
            int64_t ars = direct ? rsa : 1, acs = direct ? 1 : kn->split ? ib : mr;
            if (csc == 1) {
                ukr(kb, ai, ars, acs, bpj, rsb, cij, rsc, ib, jb, accum);
                continue;
            }
            ukr(kb, ai, ars, acs, bpj, rsb, tile, nr, ib, nr, 0);
            for (int64_t ii = 0; ii < ib; ii++)
                for (int64_t jj = 0; jj < jb; jj++) {
                    T *cp = cij + ii * rsc + jj * csc;
                    *cp = accum ? *cp + tile[ii * nr + jj] : tile[ii * nr + jj];
                }
        }
    }
}

/* Operands of one product (or of a group of batch items sharing B). */
struct S(prob) {
    int64_t m, n, k;
    const T *a;
    int64_t rsa, csa;
    const T *b;
    int64_t rsb, csb;
    T *c;
    int64_t rsc, csc;
    int64_t count;        /* batch items sharing this B */
    const int64_t *a_off; /* NULL: a single item at offset 0 */
    const int64_t *c_off;
    const gemm_epi *epi;  /* NULL, or (a single item) applied to each finished block */
    const gemm_bsrc *bsrc; /* NULL, or (a single item) B's packer; b unused */
};

/* The epilogue over rows [i0, i0 + rows) x cols [j0, j0 + cols) of C (csc == 1). */
static void S(epi_block)(const struct S(prob) *pr, int64_t i0, int64_t rows, int64_t j0,
                         int64_t cols)
{
    if (pr->epi && rows > 0 && cols > 0)
        pr->epi->fn(pr->epi->ctx, pr->c + i0 * pr->rsc + j0, pr->rsc, i0, rows, j0, cols);
}

/* One thread's share of the work on one packed B panel. */
struct S(panel_job) {
    const struct S(kernel) *kn;
    const struct S(prob) *pr;
    int64_t jc, nb, pc, kb;
    const T *bp;
    int tm, tn;       /* thread grid: tm row ranges x tn column ranges */
    int64_t item;     /* batch item */
    const T *bdir;    /* non-NULL: full B micro-panels read in place from here */
    void *pack;       /* non-NULL: a packb_job; each task first packs its own columns */
};

static void S(slow)(const struct S(prob) *pr, int64_t item, int64_t r0, int64_t r1, int64_t c0,
                    int64_t c1, int64_t p0, int64_t p1, int accum);

static void S(panel_rows_cols)(struct S(panel_job) *job, int64_t r0, int64_t r1, int64_t c0,
                               int64_t c1)
{
    const struct S(kernel) *kn = job->kn;
    const struct S(prob) *pr = job->pr;
    int64_t item = job->item;
    const T *a = pr->a + (pr->a_off ? pr->a_off[item] : 0);
    T *c = pr->c + (pr->c_off ? pr->c_off[item] : 0);
    int accum = job->pc != 0;
    /* Packing A pays off when the packed block is reused across many B
       micro-panels; a row-major A feeding only a few is read in place. */
    int inplace = pr->csa == 1 && ceil_div(c1 - c0, kn->nr) <= GEMM_INPLACE_MAX_PANELS;
    int64_t mc = inplace ? kn->mr : min64(kn->mc, r1 - r0);
    T *ap = packbuf_get(0, (size_t)(ceil_div(mc, kn->mr) * kn->mr * job->kb) * sizeof(T));
    if (!ap) {
        S(slow)(pr, item, r0, r1, job->jc + c0, job->jc + c1, job->pc, job->pc + job->kb,
                accum);
        if (job->pc + job->kb == pr->k)
            S(epi_block)(pr, r0, r1 - r0, job->jc + c0, c1 - c0);
        return;
    }
    for (int64_t ic = r0; ic < r1; ic += kn->mc) {
        int64_t mb = min64(kn->mc, r1 - ic);
        const T *ablk = a + ic * pr->rsa + job->pc * pr->csa;
        if (inplace) {
            int64_t full = mb / kn->mr * kn->mr;
            if (full < mb && !kn->tails)
                S(pack_a)(kn, mb - full, job->kb, ablk + full * pr->rsa, pr->rsa, 1, ap);
        } else {
            S(pack_a)(kn, mb, job->kb, ablk, pr->rsa, pr->csa, ap);
        }
        S(macro)(kn, mb, job->nb, c0, c1, job->kb, inplace, ablk, pr->rsa, ap, job->bp,
                 job->bdir, pr->rsb,
                 c + ic * pr->rsc + job->jc * pr->csc, pr->rsc, pr->csc, accum);
        if (job->pc + job->kb == pr->k)
            S(epi_block)(pr, ic, mb, job->jc + c0, c1 - c0);
    }
}

/* Threads split rows in units of this many: with tail kernels a range need
   not be whole MR-row tiles (128 rows split 64 + 64, not 72 + 56). */
static int64_t S(row_unit)(const struct S(kernel) *kn)
{
    return kn->tails ? 4 : kn->mr;
}

static void S(packb_task)(void *ctx, int64_t p0, int64_t p1);

static void S(panel_task)(void *ctx, int64_t t0, int64_t t1)
{
    struct S(panel_job) *job = ctx;
    const struct S(kernel) *kn = job->kn;
    int64_t u = S(row_unit)(kn), pm = ceil_div(job->pr->m, u), pn = ceil_div(job->nb, kn->nr);
    for (int64_t t = t0; t < t1; t++) {
        int64_t ti = t / job->tn, tj = t % job->tn;
        int64_t r0 = pm * ti / job->tm * u;
        int64_t r1 = min64(pm * (ti + 1) / job->tm * u, job->pr->m);
        int64_t c0 = pn * tj / job->tn * kn->nr;
        int64_t c1 = min64(pn * (tj + 1) / job->tn * kn->nr, job->nb);
        if (c0 < c1 && job->pack)
            S(packb_task)(job->pack, c0 / kn->nr, ceil_div(c1, kn->nr));
        if (r0 < r1 && c0 < c1)
            S(panel_rows_cols)(job, r0, r1, c0, c1);
    }
}

struct S(packb_job) {
    const struct S(kernel) *kn;
    const struct S(prob) *pr;
    int64_t jc, pc, kb, nb;
    T *bp;
    int nr;
};

static void S(packb_task)(void *ctx, int64_t p0, int64_t p1)
{
    struct S(packb_job) *job = ctx;
    const struct S(prob) *pr = job->pr;
    int64_t j0 = p0 * job->nr, j1 = min64(p1 * job->nr, job->nb);
    if (pr->bsrc) {
        pr->bsrc->pack(pr->bsrc->ctx, job->pc, job->kb, job->jc + j0, j1 - j0, job->nr,
                       job->bp + j0 * job->kb);
        return;
    }
    S(pack_b)(job->kn, job->kb, j1 - j0, pr->b + job->pc * pr->rsb + (job->jc + j0) * pr->csb,
              pr->rsb, pr->csb, job->bp + j0 * job->kb);
}

/* Thread grid tm x tn == threads minimising the largest per-thread tile count;
   splitting columns wins unless rows are better by more than 1/8. Measured on
   Zen 5 at 2 threads (n = 256 .. 2048 and the MLP shapes), columns beat rows
   by 3-25% although each thread then packs the whole A block: each thread's
   B micro-panels are the ones it packed itself, in its own L2, instead of
   half of them being fetched from the other core's. */
static void S(grid)(int threads, int64_t pm, int64_t pn, int *tm, int *tn)
{
    int64_t best = -1;
    for (int r = 1; r <= threads; r++) {
        if (threads % r)
            continue;
        int64_t w = ceil_div(pm, r) * ceil_div(pn, threads / r);
        if (best < 0 || w * 8 < best * 7) {
            best = w;
            *tm = r;
            *tn = threads / r;
        }
    }
}

/* Naive strided product for the tiny case and for out-of-memory fallback:
   rows r0..r1, cols c0..c1, k range p0..p1 of one batch item. */
static void S(slow)(const struct S(prob) *pr, int64_t item, int64_t r0, int64_t r1, int64_t c0,
                    int64_t c1, int64_t p0, int64_t p1, int accum)
{
    const T *a = pr->a + (pr->a_off ? pr->a_off[item] : 0);
    T *c = pr->c + (pr->c_off ? pr->c_off[item] : 0);
    for (int64_t i = r0; i < r1; i++)
        for (int64_t j = c0; j < c1; j++) {
            T s = accum ? c[i * pr->rsc + j * pr->csc] : 0;
            for (int64_t p = p0; p < p1; p++) {
                T bv;
                if (pr->bsrc)
                    pr->bsrc->pack(pr->bsrc->ctx, p, 1, j, 1, 1, &bv);
                else
                    bv = pr->b[p * pr->rsb + j * pr->csb];
                s += a[i * pr->rsa + p * pr->csa] * bv;
            }
            c[i * pr->rsc + j * pr->csc] = s;
        }
}

/* Matrix-vector item (n == 1: y = A b; m == 1: y^T = a^T B, i.e. y = B^T a) as
   y = M x, outputs [r0, r1) only, without packing, when M or M^T has
   unit-stride rows and the vector on that side is contiguous. Returns 0 if
   the layout does not fit (it is the same for every item and every range). */
static int S(vec_item)(const struct S(kernel) *kn, const struct S(prob) *pr, int64_t item,
                       int64_t r0, int64_t r1)
{
    const T *a = pr->a + (pr->a_off ? pr->a_off[item] : 0);
    T *y = pr->c + (pr->c_off ? pr->c_off[item] : 0);
    const T *mat = a, *x = pr->b;
    int64_t cols = pr->k, rsm = pr->rsa, csm = pr->csa, incx = pr->rsb, incy = pr->rsc;
    if (pr->n != 1) {
        mat = pr->b;
        x = a;
        rsm = pr->csb;
        csm = pr->rsb;
        incx = pr->csa;
        incy = pr->csc;
    }
    mat += r0 * rsm;
    y += r0 * incy;
    if (csm == 1 && incx == 1) {
        kn->dotrows(r1 - r0, cols, mat, rsm, x, y, incy);
        return 1;
    }
    if (rsm == 1 && incy == 1) {
        kn->axpyrows(cols, r1 - r0, x, incx, mat, csm, y);
        return 1;
    }
    return 0;
}

/* One thread's range of a matrix-vector item's outputs. */
struct S(vec_job) {
    const struct S(kernel) *kn;
    const struct S(prob) *pr;
    int64_t item, outs;
};

static void S(vec_task)(void *ctx, int64_t g0, int64_t g1) /* in grains of outputs */
{
    const struct S(vec_job) *job = ctx;
    S(vec_item)(job->kn, job->pr, job->item, g0 * GEMM_GEMV_GRAIN,
                min64(g1 * GEMM_GEMV_GRAIN, job->outs));
}

/* Whether a product is small enough for A and B read in place with none of
   run_group's blocking (one A block, B's panel in place, k within one
   panel; a kernel with row tails, as every level has). */
static int S(small_fits)(const struct S(kernel) *kn, const struct S(prob) *pr)
{
    return kn->tails && kn->packbt && pr->csa == 1 && pr->csb == 1 && pr->m > 1 && pr->n > 1 &&
           pr->m <= kn->mc && pr->k <= kn->kc && pr->m * pr->n * pr->k > GEMM_DIRECT_MAX_WORK &&
           ceil_div(pr->n, kn->nr) <= GEMM_INPLACE_MAX_PANELS &&
           ceil_div(pr->m, kn->mr) <= GEMM_BINPLACE_MAX_TILES;
}

/* The length of run_group's passes over k: equal, at most kc, rounded up to
   8 (AVX2 on Zen 3, kc 336: 1024 = 4 x 256, not 3 x 336 + a 16-deep pass
   that reads and writes all of C for almost no work).  The whole kernels
   take the same passes, so every path gives an element the same FMA chains. */
static int64_t S(pass_len)(int64_t kc, int64_t k)
{
    return ceil_div(ceil_div(k, ceil_div(k, kc)), 8) * 8;
}

/* The whole-product kernel for a problem (its items all alike), or NULL:
   - at most one 512-bit vector wide (16 float32, 8 float64 columns), any m
     and k: the level's narrow kernel up to 256 bits wide, else its small
     one.  A is read once, in place, in run_group's passes over k (each
     pass's kc x n slice of B stays in cache), where the macro-kernel would
     pack A for at most 16 multiply-adds an element.  Zen 4, float32 (2
     threads where the product splits): 128x784 @ 784x8 31.6 -> 17.6 us,
     256x128 @ 128x8 10.6 -> 6.5, 4096x512 @ 512x8 638 -> 405, 128x512 @
     512x10 21.3 -> 19.0, 128x784 @ 784x16 32 -> 18, 256x1500 @ 1500x4
     116 -> 74; the rows split over `threads` in S(whole_task)'s grains;
   - else on one thread, a product that fits small_fits: the level's small
     kernel. */
static S(whole_fn) S(whole_kernel)(const struct S(kernel) *kn, const struct S(prob) *pr,
                                   int threads)
{
    if (pr->csa != 1 || pr->csb != 1 || pr->csc != 1)
        return NULL;
    int64_t bytes = pr->n * (int64_t)sizeof(T);
    if (bytes <= 64 && pr->m > 1 && pr->n > 1 && pr->m * pr->n * pr->k > GEMM_DIRECT_MAX_WORK) {
        if (kn->narrow && bytes <= 32)
            return kn->narrow;
        if (kn->small)
            return kn->small;
    }
    return threads == 1 && kn->small && S(small_fits)(kn, pr) ? kn->small : NULL;
}

/* `rows` rows of an item (A at a, B at b, C at c) by a whole kernel, in
   passes of kp over k: the first overwrites C, the others add to it. */
static void S(whole_rows)(S(whole_fn) fn, int64_t kp, const struct S(prob) *pr, int64_t rows,
                          const T *a, const T *b, T *c)
{
    for (int64_t pc = 0; pc < pr->k; pc += kp)
        fn(rows, pr->n, min64(kp, pr->k - pc), a + pc, pr->rsa, b + pc * pr->rsb, pr->rsb, c,
           pr->rsc, pc > 0);
}

/* One thread's rows of an item of a whole-kernel problem, in grains of
   GEMM_WHOLE_GRAIN rows, and the epilogue over them. */
struct S(whole_job) {
    S(whole_fn) fn;
    int64_t kp;
    const struct S(prob) *pr;
    int64_t item;
};

static void S(whole_task)(void *ctx, int64_t g0, int64_t g1)
{
    const struct S(whole_job) *job = ctx;
    const struct S(prob) *pr = job->pr;
    int64_t r0 = g0 * GEMM_WHOLE_GRAIN, r1 = min64(g1 * GEMM_WHOLE_GRAIN, pr->m);
    const T *a = pr->a + (pr->a_off ? pr->a_off[job->item] : 0) + r0 * pr->rsa;
    T *c = pr->c + (pr->c_off ? pr->c_off[job->item] : 0) + r0 * pr->rsc;
    S(whole_rows)(job->fn, job->kp, pr, r1 - r0, a, pr->b, c);
    S(epi_block)(pr, r0, r1 - r0, 0, pr->n);
}

/* Runs a group of items sharing B; `threads` > 1 parallelises inside each panel
   (inside each item's outputs for a matrix-vector product). */
static void S(run_group)(const struct S(prob) *pr, int threads)
{
    struct S(kernel) kn = S(pick_kernel)();
    if ((pr->m == 1 || pr->n == 1) && !pr->bsrc && S(vec_item)(&kn, pr, 0, 0, 0)) {
        int64_t outs = pr->n == 1 ? pr->m : pr->n;
        for (int64_t it = 0; it < pr->count; it++) {
            struct S(vec_job) job = {&kn, pr, it, outs};
            if (threads > 1)
                par_for(ceil_div(outs, GEMM_GEMV_GRAIN), S(vec_task), &job);
            else
                S(vec_item)(&kn, pr, it, 0, outs);
        }
        S(epi_block)(pr, 0, pr->m, 0, pr->n);
        return;
    }
    if (pr->m * pr->n * pr->k <= GEMM_DIRECT_MAX_WORK) {
        for (int64_t it = 0; it < pr->count; it++)
            S(slow)(pr, it, 0, pr->m, 0, pr->n, 0, pr->k, 0);
        S(epi_block)(pr, 0, pr->m, 0, pr->n);
        return;
    }
    S(whole_fn) whole = S(whole_kernel)(&kn, pr, threads);
    if (whole) {
        int64_t grains = ceil_div(pr->m, GEMM_WHOLE_GRAIN);
        struct S(whole_job) job = {whole, S(pass_len)(kn.kc, pr->k), pr, 0};
        for (; job.item < pr->count; job.item++) {
            if (threads > 1 && grains > 1)
                par_for(grains, S(whole_task), &job);
            else
                S(whole_task)(&job, 0, grains);
        }
        return;
    }
    /* n in equal column panels of at most nc (1536 = 768 + 768, not 1024 + 512) */
    int64_t npanels = ceil_div(pr->n, kn.nc);
    kn.nc = ceil_div(ceil_div(pr->n, npanels), kn.nr) * kn.nr;
    kn.kc = S(pass_len)(kn.kc, pr->k);
    int64_t ncb = min64(kn.nc, ceil_div(pr->n, kn.nr) * kn.nr);
    int64_t kcb = min64(kn.kc, pr->k);
    /* A row-major B reused by only a few row tiles is read in place (its full
       micro-panels; every kernel loads B unaligned): packing it
       would cost about as much as the products it feeds.  So is a B of any
       size feeding at most GEMM_BINPLACE_FEW_TILES when a pass's micro-panel
       fits L1: the first tile brings it in, the others find it there. */
    int64_t tiles = ceil_div(pr->m, kn.mr) * pr->count;
    int few = tiles <= GEMM_BINPLACE_FEW_TILES &&
              kcb * kn.nr * (int64_t)sizeof(T) <= ad_cpu_caches()->l1d;
    int binplace = pr->csb == 1 && kn.packbt &&
                   (few || (tiles <= GEMM_BINPLACE_MAX_TILES &&
                            pr->n * pr->k <= GEMM_BINPLACE_MAX_ELEMS));
    T *bp = packbuf_get(1, (size_t)(ncb * kcb) * sizeof(T));
    if (!bp) {
        for (int64_t it = 0; it < pr->count; it++)
            S(slow)(pr, it, 0, pr->m, 0, pr->n, 0, pr->k, 0);
        S(epi_block)(pr, 0, pr->m, 0, pr->n);
        return;
    }
    for (int64_t jc = 0; jc < pr->n; jc += kn.nc) {
        int64_t nb = min64(kn.nc, pr->n - jc);
        int64_t pn = ceil_div(nb, kn.nr), u = S(row_unit)(&kn), pm = ceil_div(pr->m, u);
        for (int64_t pc = 0; pc < pr->k; pc += kn.kc) {
            int64_t kb = min64(kn.kc, pr->k - pc);
            struct S(packb_job) pj = {&kn, pr, jc, pc, kb, nb, bp, kn.nr};
            struct S(panel_job) job = {&kn, pr, jc, nb, pc, kb, bp, 1, 1, 0, NULL, NULL};
            if (threads > 1)
                S(grid)(threads, pm, pn, &job.tm, &job.tn);
            /* Threads splitting columns only each pack their own B micro-panels
               inside the first item's loop: no separate packing loop to wait
               for, and each thread's panels stay in its own cache. */
            int fuse = threads > 1 && job.tm == 1 && !binplace;
            /* Column split of a row-major A read in place (no A packing per
               task): one task per B micro-panel, claimed dynamically. */
            int dyn = threads > 1 && job.tm == 1 && pr->csa == 1 && job.tn < pn &&
                      ceil_div(pn, threads) <= GEMM_INPLACE_MAX_PANELS;
            if (dyn)
                job.tn = (int)pn;
            const T *bdir = NULL;
            if (binplace) {
                bdir = pr->b + pc * pr->rsb + jc;
                int64_t j0 = (pn - 1) * kn.nr;
                if (nb % kn.nr) /* the partial last micro-panel alone, at bp */
                    S(pack_b)(&kn, kb, nb - j0, bdir + j0, pr->rsb, 1, bp);
            } else if (fuse) {
                job.pack = &pj;
            } else if (threads > 1) {
                par_for(pn, S(packb_task), &pj);
            } else {
                S(packb_task)(&pj, 0, pn);
            }
            job.bdir = bdir;
            for (int64_t it = 0; it < pr->count; it++) {
                job.item = it;
                if (it == 1)
                    job.pack = NULL;
                if (dyn)
                    par_for_dyn(job.tn, S(panel_task), &job);
                else if (threads > 1)
                    par_for(job.tm * job.tn, S(panel_task), &job);
                else
                    S(panel_task)(&job, 0, 1);
            }
        }
    }
}

static void S(zero_c)(const struct S(prob) *pr, int64_t item)
{
    T *c = pr->c + (pr->c_off ? pr->c_off[item] : 0);
    for (int64_t i = 0; i < pr->m; i++)
        for (int64_t j = 0; j < pr->n; j++)
            c[i * pr->rsc + j * pr->csc] = 0;
}

/* Batch items [i0, i1) on the calling thread, grouping runs of equal b_off. */
struct S(batch_job) {
    struct S(prob) base;
    const int64_t *a_off, *b_off, *c_off;
};

/* A batch of small products (small_fits) needs none of run_group's
   blocking: one whole-kernel call per item where the level has one
   (S(whole_kernel)), else one macro-kernel call, decided once for the
   batch.  Returns 0 when the shapes or layouts do not fit. */
static int S(small_batch)(const struct S(batch_job) *bj, int64_t i0, int64_t i1)
{
    const struct S(prob) *pr = &bj->base;
    struct S(kernel) kn = S(pick_kernel)();
    S(whole_fn) whole = S(whole_kernel)(&kn, pr, 1);
    if (whole) {
        int64_t kp = S(pass_len)(kn.kc, pr->k);
        for (int64_t i = i0; i < i1; i++)
            S(whole_rows)(whole, kp, pr, pr->m, pr->a + bj->a_off[i], pr->b + bj->b_off[i],
                          pr->c + bj->c_off[i]);
        return 1;
    }
    if (!S(small_fits)(&kn, pr))
        return 0;
    int64_t full = pr->n / kn.nr * kn.nr; /* a partial last panel is packed, per item */
    T *bp = NULL;
    if (full < pr->n && !(bp = packbuf_get(1, (size_t)(kn.nr * pr->k) * sizeof(T))))
        return 0;
    for (int64_t i = i0; i < i1; i++) {
        const T *a = pr->a + bj->a_off[i], *b = pr->b + bj->b_off[i];
        if (bp)
            S(pack_b)(&kn, pr->k, pr->n - full, b + full, pr->rsb, 1, bp);
        S(macro)(&kn, pr->m, pr->n, 0, pr->n, pr->k, 1, a, pr->rsa, NULL, bp, b, pr->rsb,
                 pr->c + bj->c_off[i], pr->rsc, pr->csc, 0);
    }
    return 1;
}

static void S(batch_task)(void *ctx, int64_t i0, int64_t i1)
{
    const struct S(batch_job) *bj = ctx;
    if (S(small_batch)(bj, i0, i1))
        return;
    for (int64_t i = i0; i < i1;) {
        int64_t e = i + 1;
        while (e < i1 && bj->b_off[e] == bj->b_off[i])
            e++;
        struct S(prob) pr = bj->base;
        pr.b += bj->b_off[i];
        pr.count = e - i;
        pr.a_off = bj->a_off + i;
        pr.c_off = bj->c_off + i;
        S(run_group)(&pr, 1);
        i = e;
    }
}

void S(gemm_batch)(int64_t batch, const int64_t *a_off, const int64_t *b_off,
                   const int64_t *c_off, int64_t m, int64_t n, int64_t k, const T *a,
                   int64_t rsa, int64_t csa, const T *b, int64_t rsb, int64_t csb, T *c,
                   int64_t rsc, int64_t csc)
{
    if (batch <= 0 || m <= 0 || n <= 0)
        return;
    struct S(prob) pr = {m, n, k, a, rsa, csa, b, rsb, csb, c, rsc, csc, 1, NULL, NULL, NULL, NULL};
    if (k <= 0) {
        for (int64_t i = 0; i < batch; i++) {
            pr.c = c + c_off[i];
            S(zero_c)(&pr, 0);
        }
        return;
    }
    /* The micro-kernel writes rows of C with unit column stride; a column-major
       C is the row-major C^T = B^T A^T, so swap the operands. */
    if (csc != 1 && rsc == 1) {
        pr = (struct S(prob)){n, m, k, b, csb, rsb, a, csa, rsa, c, csc, rsc, 1, NULL, NULL, NULL, NULL};
        const int64_t *t = a_off;
        a_off = b_off;
        b_off = t;
    }
    int threads = par_num_threads();
    int64_t work = m * n * k;
    /* a matrix-vector batch splits over its items, a single one over its outputs */
    int inner = threads > 1 && (m == 1 || n == 1 ? batch == 1 && work >= GEMM_GEMV_PAR_MIN
                                                 : work >= GEMM_PAR_MIN_WORK);
    if (batch == 1) {
        pr.a += a_off[0];
        pr.b += b_off[0];
        pr.c += c_off[0];
        S(run_group)(&pr, inner ? threads : 1);
        return;
    }
    struct S(batch_job) bj = {pr, a_off, b_off, c_off};
    if (!inner && threads > 1 && work * batch >= GEMM_BATCH_PAR_MIN) {
        par_for(batch, S(batch_task), &bj);
        return;
    }
    if (!inner) {
        S(batch_task)(&bj, 0, batch);
        return;
    }
    /* Large items: parallelise inside each item's panels, still sharing B. */
    for (int64_t i = 0; i < batch;) {
        int64_t e = i + 1;
        while (e < batch && b_off[e] == b_off[i])
            e++;
        struct S(prob) g = pr;
        g.b += b_off[i];
        g.count = e - i;
        g.a_off = a_off + i;
        g.c_off = c_off + i;
        S(run_group)(&g, threads);
        i = e;
    }
}

void S(gemm_epi)(int64_t m, int64_t n, int64_t k, const T *a, int64_t rsa, int64_t csa,
                 const T *b, int64_t rsb, int64_t csb, T *c, int64_t rsc, const gemm_epi *epi)
{
    if (m <= 0 || n <= 0)
        return;
    struct S(prob) pr = {m, n, k, a, rsa, csa, b, rsb, csb, c, rsc, 1, 1, NULL, NULL, epi, NULL};
    if (k <= 0) {
        S(zero_c)(&pr, 0);
        S(epi_block)(&pr, 0, m, 0, n);
        return;
    }
    int threads = par_num_threads();
    int64_t work = m * n * k;
    int inner = threads > 1 && work >= (m == 1 || n == 1 ? GEMM_GEMV_PAR_MIN : GEMM_PAR_MIN_WORK);
    S(run_group)(&pr, inner ? threads : 1);
}

/* B from a packer (gemm.h): the packed path, whose B-reading paths (in-place
   B, the whole and matrix-vector kernels) run_group leaves out: they ask for
   unit-stride B (csb 1), and a bsrc problem's B strides are 0. */
void S(gemm_bsrc)(int64_t m, int64_t n, int64_t k, const T *a, int64_t rsa, int64_t csa,
                  const gemm_bsrc *bs, T *c, int64_t rsc)
{
    if (m <= 0 || n <= 0)
        return;
    struct S(prob) pr = {m, n, k, a, rsa, csa, NULL, 0, 0, c, rsc, 1, 1, NULL, NULL, NULL, bs};
    if (k <= 0) {
        S(zero_c)(&pr, 0);
        return;
    }
    int threads = par_num_threads();
    S(run_group)(&pr, threads > 1 && m * n * k >= GEMM_PAR_MIN_WORK ? threads : 1);
}

void S(gemm)(int64_t m, int64_t n, int64_t k, const T *a, int64_t rsa, int64_t csa, const T *b,
             int64_t rsb, int64_t csb, T *c, int64_t rsc, int64_t csc)
{
    static const int64_t zero = 0;
    S(gemm_batch)(1, &zero, &zero, &zero, m, n, k, a, rsa, csa, b, rsb, csb, c, rsc, csc);
}

void S(gemm_dots)(int64_t m, int64_t n, int64_t k, const T *a, int64_t rsa, const T *b,
                  int64_t rsb, T *c, int64_t rsc)
{
    int sel = kernel_sel();
    (sel == KSEL_AVX512 ? DOTS(avx512) : sel == KSEL_AVX2 ? DOTS(avx2) : DOTS(portable))(
        m, n, k, a, rsa, b, rsb, c, rsc);
}

