/* ew.h - the elementwise kernel types and the per-ISA kernel tables
 * (ew_kernels.h, instantiated by ew_portable.c, ew_avx2.c, ew_avx512.c). */
#ifndef AD_EW_H
#define AD_EW_H

#include "internal.h"

typedef void (*bin_kernel)(int64_t n, const void *a, int64_t sa, const void *b, int64_t sb,
                           void *y);
/* s: the op's float arguments (up to two; zeros when it has none) */
typedef void (*un_kernel)(int64_t n, const void *x, int64_t sx, void *y, const double *s);

/* A double argument in an integer kernel goes through a saturating int64
   conversion (a direct out-of-range cast is undefined behaviour in C). */
static inline int64_t sat_i64(double v) {
    if (v != v) return 0;
    if (v >= 9.2233720368547758e18) return INT64_MAX;
    if (v <= -9.2233720368547758e18) return INT64_MIN;
    return (int64_t)v;
}
#define EW_TABLES(SFX)                                                                 \
    extern const bin_kernel ew_bin_table_##SFX[AD_OP__COUNT][6];                        \
    extern const un_kernel ew_un_table_##SFX[AD_OP__COUNT][6];
EW_TABLES(portable)
EW_TABLES(avx2)
EW_TABLES(avx512)

#endif
