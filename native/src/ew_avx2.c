/* The elementwise kernels compiled for -mavx2 -mfma (tools/build.py), called only after a CPU check. */
#define EW_SFX avx2
#include "ew_kernels.h"
