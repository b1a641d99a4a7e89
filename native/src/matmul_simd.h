/* matmul.c's hand-vectorised matrix-vector kernels for one dtype at one SIMD
   level: included once per (level, dtype) by matmul.c, which defines first
     T, S(name) (the name suffix, e.g. name##_f32_avx2), MV_ATTR (the level's
     target attribute: matmul.c is compiled without ISA flags);
     V (the vector type), W (its lanes), MT (the tail mask's type);
     LOAD, STORE, FMA, ZERO, SET1 (the level's intrinsics);
     MASK(n) (the mask of the first n lanes), MLOAD(p, mk), MSTORE(p, mk, v);
     SUM8(y, incy, c) (eight accumulators' totals to y[r * incy]), NARROW(v)
     (a vector to the AVX2 width, by adding its halves: identity at the AVX2
     level) and RED1(v) (one narrowed vector's total);
     SKNV(mr) (the skinny kernel's vectors of columns per tile of mr rows:
     as many accumulators as the level's registers hold beside B's vectors)
     and AXG (rows of M^T per pass of the axpy form over y, for an M of more
     than AXPY_FAR bytes at one thread: 8 else);
     SK_TALL_NV, where the level has the tall form (sk_tall): its vectors of
     columns per tile of 8 rows;
     DOTN, where the level has the dot kernel (dotn: the AVX2 level's, which
     the AVX-512 level calls too).
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

/* y (+)= sum_r x[r * incx] b[r * rsb + j] over g <= 16 rows of M^T at once
   (g a constant: the function is always inlined), one FMA per row into each of
   y's vectors in the rows' order: y's lanes see the FMA chain over p alone,
   whatever g is. first: y from zero. */
MV_ATTR static inline __attribute__((always_inline)) void
S(axpy_group)(const int g, int first, int64_t nv, int tail, MT mk, const T *x, int64_t incx,
              const T *b, int64_t rsb, T *restrict y) {
    V xs[16];
    const T *restrict q[16];
    for (int r = 0; r < g; r++) {
        xs[r] = SET1(x[r * incx]);
        q[r] = b + r * rsb;
    }
    for (int64_t j = 0; j < nv; j += W) {
        V t = first ? ZERO() : LOAD(y + j);
        for (int r = 0; r < g; r++) t = FMA(xs[r], LOAD(q[r] + j), t);
        STORE(y + j, t);
    }
    if (tail) {
        V t = first ? ZERO() : MLOAD(y + nv, mk);
        for (int r = 0; r < g; r++) t = FMA(xs[r], MLOAD(q[r] + nv, mk), t);
        MSTORE(y + nv, mk, t);
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
    if (AXG > 8 && k * n * (int64_t)sizeof(T) > AXPY_FAR && par_num_threads() == 1 &&
        ad_cpu_caches()->l1d >= AXPY_WIDE_L1)
        for (; p + AXG <= k; p += AXG)
            S(axpy_group)(AXG, p == 0, nv, tail, mk, x + p * incx, incx, b + p * rsb, rsb, y);
    for (; p + 8 <= k; p += 8)
        S(axpy_group)(8, p == 0, nv, tail, mk, x + p * incx, incx, b + p * rsb, rsb, y);
    const T *xp = x + p * incx, *bp = b + p * rsb;
    switch (k - p) {
    case 0: break;
    case 1: S(axpy_group)(1, p == 0, nv, tail, mk, xp, incx, bp, rsb, y); break;
    case 2: S(axpy_group)(2, p == 0, nv, tail, mk, xp, incx, bp, rsb, y); break;
    case 3: S(axpy_group)(3, p == 0, nv, tail, mk, xp, incx, bp, rsb, y); break;
    case 4: S(axpy_group)(4, p == 0, nv, tail, mk, xp, incx, bp, rsb, y); break;
    case 5: S(axpy_group)(5, p == 0, nv, tail, mk, xp, incx, bp, rsb, y); break;
    case 6: S(axpy_group)(6, p == 0, nv, tail, mk, xp, incx, bp, rsb, y); break;
    default: S(axpy_group)(7, p == 0, nv, tail, mk, xp, incx, bp, rsb, y); break;
    }
}

/* skinny: C[0:mr, :) (row stride ldc) = A[0:mr, 0:k) B[0:k, :) for one tile
   of mr rows (<= 8) by nv vectors of columns (nv <= 4), B's rows unit-stride,
   A in any layout; the tile's accumulators stay in registers over the k
   rows (first: from zero, else from C). With tail, the last vector is the
   columns' masked remainder. mr, nv and tail are constants in every call
   (the function is always inlined), so the loops unroll fully. */
MV_ATTR static inline __attribute__((always_inline)) void
S(sk_tile)(const int mr, const int nv, const int tail, MT mk, int first, int64_t k, const T *a,
           int64_t rsa, int64_t csa, const T *b, int64_t rsb, T *c, int64_t ldc) {
    V acc[8][4];
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < nv; v++)
            acc[r][v] = first ? ZERO()
                        : tail && v == nv - 1 ? MLOAD(c + r * ldc + v * W, mk)
                                              : LOAD(c + r * ldc + v * W);
    for (int64_t p = 0; p < k; p++) {
        const T *restrict bp = b + p * rsb;
        V bv[4];
        for (int v = 0; v < nv; v++)
            bv[v] = tail && v == nv - 1 ? MLOAD(bp + v * W, mk) : LOAD(bp + v * W);
        for (int r = 0; r < mr; r++) {
            const V av = SET1(a[r * rsa + p * csa]);
            for (int v = 0; v < nv; v++) acc[r][v] = FMA(av, bv[v], acc[r][v]);
        }
    }
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < nv; v++) {
            if (tail && v == nv - 1)
                MSTORE(c + r * ldc + v * W, mk, acc[r][v]);
            else
                STORE(c + r * ldc + v * W, acc[r][v]);
        }
}

