#define _POSIX_C_SOURCE 200809L
/* alloc.c - every native allocation goes through here, so that tests can
 * count what is live and make the n-th allocation fail. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

atomic_llong ad_live_tensor_count;
atomic_llong ad_live_byte_count;

/* Test hook: when > 0, counts down; the allocation that brings it to 0 fails. */
static atomic_llong fail_countdown;

static bool injected_failure(void) {
    if (atomic_load_explicit(&fail_countdown, memory_order_relaxed) <= 0) return false;
    return atomic_fetch_sub(&fail_countdown, 1) == 1;
}

AD_API void ad_testing_fail_alloc_after(int64_t n) { atomic_store(&fail_countdown, n); }

void *ad_malloc(size_t n) {
    if (injected_failure()) return NULL;
    return malloc(n ? n : 1);
}

void *ad_calloc(size_t n) {
    if (injected_failure()) return NULL;
    return calloc(1, n ? n : 1);
}

void ad_mfree(void *p) { free(p); }

/* ---- a small cache of recently freed large data blocks ----------------------
 * A fresh multi-megabyte block costs a page fault per 4 KiB on first touch, so
 * large blocks are kept after release and handed out again to a request of
 * the same size class.  Cached blocks are not live (ad_live_bytes counts only
 * blocks in use), and a cache hit still honours the failure-injection hook. */
enum { CACHE_MIN = 256 * 1024, CACHE_SLOTS = 16 };
#define CACHE_MAX_BYTES ((size_t)128 << 20)

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    void *p;
    size_t size;
    uint64_t stamp; /* for evicting the oldest */
} cache[CACHE_SLOTS];
static size_t cache_bytes;
static uint64_t cache_clock;

/* The size actually allocated for n bytes: small blocks round to 64 bytes;
   large ones to an eighth of their leading power of two (waste <= 12.5%), so
   blocks of similar sizes share a class. */
static size_t block_size(size_t n) {
    if (n < CACHE_MIN) return n ? (n + 63) & ~(size_t)63 : 64;
    int lg = 63 - __builtin_clzll((unsigned long long)n);
    size_t g = (size_t)1 << (lg - 3);
    return (n + g - 1) & ~(g - 1);
}

static void *cache_take(size_t size) {
    void *p = NULL;
    pthread_mutex_lock(&cache_lock);
    int best = -1;
    for (int i = 0; i < CACHE_SLOTS; i++)
        if (cache[i].p && cache[i].size == size &&
            (best < 0 || cache[i].stamp > cache[best].stamp))
            best = i;
    if (best >= 0) {
        p = cache[best].p;
        cache[best].p = NULL;
        cache_bytes -= size;
    }
    pthread_mutex_unlock(&cache_lock);
    return p;
}

/* Keeps p (of block size `size`) if it fits, evicting the oldest blocks;
   returns false when the caller should free it. */
static bool cache_put(void *p, size_t size) {
    if (size < CACHE_MIN || size > CACHE_MAX_BYTES) return false;
    void *evict[CACHE_SLOTS];
    int ne = 0;
    pthread_mutex_lock(&cache_lock);
    for (;;) {
        int free_slot = -1, oldest = -1;
        for (int i = 0; i < CACHE_SLOTS; i++) {
            if (!cache[i].p) free_slot = free_slot < 0 ? i : free_slot;
            else if (oldest < 0 || cache[i].stamp < cache[oldest].stamp) oldest = i;
        }
        if (free_slot >= 0 && cache_bytes + size <= CACHE_MAX_BYTES) {
            cache[free_slot].p = p;
            cache[free_slot].size = size;
            cache[free_slot].stamp = ++cache_clock;
            cache_bytes += size;
            break;
        }
        /* oldest >= 0 here: a full table or too many bytes means something is cached */
        evict[ne++] = cache[oldest].p;
        cache_bytes -= cache[oldest].size;
        cache[oldest].p = NULL;
    }
    pthread_mutex_unlock(&cache_lock);
    for (int i = 0; i < ne; i++) free(evict[i]);
    return true;
}

void *ad_data_alloc(size_t n) {
    if (injected_failure()) return NULL;
    size_t size = block_size(n);
    if (size < n) return NULL; /* overflow */
    void *p = size >= CACHE_MIN ? cache_take(size) : NULL;
    if (!p && posix_memalign(&p, 64, size) != 0) return NULL;
    atomic_fetch_add_explicit(&ad_live_byte_count, (long long)n, memory_order_relaxed);
    return p;
}

void ad_data_free(void *p, size_t n) {
    if (!p) return;
    atomic_fetch_sub_explicit(&ad_live_byte_count, (long long)n, memory_order_relaxed);
    if (!cache_put(p, block_size(n))) free(p);
}

AD_API int64_t ad_live_tensors(void) { return atomic_load(&ad_live_tensor_count); }
AD_API int64_t ad_live_bytes(void) { return atomic_load(&ad_live_byte_count); }
AD_API void ad_free(void *p) { free(p); }
