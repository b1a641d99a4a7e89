/* lanes.c's kernels for one dtype: included once per dtype by lanes.c, which
   defines T (the element type), S(name) (the dtype suffix) and ACC (cumsum's
   accumulator: double for the floats; uint64_t for int64, exact, wrapping
   instead of UB) first, and, for the float dtypes, SIMD_LANE(call): the call
   itself for float32 (the SIMD exp path, 0 when the lane needs the double
   loop), 0 for float64 (double libm only).  No include guard: including it
   twice is the point; it undefines its parameters at the end. */

#ifdef SIMD_LANE

/* max of a lane in double (NaN skipped: it reaches the result through the sum) */
static inline double S(lane_max_dbl)(const T *X, int64_t sx, int64_t len) {
    double m = -INFINITY;
    for (int64_t i = 0; i < len; i++)
        if ((double)X[i * sx] > m) m = (double)X[i * sx];
    return m;
}

static void S(lse)(const void *px, int64_t sx, void *py, int64_t sy, int64_t len, int flag) {
    const T *X = px;
    (void)sy, (void)flag;
    if (SIMD_LANE(lse_simd(px, sx, py, len))) return;
    double m = S(lane_max_dbl)(X, sx, len), shift = isfinite(m) ? m : 0.0;
    double acc = 0;
    for (int64_t i = 0; i < len; i++) acc += exp((double)X[i * sx] - shift);
    /* an infinite maximum is the result, unless a NaN (skipped by the
       maximum, an all-NaN lane's being -inf) made the terms' sum NaN */
    *(T *)py = (T)(isinf(m) && acc == acc ? m : shift + log(acc));
}

/* flag 0: softmax, 1: log_softmax */
static void S(softmax)(const void *px, int64_t sx, void *py, int64_t sy, int64_t len,
                       int flag) {
    const T *X = px;
    T *Y = py;
    if (SIMD_LANE(softmax_simd(px, sx, py, sy, len, flag))) return;
    double m = S(lane_max_dbl)(X, sx, len), shift = isfinite(m) ? m : 0.0;
    if (m == INFINITY) {
        /* x - max is NaN at an inf (and -inf beside it), so the sum is NaN:
           the whole lane is NaN, as torch's (e^x / sum left 0 beside the inf) */
        for (int64_t i = 0; i < len; i++) Y[i * sy] = (T)NAN;
        return;
    }
    double acc = 0;
    for (int64_t i = 0; i < len; i++) acc += exp((double)X[i * sx] - shift);
    if (flag) {
        double lz = shift + log(acc);
        for (int64_t i = 0; i < len; i++) Y[i * sy] = (T)((double)X[i * sx] - lz);
    } else {
        for (int64_t i = 0; i < len; i++) Y[i * sy] = (T)(exp((double)X[i * sx] - shift) / acc);
    }
}

#endif

/* flag 1: reversed (sums from the end), the backward of cumsum */
static void S(cumsum)(const void *px, int64_t sx, void *py, int64_t sy, int64_t len,
                      int flag) {
    const T *X = px;
    T *Y = py;
    ACC acc = 0;
    for (int64_t k = 0; k < len; k++) {
        int64_t i = flag ? len - 1 - k : k;
        acc += (ACC)X[i * sx];
        Y[i * sy] = (T)acc;
    }
}

/* nl <= CUMSUM_COLS lanes side by side (lane k's element i at X[i sx + k sk],
   Y[i sy + k yk]) a row at a time: each lane's sums in the order and type of
   cumsum's, so the same bits; the rows are read and written whole */
static void S(cumsum_cols)(const void *px, int64_t sx, int64_t sk, void *py, int64_t sy,
                           int64_t yk, int64_t len, int nl, int flag) {
    const T *X = px;
    T *Y = py;
    ACC acc[CUMSUM_COLS] = {0};
    for (int64_t r = 0; r < len; r++) {
        int64_t i = flag ? len - 1 - r : r;
        const T *x = X + i * sx;
        T *y = Y + i * sy;
        if (sk == 1 && yk == 1)
            for (int k = 0; k < nl; k++) y[k] = (T)(acc[k] += (ACC)x[k]);
        else
            for (int k = 0; k < nl; k++) y[k * yk] = (T)(acc[k] += (ACC)x[k * sk]);
    }
}

#undef T
#undef S
#undef ACC
#undef SIMD_LANE
