/* gemm_bench: where the packed GEMM's cycles go, at one thread (a timing
   tool, not a test: it checks nothing and is not run by the suite).

   It includes gemm.c to reach the static packing routines and prints, for the
   kernel level selected (default avx2, or the first argument):
     - the core's FMA peak from a loop of 12 independent vector FMA chains
       (AVX2 width: on Zen 4 an AVX-512 FMA is issued as two halves, so the
       peak is the same at both levels);
     - the micro-kernel alone, on one packed A and B micro-panel in L1, and
       on an A block in L2 streamed against one B micro-panel (the
       macro-kernel's inner loop without packing);
     - row-major products n^3 (float32 n = 128 .. 2048, float64 128 .. 1024)
       as % of the peak, with the time the same A and B packing takes alone,
       as % of the product's (packing alone runs on warm caches, so it reads
       low);
   for float32 and float64 (the second argument: f32 or f64 for one only),
   the per-dtype part written once below and compiled for each (this file
   includes itself). Times are per-thread CPU time, medians.

   Build and run (from the repository root):
     gcc -O3 -std=c11 -Wall -Wextra -pthread -Inative/include -c native/tests/gemm_bench.c \
         -o /tmp/gemm_bench.o
     gcc -O3 -std=c11 -pthread -mavx2 -mfma -Inative/include -c native/src/gemm_avx2.c \
         -o /tmp/gemm_avx2.o
     gcc -O3 -std=c11 -pthread -mavx512f -mavx512dq -mavx512bw -mavx512vl -mfma \
         -Inative/include -c native/src/gemm_avx512.c -o /tmp/gemm_avx512.o
     gcc -pthread /tmp/gemm_bench.o /tmp/gemm_avx2.o /tmp/gemm_avx512.o native/src/parallel.c \
         native/src/cpu.c -Inative/include -o /tmp/gemm_bench
     PYAUTODIFF_NUM_THREADS=1 /tmp/gemm_bench [avx2|avx512|portable] [f32|f64] */
#ifndef BENCH_T
#define _GNU_SOURCE
#include "../src/gemm.c"

#include <immintrin.h>
#include <stdio.h>
#include <time.h>

#include "../include/pyautodiff.h"

/* parallel.c reports a bad thread count through ad_fail (error.c); this weak
   stand-in lets the tool link without the rest of the library. */
