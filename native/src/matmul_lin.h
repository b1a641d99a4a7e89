/* The linear op's epilogue and backward loops (matmul.c) for one dtype at one
   ISA level: included once per (level, dtype) by matmul.c, which defines T,
   S(name) (the name suffix, e.g. name##_f32_avx2) and LIN_ATTR (the level's
   target attribute, or nothing) first.  The same expressions at every level
   (no FMA: an add, a select, products rounded one by one), so the same bits.
   No include guard: including it twice is the point; it undefines its
   parameters at the end. */

/* rows x cols of C (row stride rsc): + b[j] (b NULL: none; bs 0: one element),
   then relu when asked (t <= 0 ? 0 : t keeps a NaN, as the relu op) */
LIN_ATTR static void S(lin_rows)(int64_t rows, int64_t cols, T *c, int64_t rsc, const T *b,
                                 int64_t bs, int relu) {
    for (int64_t i = 0; i < rows; i++) {
        T *restrict r = c + i * rsc;
        if (b && bs && relu)
            for (int64_t j = 0; j < cols; j++) {
                T t = r[j] + b[j];
                r[j] = t <= 0 ? 0 : t;
            }
        else if (b && bs)
            for (int64_t j = 0; j < cols; j++) r[j] = r[j] + b[j];
        else if (b && relu)
            for (int64_t j = 0; j < cols; j++) {
                T t = r[j] + b[0];
                r[j] = t <= 0 ? 0 : t;
            }
        else if (b)
            for (int64_t j = 0; j < cols; j++) r[j] = r[j] + b[0];
        else if (relu)
            for (int64_t j = 0; j < cols; j++) r[j] = r[j] <= 0 ? 0 : r[j];
    }
}

/* The backward's elementwise part without create_graph: the gradient at the
   pre-activation, gz = g * act'(y) (act' from the output, by the same
   expressions as the relu / tanh / sigmoid backward ops), and, when gb is
   non-NULL, its column sums (the bias gradient) in the same pass.  g, y, gz
   are m x n contiguous; with no activation gz is g and only gb is written. */
LIN_ATTR static void S(lin_gradz)(int64_t m, int64_t n, int act, const T *g, const T *y, T *gz,
                                  T *gb) {
    if (gb)
        for (int64_t j = 0; j < n; j++) gb[j] = 0;
    for (int64_t i = 0; i < m; i++) {
        const T *restrict gr = g + i * n, *restrict yr = y ? y + i * n : NULL;
        const T *zr = gr;
        if (act != AD_LINEAR_NONE) {
            T *restrict w = gz + i * n;
            if (act == AD_LINEAR_RELU)
                for (int64_t j = 0; j < n; j++) w[j] = (T)(yr[j] > 0) * gr[j];
            else if (act == AD_LINEAR_TANH)
                for (int64_t j = 0; j < n; j++) w[j] = (1 - yr[j] * yr[j]) * gr[j];
            else
                for (int64_t j = 0; j < n; j++) w[j] = gr[j] * yr[j] * (1 - yr[j]);
            zr = w;
        }
        if (gb)
            for (int64_t j = 0; j < n; j++) gb[j] += zr[j];
    }
}

#undef T
#undef S
#undef LIN_ATTR
