#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* MADV_HUGEPAGE */
/* alloc.c - every native allocation goes through here, so that tests can
 * count what is live and make the n-th allocation fail. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

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

bool ad_alloc_failure_armed(void) {
    return atomic_load_explicit(&fail_countdown, memory_order_relaxed) > 0;
}

/* ad_testing_poison_allocs: the byte new blocks of ad_malloc and
   ad_small_alloc are filled with, or -1 (off), so that a test sees a field
   left uninitialised (an external storage's seqlock once started odd in
   reused memory, and its first write waited forever) */
static atomic_int poison_byte = -1;

AD_API void ad_testing_poison_allocs(int byte) {
    atomic_store_explicit(&poison_byte, byte < 0 ? -1 : byte & 0xff, memory_order_relaxed);
}

static void *poisoned(void *p, size_t n) {
    int b = atomic_load_explicit(&poison_byte, memory_order_relaxed);
    if (b >= 0 && p) memset(p, b, n);
    return p;
}

void *ad_malloc(size_t n) {
    if (injected_failure()) return NULL;
    return poisoned(malloc(n ? n : 1), n);
}

void *ad_malloc_aligned(size_t n, void **raw) {
    *raw = ad_malloc(n + 64);
    return *raw ? (void *)(((uintptr_t)*raw + 63) & ~(uintptr_t)63) : NULL;
}

void *ad_calloc(size_t n) {
    if (injected_failure()) return NULL;
    return calloc(1, n ? n : 1);
}

void ad_mfree(void *p) { free(p); }

/* ---- per-thread free lists of small blocks -------------------------------------
 * glibc's per-thread cache keeps blocks up to 1032 bytes; a larger one, such
 * as a storage holding a 1000-element float32 tensor's data inline
 * (tensor.c), went through its arena's bins: about 450 instructions for a
 * malloc and free pair (callgrind), a third of a 1000-element add's native
 * work.  Even from glibc's cache a pair costs about 130 (free's checks), so
 * the tensor headers and the small storages come from here too.  Blocks of
 * at most SMALL_MAX bytes a thread frees are kept on that thread's lists,
 * one per 64-byte class, SMALL_KEEP each (at most about 1.3 MiB per thread),
 * and handed out again by class; a thread's lists are freed when it exits.
 * The blocks are plain malloc blocks of the class's size, so any thread may
 * take or free any of them.  Every thread's lists are also linked from
 * small_all, a global: LeakSanitizer does not look into thread-local
 * storage (.ci/run: use_tls=0), and would call the kept blocks leaked. */
enum { SMALL_MAX = 4096 + 512, SMALL_CLASSES = SMALL_MAX / 64, SMALL_KEEP = 8 };

typedef struct small_lists {
    void *head[SMALL_CLASSES]; /* each block's first word links the next */
    uint8_t n[SMALL_CLASSES];
    struct small_lists *prev, *next; /* in small_all */
} small_lists;

static _Thread_local small_lists *tl_small;
static small_lists *small_all;
static pthread_mutex_t small_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_key_t small_key;
static pthread_once_t small_once = PTHREAD_ONCE_INIT;

static void small_unlink(small_lists *l) {
    if (l->prev) l->prev->next = l->next;
    else small_all = l->next;
    if (l->next) l->next->prev = l->prev;
}

static void small_lists_free(small_lists *l) {
    for (int c = 0; c < SMALL_CLASSES; c++)
        while (l->head[c]) {
            void *p = l->head[c];
            l->head[c] = *(void **)p;
            free(p);
        }
    free(l);
}

/* the thread's exit (its key's destructor): a block freed later in the exit
   makes new lists, which the destructor's next round frees */
static void small_exit(void *arg) {
    small_lists *l = arg;
    tl_small = NULL;
    pthread_mutex_lock(&small_lock);
    small_unlink(l);
    pthread_mutex_unlock(&small_lock);
    small_lists_free(l);
}

static bool small_key_ok; /* no key (all of the process's taken): no lists, plain free */

static void small_key_init(void) { small_key_ok = !pthread_key_create(&small_key, small_exit); }

static small_lists *small_lists_new(void) {
    pthread_once(&small_once, small_key_init);
    if (!small_key_ok) return NULL;
    small_lists *l = calloc(1, sizeof *l);
    if (!l) return NULL;
    if (pthread_setspecific(small_key, l)) {
        free(l);
        return NULL;
    }
    pthread_mutex_lock(&small_lock);
    l->next = small_all;
    if (small_all) small_all->prev = l;
    small_all = l;
    pthread_mutex_unlock(&small_lock);
    return tl_small = l;
}

/* the class of an n-byte block, -1 outside the kept sizes */
static int small_class(size_t n) { return n && n <= SMALL_MAX ? (int)((n - 1) / 64) : -1; }

