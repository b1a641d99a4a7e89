/* strided.c's per-dtype kernels: included once per dtype by strided.c through
   each_dtype.h, which defines T (the element type) and S(name) (the dtype
   suffix) first. No include guard: including it twice is the point; it
   undefines its parameters at the end. */

/* A strided copy of n elements of T. Copies go by element size, through the
   integer instantiations (copy_inner), so the float ones go unused. */
__attribute__((unused)) static void S(copy)(int64_t n, char **p, const int64_t *s) {
    T *d = (T *)p[0];
    const T *x = (const T *)p[1];
    if (s[0] == 1 && s[1] == 0) { /* a broadcast source: a fill, which the compiler
                                     vectorises (the strided loop stores one at a time) */
        const T v = *x;
        for (int64_t i = 0; i < n; i++) d[i] = v;
        return;
    }
    for (int64_t i = 0; i < n; i++) d[i * s[0]] = x[i * s[1]];
}

/* The conversion from T to the dtype in *ctx (integers saturate). */
static void S(cvt)(void *ctx, int64_t n, char **p, const int64_t *s) {
    int to = *(int *)ctx;
    const T *x = (const T *)p[1];
    switch (to) {
    case AD_FLOAT32: {
        float *d = (float *)p[0];
        for (int64_t i = 0; i < n; i++) d[i * s[0]] = (float)x[i * s[1]];
    } break;
    case AD_FLOAT64: {
        double *d = (double *)p[0];
        for (int64_t i = 0; i < n; i++) d[i * s[0]] = (double)x[i * s[1]];
    } break;
    case AD_INT64: {
        int64_t *d = (int64_t *)p[0];
        for (int64_t i = 0; i < n; i++) d[i * s[0]] = ad_sat_i64((double)x[i * s[1]]);
    } break;
    case AD_INT32: {
        int32_t *d = (int32_t *)p[0];
        for (int64_t i = 0; i < n; i++) d[i * s[0]] = (int32_t)ad_sat_i64((double)x[i * s[1]]);
    } break;
    case AD_UINT8: {
        uint8_t *d = (uint8_t *)p[0];
        for (int64_t i = 0; i < n; i++) d[i * s[0]] = (uint8_t)ad_sat_i64((double)x[i * s[1]]);
    } break;
    case AD_BOOL: {
        uint8_t *d = (uint8_t *)p[0];
        for (int64_t i = 0; i < n; i++) d[i * s[0]] = x[i * s[1]] != 0;
    } break;
    }
}

#undef T
#undef S
