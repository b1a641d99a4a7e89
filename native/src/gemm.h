/* Internal: packed, cache-blocked matrix multiply (BLIS structure).

   gemm.c (with its per-dtype template gemm_dtype.h) holds the five loops,
   packing and the run time dispatch; the micro-kernels come from template
   headers: gemm_ukr_portable.h, gemm_ukr_avx2.h (k loop unrolled, A's packed
   column stride read at run time, included by gemm_avx2.c) and
   gemm_ukr_avx512.h (one include per tile shape, included by gemm_avx512.c,
   with gemm_small_avx512.h: whole small products read in place). */
#ifndef PYAUTODIFF_GEMM_H
#define PYAUTODIFF_GEMM_H

#include <stdint.h>

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* C[m,n] = A[m,k] @ B[k,n] (overwrites C; C is never aliased with A or B).
   All strides are in elements and may be any value (row-major, column-major/transposed,
   sliced with step, or 0 for a broadcast dim). k may be 0 (then C = 0). m or n may be 0. */
void gemm_f32(int64_t m, int64_t n, int64_t k,
              const float *a, int64_t rsa, int64_t csa,
              const float *b, int64_t rsb, int64_t csb,
              float *c, int64_t rsc, int64_t csc);
void gemm_f64(int64_t m, int64_t n, int64_t k,
              const double *a, int64_t rsa, int64_t csa,
              const double *b, int64_t rsb, int64_t csb,
              double *c, int64_t rsc, int64_t csc);

/* Batched: for i in [0,batch): C_i = A_i @ B_i with A_i = a + a_off[i], B_i = b + b_off[i],
   C_i = c + c_off[i] (offsets in elements). Consecutive equal b_off values (B broadcast
   over the batch) share one packed B. */
void gemm_batch_f32(int64_t batch, const int64_t *a_off, const int64_t *b_off, const int64_t *c_off,
                    int64_t m, int64_t n, int64_t k,
                    const float *a, int64_t rsa, int64_t csa,
                    const float *b, int64_t rsb, int64_t csb,
                    float *c, int64_t rsc, int64_t csc);
void gemm_batch_f64(int64_t batch, const int64_t *a_off, const int64_t *b_off, const int64_t *c_off,
                    int64_t m, int64_t n, int64_t k,
                    const double *a, int64_t rsa, int64_t csa,
                    const double *b, int64_t rsb, int64_t csb,
                    double *c, int64_t rsc, int64_t csc);

/* A product with an epilogue: C = A @ B (C row-major, unit column stride), then
   fn(ctx, c_blk, rsc, i0, rows, j0, cols) once for every block of C whose
   product is complete, c_blk pointing at element (i0, j0), while the block is
   still in cache (the packed path calls it per macro-kernel block, on the
   thread that computed it; the other paths once for all of C).  Every element
   is passed exactly once.  The linear op (matmul.c) adds its bias and applies
   its activation here. */
typedef struct gemm_epi {
    void (*fn)(const void *ctx, void *c, int64_t rsc, int64_t i0, int64_t rows, int64_t j0,
               int64_t cols);
    const void *ctx;
} gemm_epi;
void gemm_epi_f32(int64_t m, int64_t n, int64_t k, const float *a, int64_t rsa, int64_t csa,
                  const float *b, int64_t rsb, int64_t csb, float *c, int64_t rsc,
                  const gemm_epi *epi);
void gemm_epi_f64(int64_t m, int64_t n, int64_t k, const double *a, int64_t rsa, int64_t csa,
                  const double *b, int64_t rsb, int64_t csb, double *c, int64_t rsc,
                  const gemm_epi *epi);

/* A product whose B is never stored whole: C = A @ B (C row-major, unit
   column stride) with B's micro-panels written by pack(ctx, p0, kb, j0, nb,
   nr, dst), rows [p0, p0 + kb) and columns [j0, j0 + nb) of B as
   ceil(nb / nr) panels of kb rows of nr elements, panel after panel, each row
   contiguous and zero-padded past column j0 + nb.  The product always takes
   the packed path (the fallbacks read B one element at a time, nr = 1); pack
   may run on several threads at once.  conv2d packs im2col(x) this way,
   straight from the image (conv.c). */
