/* nn.c's per-dtype max-pool kernels: included once per float dtype by nn.c,
   which defines T (the element type) and S(name) (the dtype suffix) first.
   No include guard: including it twice is the point; it undefines its
   parameters at the end. */

/* m[j]: the window maximum of output (i, j), NaN if the window holds one,
   -inf for a window wholly in the padding */
static void S(pool_max_row)(const pool_geom *g, const T *restrict plane, int64_t i,
                            T *restrict m) {
    for (int64_t j = 0; j < g->ow; j++) m[j] = (T)-INFINITY;
    for (int64_t ki = 0; ki < g->kh; ki++) {
        int64_t y = i * g->sh - g->ph + ki * g->dh;
        if (y < 0 || y >= g->h) continue;
        for (int64_t kj = 0; kj < g->kw; kj++) {
            int64_t off = kj * g->dw - g->pw, j0, j1;
            pool_cols(g, off, &j0, &j1);
            const T *restrict r = plane + y * g->w + off;
            POOL_COLS(j0, j1, g->sw, {
                T v = r[j * STEP], c = m[j];
                m[j] = (v > c || v != v) ? v : c;
            });
        }
    }
}

/* POOL_BWD: gx[argmax] += gy[j] (gx the plane of the x-shaped result);
   POOL_GATHER: out[j] = t[argmax] (t the plane of the x-shaped operand) */
static void S(pool_arg_row)(const pool_geom *g, int kind, const T *restrict plane,
                            int64_t i, const T *restrict m, T *restrict done,
                            const T *restrict gy, T *restrict gx,
                            const T *restrict t, T *restrict out) {
    for (int64_t j = 0; j < g->ow; j++) done[j] = 0;
    if (kind == POOL_GATHER)
        for (int64_t j = 0; j < g->ow; j++) out[j] = 0;
    for (int64_t ki = 0; ki < g->kh; ki++) {
        int64_t y = i * g->sh - g->ph + ki * g->dh;
        if (y < 0 || y >= g->h) continue;
        for (int64_t kj = 0; kj < g->kw; kj++) {
            int64_t off = kj * g->dw - g->pw, j0, j1, base = y * g->w + off;
            pool_cols(g, off, &j0, &j1);
            const T *restrict r = plane + base;
            if (kind == POOL_BWD) {
                T *restrict d = gx + base;
                POOL_COLS(j0, j1, g->sw, {
                    T v = r[j * STEP], gv = gy[j];
                    T hit = (T)((done[j] == 0) & ((v == m[j]) | (v != v)));
                    d[j * STEP] += hit != 0 ? gv : 0;
                    done[j] += hit;
                });
            } else {
                const T *restrict tr = t + base;
                POOL_COLS(j0, j1, g->sw, {
                    T v = r[j * STEP], tv = tr[j * STEP];
                    T hit = (T)((done[j] == 0) & ((v == m[j]) | (v != v)));
                    out[j] = hit != 0 ? tv : out[j];
                    done[j] += hit;
                });
            }
        }
    }
}

/* The common 2x2 window with stride 2 and no padding or dilation, one plane:
   each output row reads two input rows once, with no per-offset passes.  The
   backward stores every window's four elements (the windows do not overlap);
   the caller zeroes the rest.  The AVX2 form is pool_avx2.c's. */
