/* matmul.c's hand-vectorised matrix-vector kernels for one dtype at one SIMD
   level: included once per (level, dtype) by matmul.c, which defines first
     T, S(name) (the name suffix, e.g. name##_f32_avx2), MV_ATTR (the level's
     target attribute: matmul.c is compiled without ISA flags);
     V (the vector type), W (its lanes), MT (the tail mask's type);
     LOAD, STORE, FMA, ZERO, SET1 (the level's intrinsics);
     MASK(n) (the mask of the first n lanes), MLOAD(p, mk), MSTORE(p, mk, v);
     SUM8(y, incy, c) (eight accumulators' totals to y[r * incy]), NARROW(v)
     (a vector to the AVX2 width, by adding its halves: identity at the AVX2
     level) and RED1(v) (one narrowed vector's total).
   No include guard: including it twice is the point; it undefines its
   parameters at the end. */

MV_ATTR static void S(mv_dot)(int64_t m, int64_t k, const T *a, int64_t rsa, const T *restrict x,
                              T *restrict y, int64_t incy) {
    const int64_t kv = k / W * W;
    const int tail = (int)(k - kv);
    const MT mk = MASK(tail);
    int64_t i = 0;
    for (; i + 8 <= m; i += 8) {
        const T *restrict r = a + i * rsa;
        V c[8];
        for (int q = 0; q < 8; q++) c[q] = ZERO();
        for (int64_t p = 0; p < kv; p += W) {
            V xv = LOAD(x + p);
            for (int q = 0; q < 8; q++) c[q] = FMA(LOAD(r + q * rsa + p), xv, c[q]);
        }
        if (tail) {
            V xv = MLOAD(x + kv, mk);
            for (int q = 0; q < 8; q++)
                c[q] = FMA(MLOAD(r + q * rsa + kv, mk), xv, c[q]);
        }
        SUM8(y + i * incy, incy, c);
    }
    for (; i < m; i++) {
        const T *restrict r = a + i * rsa;
        V c = ZERO();
        for (int64_t p = 0; p < kv; p += W) c = FMA(LOAD(r + p), LOAD(x + p), c);
        if (tail)
            c = FMA(MLOAD(r + kv, mk), MLOAD(x + kv, mk), c);
        y[i * incy] = RED1(NARROW(c));
    }
}

MV_ATTR static void S(mv_axpy)(int64_t k, int64_t n, const T *x, int64_t incx, const T *b,
                                int64_t rsb, T *restrict y) {
    const int64_t nv = n / W * W;
    const int tail = (int)(n - nv);
    const MT mk = MASK(tail);
    if (k <= 0) {
        for (int64_t j = 0; j < n; j++) y[j] = 0;
        return;
    }
    int64_t p = 0;
    for (; p + 4 <= k; p += 4) {
        const V x0 = SET1(x[p * incx]), x1 = SET1(x[(p + 1) * incx]);
        const V x2 = SET1(x[(p + 2) * incx]), x3 = SET1(x[(p + 3) * incx]);
        const T *restrict q0 = b + p * rsb, *restrict q1 = q0 + rsb;
        const T *restrict q2 = q1 + rsb, *restrict q3 = q2 + rsb;
        const int first = p == 0;
        for (int64_t j = 0; j < nv; j += W) {
            V t = first ? ZERO() : LOAD(y + j);
            t = FMA(x0, LOAD(q0 + j), t);
            t = FMA(x1, LOAD(q1 + j), t);
            t = FMA(x2, LOAD(q2 + j), t);
            t = FMA(x3, LOAD(q3 + j), t);
            STORE(y + j, t);
        }
        if (tail) {
            V t = first ? ZERO() : MLOAD(y + nv, mk);
            t = FMA(x0, MLOAD(q0 + nv, mk), t);
            t = FMA(x1, MLOAD(q1 + nv, mk), t);
            t = FMA(x2, MLOAD(q2 + nv, mk), t);
            t = FMA(x3, MLOAD(q3 + nv, mk), t);
            MSTORE(y + nv, mk, t);
        }
    }
    for (; p < k; p++) {
        const V xp = SET1(x[p * incx]);
        const T *restrict q = b + p * rsb;
        const int first = p == 0;
        for (int64_t j = 0; j < nv; j += W)
            STORE(y + j, FMA(xp, LOAD(q + j), first ? ZERO() : LOAD(y + j)));
        if (tail)
            MSTORE(y + nv, mk, FMA(xp, MLOAD(q + nv, mk), first ? ZERO() : MLOAD(y + nv, mk)));
    }
}

#undef T
#undef S
#undef MV_ATTR
#undef V
#undef W
#undef MT
#undef LOAD
#undef STORE
#undef FMA
#undef ZERO
#undef SET1
#undef MASK
#undef MLOAD
#undef MSTORE
#undef NARROW
#undef SUM8
#undef RED1