typedef struct gemm_bsrc {
    void (*pack)(const void *ctx, int64_t p0, int64_t kb, int64_t j0, int64_t nb, int nr,
                 void *dst);
    const void *ctx;
} gemm_bsrc;
void gemm_bsrc_f32(int64_t m, int64_t n, int64_t k, const float *a, int64_t rsa, int64_t csa,
                   const gemm_bsrc *bs, float *c, int64_t rsc);
void gemm_bsrc_f64(int64_t m, int64_t n, int64_t k, const double *a, int64_t rsa, int64_t csa,
                   const gemm_bsrc *bs, double *c, int64_t rsc);

/* Kernel selection: "avx512", "avx2" or "portable", by default the level cpu.c
   picks (the CPU's best unless PYAUTODIFF_ISA / PYAUTODIFF_PORTABLE caps it).
   gemm_set_kernel(name) forces a level, "auto" (or NULL) restores the default;
   it returns -1 for an unknown name or a level above the default. */
const char *gemm_kernel_name(void);
int gemm_set_kernel(const char *name);
/* ad_testing_gemm_packbuf_fail's switch: bit w makes packing buffer w
   (0: A, 1: B) unobtainable */
void gemm_packbuf_fail(int mask);

/* ---- micro-kernels (internal to gemm*.c) ----

   A micro-kernel computes one MR x NR tile from a B micro-panel
     bp: k steps of NR contiguous elements, step p at bp + p*rsb (rsb == NR
         when packed; a row-major B with full NR-wide panels is read in place)
   and an A micro-panel which is either
     packed (rsa == 1, csa == PMR: column p at ap[p*PMR .. p*PMR+MR)), or
     read in place from a row-major A (csa == 1, rsa = its row stride),
   and writes the first `rows` rows and `cols` columns of C[i*rsc + j] (unit
   column stride), overwriting when accum == 0 and adding otherwise; the
   columns past `cols` are computed but masked off at the store, so a tile cut
   in n is written in place. The in-place A form is used when A is row-major
   and its packed copy would be used only a few times; it always reads all MR
   rows. PMR is the packed panel height: MR for the main kernels; the tail
   kernels (fewer rows, used for the last rows of A instead of a zero-padded
   full tile) read panels packed for the main kernel. The half-width kernels
   (NR/2 columns) serve a last micro-panel at most half full, reading the
   first NR/2 columns of an NR-wide packed panel. */
#define GEMM_UKR_DECLARE(NAME, T)                                                          \
    void NAME(int64_t k, const T *a, int64_t rsa, int64_t csa, const T *bp, int64_t rsb, T *c,   \
              int64_t rsc, int64_t rows, int64_t cols, int accum);
GEMM_UKR_DECLARE(gemm_ukr_f32_avx2, float)
GEMM_UKR_DECLARE(gemm_ukr_f64_avx2, double)
GEMM_UKR_DECLARE(gemm_ukrh_f32_avx2, float)
GEMM_UKR_DECLARE(gemm_ukrh_f64_avx2, double)
GEMM_UKR_DECLARE(gemm_ukr_f32_avx512, float)
GEMM_UKR_DECLARE(gemm_ukr_f64_avx512, double)
GEMM_UKR_DECLARE(gemm_ukrh_f32_avx512, float)
GEMM_UKR_DECLARE(gemm_ukrh_f64_avx512, double)
typedef void (*gemm_ukr_f32)(int64_t, const float *, int64_t, int64_t, const float *, int64_t,
                             float *, int64_t, int64_t, int64_t, int);
typedef void (*gemm_ukr_f64)(int64_t, const double *, int64_t, int64_t, const double *, int64_t,
                             double *, int64_t, int64_t, int64_t, int);
