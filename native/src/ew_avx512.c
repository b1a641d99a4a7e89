/* The elementwise kernels compiled for the AVX-512 flags (tools/build.py), called only after a CPU check. */
#define EW_SFX avx512
#include "ew_kernels.h"
