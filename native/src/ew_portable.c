/* The elementwise kernels compiled for baseline x86-64 (or any CPU). */
#if defined(__SSE2__)
#include <immintrin.h>
#define EW_STREAM_BYTES 16
#define EW_STREAM_COPY1(d, s) _mm_stream_si128((__m128i *)(d), _mm_loadu_si128((const __m128i *)(s)))
#else
#define EW_STREAM_BYTES 0
#endif
#define EW_SFX portable
#include "ew_kernels.h"
