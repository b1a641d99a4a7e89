/* matmul.c's plain-C matrix-vector kernels (the portable level) for one dtype
   and one count of partial sums: included once per (dtype, L) by matmul.c,
   which defines T (the element type), L (partial sums per row) and S(name)
   (the name suffix, e.g. name##_f32_base8) first.  No include guard:
   including it twice is the point; it undefines its parameters at the end. */

static void S(mv_dot)(int64_t m, int64_t k, const T *a, int64_t rsa, const T *restrict x,
                      T *restrict y, int64_t incy) {
    int64_t i = 0;
    for (; i + 4 <= m; i += 4) {
        const T *restrict r0 = a + i * rsa, *restrict r1 = r0 + rsa;
        const T *restrict r2 = r1 + rsa, *restrict r3 = r2 + rsa;
        T s0[L] = {0}, s1[L] = {0}, s2[L] = {0}, s3[L] = {0};
        int64_t p = 0;
        for (; p + L <= k; p += L)
            for (int l = 0; l < L; l++) {
                T xv = x[p + l];
                s0[l] += r0[p + l] * xv;
                s1[l] += r1[p + l] * xv;
                s2[l] += r2[p + l] * xv;
                s3[l] += r3[p + l] * xv;
            }
        for (int w = L / 2; w >= 1; w /= 2)
            for (int l = 0; l < w; l++) {
                s0[l] += s0[l + w];
                s1[l] += s1[l + w];
                s2[l] += s2[l + w];
                s3[l] += s3[l + w];
            }
        T t0 = s0[0], t1 = s1[0], t2 = s2[0], t3 = s3[0];
        for (; p < k; p++) {
            t0 += r0[p] * x[p];
            t1 += r1[p] * x[p];
            t2 += r2[p] * x[p];
            t3 += r3[p] * x[p];
        }
        y[i * incy] = t0;
        y[(i + 1) * incy] = t1;
        y[(i + 2) * incy] = t2;
        y[(i + 3) * incy] = t3;
    }
    for (; i < m; i++) {
        const T *restrict r0 = a + i * rsa;
        T s0[L] = {0}, t0 = 0;
        int64_t p = 0;
        for (; p + L <= k; p += L)
            for (int l = 0; l < L; l++) s0[l] += r0[p + l] * x[p + l];
        for (int w = L / 2; w >= 1; w /= 2)
            for (int l = 0; l < w; l++) s0[l] += s0[l + w];
        t0 = s0[0];
        for (; p < k; p++) t0 += r0[p] * x[p];
        y[i * incy] = t0;
    }
}
__attribute__((unused)) static void S(mv_axpy)(int64_t k, int64_t n, const T *x, int64_t incx,
                                               const T *b, int64_t rsb, T *restrict y) {
    for (int64_t j = 0; j < n; j++) y[j] = 0;
    int64_t p = 0;
    for (; p + 4 <= k; p += 4) {
        const T x0 = x[p * incx], x1 = x[(p + 1) * incx], x2 = x[(p + 2) * incx],
                x3 = x[(p + 3) * incx];
        const T *restrict q0 = b + p * rsb, *restrict q1 = q0 + rsb;
        const T *restrict q2 = q1 + rsb, *restrict q3 = q2 + rsb;
        for (int64_t j = 0; j < n; j++)
            y[j] += x0 * q0[j] + x1 * q1[j] + x2 * q2[j] + x3 * q3[j];
    }
    for (; p < k; p++) {
        const T xp = x[p * incx], *restrict q = b + p * rsb;
        for (int64_t j = 0; j < n; j++) y[j] += xp * q[j];
    }
}

#undef T
#undef L
#undef S