/* One group of mr rows, columns [0, n) of B and C (already offset to the
   first column): tiles of SKNV(mr) vectors, then single vectors, then the
   masked remainder, over blocks of kc rows of B. A small kc (16) reads B as
   kc sequential streams across its full width, which beat taller blocks of
   narrower column strips by 1.5-2x once B is out of cache (its rows 4-16
   KiB apart alias in the caches' sets); a B that fits in L2 is one block. */
MV_ATTR static inline __attribute__((always_inline)) void
S(sk_rows)(const int mr, int64_t k, int64_t n, int64_t kc, const T *a, int64_t rsa,
           int64_t csa, const T *b, int64_t rsb, T *c, int64_t ldc) {
    const int nv = SKNV(mr);
    const int64_t nfull = n / W * W;
    const int tail = (int)(n - nfull);
    const MT mk = MASK(tail), none = MASK(0);
    for (int64_t pc = 0; pc < k; pc += kc) {
        const int64_t kb = pc + kc < k ? kc : k - pc;
        const T *ap = a + pc * csa, *bp = b + pc * rsb;
        int64_t j = 0;
        for (; j + nv * W <= nfull; j += nv * W)
            S(sk_tile)(mr, nv, 0, none, pc == 0, kb, ap, rsa, csa, bp + j, rsb, c + j, ldc);
        for (; j + W <= nfull; j += W)
            S(sk_tile)(mr, 1, 0, none, pc == 0, kb, ap, rsa, csa, bp + j, rsb, c + j, ldc);
        if (tail)
            S(sk_tile)(mr, 1, 1, mk, pc == 0, kb, ap, rsa, csa, bp + j, rsb, c + j, ldc);
    }
}

