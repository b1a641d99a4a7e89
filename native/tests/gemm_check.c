/* gemm_check: the packed GEMM against a naive triple loop in double.

   Random shapes (1, primes, sizes straddling the register and cache blocks),
   every operand layout the strided API allows (row-major, column-major,
   sliced with a step, broadcast with stride 0, negative strides), C in row- and
   column-major, batched products with and without a broadcast B, each with
   every kernel level the CPU has (AVX-512, AVX2, portable) on 1 and 2
   threads, and two threads calling gemm at the same time.

   Build and run (from the repository root):
     gcc -O2 -std=c11 -Wall -Wextra -pthread -Inative/include native/tests/gemm_check.c \
         native/src/gemm.c native/src/gemm_avx2.c native/src/gemm_avx512.c \
         native/src/parallel.c native/src/cpu.c -o /tmp/gemm_check
   (gemm_avx2.c needs -mavx2 -mfma and gemm_avx512.c the AVX-512 flags, as in
   tools/build.py; compile those two separately with their flags.)
   Exit status 0 when every product matches. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../include/pyautodiff.h"
#include "../src/gemm.h"

/* parallel.c reports a bad thread count through ad_fail (error.c); this weak
   stand-in lets the check link without the rest of the library. */
__attribute__((weak)) ad_status ad_fail(ad_status st, const char *fmt, ...);
__attribute__((weak)) ad_status ad_fail(ad_status st, const char *fmt, ...)
{
    (void)fmt;
    return st;
}

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}
static double urand(void) { return (double)(rnd() >> 11) / 9007199254740992.0 * 2 - 1; }

static int g_failures, g_checks;

/* A strided view of an r x c matrix inside a freshly allocated buffer. */
struct view {
    void *buf;
    int64_t off, rs, cs; /* element of (i, j) is off + i*rs + j*cs */
};

enum { L_ROW, L_COL, L_STEP, L_BCAST_ROW, L_BCAST_COL, L_NEG, L_COUNT };

static struct view make_view(int64_t r, int64_t c, int layout, size_t esz)
{
    struct view v = {0};
    int64_t n;
    switch (layout) {
    case L_ROW: v.rs = c; v.cs = 1; n = r * c; break;
    case L_COL: v.rs = 1; v.cs = r; n = r * c; break;
    case L_STEP: v.rs = 3 * c + 1; v.cs = 2; n = r * (3 * c + 1); break;
    case L_BCAST_ROW: v.rs = 0; v.cs = 1; n = c; break;        /* every row the same */
    case L_BCAST_COL: v.rs = 1; v.cs = 0; n = r; break;        /* every column the same */
    default: v.rs = -c; v.cs = -1; n = r * c; v.off = n - 1; break; /* flipped both ways */
    }
    v.buf = malloc((size_t)(n > 0 ? n : 1) * esz);
    for (int64_t i = 0; i < n; i++) {
        if (esz == 4)
            ((float *)v.buf)[i] = (float)urand();
        else
            ((double *)v.buf)[i] = urand();
    }
    return v;
}

static double get(const struct view *v, size_t esz, int64_t i, int64_t j)
{
    int64_t e = v->off + i * v->rs + j * v->cs;
    return esz == 4 ? ((const float *)v->buf)[e] : ((const double *)v->buf)[e];
}

/* max |C - ref| / (|A| @ |B|), which is what rounding error scales with */
static double rel_err(int64_t m, int64_t n, int64_t k, const struct view *a,
                      const struct view *b, const struct view *c, size_t esz)
{
    double worst = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0, sa = 0;
            for (int64_t p = 0; p < k; p++) {
                double x = get(a, esz, i, p), y = get(b, esz, p, j);
                s += x * y;
                sa += fabs(x * y);
            }
            double e = fabs(get(c, esz, i, j) - s) / (sa + 1e-300);
            if (sa == 0)
                e = fabs(get(c, esz, i, j));
            if (e > worst || e != e)
                worst = e != e ? INFINITY : e;
        }
    return worst;
}

static void run_one(int64_t m, int64_t n, int64_t k, int la, int lb, int lc, size_t esz,
                    const char *what)
{
    struct view a = make_view(m, k, la, esz), b = make_view(k, n, lb, esz);
    struct view c = make_view(m, n, lc, esz); /* garbage in C must be overwritten */
    if (esz == 4)
        gemm_f32(m, n, k, (float *)a.buf + a.off, a.rs, a.cs, (float *)b.buf + b.off, b.rs, b.cs,
                 (float *)c.buf + c.off, c.rs, c.cs);
    else
        gemm_f64(m, n, k, (double *)a.buf + a.off, a.rs, a.cs, (double *)b.buf + b.off, b.rs,
                 b.cs, (double *)c.buf + c.off, c.rs, c.cs);
    double e = rel_err(m, n, k, &a, &b, &c, esz), tol = esz == 4 ? 1e-5 : 1e-12;
    g_checks++;
    if (!(e <= tol)) {
        g_failures++;
        fprintf(stderr, "FAIL %s f%d m=%lld n=%lld k=%lld layouts a=%d b=%d c=%d err=%g\n", what,
                (int)esz * 8, (long long)m, (long long)n, (long long)k, la, lb, lc, e);
    }
    free(a.buf);
    free(b.buf);
    free(c.buf);
}

