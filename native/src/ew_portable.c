/* The elementwise kernels compiled for baseline x86-64 (or any CPU). */
#define EW_SFX portable
#include "ew_kernels.h"

#if defined(__SSE2__)
#include <immintrin.h>
#endif
#include <string.h>

/* dst <- src with non-temporal stores past dst's first 16-byte boundary
   (memcpy for the ends); the fence orders them before the caller's later
   stores, such as the thread pool's completion flag */
void EW_NAME(ew_stream_copy)(void *dst, const void *src, size_t n) {
    char *d = dst;
    const char *s = src;
    size_t head = (size_t)(-(uintptr_t)d & 15);
    if (head > n) head = n;
    memcpy(d, s, head);
    d += head, s += head, n -= head;
#if defined(__SSE2__)
    for (; n >= 64; n -= 64, d += 64, s += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)s), b = _mm_loadu_si128((const __m128i *)(s + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + 32)), e = _mm_loadu_si128((const __m128i *)(s + 48));
        _mm_stream_si128((__m128i *)d, a);
        _mm_stream_si128((__m128i *)(d + 16), b);
        _mm_stream_si128((__m128i *)(d + 32), c);
        _mm_stream_si128((__m128i *)(d + 48), e);
    }
#endif
#if defined(__SSE2__)
    _mm_sfence();
#endif
    memcpy(d, s, n);
}
