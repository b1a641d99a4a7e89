/* Packed, cache-blocked GEMM after BLIS (Van Zee & van de Geijn, frame/3/gemm):

     jc over n by nc     B panel  kc x nc  packed into NR-wide micro-panels (L3)
      pc over k by kc
       ic over m by mc   A block  mc x kc  packed into MR-tall micro-panels (L2)
        jr over nc by NR   B micro-panel kc x NR stays in L1
         ir over mc by MR  micro-kernel: MR x NR register tile

   Packing reads any strided layout (unit row or unit column stride take a fast
   path) and pads edges with zeros; the last rows of A go to tail kernels of
   exactly that many rows (every kernel level has them), and a tile cut in n is stored through a
   column mask, by a half-width kernel when at most half of it is used. A
   row-major A or B whose packed copy would be reused only a few times is read
   in place instead (small products skip packing altogether: at the
   AVX-512 level one gemm_small call per product, gemm_small_avx512.h; so do
   products at most one vector wide, of any height: gemm_small, or AVX2's
   gemm_narrow where 256-bit vectors are chosen), and matrix-vector products
   (m or n == 1) skip packing.
   Threads split the m x nc work of one B panel into a grid of row x column
   ranges (columns preferred: each thread packs and keeps its own B
   micro-panels); batches of small products are split over the batch instead.

   The per-dtype code is written once, in the template header gemm_dtype.h,
   and instantiated below for float and double (T, S() and the kernel lists
   defined before each #include): the one way this library stamps out dtype
   and ISA variants (README, layout: "Dtype and ISA variants"). */

#define _GNU_SOURCE
#include "gemm.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "parallel.h"

#define GEMM_ALIGN 64
#define GEMM_MAX_TILE 512 /* elements of the largest MR x NR tile */

/* Products below this many multiply-adds (m*n*k) run on the calling thread
   (measured: two threads start to win between 96^3 and 128^3) ... */
#define GEMM_PAR_MIN_WORK (96 * 96 * 96)
/* ... and below this one skip packing altogether. */
#define GEMM_DIRECT_MAX_WORK (8 * 8 * 8)
/* A batch of products is split over threads, whole items per thread, from
   this many multiply-adds in all: nothing is packed or shared, so a wake-up
   pays off sooner (Zen 4, 2 threads against 1, float32: 8 x (64x32 @ 32x8)
   5.6 -> 3.7 us, 128 x (8x16 @ 16x8) 8.5 -> 6.9; at 2^16 level, one of five
   shapes slower). */
#define GEMM_BATCH_PAR_MIN (1 << 17)
/* A matrix-vector product (memory bound) is split over threads from this many
   matrix elements (1 MiB of float32), in ranges of GEMM_GEMV_GRAIN outputs. */
#define GEMM_GEMV_PAR_MIN (256 * 1024)
#define GEMM_GEMV_GRAIN 64
/* Rows of C per grain of a whole-kernel product split over threads
   (gemm_dtype.h whole_task): one 8-row tile of the narrow kernel. */
#define GEMM_WHOLE_GRAIN 8
/* A row-major A is read in place instead of packed when a thread's share of
   a B panel has at most this many NR-wide micro-panels (too few reuses of a
   packed copy to pay for it: batches of small products, n = 32 .. 128). */
#define GEMM_INPLACE_MAX_PANELS 4
/* A row-major B is packed a row at a time into this many micro-panels at
   once (gemm_dtype.h pack_rows) at the AVX-512 and portable levels: a whole
   row of a float32 B panel at the AVX-512 level (nc / NR = 32); the AVX2
   level packs GEMM_AVX2_BPANELS (gemm.h). */
