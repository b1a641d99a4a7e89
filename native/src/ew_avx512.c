/* The elementwise kernels compiled for the AVX-512 flags (tools/build.py), called only after a CPU check. */
#include <immintrin.h>

#define EW_SFX avx512
#define EW_STREAM_BYTES 64
#define EW_STREAM_COPY1(d, s) _mm512_stream_si512((void *)(d), _mm512_loadu_si512((const void *)(s)))
#define EW_CVT4_F32(v, p) ((v) = (EW_NAME(vd4))_mm256_cvtps_pd(_mm_loadu_ps(p)))
#include "ew_kernels.h"
