#define _POSIX_C_SOURCE 200809L
/* alloc.c - every native allocation goes through here, so that tests can
 * count what is live and make the n-th allocation fail. */
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

void *ad_data_alloc(size_t n) {
    if (injected_failure()) return NULL;
    void *p = NULL;
    size_t rounded = (n + 63) & ~(size_t)63;
    if (rounded < n || posix_memalign(&p, 64, rounded ? rounded : 64) != 0) return NULL;
    atomic_fetch_add_explicit(&ad_live_byte_count, (long long)n, memory_order_relaxed);
    return p;
}

void ad_data_free(void *p, size_t n) {
    if (!p) return;
    atomic_fetch_sub_explicit(&ad_live_byte_count, (long long)n, memory_order_relaxed);
    free(p);
}

AD_API int64_t ad_live_tensors(void) { return atomic_load(&ad_live_tensor_count); }
AD_API int64_t ad_live_bytes(void) { return atomic_load(&ad_live_byte_count); }
AD_API void ad_free(void *p) { free(p); }
