/* reduce.c's vectorised loops for one dtype and one ISA level: included twice
   per summing dtype by reduce_dtype.h, which defines RED_ISA (the name suffix:
   base or avx2) and RED_ATTR (nothing, or the avx2 target attribute) first,
   on top of T, S(name) and ACC. The same C compiled for each level gives the
   same lanes and order, so the same bits. No include guard: including it
   twice is the point; it undefines RED_ISA and RED_ATTR at the end. */
#define RED_K(name) RED_CAT(S(name), RED_ISA)

/* Sum of x[0..n), n a multiple of 32: 32 lanes (several vector accumulators,
   no dependency chain), each block of 1024 folded pairwise (lane l += lane
   l + w for w = 16, 8, ..., 1) and added to the total in ACC.  The lanes are
   RED_NV vectors of 32 bytes (GCC vector types: SSE pairs at the baseline),
   so the fold's wide steps are vector adds and only the last steps within a
   vector are scalar: as a plain loop over a lane array, GCC spilled the
   array and folded it lane by lane, a quarter of a 1024-wide row's sum. */
#define RED_VL ((int)(32 / sizeof(T)))
#define RED_NV (32 / RED_VL)
typedef T RED_K(vec) __attribute__((vector_size(32)));
RED_ATTR __attribute__((unused)) static ACC RED_K(sum_lanes)(const T *x, int64_t n) {
    ACC total = 0;
    for (int64_t i = 0; i < n;) {
        RED_K(vec) acc[RED_NV];
        _Pragma("GCC unroll 8") for (int v = 0; v < RED_NV; v++) acc[v] = (RED_K(vec)){0};
        int64_t end = i + 1024 < n ? i + 1024 : n;
        for (; i < end; i += 32)
            _Pragma("GCC unroll 8") for (int v = 0; v < RED_NV; v++) {
                RED_K(vec) t;
                memcpy(&t, x + i + v * RED_VL, sizeof t);
                acc[v] += t;
            }
        _Pragma("GCC unroll 3") for (int w = RED_NV / 2; w >= 1; w /= 2)
            _Pragma("GCC unroll 4") for (int v = 0; v < w; v++) acc[v] += acc[v + w];
        T lane[RED_VL];
        memcpy(lane, &acc[0], sizeof lane);
        _Pragma("GCC unroll 3") for (int w = RED_VL / 2; w >= 1; w /= 2)
            _Pragma("GCC unroll 4") for (int l = 0; l < w; l++) lane[l] += lane[l + w];
        total += (ACC)lane[0];
    }
    return total;
}
#undef RED_VL
#undef RED_NV

/* Sum over the outer dim of a 2-d iteration into a contiguous output row:
   columns [c0, c1), four input rows folded per pass over the output row. */
RED_ATTR __attribute__((unused)) static void RED_K(fold)(char *po, const char *px, int64_t rows,
                                                         int64_t row_bytes, int64_t c0,
                                                         int64_t c1) {
    T *restrict o = (T *)po;
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4) {
        const T *restrict a = (const T *)(px + r * row_bytes);
        const T *restrict b = (const T *)(px + (r + 1) * row_bytes);
        const T *restrict c = (const T *)(px + (r + 2) * row_bytes);
        const T *restrict d = (const T *)(px + (r + 3) * row_bytes);
        for (int64_t i = c0; i < c1; i++) o[i] += (a[i] + b[i]) + (c[i] + d[i]);
    }
    for (; r < rows; r++) {
        const T *restrict a = (const T *)(px + r * row_bytes);
        for (int64_t i = c0; i < c1; i++) o[i] += a[i];
    }
}

#undef RED_K
#undef RED_ISA
#undef RED_ATTR
