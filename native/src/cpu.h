/* cpu.h - the SIMD level kernels dispatch on (cpu.c). */
#ifndef AD_CPU_H
#define AD_CPU_H

enum { AD_ISA_PORTABLE, AD_ISA_AVX2, AD_ISA_AVX512 };

/* The level to use: the CPU's best, capped by PYAUTODIFF_ISA / PYAUTODIFF_PORTABLE. */
int ad_cpu_isa(void);
/* AD_ISA_* for "portable", "avx2", "avx512"; -1 for anything else (or NULL). */
int ad_isa_by_name(const char *name);
const char *ad_isa_name(int level);

#endif
