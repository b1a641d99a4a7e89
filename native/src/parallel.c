/* A persistent pthread pool behind par_for.

   Workers are created lazily on the first parallel loop and then live for the
   process. A loop is published by bumping a generation counter; workers spin
   briefly on it (a GEMM issues loops back to back, microseconds apart) and
   then sleep on a condition variable. Chunks are claimed with an atomic
   counter, so a worker that wakes late simply finds nothing left to do.
   One loop runs at a time: a caller that finds the pool busy runs its loop
   inline instead of queueing behind another thread's work. */
#define _GNU_SOURCE
#include "parallel.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "../include/pyautodiff.h"
#include "internal.h"

#define PAR_MAX_THREADS 256
#define PAR_SPIN 20000

static atomic_int g_num_threads;            /* 0 until first read */
static pthread_once_t g_threads_once = PTHREAD_ONCE_INIT;

static pthread_mutex_t g_use = PTHREAD_MUTEX_INITIALIZER;   /* one loop at a time */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;  /* guards the sleeps */
static pthread_cond_t g_work_cv = PTHREAD_COND_INITIALIZER;
static pthread_cond_t g_done_cv = PTHREAD_COND_INITIALIZER;
static int g_workers;                        /* created so far; under g_use */

/* The published loop. g_claim packs generation (high 32 bits), chunk count
   (16 bits) and next unclaimed chunk (16 bits) into one word, so a worker
   still finishing an old loop can never claim a chunk of a newer one; the
   job fields below are only read after a successful claim, and are only
   rewritten once every claimed chunk has finished (g_pending == 0). */
static void (*g_fn)(void *, int64_t, int64_t);
static void *g_ctx;
static int64_t g_n;
static _Atomic uint64_t g_claim;
static atomic_uint g_gen;
static atomic_int g_pending;                 /* chunks not yet finished */
static atomic_int g_caller_cpu;              /* where the loop's caller runs, or -1 */

#if defined(__x86_64__) || defined(__i386__)
#define CPU_RELAX() __builtin_ia32_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

static void init_threads(void)
{
    int n = 0;
    const char *env = getenv("PYAUTODIFF_NUM_THREADS");
    if (env && *env) {
        char *end;
        long v = strtol(env, &end, 10);
        if (*end == '\0' && v >= 1)
            n = v > PAR_MAX_THREADS ? PAR_MAX_THREADS : (int)v;
    }
    if (n == 0) { /* the CPUs this process may run on (taskset, cgroup cpusets) */
        cpu_set_t set;
        long c = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                             : sysconf(_SC_NPROCESSORS_ONLN);
        n = c < 1 ? 1 : c > PAR_MAX_THREADS ? PAR_MAX_THREADS : (int)c;
    }
    int zero = 0;
    atomic_compare_exchange_strong(&g_num_threads, &zero, n);
}

int par_num_threads(void)
{
    int n = atomic_load_explicit(&g_num_threads, memory_order_relaxed);
    if (n == 0) {
        pthread_once(&g_threads_once, init_threads);
        n = atomic_load(&g_num_threads);
    }
    return n;
}

AD_API ad_status ad_set_num_threads(int n)
{
    if (n < 1)
        return ad_fail(AD_ERR_VALUE, "ad_set_num_threads: the thread count must be >= 1, got %d",
                       n);
    pthread_once(&g_threads_once, init_threads);
    atomic_store(&g_num_threads, n > PAR_MAX_THREADS ? PAR_MAX_THREADS : n);
    return AD_OK;
}

AD_API int ad_get_num_threads(void)
{
    return par_num_threads();
}

static void leave_cpu(int cpu);

/* Claims and runs chunks of loop `gen` until none is left; a worker first
   steps off its caller's CPU once it has a chunk to run. */