#define GEMM_BROWS_PANELS 32
/* pack_rows prefetches the run it will copy GEMM_PACK_PF buffer rows ahead
   when a row's run is at most GEMM_PACK_PF_RUN bytes (the AVX2 level's: 8
   panels of B, 512 bytes; of A, 192): a run of a few lines, each a row
   stride apart, waits on every row's first load (52% of (12x512) @
   (512x4096) in the packing, the loads stalled), while the AVX-512 level's
   4 KiB runs keep the hardware prefetcher streaming (prefetched into L1 they
   lost 2-4%; into L2, skinny products gained 5-10% but 512^3 and 2048^3
   lost 2-4%, within the noise, so they are left alone).
   PYAUTODIFF_ISA=avx2, Zen 4, 1 thread, thread CPU time against numpy,
   interleaved in one process: float32 (12x512) @ (512x4096) 0.56-0.62 ->
   0.77-0.94x numpy's speed, (32x512) 0.70-0.72 -> 0.71-0.92, (64x512) 0.60-0.83
   -> 0.71-0.83, X^T G (384x2048) @ (2048x128) 0.93 -> 1.08 (prefetched into
   L1); into L2 (prefetcht1: the misses do not hold L1's fill buffers) 12 rows
   0.92 -> 1.01x, 32 rows 0.90 -> 0.93-0.98, 64 rows 0.82 -> 0.90, the MLP
   and square shapes level. 16 rows ahead was no better than 8, 4 worse. */
#define GEMM_PACK_PF 8
#define GEMM_PACK_PF_RUN 512
/* A row-major B is read in place instead of packed when it is small (L2) and
   each of its micro-panels would feed at most this many row tiles. */
#define GEMM_BINPLACE_MAX_TILES 16
#define GEMM_BINPLACE_MAX_ELEMS (256 * 256)
/* ... or, of any size, when its micro-panels feed at most this many row
   tiles and a pass's micro-panel fits L1 (gemm_dtype.h run_group).
   PYAUTODIFF_ISA=avx2 on Zen 4 (kc 336: 21 KiB micro-panels), float32, 1
   thread, against packing B (interleaved in one process, medians): 12 rows
   x 512 @ 512 x 4096 849 -> 606 us, 16 rows 1058 -> 869, 24 rows 1580 ->
   1437, 16 x 2048 @ 2048 x 2048 3047 -> 2243, 16 x 1024 @ 1024 x 1024 471
   -> 426; 48 rows (8 tiles) lost 5-10%; at 2 threads noisier, 7% either
   way at 16-24 rows, up to 27% faster elsewhere.  AVX-512 (32-wide panels:
   k <= 256 fits), 1 thread: 32 x 256 @ 256 x 4096 856 -> 672, 48 rows 1149
   -> 973, 30 x 128 @ 128 x 8192 755 -> 615; past L1 (kc 1024, a 128 KiB
   micro-panel) the same reading lost up to 30% from k = 2048. */
#define GEMM_BINPLACE_FEW_TILES 4

/* ---- kernel selection ---- */

enum { KSEL_PORTABLE = AD_ISA_PORTABLE, KSEL_AVX2 = AD_ISA_AVX2, KSEL_AVX512 = AD_ISA_AVX512 };

static atomic_int g_forced_kernel = -1; /* gemm_set_kernel; -1: the level cpu.c picks */

static int kernel_sel(void)
{
    int forced = atomic_load_explicit(&g_forced_kernel, memory_order_relaxed);
    return forced >= 0 ? forced : ad_cpu_isa();
}

const char *gemm_kernel_name(void)
{
    return ad_isa_name(kernel_sel());
}

int gemm_set_kernel(const char *name)
{
    if (!name || strcmp(name, "auto") == 0) {
        atomic_store(&g_forced_kernel, -1);
        return 0;
    }
    int k = ad_isa_by_name(name);
    if (k < 0 || k > ad_cpu_isa())
        return -1;
    atomic_store(&g_forced_kernel, k);
    return 0;
}

/* ---- per-thread packing buffers ----

   Grown on demand and kept for the thread's lifetime, so repeated small
   products do not allocate; freed by a pthread key destructor at thread exit. */

struct packbuf {
    void *ptr[2]; /* [0]: A block, [1]: B panel */
    size_t cap[2];
};

static pthread_key_t g_buf_key;
static pthread_once_t g_buf_once = PTHREAD_ONCE_INIT;
static _Thread_local struct packbuf *tl_buf;

static void packbuf_free(void *p)
{
    struct packbuf *pb = p;
    free(pb->ptr[0]);
    free(pb->ptr[1]);
    free(pb);
}

static void packbuf_key_init(void)
{
    pthread_key_create(&g_buf_key, packbuf_free);
}

