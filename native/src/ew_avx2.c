/* The elementwise kernels compiled for -mavx2 -mfma (tools/build.py), called only after a CPU check. */
#define EW_SFX avx2
#include "ew_kernels.h"

#include <immintrin.h>
#include <string.h>

/* dst <- src with non-temporal stores past dst's first 32-byte boundary
   (memcpy for the ends); the fence orders them before the caller's later
   stores, such as the thread pool's completion flag */
void EW_NAME(ew_stream_copy)(void *dst, const void *src, size_t n) {
    char *d = dst;
    const char *s = src;
    size_t head = (size_t)(-(uintptr_t)d & 31);
    if (head > n) head = n;
    memcpy(d, s, head);
    d += head, s += head, n -= head;
    for (; n >= 128; n -= 128, d += 128, s += 128) {
        __m256i a = _mm256_loadu_si256((const __m256i *)s), b = _mm256_loadu_si256((const __m256i *)(s + 32));
        __m256i c = _mm256_loadu_si256((const __m256i *)(s + 64)), e = _mm256_loadu_si256((const __m256i *)(s + 96));
        _mm256_stream_si256((__m256i *)d, a);
        _mm256_stream_si256((__m256i *)(d + 32), b);
        _mm256_stream_si256((__m256i *)(d + 64), c);
        _mm256_stream_si256((__m256i *)(d + 96), e);
    }
    for (; n >= 32; n -= 32, d += 32, s += 32)
        _mm256_stream_si256((__m256i *)d, _mm256_loadu_si256((const __m256i *)s));
    _mm_sfence();
    memcpy(d, s, n);
}