__attribute__((weak)) ad_status ad_fail(ad_status st, const char *fmt, ...);
__attribute__((weak)) ad_status ad_fail(ad_status st, const char *fmt, ...)
{
    (void)fmt;
    return st;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* the median over `reps` (<= 32) timings of BODY */
#define MEDIAN_TIME(out, reps, BODY)                                                        \
    do {                                                                                    \
        double s_[32];                                                                      \
        for (int r_ = 0; r_ < (reps); r_++) {                                               \
            double t0_ = now();                                                             \
            BODY;                                                                           \
            s_[r_] = now() - t0_;                                                           \
        }                                                                                   \
        qsort(s_, (size_t)(reps), sizeof(double), cmp_double);                              \
        (out) = s_[(reps) / 2];                                                             \
    } while (0)

__attribute__((target("avx2,fma"), noinline)) static float peak_loop(long n)
{
    __m256 acc[12], x = _mm256_set1_ps(1.0000001f), y = _mm256_set1_ps(0.999999f);
    for (int i = 0; i < 12; i++)
        acc[i] = _mm256_set1_ps((float)i);
    for (long it = 0; it < n; it++) {
        _Pragma("GCC unroll 12") for (int i = 0; i < 12; i++) acc[i] =
            _mm256_fmadd_ps(acc[i], x, y);
    }
    __m256 s = acc[0];
    for (int i = 1; i < 12; i++)
        s = _mm256_add_ps(s, acc[i]);
    float o[8];
    _mm256_storeu_ps(o, s);
    return o[0];
}

#define BENCH_T
#define T float
#define S(name) name##_f32
#define BENCH_NMAX 2048
#include "gemm_bench.c" /* itself: the per-dtype part */
#define T double
#define S(name) name##_f64
#define BENCH_NMAX 1024
#include "gemm_bench.c" /* itself: the per-dtype part */
#undef BENCH_T

int main(int argc, char **argv)
{
    const char *level = argc > 1 ? argv[1] : "avx2";
    const char *only = argc > 2 ? argv[2] : "";
    if (gemm_set_kernel(level) != 0) {
        fprintf(stderr, "kernel level %s is not available here\n", level);
        return 1;
    }
    double t;
    long iters = 20000000;
    volatile float sink;
    MEDIAN_TIME(t, 5, sink = peak_loop(iters));
    (void)sink;
    double peak = 12.0 * 8 * 2 * (double)iters / t / 1e9;
    printf("FMA peak: %.1f GFLOP/s float32 (%.2f GHz x 32 flop a cycle), %.1f float64\n", peak,
           peak / 32, peak / 2);
    if (strcmp(only, "f64") != 0)
        bench_f32("float32", peak);
    if (strcmp(only, "f32") != 0)
        bench_f64("float64", peak);
    return 0;
}
#else /* the per-dtype part, included by the lines above */
/* ---- the per-dtype part: T, S(name) and BENCH_NMAX defined by the includer ---- */

static T *S(buf)(int64_t n)
{
    T *p = NULL;
    if (posix_memalign((void **)&p, 64, (size_t)n * sizeof(T) + 64) != 0) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (int64_t i = 0; i < n; i++)
        p[i] = (T)((i * 7919) % 1000) / 1000 - (T)0.5;
    return p;
}

/* peak: the float32 FMA peak in GFLOP/s (float64's is half) */
static void S(bench)(const char *dtype, double peak)
{
    const struct ad_caches *ca = ad_cpu_caches();
    struct S(kernel) kn = S(pick_kernel)();
    peak = peak * (double)sizeof(float) / (double)sizeof(T);
    printf("\n%s %s: %d x %d tiles, kc %ld, mc %ld, nc %ld (caches: L1d %ld, L2 %ld, L3 share "
           "%ld bytes); %d thread(s); peak %.1f GFLOP/s\n",
           dtype, gemm_kernel_name(), kn.mr, kn.nr, (long)kn.kc, (long)kn.mc, (long)kn.nc,
           ca->l1d, ca->l2, ca->l3, par_num_threads(), peak);
    double t;
    const int64_t kc = kn.kc, mc = kn.mc, mr = kn.mr, nr = kn.nr, ldc = 1024;
    T *ap = S(buf)(mc * kc), *bp = S(buf)(nr * kc), *c = S(buf)(mc * ldc);
    const int calls = 2000;
    MEDIAN_TIME(t, 15, for (int i = 0; i < calls; i++) kn.ukr(kc, ap, 1, mr, bp, nr, c, nr, mr,
                                                              nr, 1));
    double gf = 2.0 * (double)(mr * nr * kc) * calls / t / 1e9;
    printf("micro-kernel, A and B micro-panels in L1 (k %ld): %.1f GFLOP/s, %.1f%% of peak\n",
           (long)kc, gf, 100 * gf / peak);
    const int64_t panels = mc / mr;
    const int sweeps = 50;
    MEDIAN_TIME(t, 15, for (int i = 0; i < sweeps; i++) for (int64_t q = 0; q < panels; q++)
                           kn.ukr(kc, ap + q * mr * kc, 1, mr, bp, nr, c + q * mr * ldc, ldc, mr,
                                  nr, 1));
    gf = 2.0 * (double)(mr * nr * kc * panels) * sweeps / t / 1e9;
    printf("micro-kernel, %ld-row A block from L2, one B micro-panel: %.1f GFLOP/s, %.1f%% of "
           "peak\n",
           (long)mc, gf, 100 * gf / peak);
    free(ap);
    free(bp);
    free(c);

    for (int64_t n = 128; n <= BENCH_NMAX; n *= 2) {
        T *a = S(buf)(n * n), *b = S(buf)(n * n), *cc = S(buf)(n * n);
        int reps = (int)(2e8 / ((double)n * n * n)) + 1;
        MEDIAN_TIME(t, 11, for (int i = 0; i < reps; i++)
                               S(gemm)(n, n, n, a, n, 1, b, n, 1, cc, n, 1));
        gf = 2.0 * (double)(n * n * n) * reps / t / 1e9;
        int64_t kcb = min64(kc, n), ncb = min64(kn.nc, n), mcb = min64(mc, n);
        T *bpk = S(buf)(kcb * (ncb + nr)), *apk = S(buf)(kcb * (mcb + mr));
        double tb, ta;
        MEDIAN_TIME(tb, 11, for (int i = 0; i < reps; i++) for (int64_t jc = 0; jc < n; jc += ncb)
                                for (int64_t pc = 0; pc < n; pc += kcb)
                                    S(pack_b)(&kn, min64(kcb, n - pc), min64(ncb, n - jc),
                                              b + pc * n + jc, n, 1, bpk));
        MEDIAN_TIME(ta, 11, for (int i = 0; i < reps; i++) for (int64_t jc = 0; jc < n; jc += ncb)
                                for (int64_t pc = 0; pc < n; pc += kcb)
                                    for (int64_t ic = 0; ic < n; ic += mcb)
                                        S(pack_a)(&kn, min64(mcb, n - ic), min64(kcb, n - pc),
                                                  a + ic * n + pc, n, 1, apk));
        printf("%s %4ld^3: %.1f GFLOP/s, %.1f%% of peak; packing alone: B %.1f%%, A %.1f%% "
               "of the product's time\n",
               dtype, (long)n, gf, 100 * gf / peak, 100 * tb / t, 100 * ta / t);
        free(a);
        free(b);
        free(cc);
        free(bpk);
        free(apk);
    }
}

#undef T
#undef S
#undef BENCH_NMAX
#endif /* BENCH_T: the per-dtype part */
