/* One register tile of a whole small product read in place: MR rows x NV
   vectors of C = A @ B (C += A @ B with accum: the chain's sum added to C,
   as the macro-kernel's later passes over k do), A, B and C row-major (row
   strides rsa, rsb, rsc), the last vector loaded and stored through a mask
   of `last` lanes when MASKED.
   Each element is the same FMA chain over k from zero as in every other GEMM
   path, so the bits do not change.  A template: the includer defines T, V,
   VL, LOADU, STOREU, SET1, FMA, ADD, ZERO, MLOAD, MSTORE and SMALL_S (the name
   suffixer) first; MR <= 12 and NV <= 4 are constants at every call, so the
   accumulators stay in registers.  Included by gemm_small_avx512.h and
   gemm_ukr_avx2.h (gemm_narrow).  No include guard: once per dtype and
   level is the point. */

static inline __attribute__((always_inline)) void SMALL_S(small_tile)(
    const int MR, const int NV, const int MASKED, int64_t k, const T *restrict a, int64_t rsa,
    const T *restrict b, int64_t rsb, T *restrict c, int64_t rsc, int last, int accum)
{
    V acc[12][4];
    _Pragma("GCC unroll 16") for (int i = 0; i < MR; i++)
        _Pragma("GCC unroll 4") for (int j = 0; j < NV; j++) acc[i][j] = ZERO();
    for (int64_t p = 0; p < k; p++) {
        V bv[4];
        _Pragma("GCC unroll 4") for (int j = 0; j < NV; j++) bv[j] =
            MASKED && j == NV - 1 ? MLOAD(b + j * VL, last) : LOADU(b + j * VL);
        _Pragma("GCC unroll 16") for (int i = 0; i < MR; i++) {
            V av = SET1(a[i * rsa]);
            _Pragma("GCC unroll 4") for (int j = 0; j < NV; j++)
                acc[i][j] = FMA(av, bv[j], acc[i][j]);
        }
        a++;
        b += rsb;
    }
    _Pragma("GCC unroll 16") for (int i = 0; i < MR; i++)
        _Pragma("GCC unroll 4") for (int j = 0; j < NV; j++) {
            T *cij = c + i * rsc + j * VL;
            if (MASKED && j == NV - 1)
                MSTORE(cij, accum ? ADD(acc[i][j], MLOAD(cij, last)) : acc[i][j], last);
            else
                STOREU(cij, accum ? ADD(acc[i][j], LOADU(cij)) : acc[i][j]);
        }
}