/* tails[r] (1 <= r < MR): a kernel for exactly r rows of an MR-row panel;
   the _half tables are the same for the half-width kernels */
extern const gemm_ukr_f32 gemm_tails_f32_avx512[];
extern const gemm_ukr_f64 gemm_tails_f64_avx512[];
extern const gemm_ukr_f32 gemm_tails_half_f32_avx512[];
extern const gemm_ukr_f64 gemm_tails_half_f64_avx512[];
extern const gemm_ukr_f32 gemm_tails_f32_avx2[];
extern const gemm_ukr_f64 gemm_tails_f64_avx2[];
extern const gemm_ukr_f32 gemm_tails_half_f32_avx2[];
extern const gemm_ukr_f64 gemm_tails_half_f64_avx2[];

/* The height of the next row tile with `rem` rows left, in tiles of th
   rows: the last th + th / 2 rows or fewer (at most cap) are one tile, so no
   tile of 1-3 rows (whose few accumulators leave the FMA pipe idle on
   latency) follows a full one: th 8 tiles 34 rows 8 8 8 10.  The driver's
   macro-kernel (gemm_dtype.h) and the small-product kernel tile by it. */
static inline int64_t gemm_tile_rows(int64_t th, int64_t cap, int64_t rem) {
    int64_t last = th + th / 2 < cap ? th + th / 2 : cap;
    return rem <= last ? rem : th;
}

/* X(1) X(2) ... X(12): the cases of a switch over a tile's rows (the small
   and narrow kernels' tiles are at most 12 rows, each a constant-size
   instance of one inlined loop) */
#define GEMM_ROWS_1_TO_12(X) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12)

/* Whole small products, C[m,n] = A[m,k] @ B[k,n] with A, B and C row-major
   (unit column strides; row strides rsa, rsb, rsc), read and written in
   place; C is overwritten, or with accum C += A @ B (the sum over k added
   to C, as a later pass over k):
     gemm_small:  the AVX-512 level's (gemm_small_avx512.h);
     gemm_narrow: at most one 256-bit vector wide (n <= 8 float32, 4
                  float64), AVX2 code (gemm_ukr_avx2.h). */
#define GEMM_WHOLE_DECLARE(NAME, T)                                                         \
    void NAME(int64_t m, int64_t n, int64_t k, const T *a, int64_t rsa, const T *b,         \
              int64_t rsb, T *c, int64_t rsc, int accum);
GEMM_WHOLE_DECLARE(gemm_small_f32_avx512, float)
GEMM_WHOLE_DECLARE(gemm_small_f64_avx512, double)
GEMM_WHOLE_DECLARE(gemm_narrow_f32_avx2, float)
GEMM_WHOLE_DECLARE(gemm_narrow_f64_avx2, double)

/* Matrix-vector products (m == 1 or n == 1) skip packing: y = M x with either
     dotrows:  M rows unit-stride, x contiguous:  y[i*incy] = sum_p M[i*rsm + p] x[p]
     axpyrows: M^T rows unit-stride, y contiguous: y[i] = sum_p x[p*incx] M[p*rsm + i]
   written once in gemm_gemv.h and compiled for each ISA level. */
#define GEMM_GEMV_DECLARE(SFX, T)                                                           \
    void gemm_dotrows_##SFX(int64_t m, int64_t k, const T *a, int64_t rsa, const T *x, T *y, \
                            int64_t incy);                                                 \
    void gemm_axpyrows_##SFX(int64_t k, int64_t n, const T *x, int64_t incx, const T *b,     \
                             int64_t rsb, T *y);                                            \
    void gemm_dots_##SFX(int64_t m, int64_t n, int64_t k, const T *a, int64_t rsa, const T *b, \
                         int64_t rsb, T *c, int64_t rsc);
