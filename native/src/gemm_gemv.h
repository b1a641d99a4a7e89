/* The matrix-vector kernels (gemm.h) for one dtype at one ISA level: included
   once per (level, dtype) by gemm.c (portable), gemm_avx2.c and gemm_avx512.c,
   which define T and GEMV_SFX (the name suffix, e.g. f32_avx2) first; the
   level comes from the including file's compile flags.  Plain C the compiler
   vectorises: GEMV_LANES independent partial sums (a reduction in one
   variable would not vectorise without -ffast-math).  No include guard:
   including it twice is the point; it undefines T and GEMV_SFX at the end. */
#include <string.h>

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

/* C = A B^T for rows of A and of B both unit-stride along k (m x n dot
   products): each element as GEMM_DOTS_LANES partial sums, added in order,
   then the rest of k, so the bits are the same at every level.  The sums
   are NV vectors of the level's width (GCC vectors, W bytes); blocks of DR
   rows of A by DS rows of B share each chunk's loads, the DR x DS x NV sums
   in registers (a block's rows past m or n repeat the last one and are not
   stored). */
#if defined(__AVX512F__)
#define DOTS_W 64
#elif defined(__AVX2__)
#define DOTS_W 32
#else
#define DOTS_W 16
#endif
typedef T GEMV_S(dots_v) __attribute__((vector_size(DOTS_W)));

void GEMV_S(gemm_dots)(int64_t m, int64_t n, int64_t k, const T *restrict a, int64_t rsa,
                       const T *restrict b, int64_t rsb, T *restrict c, int64_t rsc)
{
    typedef GEMV_S(dots_v) V;
    enum { L = GEMM_DOTS_LANES, VL = DOTS_W / sizeof(T), NV = L / VL,
           DS = NV <= 4 ? 3 : 1, DR = NV == 1 ? 4 : NV == 2 ? 2 : 1 };
    for (int64_t i0 = 0; i0 < m; i0 += DR)
        for (int64_t j0 = 0; j0 < n; j0 += DS) {
            const T *ar[DR], *bs[DS];
            for (int r = 0; r < DR; r++) ar[r] = a + min64(i0 + r, m - 1) * rsa;
            for (int s = 0; s < DS; s++) bs[s] = b + min64(j0 + s, n - 1) * rsb;
            V acc[DR][DS][NV];
            for (int r = 0; r < DR; r++)
                for (int s = 0; s < DS; s++)
                    for (int h = 0; h < NV; h++) acc[r][s][h] = (V){0};
            int64_t p = 0;
            for (; p + L <= k; p += L)
#pragma GCC unroll 8
                for (int h = 0; h < NV; h++) {
                    V vb[DS];
#pragma GCC unroll 8
                    for (int s = 0; s < DS; s++) memcpy(&vb[s], bs[s] + p + h * VL, sizeof(V));
#pragma GCC unroll 8
                    for (int r = 0; r < DR; r++) {
                        V va;
                        memcpy(&va, ar[r] + p + h * VL, sizeof(V));
#pragma GCC unroll 8
                        for (int s = 0; s < DS; s++) acc[r][s][h] += va * vb[s];
                    }
                }
            for (int r = 0; r < DR && i0 + r < m; r++)
                for (int s = 0; s < DS && j0 + s < n; s++) {
                    T sum = 0;
                    for (int h = 0; h < NV; h++) {
                        V v = acc[r][s][h]; /* a copy: acc stays in registers */
                        T t[VL];
                        memcpy(t, &v, sizeof v);
                        for (int l = 0; l < VL; l++)
                            sum += t[l];
                    }
                    for (int64_t q = p; q < k; q++)
                        sum += ar[r][q] * bs[s][q];
                    c[(i0 + r) * rsc + j0 + s] = sum;
                }
        }
}
#undef DOTS_W

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