static void run_chunks(unsigned gen, int worker)
{
    uint64_t v = atomic_load_explicit(&g_claim, memory_order_acquire);
    for (;;) {
        unsigned idx = (unsigned)(v & 0xffff), chunks = (unsigned)((v >> 16) & 0xffff);
        if ((unsigned)(v >> 32) != gen || idx >= chunks)
            return;
        if (!atomic_compare_exchange_weak_explicit(&g_claim, &v, v + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        if (worker) {
            leave_cpu(atomic_load_explicit(&g_caller_cpu, memory_order_relaxed));
            worker = 0;
        }
        g_fn(g_ctx, g_n * idx / chunks, g_n * (idx + 1) / chunks);
        if (atomic_fetch_sub(&g_pending, 1) == 1) {
            pthread_mutex_lock(&g_lock);
            pthread_cond_broadcast(&g_done_cv);
            pthread_mutex_unlock(&g_lock);
        }
        v = atomic_load_explicit(&g_claim, memory_order_acquire);
    }
}

/* The scheduler can leave a woken worker queued on its waker's CPU while
   another CPU idles: a newly created thread starts there, and two threads
   that take turns are both "cache hot", which the load balancer will not
   move. On 2 cores that turns a parallel loop into a slower serial one
   (measured: a 2-thread 256^3 matmul at 160 us instead of 72). A worker that
   finds itself on the caller's CPU therefore steps off it: it narrows its
   affinity to the other allowed CPUs, which moves it now, then restores the
   set it had, so it stays free to run anywhere later (an affinity change made
   to a pool worker from outside in between would be undone). Only a worker
   that has claimed a chunk moves. */
static void leave_cpu(int cpu)
{
    if (cpu < 0 || sched_getcpu() != cpu)
        return;
    cpu_set_t all, others;
    if (sched_getaffinity(0, sizeof all, &all) != 0 || !CPU_ISSET(cpu, &all))
        return;
    others = all;
    CPU_CLR(cpu, &others);
    if (CPU_COUNT(&others) > 0 && sched_setaffinity(0, sizeof others, &others) == 0)
        sched_setaffinity(0, sizeof all, &all);
}

static void *worker_main(void *arg)
{
    unsigned seen = (unsigned)(uintptr_t)arg;
    for (;;) {
        unsigned gen;
        int spin = 0;
        while ((gen = atomic_load_explicit(&g_gen, memory_order_acquire)) == seen) {
            if (++spin < PAR_SPIN) {
                CPU_RELAX();
                continue;
            }
            pthread_mutex_lock(&g_lock);
            while ((gen = atomic_load(&g_gen)) == seen)
                pthread_cond_wait(&g_work_cv, &g_lock);
            pthread_mutex_unlock(&g_lock);
            break;
        }
        seen = gen;
        run_chunks(gen, 1);
    }
    return NULL;
}

/* A forked child has none of the parent's workers, and a loop that was
   running in the parent never finishes there: start the pool afresh. (Even
   without this a child would not hang, only run loops on one thread, since
   the caller itself claims every chunk nobody else takes.) */
static void pool_after_fork_child(void)
{
    pthread_mutex_init(&g_use, NULL);
    pthread_mutex_init(&g_lock, NULL);
    pthread_cond_init(&g_work_cv, NULL);
    pthread_cond_init(&g_done_cv, NULL);
    g_workers = 0;
}

static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;
static void register_atfork(void) { pthread_atfork(NULL, NULL, pool_after_fork_child); }

/* Under g_use. Returns how many workers exist (may be fewer than asked). */
static int ensure_workers(int want)
{
    pthread_once(&g_atfork_once, register_atfork);
    while (g_workers < want) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &attr, worker_main,
                                (void *)(uintptr_t)atomic_load(&g_gen));
        pthread_attr_destroy(&attr);
        if (rc != 0)
            break;
        g_workers++;
    }
    return g_workers;
}

static void par_run(int64_t n, int dyn, void (*fn)(void *ctx, int64_t begin, int64_t end),
                    void *ctx)
{
    int threads = par_num_threads();
    if (n <= 0)
        return;
    if (n == 1 || threads == 1 || pthread_mutex_trylock(&g_use) != 0) {
        fn(ctx, 0, n);
        return;
    }
    int workers = ensure_workers(threads - 1); /* more may exist from an earlier setting */
    int avail = workers + 1 < threads ? workers + 1 : threads;
    int chunks = (int)(n < avail ? n : avail);
    if (dyn && chunks > 1)
        chunks = (int)(n < 0xffff ? n : 0xffff);
    if (chunks <= 1) {
        pthread_mutex_unlock(&g_use);
        fn(ctx, 0, n);
        return;
    }
    unsigned gen = atomic_load(&g_gen) + 1;
    g_fn = fn;
    g_ctx = ctx;
    g_n = n;
    atomic_store_explicit(&g_caller_cpu, sched_getcpu(), memory_order_relaxed);
    atomic_store(&g_pending, chunks);
    atomic_store_explicit(&g_claim, (uint64_t)gen << 32 | (uint64_t)chunks << 16,
                          memory_order_release);
    pthread_mutex_lock(&g_lock);
    atomic_store_explicit(&g_gen, gen, memory_order_release);
    pthread_cond_broadcast(&g_work_cv);
    pthread_mutex_unlock(&g_lock);

    run_chunks(gen, 0);

    int spin = 0;
    while (atomic_load_explicit(&g_pending, memory_order_acquire) != 0) {
        if (++spin < PAR_SPIN) {
            CPU_RELAX();
            continue;
        }
        pthread_mutex_lock(&g_lock);
        while (atomic_load(&g_pending) != 0)
            pthread_cond_wait(&g_done_cv, &g_lock);
        pthread_mutex_unlock(&g_lock);
        break;
    }
    pthread_mutex_unlock(&g_use);
}

void par_for(int64_t n, void (*fn)(void *ctx, int64_t begin, int64_t end), void *ctx)
{
    par_run(n, 0, fn, ctx);
}

void par_for_dyn(int64_t n, void (*fn)(void *ctx, int64_t begin, int64_t end), void *ctx)
{
    par_run(n, 1, fn, ctx);
}