void *ad_small_alloc(size_t n) {
    if (injected_failure()) return NULL;
    int c = AD_EXACT_ALLOC ? -1 : small_class(n); /* exact: malloc's own size */
    if (c < 0) return poisoned(malloc(n ? n : 1), n);
    small_lists *l = tl_small;
    void *p = l ? l->head[c] : NULL;
    if (p) {
        l->head[c] = *(void **)p;
        l->n[c]--;
        return poisoned(p, n);
    }
    return poisoned(malloc(64 * (size_t)(c + 1)), n);
}

void ad_small_free(void *p, size_t n) {
    int c = AD_EXACT_ALLOC ? -1 : small_class(n);
    small_lists *l = tl_small;
    if (p && c >= 0 && !l) l = small_lists_new();
    if (!p || c < 0 || !l || l->n[c] >= SMALL_KEEP) {
        free(p);
        return;
    }
    *(void **)p = l->head[c];
    l->head[c] = p;
    l->n[c]++;
}

/* ---- caches of recently freed data blocks ------------------------------------
 * A fresh multi-megabyte block costs a page fault per 4 KiB on first touch,
 * and a mid-sized one (a 64x64 matmul's output) costs glibc a consolidation
 * of its fast bins on every malloc, so freed blocks of both kinds are kept
 * and handed out again to a request of the same size class.  Two separate
 * caches, so that churn of mid-sized blocks never evicts the large ones.
 * Cached blocks are not live (ad_live_bytes counts only blocks in use), and
 * a cache hit still honours the failure-injection hook. */
/* 64 slots: a one-block transformer's training step (d = 128, batch 32 x 64)
   frees and takes back a few dozen blocks of 256 KiB - 4 MiB per step; with
   16 they were evicted before their reuse (2500 page faults and 4.7 ms of
   system time in a 39 ms step, against none with 64). */
enum { MID_MIN = 4 * 1024, LARGE_MIN = 256 * 1024, CACHE_SLOTS = 64 };

/* slot[0 .. n-1] from the oldest block to the newest: a take scans from the
   newest down and usually stops at once (a loop frees and takes back the
   same size), a put evicts from the oldest end.  Keeping the slots in that
   order costs a short memmove; a scan of all 64 slots for the newest match
   and the oldest cost a 16384-element add about 1000 instructions, a sixth
   of its work outside the kernel. */
typedef struct {
    pthread_mutex_t lock;
    size_t max, max_bytes; /* largest block kept, most bytes kept */
    size_t bytes;
    int n;
    struct {
        void *p;
        size_t size;
    } slot[CACHE_SLOTS];
} block_cache;

static block_cache mid_cache = {
    .lock = PTHREAD_MUTEX_INITIALIZER, .max = LARGE_MIN - 1, .max_bytes = 1 << 20};
static block_cache large_cache = {.lock = PTHREAD_MUTEX_INITIALIZER,
                                  .max = (size_t)128 << 20, .max_bytes = (size_t)128 << 20};

static block_cache *cache_for(size_t size) {
    if (AD_EXACT_ALLOC) return NULL; /* no reuse: a stale pointer's read is reported */
    return size >= LARGE_MIN ? &large_cache : size >= MID_MIN ? &mid_cache : NULL;
}

/* The size actually allocated for n bytes: blocks round to 64 bytes below
   MID_MIN, above it to an eighth of their leading power of two (waste <=
   12.5%), so blocks of similar sizes share a class. */
static size_t block_size(size_t n) {
    if (AD_EXACT_ALLOC) return n ? n : 1;
    if (n < MID_MIN) return n ? (n + 63) & ~(size_t)63 : 64;
    int lg = 63 - __builtin_clzll((unsigned long long)n);
    size_t g = (size_t)1 << (lg - 3);
    return (n + g - 1) & ~(g - 1);
}

static void cache_remove(block_cache *c, int i) {
    c->bytes -= c->slot[i].size;
    c->n--;
    memmove(&c->slot[i], &c->slot[i + 1], (size_t)(c->n - i) * sizeof c->slot[0]);
}

/* the newest cached block of this size, or NULL */
static void *cache_take(block_cache *c, size_t size) {
    void *p = NULL;
    pthread_mutex_lock(&c->lock);
    for (int i = c->n - 1; i >= 0; i--)
        if (c->slot[i].size == size) {
            p = c->slot[i].p;
            cache_remove(c, i);
            break;
        }
    pthread_mutex_unlock(&c->lock);
    return p;
}

/* Keeps p (of block size `size`) as the newest, evicting the oldest blocks
   to make room; returns false when the caller should free it. */
static bool cache_put(block_cache *c, void *p, size_t size) {
    if (size > c->max || size > c->max_bytes) return false;
    void *evict[CACHE_SLOTS];
    int ne = 0;
    pthread_mutex_lock(&c->lock);
    while (c->n == CACHE_SLOTS || c->bytes + size > c->max_bytes) {
        evict[ne++] = c->slot[0].p; /* n > 0: a full table or too many bytes */
        cache_remove(c, 0);
    }
    c->slot[c->n].p = p;
    c->slot[c->n].size = size;
    c->n++;
    c->bytes += size;
    pthread_mutex_unlock(&c->lock);
    for (int i = 0; i < ne; i++) free(evict[i]);
    return true;
}