static void S(pool_2x2)(int kind, int64_t w, int64_t oh, int64_t ow, const T *restrict x,
                        const T *restrict gy, T *restrict y) {
    for (int64_t i = 0; i < oh; i++) {
        const T *restrict r0 = x + 2 * i * w, *restrict r1 = r0 + w;
        if (kind == POOL_FWD) {
            T *restrict o = y + i * ow;
            for (int64_t j = 0; j < ow; j++) {
                T a = r0[2 * j], b = r0[2 * j + 1], c = r1[2 * j], d = r1[2 * j + 1];
                T m = a;
                m = (b > m || b != b) ? b : m;
                m = (c > m || c != c) ? c : m;
                m = (d > m || d != d) ? d : m;
                o[j] = (a != a) ? a : m;
            }
            continue;
        }
        if (kind == POOL_BWD) {
            const T *restrict g_ = gy + i * ow;
            T *restrict y0 = y + 2 * i * w, *restrict y1 = y0 + w;
            for (int64_t j = 0; j < ow; j++) {
                POOL_2X2_FLAGS(T);
                T gv = g_[j] + 0; /* a -0 gradient arrives as +0, as other windows' sums give */
                y0[2 * j] = h0 != 0 ? gv : 0;
                y0[2 * j + 1] = h1 != 0 ? gv : 0;
                y1[2 * j] = h2 != 0 ? gv : 0;
                y1[2 * j + 1] = h3 != 0 ? gv : 0;
            }
        } else {
            const T *restrict t0 = gy + 2 * i * w, *restrict t1 = t0 + w;
            T *restrict o = y + i * ow;
            for (int64_t j = 0; j < ow; j++) {
                POOL_2X2_FLAGS(T);
                T v = t1[2 * j + 1];
                v = h2 != 0 ? t1[2 * j] : v;
                v = h1 != 0 ? t0[2 * j + 1] : v;
                o[j] = h0 != 0 ? t0[2 * j] : v;
                (void)h3;
            }
        }
    }
}

/* planes [p0, p1) of one of the three walks (see pool_walk) */
static void S(pool_planes)(const pool_walk_job *jb, int64_t p0, int64_t p1,
                           void *scratch) {
    const pool_geom *g = jb->g;
    const int64_t hw = g->h * g->w, ohw = g->oh * g->ow;
    const bool bwd = jb->kind == POOL_BWD;
    if (jb->is2x2) {
        /* planes of even height run as one tall plane (their row pairs follow
           on); the gradient's last column and row, when odd, are in no window
           and are zeroed */
        for (int64_t p = p0, tall = g->h == 2 * g->oh ? p1 - p0 : 1; p < p1; p += tall) {
            const T *x = (const T *)jb->x + p * hw;
            const T *gy = (const T *)jb->gy + (bwd ? p * ohw : p * hw);
            T *y = (T *)jb->y + (bwd ? p * hw : p * ohw);
            int64_t oh = tall * g->oh;
#if defined(__x86_64__) || defined(__i386__)
            if (ad_cpu_isa() >= AD_ISA_AVX2)
                S(ad_pool2x2_avx2)(jb->kind, g->w, oh, g->ow, x, gy, y);
            else
#endif
                S(pool_2x2)(jb->kind, g->w, oh, g->ow, x, gy, y);
            if (!bwd) continue;
            for (int64_t r = 0; r < 2 * oh; r++)
                for (int64_t c = 2 * g->ow; c < g->w; c++) y[r * g->w + c] = 0;
            for (int64_t e = 2 * oh * g->w; e < tall * hw; e++) y[e] = 0;
        }
        return;
    }
    T *m = scratch, *done = m + g->ow;
    if (bwd) /* each thread zeroes the planes it adds into */
        memset((T *)jb->y + p0 * hw, 0, (size_t)((p1 - p0) * hw) * sizeof(T));
    for (int64_t p = p0; p < p1; p++) {
        const T *plane = (const T *)jb->x + p * hw;
        for (int64_t i = 0; i < g->oh; i++) {
            int64_t o = p * ohw + i * g->ow;
            if (jb->kind == POOL_FWD) {
                S(pool_max_row)(g, plane, i, (T *)jb->y + o);
                continue;
            }
            S(pool_max_row)(g, plane, i, m);
            if (jb->kind == POOL_GATHER)
                S(pool_arg_row)(g, POOL_GATHER, plane, i, m, done, NULL, NULL,
                                (const T *)jb->gy + p * hw, (T *)jb->y + o);
            else
                S(pool_arg_row)(g, POOL_BWD, plane, i, m, done,
                                (const T *)jb->gy + o, (T *)jb->y + p * hw, NULL,
                                NULL);
        }
    }
}

#undef T
#undef S
