/* ew.h - the elementwise kernel types and the per-ISA kernel tables
 * (ew_kernels.h, instantiated by ew_portable.c, ew_avx2.c, ew_avx512.c). */
#ifndef AD_EW_H
#define AD_EW_H

#include "internal.h"

typedef void (*bin_kernel)(int64_t n, const void *a, int64_t sa, const void *b, int64_t sb,
                           void *y);
/* s: the op's float arguments (up to two; zeros when it has none) */
typedef void (*un_kernel)(int64_t n, const void *x, int64_t sx, void *y, const double *s);
/* contiguous float32 a op b written with non-temporal stores (ew_bin_nt_f32) */
typedef void (*bin_nt_kernel)(int64_t n, const float *a, const float *b, float *y);

/* per ISA level: the kernel tables, and ew_stream_copy, a memcpy with
   non-temporal stores for outputs too large to stay in the last-level cache
   (a store then skips the read-for-ownership of the line it overwrites) */
#define EW_TABLES(SFX)                                                                 \
    extern const bin_kernel ew_bin_table_##SFX[AD_OP__COUNT][6];                        \
    extern const un_kernel ew_un_table_##SFX[AD_OP__COUNT][6];                          \
    void ew_stream_copy_##SFX(void *dst, const void *src, size_t n);                   \
    void ew_stream_fence_##SFX(void); /* after a run of ew_stream_copy calls */
EW_TABLES(portable)
EW_TABLES(avx2)
EW_TABLES(avx512)
/* ADD SUB MUL DIV rows, from ew_avx2.c only: the AVX-512 level uses them too */
extern const bin_nt_kernel ew_bin_nt_f32_avx2[AD_OP__COUNT];

#endif
