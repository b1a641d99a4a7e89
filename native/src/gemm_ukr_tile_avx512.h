/* One AVX-512 micro-kernel, UKR_MR rows x UKR_NV vectors: included once per
   row count by gemm_ukr_width_avx512.h (with T, V, VL, SFX, PMR, the vector
   operations and UKR_NV defined), which defines UKR_MR first, and UKR_NAME
   for a main kernel (declared in gemm.h). No include guard: including it
   twice is the point; it undefines UKR_MR and UKR_NAME at its end.

   A tail kernel is static, named ukr<MR>x<NV>_<SFX>. C (+)= A micro-panel @ B
   micro-panel with the contract of GEMM_UKR_DECLARE (gemm.h). The
   accumulators are an array the compiler keeps in registers once the
   constant loops are unrolled; an element of A is broadcast from memory, NV
   vectors of B are loaded per k step. The k loop is compiled twice, once with
   the packed layout's constant strides and once with A's run-time row
   stride. */
#ifndef UKR_NAME
/* a tail: the static declaration gives the definition below internal linkage */
#define UKR_NAME UKR_TILE(UKR_MR, UKR_NV)
static void UKR_NAME(int64_t, const T *restrict, int64_t, int64_t, const T *restrict, int64_t,
                     T *restrict, int64_t, int64_t, int64_t, int);
#endif
void UKR_NAME(int64_t k, const T *restrict a, int64_t rsa, int64_t csa, const T *restrict bp,
              int64_t rsb, T *restrict c, int64_t rsc, int64_t rows, int64_t cols, int accum)
{
    V acc[UKR_MR][UKR_NV];
    _Pragma("GCC unroll 16") for (int i = 0; i < UKR_MR; i++)
        _Pragma("GCC unroll 4") for (int j = 0; j < UKR_NV; j++) acc[i][j] = ZERO();
    /* the k loop: A element (i, p) at a[i * ARS + p * ACS] */
#define UKR_LOOP_(ARS, ACS)                                                                 \
    for (int64_t p = 0; p < k; p++) {                                                      \
        V bv[UKR_NV];                                                                      \
        _Pragma("GCC unroll 4") for (int j = 0; j < UKR_NV; j++) bv[j] =                   \
            LOADU(bp + j * VL);                                                            \
        _Pragma("GCC unroll 16") for (int i = 0; i < UKR_MR; i++) {                        \
            V av = SET1(a[i * (ARS)]);                                                     \
            _Pragma("GCC unroll 4") for (int j = 0; j < UKR_NV; j++)                       \
                acc[i][j] = FMA(av, bv[j], acc[i][j]);                                     \
        }                                                                                  \
        a += (ACS);                                                                        \
        bp += rsb;                                                                         \
    }
    if (csa == 1)
        UKR_LOOP_(rsa, 1)
    else
        UKR_LOOP_(1, PMR)
#undef UKR_LOOP_
    _Pragma("GCC unroll 16") for (int i = 0; i < UKR_MR; i++) {
        if (i >= rows)
            break;
        T *ci = c + i * rsc;
        _Pragma("GCC unroll 4") for (int j = 0; j < UKR_NV; j++) {
            V r = acc[i][j];
            int64_t lanes = cols - j * VL;
            if (lanes >= VL) {
                if (accum)
                    r = ADD(r, LOADU(ci + j * VL));
                STOREU(ci + j * VL, r);
            } else if (lanes > 0) {
                if (accum)
                    r = ADD(r, MLOAD(ci + j * VL, lanes));
                MSTORE(ci + j * VL, r, lanes);
            }
        }
    }
    (void)rsa;
}

#undef UKR_MR
#undef UKR_NAME