/* ---- huge pages for large blocks ----------------------------------------------
 * A fresh block of HUGE_MIN bytes or more is aligned to HUGE_PAGE and advised
 * MADV_HUGEPAGE, as numpy advises its arrays from 4 MiB on: where the
 * kernel's transparent huge pages are in "madvise" mode (a common default)
 * the block is then mapped in 2 MiB pages, one TLB entry for 512, and a
 * sequential read is not cut at every 4 KiB page boundary, where the
 * hardware prefetcher stops.  A vector @ (4096x4096) float32 product (its
 * 64 MiB read once) took 2.43 instead of 2.78 ms on a Zen 4 (27.6 against
 * 24.1 GB/s, medians of 41, the same process), numpy's 2.42.  The block
 * cache keeps such blocks advised.  PYAUTODIFF_HUGEPAGES=0 turns it off. */
enum { HUGE_MIN = 4 << 20, HUGE_PAGE = 2 << 20 };

bool ad_env_switch(atomic_int *cache, const char *name) {
    int v = atomic_load_explicit(cache, memory_order_relaxed);
    if (v < 0) {
        const char *env = getenv(name);
        v = !(env && env[0] == '0' && !env[1]);
        atomic_store_explicit(cache, v, memory_order_relaxed);
    }
    return v;
}

static bool huge_pages(void) {
    static atomic_int on = -1;
    return ad_env_switch(&on, "PYAUTODIFF_HUGEPAGES");
}

static void *data_block_new(size_t size) {
    void *p = NULL;
    bool huge = size >= HUGE_MIN && huge_pages();
    if (posix_memalign(&p, huge ? HUGE_PAGE : 64, size) != 0) return NULL;
#ifdef MADV_HUGEPAGE
    if (huge) (void)madvise(p, size & ~(size_t)(HUGE_PAGE - 1), MADV_HUGEPAGE); /* advice only */
#endif
    return p;
}

void *ad_data_alloc(size_t n) {
    if (injected_failure()) return NULL;
    size_t size = block_size(n);
    if (size < n) return NULL; /* overflow */
    block_cache *c = cache_for(size);
    void *p = c ? cache_take(c, size) : NULL;
    if (!p && !(p = data_block_new(size))) return NULL;
    ad_live_bytes_add((long long)n); /* memory_stats: raises the peak */
    return p;
}

void ad_data_free(void *p, size_t n) {
    if (!p) return;
    atomic_fetch_sub_explicit(&ad_live_byte_count, (long long)n, memory_order_relaxed);
    size_t size = block_size(n);
    block_cache *c = cache_for(size);
    if (!c || !cache_put(c, p, size)) free(p);
}

/* ---- fork ---------------------------------------------------------------------
 * The only registration of fork handlers in the library.  Before fork() every
 * native lock is taken, in the order code paths nest them (a store's lock
 * is held while its sums allocate and run parallel loops; a parallel loop's
 * kernels may allocate), so the fork waits for whatever is in flight and the
 * child's copies of the caches, the pool and the stores are consistent.  The
 * parent then unlocks; the child, whose other threads are gone, re-creates
 * the locks. */
static void fork_prepare(void) {
    ad_storage_writes_fork_prepare(); /* a write runs parallel loops and allocates */
    ad_gradstore_fork_prepare();
    par_fork_prepare();
    pthread_mutex_lock(&mid_cache.lock);
    pthread_mutex_lock(&large_cache.lock);
    pthread_mutex_lock(&small_lock);
}

static void fork_parent(void) {
    pthread_mutex_unlock(&small_lock);
    pthread_mutex_unlock(&large_cache.lock);
    pthread_mutex_unlock(&mid_cache.lock);
    par_fork_parent();
    ad_gradstore_fork_parent();
    ad_storage_writes_fork_parent();
}

static void fork_child(void) {
    pthread_mutex_init(&small_lock, NULL);
    /* the other threads' lists: those threads are gone in the child */
    for (small_lists *l = small_all, *next; l; l = next) {
        next = l->next;
        if (l != tl_small) {
            small_unlink(l);
            small_lists_free(l);
        }
    }
    pthread_mutex_init(&large_cache.lock, NULL);
    pthread_mutex_init(&mid_cache.lock, NULL);
    par_fork_child();
    ad_gradstore_fork_child();
    ad_storage_writes_fork_child();
}

__attribute__((constructor)) static void register_fork_handlers(void) {
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

AD_API int64_t ad_live_tensors(void) { return atomic_load(&ad_live_tensor_count); }
AD_API int64_t ad_live_bytes(void) { return atomic_load(&ad_live_byte_count); }
AD_API void ad_free(void *p) { free(p); }
