/* The elementwise kernels compiled for baseline x86-64 (or any CPU). */
#define EW_SFX portable
#include "ew_kernels.h"
