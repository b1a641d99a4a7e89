/* cpu.h - the SIMD level kernels dispatch on (cpu.c). */
#ifndef AD_CPU_H
#define AD_CPU_H

enum { AD_ISA_PORTABLE, AD_ISA_AVX2, AD_ISA_AVX512 };

/* The level to use: the CPU's best, capped by PYAUTODIFF_ISA / PYAUTODIFF_PORTABLE. */
int ad_cpu_isa(void);
/* The vector width, 256 or 512 bits, at the AVX-512 level of the kernels
   that come in both: 256 where the CPU splits 512-bit ops into halves (AMD
   Zen 4), else 512.  PYAUTODIFF_VEC_BITS=256|512 overrides (tests reach both
   forms with it).  Its two users:
   - the compiler-vectorised elementwise kernels (binary, unary,
     tensor-scalar; elementwise.c), bound by L2/L3 bandwidth: float32 add and
     mul 3% faster at 1e5 elements, 8-10% at 3e5 - 1e6, relu 2-7%.  The
     hand-written float32 maps (exp, tanh, ...) keep 512: they are bound by
     arithmetic, and lost 20-35% in 256;
   - whole small products at most 8 float32 (4 float64) columns wide
     (gemm_dtype.h): AVX2's gemm_narrow, one vector a row, against the
     AVX-512 kernel's paired rows (permutes and 64-bit broadcasts): 1.6x
     faster on Zen 4. */
int ad_cpu_vec_bits(void);
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
