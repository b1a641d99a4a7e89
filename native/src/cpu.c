/* cpu.c - which SIMD level the kernels may use: the best the CPU has, capped
 * by the environment (read once per process):
 *   PYAUTODIFF_PORTABLE=1        plain C everywhere
 *   PYAUTODIFF_ISA=avx2|portable at most that level (a level the CPU lacks
 *                                is ignored)
 * GEMM (gemm.c) and the float32 maps (elementwise.c) both dispatch on it. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

static int isa = -1;
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
}

int ad_cpu_isa(void) {
    pthread_once(&isa_once, detect);
    return isa;
}
