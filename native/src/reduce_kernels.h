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
/* rows summed at once by sum_rows: 16 vector accumulators in all */
#define RED_ROWS (16 / RED_NV)
typedef T RED_K(vec) __attribute__((vector_size(32)));
/* The sums of R rows (R a constant in each inlined copy) of n elements, rs
   apart, n a multiple of 32, each in exactly the order above; the rows'
   dependency chains interleaved, so a short row's latency (its fold, its
   chain of 1024 / 32 adds) overlaps the next rows'. */
RED_ATTR static inline __attribute__((always_inline)) void
RED_K(sum_lanes_rows)(const int R, const T *x, int64_t rs, int64_t n, ACC *total) {
    for (int r = 0; r < R; r++) total[r] = 0;
    for (int64_t i = 0; i < n;) {
        RED_K(vec) acc[RED_ROWS][RED_NV];
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)
            _Pragma("GCC unroll 8") for (int v = 0; v < RED_NV; v++) acc[r][v] = (RED_K(vec)){0};
        int64_t end = i + 1024 < n ? i + 1024 : n;
        for (; i < end; i += 32)
            _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)
                _Pragma("GCC unroll 8") for (int v = 0; v < RED_NV; v++) {
                    RED_K(vec) t;
                    memcpy(&t, x + r * rs + i + v * RED_VL, sizeof t);
                    acc[r][v] += t;
                }
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
            _Pragma("GCC unroll 3") for (int w = RED_NV / 2; w >= 1; w /= 2)
                _Pragma("GCC unroll 4") for (int v = 0; v < w; v++) acc[r][v] += acc[r][v + w];
            T lane[RED_VL];
            memcpy(lane, &acc[r][0], sizeof lane);
            _Pragma("GCC unroll 3") for (int w = RED_VL / 2; w >= 1; w /= 2)
                _Pragma("GCC unroll 4") for (int l = 0; l < w; l++) lane[l] += lane[l + w];
            total[r] += (ACC)lane[0];
        }
    }
}

RED_ATTR __attribute__((unused)) static ACC RED_K(sum_lanes)(const T *x, int64_t n) {
    ACC total;
    RED_K(sum_lanes_rows)(1, x, 0, n, &total);
    return total;
}

/* o[r * os] += the sum of row r of x (rows rs apart, n elements each) for r
   in [0, rows): a row at a time, or RED_ROWS rows at a time through
   sum_lanes_rows when a row is at most RED_GROUP_BYTES long, the last n % 32
   elements of each row added one by one in ACC, as S(sum) does for a row
   alone, so each row's bits are its sum's alone (either way). Interleaved
   longer rows are read as RED_ROWS streams, which the hardware prefetcher
   followed worse than one: Zen 4, 1 thread, 1M float32 elements past L2,
   rows of 128 .. 4096 took 5-35% longer interleaved (4096 x 256: 70 against
   55 us, torch 50), float64 rows of 32 .. 4096 8-40% longer, while rows of
   32 float32 took 7-10% less (latency: one block and its fold per row). */
#define RED_GROUP_BYTES 128
/* Rows shorter than a block (n < 32, all in the tail loop below) where
   RED_TRANSPOSE has a transpose: RED_SHORT rows at a time copied into a
   buffer a column per row, then each row's total summed down its column in
   ACC in the row's element order, the tail loop's bits, the rows' chains
   side by side in vectors instead of each add waiting on the last. float32
   (57344, 28) sum(-1), Zen 4, 1 thread: 944-1840 -> 400-520 us (torch
   300-550, busy machine).  Returns the rows done (a multiple of RED_SHORT). */
#define RED_SHORT 32
RED_ATTR __attribute__((unused)) static int64_t RED_K(sum_short_rows)(T *o, int64_t os,
                                                                      const T *x, int64_t rs,
                                                                      int64_t rows, int64_t n) {
    red_transpose_fn tr = RED_TRANSPOSE;
    if (!tr || n >= 32) return 0;
    T buf[31 * RED_SHORT];
    int64_t r = 0;
    for (; r + RED_SHORT <= rows; r += RED_SHORT) {
        tr(n, RED_SHORT, (char *)buf, RED_SHORT * (int64_t)sizeof(T), (const char *)(x + r * rs),
           rs * (int64_t)sizeof(T));
        ACC acc[RED_SHORT] = {0};
        for (int64_t i = 0; i < n; i++)
            for (int j = 0; j < RED_SHORT; j++) acc[j] += (ACC)buf[i * RED_SHORT + j];
        for (int j = 0; j < RED_SHORT; j++)
            o[(r + j) * os] = (T)((ACC)o[(r + j) * os] + acc[j]);
    }
    return r;
}

RED_ATTR __attribute__((unused)) static void RED_K(sum_rows)(T *o, int64_t os, const T *x,
                                                             int64_t rs, int64_t rows,
                                                             int64_t n) {
    const int64_t nv = n & ~(int64_t)31;
    ACC total[RED_ROWS];
    for (int64_t r = RED_K(sum_short_rows)(o, os, x, rs, rows, n); r < rows;) {
        int g = n * (int64_t)sizeof(T) <= RED_GROUP_BYTES && rows - r >= RED_ROWS ? RED_ROWS : 1;
        if (g == RED_ROWS)
            RED_K(sum_lanes_rows)(RED_ROWS, x + r * rs, rs, nv, total);
        else
            RED_K(sum_lanes_rows)(1, x + r * rs, rs, nv, total);
        for (int q = 0; q < g; q++, r++) {
            const T *xr = x + r * rs;
            for (int64_t i = nv; i < n; i++) total[q] += (ACC)xr[i];
            o[r * os] = (T)((ACC)o[r * os] + total[q]);
        }
    }
}
#undef RED_VL
#undef RED_SHORT
#undef RED_GROUP_BYTES
#undef RED_NV
#undef RED_ROWS

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
#undef RED_TRANSPOSE
