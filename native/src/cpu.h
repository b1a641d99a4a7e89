/* cpu.h - the SIMD level kernels dispatch on (cpu.c). */
#ifndef AD_CPU_H
#define AD_CPU_H

enum { AD_ISA_PORTABLE, AD_ISA_AVX2, AD_ISA_AVX512 };

/* The level to use: the CPU's best, capped by PYAUTODIFF_ISA / PYAUTODIFF_PORTABLE. */
int ad_cpu_isa(void);
/* AD_ISA_* for "portable", "avx2", "avx512"; -1 for anything else (or NULL). */
int ad_isa_by_name(const char *name);
const char *ad_isa_name(int level);

/* The data caches one core sees, in bytes, read once per process: cpuid (leaf
   4 on Intel, 0x8000001D on AMD, AMD's legacy leaves 0x80000005/6 before
   that), else sysconf, else conservative defaults (32 KiB, 256 KiB, 2 MiB
   per core). l3 is the core's share of its L3 (0 if there is none). */
struct ad_caches {
    long l1d, l2, l3;
};
const struct ad_caches *ad_cpu_caches(void);

#endif
