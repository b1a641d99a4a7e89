/* The matrix-vector kernels (gemm.h) for one dtype at one ISA level: included
   once per (level, dtype) by gemm.c (portable), gemm_avx2.c and gemm_avx512.c,
   which define T and GEMV_SFX (the name suffix, e.g. f32_avx2) first; the
   level comes from the including file's compile flags.  Plain C the compiler
   vectorises: GEMV_LANES independent partial sums (a reduction in one
   variable would not vectorise without -ffast-math).  No include guard:
   including it twice is the point; it undefines T and GEMV_SFX at the end. */
#define GEMV_CAT_(a, b) a##_##b
#define GEMV_CAT(a, b) GEMV_CAT_(a, b)
#define GEMV_S(name) GEMV_CAT(name, GEMV_SFX)

void GEMV_S(gemm_dotrows)(int64_t m, int64_t k, const T *restrict a, int64_t rsa,
                          const T *restrict x, T *restrict y, int64_t incy)
{
    for (int64_t i = 0; i < m; i++) {
        const T *r = a + i * rsa;
        T acc[GEMV_LANES] = {0}, s = 0;
        int64_t p = 0;
        for (; p + GEMV_LANES <= k; p += GEMV_LANES)
            for (int j = 0; j < GEMV_LANES; j++)
                acc[j] += r[p + j] * x[p + j];
        for (int j = 0; j < GEMV_LANES; j++)
            s += acc[j];
        for (; p < k; p++)
            s += r[p] * x[p];
        y[i * incy] = s;
    }
}

void GEMV_S(gemm_axpyrows)(int64_t k, int64_t n, const T *restrict x, int64_t incx,
                           const T *restrict b, int64_t rsb, T *restrict y)
{
    for (int64_t j = 0; j < n; j++)
        y[j] = 0;
    int64_t p = 0;
    for (; p + 4 <= k; p += 4) {
        const T x0 = x[p * incx], x1 = x[(p + 1) * incx], x2 = x[(p + 2) * incx],
                x3 = x[(p + 3) * incx];
        const T *r0 = b + p * rsb, *r1 = r0 + rsb, *r2 = r1 + rsb, *r3 = r2 + rsb;
        for (int64_t j = 0; j < n; j++)
            y[j] += x0 * r0[j] + x1 * r1[j] + x2 * r2[j] + x3 * r3[j];
    }
    for (; p < k; p++) {
        const T xp = x[p * incx], *r = b + p * rsb;
        for (int64_t j = 0; j < n; j++)
            y[j] += xp * r[j];
    }
}

#undef GEMV_S
#undef GEMV_CAT
#undef GEMV_CAT_
#undef GEMV_SFX
#undef T