#ifdef SK_TALL_NV
/* sk_tile for a group of 1 .. 8 rows (rows a run-time count) */
MV_ATTR static inline __attribute__((always_inline)) void
S(sk_group)(const int nv, const int tail, MT mk, int first, int64_t rows, int64_t kb,
            const T *a, int64_t rsa, int64_t csa, const T *b, int64_t rsb, T *c, int64_t ldc) {
    switch (rows) {
    case 1: S(sk_tile)(1, nv, tail, mk, first, kb, a, rsa, csa, b, rsb, c, ldc); break;
    case 2: S(sk_tile)(2, nv, tail, mk, first, kb, a, rsa, csa, b, rsb, c, ldc); break;
    case 3: S(sk_tile)(3, nv, tail, mk, first, kb, a, rsa, csa, b, rsb, c, ldc); break;
    case 4: S(sk_tile)(4, nv, tail, mk, first, kb, a, rsa, csa, b, rsb, c, ldc); break;
    case 5: S(sk_tile)(5, nv, tail, mk, first, kb, a, rsa, csa, b, rsb, c, ldc); break;
    case 6: S(sk_tile)(6, nv, tail, mk, first, kb, a, rsa, csa, b, rsb, c, ldc); break;
    case 7: S(sk_tile)(7, nv, tail, mk, first, kb, a, rsa, csa, b, rsb, c, ldc); break;
    default: S(sk_tile)(8, nv, tail, mk, first, kb, a, rsa, csa, b, rsb, c, ldc); break;
    }
}

/* The tall form, 9 or more rows (matmul.c's SK_TALL_MAX): per block of kc
   rows of B, per tile of B's columns (SK_TALL_NV vectors, then single ones,
   then the masked remainder), every group of 8 rows of A in turn, so B is
   read from memory once and each tile from L1 by the groups after the
   first. Each element of C is still one FMA chain over p. */
MV_ATTR static void S(sk_tall)(int64_t m, int64_t k, int64_t n, int64_t kc, const T *a,
                               int64_t rsa, int64_t csa, const T *b, int64_t rsb, T *c,
                               int64_t ldc) {
    const int nv = SK_TALL_NV;
    const int64_t nfull = n / W * W;
    const int tail = (int)(n - nfull);
    const MT mk = MASK(tail), none = MASK(0);
    for (int64_t pc = 0; pc < k; pc += kc) {
        const int64_t kb = pc + kc < k ? kc : k - pc;
        const T *ap = a + pc * csa, *bp = b + pc * rsb;
        const int first = pc == 0;
        int64_t j = 0;
#define SK_GROUPS(NV, TAIL, MK)                                                               \
    for (int64_t i = 0; i < m; i += 8)                                                        \
        S(sk_group)(NV, TAIL, MK, first, m - i < 8 ? m - i : 8, kb, ap + i * rsa, rsa, csa,   \
                    bp + j, rsb, c + i * ldc + j, ldc)
        for (; j + nv * W <= nfull; j += nv * W) SK_GROUPS(nv, 0, none);
        for (; j + W <= nfull; j += W) SK_GROUPS(1, 0, none);
        if (tail) SK_GROUPS(1, 1, mk);
#undef SK_GROUPS
    }
}
#endif

/* C[0:m, 0:n) = A B for m rows of A (any layout) and B's rows unit-stride,
   B and C already offset to the first column: groups of 8 rows, then the
   rest. Every element of C is one FMA chain over p = 0, 1, ..., k - 1 in
   its lane, whichever tile, vector width or column split computed it. */
MV_ATTR static void S(mv_skinny)(int64_t m, int64_t k, int64_t n, const T *a, int64_t rsa,
                                 int64_t csa, const T *b, int64_t rsb, T *c, int64_t ldc) {
    const int64_t bytes = k * n * (int64_t)sizeof(T);
#ifdef SK_TALL_NV
    if (m > 8) {
        S(sk_tall)(m, k, n, bytes > SK_FAR ? 16 : SK_TALL_KC, a, rsa, csa, b, rsb, c, ldc);
        return;
    }
#endif
    const int64_t kc = bytes <= SK_CACHED ? k : 16;
    for (int64_t i = 0; i < m; i += 8) {
        const T *ai = a + i * rsa;
        T *ci = c + i * ldc;
        switch (m - i < 8 ? m - i : 8) {
        case 1: S(sk_rows)(1, k, n, kc, ai, rsa, csa, b, rsb, ci, ldc); break;
        case 2: S(sk_rows)(2, k, n, kc, ai, rsa, csa, b, rsb, ci, ldc); break;
        case 3: S(sk_rows)(3, k, n, kc, ai, rsa, csa, b, rsb, ci, ldc); break;
        case 4: S(sk_rows)(4, k, n, kc, ai, rsa, csa, b, rsb, ci, ldc); break;
        case 5: S(sk_rows)(5, k, n, kc, ai, rsa, csa, b, rsb, ci, ldc); break;
        case 6: S(sk_rows)(6, k, n, kc, ai, rsa, csa, b, rsb, ci, ldc); break;
        case 7: S(sk_rows)(7, k, n, kc, ai, rsa, csa, b, rsb, ci, ldc); break;
        default: S(sk_rows)(8, k, n, kc, ai, rsa, csa, b, rsb, ci, ldc); break;
        }
    }
}

