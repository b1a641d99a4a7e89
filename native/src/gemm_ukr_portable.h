/* gemm_dtype.h's portable micro-kernel template: included once per tile
   shape by gemm_dtype.h (itself included once per dtype, with T and S(name)
   defined), which defines UKR_NAME (the function's name), UKR_MR (rows) and
   UKR_NC (columns) first. No include guard: including it twice is the point;
   it undefines its parameters at the end. */
static void UKR_NAME(int64_t k, const T *restrict a, int64_t rsa, int64_t csa,
                     const T *restrict bp, int64_t rsb, T *restrict c, int64_t rsc, int64_t rows,
                     int64_t cols, int accum)
{
    T acc[UKR_MR][UKR_NC] = {{0}};
    for (int64_t p = 0; p < k; p++) {
        for (int i = 0; i < UKR_MR; i++)
            for (int j = 0; j < UKR_NC; j++)
                acc[i][j] += a[i * rsa] * bp[j];
        a += csa;
        bp += rsb;
    }
    rows = rows < UKR_MR ? rows : UKR_MR;
    cols = cols < UKR_NC ? cols : UKR_NC;
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++)
            c[i * rsc + j] = accum ? c[i * rsc + j] + acc[i][j] : acc[i][j];
}

#undef UKR_NAME
#undef UKR_MR
#undef UKR_NC
