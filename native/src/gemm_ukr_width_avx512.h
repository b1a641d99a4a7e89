/* One width of gemm_ukr_avx512.h's kernels: included once per width by
   gemm_ukr_avx512.h, which defines UKR_NV (vectors per row), UKR_MAIN (the
   main kernel's name, declared in gemm.h) and UKR_TAILS (the tail table's)
   first. No include guard: including it twice is the point; it undefines
   its parameters at the end.

   Each kernel is one instance of gemm_ukr_tile_avx512.h: the main one, PMR
   rows, and the row tails, exactly r < PMR rows, so the last rows of A cost
   no padded work and a row-major A's last rows are read in place too. */
_Static_assert(PMR == 12, "the tails below are rows 1 .. 11");
#define UKR_MR 1
#include "gemm_ukr_tile_avx512.h"
#define UKR_MR 2
#include "gemm_ukr_tile_avx512.h"
#define UKR_MR 3
#include "gemm_ukr_tile_avx512.h"
#define UKR_MR 4
#include "gemm_ukr_tile_avx512.h"
#define UKR_MR 5
#include "gemm_ukr_tile_avx512.h"
#define UKR_MR 6
#include "gemm_ukr_tile_avx512.h"
#define UKR_MR 7
#include "gemm_ukr_tile_avx512.h"
#define UKR_MR 8
#include "gemm_ukr_tile_avx512.h"
#define UKR_MR 9
#include "gemm_ukr_tile_avx512.h"
#define UKR_MR 10
#include "gemm_ukr_tile_avx512.h"
#define UKR_MR 11
#include "gemm_ukr_tile_avx512.h"
#define UKR_MR PMR
#define UKR_NAME UKR_MAIN
#include "gemm_ukr_tile_avx512.h"

/* tails[r]: exactly r < PMR rows */
const UKR_FN UKR_TAILS[PMR] = {
    NULL,                   UKR_TILE(1, UKR_NV),  UKR_TILE(2, UKR_NV),  UKR_TILE(3, UKR_NV),
    UKR_TILE(4, UKR_NV),    UKR_TILE(5, UKR_NV),  UKR_TILE(6, UKR_NV),  UKR_TILE(7, UKR_NV),
    UKR_TILE(8, UKR_NV),    UKR_TILE(9, UKR_NV),  UKR_TILE(10, UKR_NV), UKR_TILE(11, UKR_NV)};

#undef UKR_NV
#undef UKR_MAIN
#undef UKR_TAILS
