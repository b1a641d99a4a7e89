/* cpu.c - which SIMD level the kernels may use: the best the CPU has, capped
 * by the environment (read once per process):
 *   PYAUTODIFF_PORTABLE=1        plain C everywhere
 *   PYAUTODIFF_ISA=avx2|portable at most that level (a level the CPU lacks
 *                                is ignored)
 *   PYAUTODIFF_VEC_BITS=256|512  the vector width at the AVX-512 level of
 *                                the kernels that come in both (cpu.h)
 * GEMM (gemm.c) and the elementwise kernels (elementwise.c) dispatch on it. */
#define _GNU_SOURCE /* sysconf's _SC_LEVEL*_CACHE_SIZE */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "cpu.h"

static int isa = -1, vec_bits = 512;
static pthread_once_t isa_once = PTHREAD_ONCE_INIT;
static const char *const names[] = {"portable", "avx2", "avx512"};

int ad_isa_by_name(const char *name) {
    for (int i = 0; i <= AD_ISA_AVX512; i++)
        if (name && strcmp(name, names[i]) == 0) return i;
    return -1;
}

const char *ad_isa_name(int level) {
    return level >= 0 && level <= AD_ISA_AVX512 ? names[level] : "?";
}

#if defined(__x86_64__) || defined(__i386__)
/* Whether cpuid leaf 0's vendor string (ebx, edx, ecx) is `name` */
static int vendor_is(unsigned b, unsigned c, unsigned d, const char *name) {
    char v[12];
    memcpy(v, &b, 4);
    memcpy(v + 4, &d, 4);
    memcpy(v + 8, &c, 4);
    return memcmp(v, name, 12) == 0;
}
#endif

/* Whether the CPU executes a 512-bit vector op as two 256-bit halves: AMD's
   family 19h, whose only AVX-512 parts are Zen 4 (Zen 3 has none). Zen 5
   (1Ah) and Intel's AVX-512 cores have full-width units. */
static int splits_512(void) {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d) || !vendor_is(b, c, d, "AuthenticAMD"))
        return 0;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    unsigned base = a >> 8 & 15, family = base == 15 ? base + (a >> 20 & 255) : base;
    return family == 0x19;
#else
    return 0;
#endif
}

static void detect(void) {
    int best = AD_ISA_PORTABLE;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        best = AD_ISA_AVX2;
        /* the *_avx512.c files are built with F, DQ, BW and VL and use all four */
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
            __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
            best = AD_ISA_AVX512;
    }
#endif
    int want = ad_isa_by_name(getenv("PYAUTODIFF_ISA"));
    if (want >= 0 && want < best) best = want;
    const char *env = getenv("PYAUTODIFF_PORTABLE");
    if (env && strcmp(env, "1") == 0) best = AD_ISA_PORTABLE;
    isa = best;
    env = getenv("PYAUTODIFF_VEC_BITS");
    if (env && (strcmp(env, "256") == 0 || strcmp(env, "512") == 0))
        vec_bits = atoi(env);
    else if (isa == AD_ISA_AVX512 && splits_512())
        vec_bits = 256;
}

int ad_cpu_isa(void) {
    pthread_once(&isa_once, detect);
    return isa;
}

int ad_cpu_vec_bits(void) {
    pthread_once(&isa_once, detect);
    return vec_bits;
}

/* ---- cache sizes ---- */

static struct ad_caches caches;
static pthread_once_t caches_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__) || defined(__i386__)
/* The deterministic cache parameters (Intel leaf 4, AMD 0x8000001D share the
   layout): each subleaf one cache, until a type of 0. */
static int cpuid_caches(unsigned leaf, struct ad_caches *c)
{
    int found = 0;
    for (unsigned i = 0; i < 16; i++) {
        unsigned a, b, cx, d;
        __cpuid_count(leaf, i, a, b, cx, d);
        unsigned type = a & 0x1f, level = (a >> 5) & 7;
        if (type == 0)
            break;
        if (type == 2) /* instruction cache */
            continue;
        long sharing = (long)((a >> 14) & 0xfff) + 1;
        long size = (long)((b >> 22) + 1) * (((b >> 12) & 0x3ff) + 1) * ((b & 0xfff) + 1) *
                    ((long)cx + 1);
        if (level == 1)
            c->l1d = size;
        else if (level == 2)
            c->l2 = size;
        else if (level == 3) /* a core's share: the VM or chip may split it many ways */
            c->l3 = size / sharing;
        found = 1;
    }
    return found;
}

static void cpuid_detect(struct ad_caches *c)
{
    unsigned a, b, cx, d;
    if (!__get_cpuid(0, &a, &b, &cx, &d))
        return;
    unsigned max_basic = a;
    int amd = vendor_is(b, cx, d, "AuthenticAMD") || vendor_is(b, cx, d, "HygonGenuine");
    unsigned max_ext = __get_cpuid_max(0x80000000, NULL);
    if (amd) {
        /* 0x8000001D needs the topology extensions (0x80000001 ECX bit 22) */
        if (max_ext >= 0x8000001D && __get_cpuid(0x80000001, &a, &b, &cx, &d) &&
            (cx >> 22 & 1) && cpuid_caches(0x8000001D, c))
            return;
        if (max_ext >= 0x80000005 && __get_cpuid(0x80000005, &a, &b, &cx, &d))
            c->l1d = (long)(cx >> 24) << 10;
        if (max_ext >= 0x80000006 && __get_cpuid(0x80000006, &a, &b, &cx, &d)) {
            c->l2 = (long)(cx >> 16) << 10;
            c->l3 = (long)(d >> 18) << 19; /* shared; its share per core is unknown here */
        }
        return;
    }
    if (max_basic >= 4)
        cpuid_caches(4, c);
}
#endif

static long clamp_size(long v, long lo, long hi, long fallback)
{
    return v <= 0 ? fallback : v < lo ? lo : v > hi ? hi : v;
}

static void caches_detect(void)
{
    struct ad_caches c = {0, 0, -1};
#if defined(__x86_64__) || defined(__i386__)
    cpuid_detect(&c);
#endif
#ifdef _SC_LEVEL1_DCACHE_SIZE
    if (c.l1d <= 0)
        c.l1d = sysconf(_SC_LEVEL1_DCACHE_SIZE);
    if (c.l2 <= 0)
        c.l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    /* glibc's L3 figure is the whole cache (of every CCX on some AMD parts):
       halved as a guess at a core's share */
    if (c.l3 < 0) {
        long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
        c.l3 = l3 > 0 ? l3 / 2 : -1;
    }
#endif
    /* PYAUTODIFF_L1D_KIB: another machine's L1D, for its kernel choices */
    const char *env = getenv("PYAUTODIFF_L1D_KIB");
    long kib = env ? atol(env) : 0;
    if (kib > 0 && kib <= 1L << 20)
        c.l1d = kib << 10;
    /* implausible reports (a hypervisor's zeros, a misread leaf) fall back */
    c.l1d = clamp_size(c.l1d, 16 << 10, 256 << 10, 32 << 10);
    c.l2 = clamp_size(c.l2, 128 << 10, 16 << 20, 256 << 10);
    c.l3 = c.l3 == 0 ? 0 : clamp_size(c.l3, 256 << 10, 1L << 30, 2 << 20);
    caches = c;
}

const struct ad_caches *ad_cpu_caches(void)
{
    pthread_once(&caches_once, caches_detect);
    return &caches;
}