static void run_batch(int64_t batch, int64_t m, int64_t n, int64_t k, int bcast_b, size_t esz)
{
    size_t offs = sizeof(int64_t) * (size_t)batch;
    int64_t *ao = malloc(offs), *bo = malloc(offs), *co = malloc(offs);
    struct view a = make_view(batch * m, k, L_ROW, esz);
    struct view b = make_view(bcast_b ? k : batch * k, n, L_ROW, esz);
    struct view c = make_view(batch * m, n, L_ROW, esz);
    for (int64_t i = 0; i < batch; i++) {
        ao[i] = i * m * k;
        bo[i] = bcast_b ? 0 : i * k * n;
        co[i] = i * m * n;
    }
    if (esz == 4)
        gemm_batch_f32(batch, ao, bo, co, m, n, k, a.buf, k, 1, b.buf, n, 1, c.buf, n, 1);
    else
        gemm_batch_f64(batch, ao, bo, co, m, n, k, a.buf, k, 1, b.buf, n, 1, c.buf, n, 1);
    double worst = 0;
    for (int64_t i = 0; i < batch; i++) {
        struct view ai = {a.buf, ao[i], k, 1}, bi = {b.buf, bo[i], n, 1}, ci = {c.buf, co[i], n, 1};
        double e = rel_err(m, n, k, &ai, &bi, &ci, esz);
        worst = e > worst ? e : worst;
    }
    g_checks++;
    if (!(worst <= (esz == 4 ? 1e-5 : 1e-12))) {
        g_failures++;
        fprintf(stderr, "FAIL batch f%d batch=%lld m=%lld n=%lld k=%lld bcast_b=%d err=%g\n",
                (int)esz * 8, (long long)batch, (long long)m, (long long)n, (long long)k, bcast_b,
                worst);
    }
    free(a.buf);
    free(b.buf);
    free(c.buf);
    free(ao);
    free(bo);
    free(co);
}

static const int64_t k_sizes[] = {0,  1,  2,  3,  5,  7,  11, 12, 13,
                                  16, 17, 31, 32, 33, 47, 64, 97, 131};

static int64_t pick(void) { return k_sizes[rnd() % (sizeof k_sizes / sizeof k_sizes[0])]; }

static void *concurrent_worker(void *arg)
{
    (void)arg;
    for (int i = 0; i < 20; i++) {
        int64_t m = 40 + i, n = 70, k = 150;
        float *a = malloc(sizeof(float) * (size_t)(m * k));
        float *b = malloc(sizeof(float) * (size_t)(k * n));
        float *c = malloc(sizeof(float) * (size_t)(m * n));
        for (int64_t t = 0; t < m * k; t++)
            a[t] = (float)((t % 7) - 3);
        for (int64_t t = 0; t < k * n; t++)
            b[t] = (float)((t % 5) - 2);
        gemm_f32(m, n, k, a, k, 1, b, n, 1, c, n, 1);
        for (int64_t r = 0; r < m; r++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0;
                for (int64_t p = 0; p < k; p++)
                    s += (double)a[r * k + p] * b[p * n + j];
                if (c[r * n + j] != (float)s) /* small integers: exact */
                    __atomic_fetch_add(&g_failures, 1, __ATOMIC_RELAXED);
            }
        free(a);
        free(b);
        free(c);
    }
    return NULL;
}

int main(void)
{
    static const char *const kernels[] = {"avx512", "avx2", "portable"};
    for (int kl = 0; kl < 3; kl++) {
        if (gemm_set_kernel(kernels[kl]) != 0) {
            fprintf(stderr, "kernel %s: not on this CPU, skipped\n", kernels[kl]);
            continue;
        }
        for (int threads = 1; threads <= 2; threads++) {
            ad_set_num_threads(threads);
            fprintf(stderr, "kernel %s, %d thread(s)\n", gemm_kernel_name(), threads);
            for (int esz = 4; esz <= 8; esz += 4) {
                for (int t = 0; t < 150; t++)
                    run_one(pick(), pick(), pick(), (int)(rnd() % L_COUNT), (int)(rnd() % L_COUNT),
                            (int)(rnd() % 2), (size_t)esz, "random");
                /* past the cache blocks (kc 512, mc 144) and the parallel threshold */
                run_one(150, 530, 600, L_ROW, L_ROW, L_ROW, (size_t)esz, "blocks");
                run_one(301, 67, 1030, L_COL, L_STEP, L_COL, (size_t)esz, "blocks");
                run_one(13, 1100, 90, L_ROW, L_COL, L_ROW, (size_t)esz, "wide");
                run_one(700, 5, 300, L_STEP, L_ROW, L_ROW, (size_t)esz, "tall");
                run_batch(7, 5, 9, 6, 0, (size_t)esz);
                run_batch(64, 32, 32, 64, 1, (size_t)esz);
                run_batch(3, 150, 100, 200, 1, (size_t)esz);
            }
        }
    }
    gemm_set_kernel("auto");
    ad_set_num_threads(2);
    pthread_t th[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&th[i], NULL, concurrent_worker, NULL);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    if (ad_set_num_threads(0) != AD_ERR_VALUE) {
        fprintf(stderr, "FAIL ad_set_num_threads(0) accepted\n");
        g_failures++;
    }
    printf("gemm_check: %d products, %d failures\n", g_checks, g_failures);
    return g_failures != 0;
}
