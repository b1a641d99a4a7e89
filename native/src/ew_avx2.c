/* The elementwise kernels compiled for -mavx2 -mfma (tools/build.py), called only after a CPU check. */
#include <immintrin.h>

#define EW_SFX avx2
#define EW_STREAM_BYTES 32
#define EW_STREAM_COPY1(d, s) \
    _mm256_stream_si256((__m256i *)(d), _mm256_loadu_si256((const __m256i *)(s)))
#define EW_STREAM_F32(d, v) _mm256_stream_ps((d), (__m256)(v))
#define EW_CVT4_F32(v, p) ((v) = (EW_NAME(vd4))_mm256_cvtps_pd(_mm_loadu_ps(p)))
#include "ew_kernels.h"