#ifdef DOTN
/* dotn: C[0:m, 0:n) (row stride ldc) = A B for a few columns, A's rows and
   B^T's (bt, row stride rsbt) unit-stride: C[i, j] = A[i, :] . B^T[j, :].
   Tiles of R rows by C <= 4 columns of C (R C accumulators, C vectors of
   B^T and one of A in registers); each element is a W-lane FMA chain over p
   (lane l taking the p = l mod W), the k % W tail masked, then SUM8's
   horizontal tree: the same bits in every tile, alone or split over threads.
   R and C are constants in every call (the function is always inlined). */
MV_ATTR static inline __attribute__((always_inline)) void
S(dotn_tile)(const int R, const int C, int64_t k, const T *a, int64_t rsa, const T *bt,
             int64_t rsbt, T *c, int64_t ldc) {
    const int64_t kv = k / W * W;
    const int tail = (int)(k - kv);
    V acc[16], bv[4];
    for (int q = 0; q < 16; q++) acc[q] = ZERO();
    for (int64_t p = 0; p < kv; p += W) {
        for (int j = 0; j < C; j++) bv[j] = LOAD(bt + j * rsbt + p);
        for (int r = 0; r < R; r++) {
            const V av = LOAD(a + r * rsa + p);
            for (int j = 0; j < C; j++) acc[r * C + j] = FMA(av, bv[j], acc[r * C + j]);
        }
    }
    if (tail) {
        const MT mk = MASK(tail);
        for (int j = 0; j < C; j++) bv[j] = MLOAD(bt + j * rsbt + kv, mk);
        for (int r = 0; r < R; r++) {
            const V av = MLOAD(a + r * rsa + kv, mk);
            for (int j = 0; j < C; j++) acc[r * C + j] = FMA(av, bv[j], acc[r * C + j]);
        }
    }
    T t[16];
    SUM8(t, 1, acc);
    if (R * C > 8) SUM8(t + 8, 1, acc + 8);
    for (int r = 0; r < R; r++)
        for (int j = 0; j < C; j++) c[r * ldc + j] = t[r * C + j];
}

/* rows [0, m) of C for columns [0, C): tiles of R rows, then single rows */
#define DOTN_ROWS(R, C)                                                                    \
    do {                                                                                   \
        int64_t i_ = 0;                                                                    \
        for (; i_ + (R) <= m; i_ += (R))                                                   \
            S(dotn_tile)(R, C, k, a + i_ * rsa, rsa, btj, rsbt, cj + i_ * ldc, ldc);        \
        for (; i_ < m; i_++)                                                               \
            S(dotn_tile)(1, C, k, a + i_ * rsa, rsa, btj, rsbt, cj + i_ * ldc, ldc);        \
    } while (0)

/* column groups of 4 (3 rows a tile), then the 1-3 left (4, 6, 8 rows) */
MV_ATTR static void S(mv_dotn)(int64_t m, int64_t n, int64_t k, const T *a, int64_t rsa,
                               const T *bt, int64_t rsbt, T *c, int64_t ldc) {
    for (int64_t j = 0; j < n; j += 4) {
        const T *btj = bt + j * rsbt;
        T *cj = c + j;
        switch (n - j < 4 ? n - j : 4) {
        case 1: DOTN_ROWS(8, 1); break;
        case 2: DOTN_ROWS(6, 2); break;
        case 3: DOTN_ROWS(4, 3); break;
        default: DOTN_ROWS(3, 4); break;
        }
    }
}
#undef DOTN_ROWS
#endif

#undef DOTN
#undef T
#undef S
#undef MV_ATTR
#undef SKNV
#undef SK_TALL_NV
#undef AXG
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
