/* The elementwise kernels compiled for the AVX-512 flags (tools/build.py), called only after a CPU check. */
#define EW_SFX avx512
#include "ew_kernels.h"

#include <immintrin.h>
#include <string.h>

/* dst <- src with non-temporal stores past dst's first 64-byte boundary
   (memcpy for the ends); the fence orders them before the caller's later
   stores, such as the thread pool's completion flag */
void EW_NAME(ew_stream_copy)(void *dst, const void *src, size_t n) {
    char *d = dst;
    const char *s = src;
    size_t head = (size_t)(-(uintptr_t)d & 63);
    if (head > n) head = n;
    memcpy(d, s, head);
    d += head, s += head, n -= head;
    for (; n >= 256; n -= 256, d += 256, s += 256) {
        __m512i a = _mm512_loadu_si512((const void *)s), b = _mm512_loadu_si512((const void *)(s + 64));
        __m512i c = _mm512_loadu_si512((const void *)(s + 128)), e = _mm512_loadu_si512((const void *)(s + 192));
        _mm512_stream_si512((void *)d, a);
        _mm512_stream_si512((void *)(d + 64), b);
        _mm512_stream_si512((void *)(d + 128), c);
        _mm512_stream_si512((void *)(d + 192), e);
    }
    for (; n >= 64; n -= 64, d += 64, s += 64)
        _mm512_stream_si512((void *)d, _mm512_loadu_si512((const void *)s));
    _mm_sfence();
    memcpy(d, s, n);
}