static atomic_int g_packbuf_fail; /* ad_testing_gemm_packbuf_fail's mask */

void gemm_packbuf_fail(int mask)
{
    atomic_store(&g_packbuf_fail, mask);
}

/* A 64-byte aligned scratch area of at least `bytes`, or NULL if out of memory. */
static void *packbuf_get(int which, size_t bytes)
{
    if (atomic_load_explicit(&g_packbuf_fail, memory_order_relaxed) >> which & 1)
        return NULL;
    struct packbuf *pb = tl_buf;
    if (!pb) {
        pthread_once(&g_buf_once, packbuf_key_init);
        pb = calloc(1, sizeof *pb);
        if (!pb)
            return NULL;
        tl_buf = pb;
        pthread_setspecific(g_buf_key, pb);
    }
    if (pb->cap[which] < bytes) {
        void *p = NULL;
        size_t want = bytes + bytes / 4;
        want = (want + GEMM_ALIGN - 1) / GEMM_ALIGN * GEMM_ALIGN;
        if (posix_memalign(&p, GEMM_ALIGN, want) != 0)
            return NULL;
        free(pb->ptr[which]);
        pb->ptr[which] = p;
        pb->cap[which] = want;
    }
    return pb->ptr[which];
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Portable micro-kernel: plain C the compiler vectorises for the baseline ISA. */
#define PORT_MR 4
#define PORT_NR 8

#define T float
#define GEMV_SFX f32_portable
#include "gemm_gemv.h"
#define T double
#define GEMV_SFX f64_portable
#include "gemm_gemv.h"

#define T float
#define S(name) name##_f32
#define UKR_AVX512 gemm_ukr_f32_avx512, gemm_ukrh_f32_avx512, GEMM_AVX512_F32_MR, GEMM_AVX512_F32_NR
#define UKR_AVX2 gemm_ukr_f32_avx2, gemm_ukrh_f32_avx2, GEMM_AVX2_F32_MR, GEMM_AVX2_F32_NR
#define GEMV(isa) gemm_dotrows_f32_##isa, gemm_axpyrows_f32_##isa
#define DOTS(isa) gemm_dots_f32_##isa
#define PACKBT_AVX2 gemm_packbt_f32_avx2
#define TAILS_AVX512 gemm_tails_f32_avx512, gemm_tails_half_f32_avx512
#define TAILS_AVX2 gemm_tails_f32_avx2, gemm_tails_half_f32_avx2
#define SMALL_AVX512 gemm_small_f32_avx512
#define NARROW_AVX2 gemm_narrow_f32_avx2
#include "gemm_dtype.h"
#undef T
#undef S
#undef UKR_AVX512
#undef UKR_AVX2
#undef GEMV
#undef DOTS
#undef PACKBT_AVX2
#undef TAILS_AVX512
#undef TAILS_AVX2
#undef SMALL_AVX512
#undef NARROW_AVX2

#define T double
#define S(name) name##_f64
#define UKR_AVX512 gemm_ukr_f64_avx512, gemm_ukrh_f64_avx512, GEMM_AVX512_F64_MR, GEMM_AVX512_F64_NR
#define UKR_AVX2 gemm_ukr_f64_avx2, gemm_ukrh_f64_avx2, GEMM_AVX2_F64_MR, GEMM_AVX2_F64_NR
#define GEMV(isa) gemm_dotrows_f64_##isa, gemm_axpyrows_f64_##isa
#define DOTS(isa) gemm_dots_f64_##isa
#define PACKBT_AVX2 gemm_packbt_f64_avx2
#define TAILS_AVX512 gemm_tails_f64_avx512, gemm_tails_half_f64_avx512
#define TAILS_AVX2 gemm_tails_f64_avx2, gemm_tails_half_f64_avx2
#define SMALL_AVX512 gemm_small_f64_avx512
#define NARROW_AVX2 gemm_narrow_f64_avx2
#include "gemm_dtype.h"
#undef T
#undef S
#undef UKR_AVX512
#undef UKR_AVX2
#undef GEMV
#undef DOTS
#undef PACKBT_AVX2
#undef TAILS_AVX512
#undef TAILS_AVX2
#undef SMALL_AVX512
#undef NARROW_AVX2
