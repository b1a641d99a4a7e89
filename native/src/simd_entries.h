/* simd_avx2.c / simd_avx512.c's exported entry points, written once: the
   non-temporal maps and the row kernels' wrappers.  Included by each ISA file
   after simd_math.h and its DEF_MAP instances, with SIMD_ISA (the name
   suffix), VW (lanes) and V_STREAM (a non-temporal vector store) defined.
   No include guard: it is included once per ISA level. */
#define SE_CAT_(a, b) a##_##b
#define SE_CAT(a, b) SE_CAT_(a, b)
#define SE_NAME(name) SE_CAT(name, SIMD_ISA)

/* y from its first VW-float boundary on with non-temporal stores; the ends
   through the ordinary map (the same bits) */
#define SE_MAP_NT(OP, OPU)                                                              \
    void SE_CAT(SE_NAME(ad_##OP##_f32), nt)(int64_t n, const float *x, float *y) {      \
        int64_t i = (int64_t)((-(uintptr_t)y & (VW * sizeof(float) - 1)) / sizeof(float)); \
        if (i > n) i = n;                                                               \
        SE_NAME(ad_##OP##_f32)(i, x, 1, y);                                             \
        for (; i + VW <= n; i += VW) V_STREAM(y + i, v_##OP(V_LOADU(x + i)));           \
        SE_NAME(ad_##OP##_f32)(n - i, x + i, 1, y + i);                                 \
    }
SIMD_MAPS(SE_MAP_NT)
#undef SE_MAP_NT

/* Box-Muller over blocks of 16 pairs (random_kernels.h): pair k of a block
   from u[k] (31 bits: u = (u[k] + 1/2) 2^-31) and v[k] (24 bits: v[k] 2^-24);
   a block's 32 outputs are its 16 cosines, then its 16 sines. */
void SE_NAME(ad_box_muller_f32)(int64_t blocks, const int32_t *u, const int32_t *v, float *y) {
    for (int64_t b = 0; b < blocks; b++, u += 16, v += 16, y += 32)
        for (int k = 0; k < 16; k += VW) {
            V uf = V_FROMI(V_BITS(V_LOADU((const float *)(u + k))));
            V vf = V_FROMI(V_BITS(V_LOADU((const float *)(v + k))));
            V c, s;
            v_box_muller(V_MUL(V_ADD(uf, V_SET1(0.5f)), V_SET1(0x1p-31f)),
                         V_MUL(vf, V_SET1(0x1p-24f)), &c, &s);
            V_STOREU(y + k, c);
            V_STOREU(y + 16 + k, s);
        }
}

int SE_NAME(ad_softmax_row_f32)(const float *x, float *y, int64_t len, int mode) {
    return row_softmax(x, y, len, mode);
}

int SE_NAME(ad_softmax_cols_f32)(const float *x, int64_t xs, float *y, int64_t ys, int64_t yk,
                                 int64_t len, int nl, int mode) {
    return cols_softmax(x, xs, y, ys, yk, len, nl, mode);
}

int SE_NAME(ad_lse_row_f32)(const float *x, int64_t len, double *lse) {
    return row_lse(x, len, lse);
}

int SE_NAME(ad_softmax_scaled_row_f32)(const float *x, float *y, int64_t len, double s) {
    return row_softmax_scaled(x, y, len, s);
}

void SE_NAME(ad_softmax_grad_cols_f32)(const float *y, const float *g, float *dx, int64_t rs,
                                       int64_t len, int64_t lanes, int mode) {
    for (int64_t k = 0; k < lanes; k += VW)
        cols_softmax_grad(y + k, g + k, dx + k, rs, len, lanes - k < VW ? (int)(lanes - k) : VW,
                          mode);
}

void SE_NAME(ad_softmax_grad_rows_f32)(const float *y, const float *g, float *dx, int64_t r0,
                                       int64_t r1, int64_t len, int mode) {
    for (int64_t r = r0; r < r1; r++)
        row_softmax_grad(y + r * len, g + r * len, dx + r * len, len, mode);
}

#define SE_GRAD(OP)                                                                       \
    void SE_NAME(ad_##OP##_grad_f32)(int64_t n, const float *x, const float *g, int64_t sg, \
                                     float *dx) {                                         \
        OP##_grad_map(n, x, g, sg, dx);                                                   \
    }
SIMD_GRADS(SE_GRAD)
#undef SE_GRAD

void SE_NAME(ad_layer_norm_rows_f32)(const float *x, const float *w, const float *b, float *y,
                                     int64_t r0, int64_t r1, int64_t len, double eps) {
    for (int64_t r = r0; r < r1; r++) row_layer_norm(x + r * len, w, b, y + r * len, len, eps);
}

void SE_NAME(ad_layer_norm_grad_rows_f32)(const float *x, const float *g, const float *w,
                                          float *dx, float *dw, float *db, int64_t r0, int64_t r1,
                                          int64_t len, double eps) {
    for (int64_t r = r0; r < r1; r++)
        row_layer_norm_grad(x + r * len, g + r * len, w, dx + r * len, dw, db, len, eps);
}

#undef SE_NAME
#undef SE_CAT
#undef SE_CAT_
