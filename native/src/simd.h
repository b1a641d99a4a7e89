/* simd.h - run-time dispatched vector kernels for elementwise float32 math
 * (simd_avx2.c is compiled with -mavx2 -mfma; callers check the CPU first). */
#ifndef AD_SIMD_H
#define AD_SIMD_H

#include <stdint.h>

/* y[i] = f(x[i * sx]) for i < n, y contiguous.  Results depend only on the
   input value, never on the element's position, length or stride (tails go
   through the same vector code), so any split of a loop gives the same bits. */
#define SIMD_MAPS(X) \
    X(exp, EXP) X(tanh, TANH) X(sigmoid, SIGMOID) X(silu, SILU) X(gelu, GELU) X(log, LOG) \
    X(erf, ERF) X(gelu_erf, GELU_ERF)
#define SIMD_DECLARE(OP, OPU)                                                            \
    void ad_##OP##_f32_avx2(int64_t n, const float *x, int64_t sx, float *y);           \
    void ad_##OP##_f32_avx512(int64_t n, const float *x, int64_t sx, float *y);
/* simd_avx512.c (AVX-512F) gives the same results as simd_avx2.c, 16 lanes */
SIMD_MAPS(SIMD_DECLARE)

/* Box-Muller over blocks of 16 pairs (simd_entries.h, random_kernels.h) */
void ad_box_muller_f32_avx2(int64_t blocks, const int32_t *u, const int32_t *v, float *y);
void ad_box_muller_f32_avx512(int64_t blocks, const int32_t *u, const int32_t *v, float *y);

/* The same maps for contiguous x and y, y written with non-temporal stores
   (an output past the last-level cache, straight from the registers instead
   of through a buffer and a streaming copy); no fence: the caller fences
   once after its last call. */
#define SIMD_DECLARE_NT(OP, OPU)                                                         \
    void ad_##OP##_f32_avx2_nt(int64_t n, const float *x, float *y);                    \
    void ad_##OP##_f32_avx512_nt(int64_t n, const float *x, float *y);
SIMD_MAPS(SIMD_DECLARE_NT)

/* One contiguous lane of the softmax family (simd_math.h's row_softmax):
   mode 0 softmax into y, 1 log_softmax into y, 2 logsumexp into y[0]; returns
   0 (nothing written) when the lane's maximum is not finite. */
int ad_softmax_row_f32_avx2(const float *x, float *y, int64_t len, int mode);
int ad_softmax_row_f32_avx512(const float *x, float *y, int64_t len, int mode);

/* nl lanes side by side, strided along the dim (simd_math.h's cols_softmax):
   lane k's element r at x[r xs + k], y[r ys + k] (modes 0, 1) or y[k yk]
   (mode 2), nl at most SIMD_COLS_AVX2 / SIMD_COLS_AVX512 (the vector width);
   each lane gets ad_softmax_row_f32's bits.  0 when a lane needs the row
   kernel's other paths (a maximum or a softmax sum that is not finite): y
   may have been written, and the caller runs the lanes again. */
enum { SIMD_COLS_AVX2 = 8, SIMD_COLS_AVX512 = 16 };
int ad_softmax_cols_f32_avx2(const float *x, int64_t xs, float *y, int64_t ys, int64_t yk,
                             int64_t len, int nl, int mode);
int ad_softmax_cols_f32_avx512(const float *x, int64_t xs, float *y, int64_t ys, int64_t yk,
                               int64_t len, int nl, int mode);

/* cross_entropy's rows (simd_math.h's row_lse / row_softmax_scaled): log sum
   e^x in double into *lse; softmax(x) s into y.  0 (nothing written) when the
   lane's maximum is not finite. */
int ad_lse_row_f32_avx2(const float *x, int64_t len, double *lse);
int ad_lse_row_f32_avx512(const float *x, int64_t len, double *lse);
int ad_softmax_scaled_row_f32_avx2(const float *x, float *y, int64_t len, double s);
int ad_softmax_scaled_row_f32_avx512(const float *x, float *y, int64_t len, double s);

/* softmax's (mode 0) and log_softmax's (mode 1) gradient over rows [r0, r1)
   of len contiguous elements (simd_math.h's row_softmax_grad), y the
   forward's output, g its gradient */
void ad_softmax_grad_rows_f32_avx2(const float *y, const float *g, float *dx, int64_t r0,
                                   int64_t r1, int64_t len, int mode);
void ad_softmax_grad_rows_f32_avx512(const float *y, const float *g, float *dx, int64_t r0,
                                     int64_t r1, int64_t len, int mode);

/* the same over `lanes` lanes side by side, lane k's element r at y[r rs +
   k] (simd_math.h's cols_softmax_grad): each lane row_softmax_grad's bits */
void ad_softmax_grad_cols_f32_avx2(const float *y, const float *g, float *dx, int64_t rs,
                                   int64_t len, int64_t lanes, int mode);
void ad_softmax_grad_cols_f32_avx512(const float *y, const float *g, float *dx, int64_t rs,
                                     int64_t len, int64_t lanes, int mode);

/* The gradient maps ad_<op>_grad_f32_<isa>(n, x, g, sg, dx): dx = g d over
   n contiguous elements, g contiguous (sg = 1) or one value (sg = 0), x the
   op's input or (marked y) its output: gelu_erf's g (Phi(x) + x phi(x)),
   gelu's (the tanh form, simd_math.h's v_gelu_grad), and tanh's (y), sigmoid's
   (y), relu's (y) and silu's, which give their recorded formulas' bits
   (simd_math.h's v_tanh_grad ...). */
#define SIMD_GRADS(X) X(gelu_erf) X(gelu) X(tanh) X(sigmoid) X(relu) X(silu)
#define SIMD_DECLARE_GRAD(OP)                                                                 \
    void ad_##OP##_grad_f32_avx2(int64_t n, const float *x, const float *g, int64_t sg,       \
                                 float *dx);                                                  \
    void ad_##OP##_grad_f32_avx512(int64_t n, const float *x, const float *g, int64_t sg,     \
                                   float *dx);
SIMD_GRADS(SIMD_DECLARE_GRAD)
/* layer_norm over rows [r0, r1) of len contiguous elements (simd_math.h's
   row_layer_norm / row_layer_norm_grad; w, b, dw, db may be NULL; dw and db
   accumulate) */
void ad_layer_norm_rows_f32_avx2(const float *x, const float *w, const float *b, float *y,
                                 int64_t r0, int64_t r1, int64_t len, double eps);
void ad_layer_norm_rows_f32_avx512(const float *x, const float *w, const float *b, float *y,
                                   int64_t r0, int64_t r1, int64_t len, double eps);
void ad_layer_norm_grad_rows_f32_avx2(const float *x, const float *g, const float *w, float *dx,
                                      float *dw, float *db, int64_t r0, int64_t r1, int64_t len,
                                      double eps);
void ad_layer_norm_grad_rows_f32_avx512(const float *x, const float *g, const float *w,
                                        float *dx, float *dw, float *db, int64_t r0, int64_t r1,
                                        int64_t len, double eps);

#endif
