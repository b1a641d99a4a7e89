/* ew.h - the elementwise kernel types and the per-ISA kernel tables
 * (ew_kernels.h, instantiated by ew_portable.c, ew_avx2.c, ew_avx512.c), and
 * the random fills and dropout (random_kernels.h, compiled with them). */
#ifndef AD_EW_H
#define AD_EW_H

#include "internal.h"

typedef void (*bin_kernel)(int64_t n, const void *a, int64_t sa, const void *b, int64_t sb,
                           void *y);
/* s: the op's float arguments (up to two; zeros when it has none) */
typedef void (*un_kernel)(int64_t n, const void *x, int64_t sx, void *y, const double *s);
/* contiguous float32 a op b written with non-temporal stores (ew_bin_nt_f32) */
typedef void (*bin_nt_kernel)(int64_t n, const float *a, const float *b, float *y);

/* One random fill or dropout (random_kernels.h): the output y (contiguous,
   dtype float32 or float64) from the seed's counter-based draws; dropout
   also reads x (contiguous, the same dtype). */
enum { EW_RAND_UNIFORM, EW_RAND_NORMAL, EW_RAND_DROPOUT };
typedef struct ew_random_job {
    int kind, dtype;
    uint64_t seed;
    uint64_t thr;  /* dropout: kept when the draw's top 53 bits are >= thr */
    double scale;  /* dropout: a kept element's factor */
    const void *x; /* dropout's input */
    void *y;
    /* float32 normal: simd_entries.h's Box-Muller at this ISA level (set by
       ew_random; NULL: the kernel's scalar form) */
    void (*box_muller_f32)(int64_t blocks, const int32_t *u, const int32_t *v, float *y);
} ew_random_job;
/* Fills j->y's n elements, split over the threads when large (elementwise.c) */
void ew_random(const ew_random_job *j, int64_t n);

/* dst[0, n) = src[0, n), the two not overlapping: a whole contiguous
   tensor's bytes (a clone, data copied in), split over the threads when
   large, non-temporal stores once source and copy outgrow the last-level
   cache (elementwise.c) */
void ew_copy(void *dst, const void *src, size_t n);

/* mse_loss's pass over the elements [i0, i1) at this machine's level
   (ew_kernels.h): (x - y)^2 into o, or with o NULL their sum, returned */
double ew_mse(int dt, const void *x, const void *y, void *o, int64_t i0, int64_t i1);

/* per ISA level: the kernel tables, and ew_stream_copy, a memcpy with
   non-temporal stores for outputs too large to stay in the last-level cache
   (a store then skips the read-for-ownership of the line it overwrites) */
#define EW_TABLES(SFX)                                                                 \
    extern const bin_kernel ew_bin_table_##SFX[AD_OP__COUNT][6];                        \
    extern const un_kernel ew_un_table_##SFX[AD_OP__COUNT][6];                          \
    void ew_stream_copy_##SFX(void *dst, const void *src, size_t n);                   \
    void ew_stream_fence_##SFX(void); /* after a run of ew_stream_copy calls */      \
    void ew_random_##SFX(const ew_random_job *j, int64_t i0, int64_t i1);             \
    double ew_mse_##SFX(int dt, const void *x, const void *y, void *o, int64_t i0, int64_t i1);
EW_TABLES(portable)
EW_TABLES(avx2)
EW_TABLES(avx512)
/* ADD SUB MUL DIV rows, from ew_avx2.c only: the AVX-512 level uses them too */
extern const bin_nt_kernel ew_bin_nt_f32_avx2[AD_OP__COUNT];

#endif
