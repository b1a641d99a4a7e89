/* cpu.h - the SIMD level kernels dispatch on (cpu.c). */
#ifndef AD_CPU_H
#define AD_CPU_H

enum { AD_ISA_PORTABLE, AD_ISA_AVX2, AD_ISA_AVX512 };

/* The level to use: the CPU's best, capped by PYAUTODIFF_ISA / PYAUTODIFF_PORTABLE. */
int ad_cpu_isa(void);
/* The vector width, 256 or 512 bits, of the compiler-vectorised elementwise
   kernels (binary, unary, tensor-scalar) at the AVX-512 level: 256 where the
   CPU splits 512-bit ops into halves (AMD Zen 4), on which a loop bound by
   L2/L3 bandwidth ran faster in 256-bit vectors (float32 add and mul 3% at
   1e5 elements, 8-10% at 3e5 - 1e6; relu 2-7%); else 512.  PYAUTODIFF_EW_BITS=256|512 overrides (tests
   reach both tables with it).  The hand-written float32 maps (exp, tanh, ...)
   keep 512: they are bound by arithmetic, and lost 20-35% in 256. */
int ad_cpu_ew_bits(void);
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