GEMM_GEMV_DECLARE(f32_portable, float)
GEMM_GEMV_DECLARE(f64_portable, double)
GEMM_GEMV_DECLARE(f32_avx2, float)
GEMM_GEMV_DECLARE(f64_avx2, double)
GEMM_GEMV_DECLARE(f32_avx512, float)
GEMM_GEMV_DECLARE(f64_avx512, double)

/* GEMV_LANES partial sums per row of the dot form (gemm_gemv.h) */
#define GEMV_LANES 32
/* C (m x n, row stride rsc) = A B^T, A's m rows and B's n rows unit-stride
   along k (rsa, rsb apart): m x n dot products, GEMM_DOTS_LANES partial sums
   each, for products too narrow for the packed GEMM (a convolution's weight
   gradient with few input channels); the CPU's level, the same bits at every
   level (gemm_gemv.h gemm_dots) */
#define GEMM_DOTS_LANES 16
void gemm_dots_f32(int64_t m, int64_t n, int64_t k, const float *a, int64_t rsa, const float *b,
                   int64_t rsb, float *c, int64_t rsc);
void gemm_dots_f64(int64_t m, int64_t n, int64_t k, const double *a, int64_t rsa,
                   const double *b, int64_t rsb, double *c, int64_t rsc);

/* Transposing pack of a unit-row-stride B into NR-wide micro-panels, or of a
   row-major A into MR-tall ones (AVX2; also used at the AVX-512 level).
   nr is 6 or a multiple of 4 (float), even (double). */
void gemm_packbt_f32_avx2(int64_t kb, const float *src, int64_t csb, float *bp, int nr);
void gemm_packbt_f64_avx2(int64_t kb, const double *src, int64_t csb, double *bp, int nr);

/* Register tiles (MR x NR) of each kernel; the driver's block sizes live in gemm.c. */
#define GEMM_AVX2_F32_MR 6
#define GEMM_AVX2_F32_NR 16
#define GEMM_AVX2_F64_MR 6
#define GEMM_AVX2_F64_NR 8
/* AVX2 level: panels of a unit-row-stride A packed at once (gemm_dtype.h
   pack_rows). Transformer G^T @ X under PYAUTODIFF_ISA=avx2 on Zen 5: 8 was
   level with 2 and 4 (within 1-2%); 64 (every panel of the block, 64 write
   streams) lost 27-53%. */
#define GEMM_AVX2_APANELS 8
/* AVX2 level: panels of a row-major B packed at once (gemm_dtype.h pack_b;
   the AVX-512 level packs GEMM_BROWS_PANELS, gemm.c): 8 NR-wide panels, runs
   of 512 bytes of a row, against 32 (2 KiB runs written to 32 panels 16-32
   KiB apart).  PYAUTODIFF_ISA=avx2, Zen 5, 1 thread, the two interleaved in
   one process (per-thread CPU time, medians, three runs): float64 256^3
   3.3-5.1% faster (634 -> 603 us), float32 256^3 1.2-2.2%, (128x784) @
   (784x512) 0.4-3.8%, n >= 512 level (the packing alone, warm: float64
   256^3's B 0.50 -> 0.15 ns an element).  At the AVX-512 level 8 panels were
   level or slower (that product 3.5% slower). */
#define GEMM_AVX2_BPANELS 8
#define GEMM_AVX512_F32_MR 12
#define GEMM_AVX512_F32_NR 32
#define GEMM_AVX512_F64_MR 12
#define GEMM_AVX512_F64_NR 16
/* AVX-512 level: rows per full-width tile when A is read in place
   (gemm_dtype.h macro): the 8-row tail kernel, not the 12-row main one, whose
   twelve row addresses do not fit the registers beside the loop's (three
   reloads per k step). Zen 4, 1 thread, float32 in place: 1024x1024 @ 1024x64
   98.7 vs 74.1 GFLOP/s, 2048x256 @ 256x96 91 vs 83, 200x784 @ 784x128 104 vs
   98; 4096x512 @ 512x128 level. */
#define GEMM_AVX512_IMR 8

#endif
