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
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../include/pyautodiff.h"
#include "internal.h"

#define PAR_MAX_THREADS 256
#define PAR_SPIN 20000
/* Workers run leaf kernels with small frames: a 1 MiB stack instead of the
   default 8 MiB keeps 256 workers within a 2 GB address-space limit. */
#define PAR_STACK ((size_t)1 << 20)
/* Address space that must be free, besides the stack, before a worker is
   started: its thread-local block and a malloc arena's first pages. */
#define PAR_HEADROOM ((size_t)4 << 20)

static atomic_int g_num_threads;            /* 0 until first read */
static pthread_once_t g_threads_once = PTHREAD_ONCE_INIT;

static pthread_mutex_t g_use = PTHREAD_MUTEX_INITIALIZER;   /* one loop at a time */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;  /* guards the sleeps */
static pthread_cond_t g_work_cv = PTHREAD_COND_INITIALIZER;
static pthread_cond_t g_done_cv = PTHREAD_COND_INITIALIZER;
static int g_workers;                        /* created so far; under g_use */
static atomic_int g_start_failed;            /* stop starting workers until re-configured */

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

/* The CPUs this process may run on (taskset, cgroup cpusets). */
static int allowed_cpus(void)
{
    cpu_set_t set;
    long c = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                         : sysconf(_SC_NPROCESSORS_ONLN);
    return c < 1 ? 1 : c > PAR_MAX_THREADS ? PAR_MAX_THREADS : (int)c;
}

/* An explicit request for more threads than allowed CPUs is honoured (it
   can be what a benchmark wants) but is almost always a mistake that makes
   every parallel loop slower: say so once per process, on stderr, so that C
   callers see it as well as Python ones. */
static atomic_int g_warned;
static void warn_oversubscribed(const char *how, int n)
{
    int cpus = allowed_cpus();
    if (n <= cpus || atomic_exchange(&g_warned, 1))
        return;
    fprintf(stderr,
            "pyautodiff: warning: %s asks for %d threads but this process may run on %d CPU%s; "
            "parallel loops will be slower than with %d\n",
            how, n, cpus, cpus == 1 ? "" : "s", cpus);
}

static void init_threads(void)
{
    int n = 0;
    const char *env = getenv("PYAUTODIFF_NUM_THREADS");
    if (env && *env) {
        char *end;
        long v = strtol(env, &end, 10);
        if (*end == '\0' && v >= 1) {
            n = v > PAR_MAX_THREADS ? PAR_MAX_THREADS : (int)v;
            warn_oversubscribed("PYAUTODIFF_NUM_THREADS", n);
        }
    }
    if (n == 0)
        n = allowed_cpus();
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
    n = n > PAR_MAX_THREADS ? PAR_MAX_THREADS : n;
    warn_oversubscribed("ad_set_num_threads", n);
    atomic_store(&g_num_threads, n);
    atomic_store(&g_start_failed, 0); /* a new count: starting workers may be retried */
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

/* What a starting worker is told, and how it answers. */
struct worker_start {
    unsigned gen;
    atomic_int ready;
};

/* The library's thread-local block (a dlopen'ed module's TLS) is allocated
   by glibc on a thread's first access, and glibc aborts the process when
   that allocation fails: a worker makes the access before it reports ready,
   while its creator still checks that memory is there. */
static _Thread_local volatile int tl_is_worker;

static void *worker_main(void *arg)
{
    struct worker_start *ws = arg;
    unsigned seen = ws->gen;
    tl_is_worker = 1;
    atomic_store_explicit(&ws->ready, 1, memory_order_release); /* ws dies after this */
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

/* fork() (the handlers are registered once, in alloc.c): the pool is idle
   while the fork runs (no loop in flight, no worker inside the lock), and a
   child, which has none of the parent's workers, starts its pool afresh on
   its first parallel loop. */
void par_fork_prepare(void)
{
    pthread_mutex_lock(&g_use);
    pthread_mutex_lock(&g_lock);
}

void par_fork_parent(void)
{
    pthread_mutex_unlock(&g_lock);
    pthread_mutex_unlock(&g_use);
}

void par_fork_child(void)
{
    pthread_mutex_init(&g_use, NULL);
    pthread_mutex_init(&g_lock, NULL);
    pthread_cond_init(&g_work_cv, NULL);
    pthread_cond_init(&g_done_cv, NULL);
    g_workers = 0;
    atomic_store(&g_start_failed, 0);
}

/* True when the address space has room for one more worker (an RLIMIT_AS
   that the earlier workers' stacks have nearly used up). */
static int room_for_worker(void)
{
    size_t n = PAR_STACK + PAR_HEADROOM;
    void *p = mmap(NULL, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return 0;
    munmap(p, n);
    return 1;
}

/* Under g_use. Returns how many workers exist: fewer than asked when one
   cannot be started (no memory, a thread limit), and the loops then run on
   fewer threads; starting more is tried again on a later loop. */
static int ensure_workers(int want)
{
    while (g_workers < want && !atomic_load(&g_start_failed)) {
        atomic_store(&g_start_failed, 1); /* until this worker is up */
        if (!room_for_worker())
            break;
        pthread_t t;
        pthread_attr_t attr;
        if (pthread_attr_init(&attr) != 0)
            break;
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, PAR_STACK);
        struct worker_start ws = {atomic_load(&g_gen), 0};
        int rc = pthread_create(&t, &attr, worker_main, &ws);
        pthread_attr_destroy(&attr);
        if (rc != 0)
            break;
        /* one worker at a time has its TLS allocated before the next one is
           checked for room */
        while (!atomic_load_explicit(&ws.ready, memory_order_acquire))
            sched_yield();
        g_workers++;
        atomic_store(&g_start_failed, 0);
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
