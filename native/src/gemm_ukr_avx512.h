/* gemm_avx512.c's micro-kernels: included once per dtype by gemm_avx512.c,
   which defines T, V (the vector type), VL (its lanes), SFX (the name
   suffix), UKR_FN (its kernel pointer type), PMR (the packed panel height),
   LOADU, STOREU, SET1, FMA, ADD, ZERO, MLOAD, MSTORE, and ITYPE (an index
   lane), PERMX, PERMX2 (one- and two-source lane permutes) and BCAST2 (two
   elements broadcast to every pair of lanes) first. No include
   guard: including it twice is the point; it undefines its parameters at the
   end.

   Two widths, each a main kernel and its row tails (gemm_ukr_width_avx512.h):
   the main tile is PMR rows x 2 vectors (32 zmm registers hold the 12 x 2
   accumulators plus the B row and a broadcast A element); the half-width one
   (x 1 vector) serves a last micro-panel at most half full. B is loaded
   unaligned: it may be read in place from a row-major operand. Then
   gemm_small_avx512.h, whole small products read in place. */

#define UKR_TILE__(mr, nv, sfx) ukr##mr##x##nv##_##sfx
#define UKR_TILE_(mr, nv, sfx) UKR_TILE__(mr, nv, sfx)
#define UKR_TILE(mr, nv) UKR_TILE_(mr, nv, SFX)
#define UKR_CAT_(a, b) a##_##b
#define UKR_CAT(a, b) UKR_CAT_(a, b)

#define UKR_NV 2
#define UKR_MAIN UKR_CAT(gemm_ukr, SFX)
#define UKR_TAILS UKR_CAT(gemm_tails, SFX)
#include "gemm_ukr_width_avx512.h"

#define UKR_NV 1
#define UKR_MAIN UKR_CAT(gemm_ukrh, SFX)
#define UKR_TAILS UKR_CAT(gemm_tails_half, SFX)
#include "gemm_ukr_width_avx512.h"

/* the small-product kernel (whole products, no packing) */
#include "gemm_small_avx512.h"

#undef UKR_CAT
#undef UKR_CAT_
#undef UKR_TILE
#undef UKR_TILE_
#undef UKR_TILE__
#undef T
#undef V
#undef VL
#undef SFX
#undef UKR_FN
#undef PMR
#undef LOADU
#undef STOREU
#undef SET1
#undef FMA
#undef ADD
#undef ZERO
#undef MLOAD
#undef MSTORE
#undef ITYPE
#undef PERMX
#undef PERMX2
#undef BCAST2
