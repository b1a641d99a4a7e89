/* conv.c's per-dtype kernels: included once per float dtype by conv.c, which
   defines T (the element type) and S(name) (the dtype suffix) first.
   No include guard: including it twice is the point; it undefines its
   parameters at the end. */

/* cols[(c*kh + i)*kw + j][y*ow + x] = in[c][y*sh - ph + i*dh][x*sw - pw + j*dw] */
static void S(im2col)(const conv_geom *g, const T *in, T *cols) {
    for (int64_t c = 0; c < g->cg; c++)
        for (int64_t i = 0; i < g->kh; i++)
            for (int64_t j = 0; j < g->kw; j++) {
                T *row = cols + ((c * g->kh + i) * g->kw + j) * g->l;
                int64_t off = j * g->dw - g->pw, x0, x1;
                valid_cols(g, off, &x0, &x1);
                for (int64_t y = 0; y < g->oh; y++) {
                    int64_t iy = y * g->sh - g->ph + i * g->dh;
                    T *restrict r = row + y * g->ow;
                    if (iy < 0 || iy >= g->h) {
                        for (int64_t x = 0; x < g->ow; x++) r[x] = 0;
                        continue;
                    }
                    const T *restrict src = in + (c * g->h + iy) * g->w + off;
                    for (int64_t x = 0; x < x0; x++) r[x] = 0;
                    CONV_COLS(x0, x1, g->sw, { r[x] = src[x * STEP]; });
                    for (int64_t x = x1; x < g->ow; x++) r[x] = 0;
                }
            }
}

/* the adjoint of im2col: in[...] += cols[...] */
static void S(col2im)(const conv_geom *g, const T *cols, T *in) {
    for (int64_t c = 0; c < g->cg; c++)
        for (int64_t i = 0; i < g->kh; i++)
            for (int64_t j = 0; j < g->kw; j++) {
                const T *row = cols + ((c * g->kh + i) * g->kw + j) * g->l;
                int64_t off = j * g->dw - g->pw, x0, x1;
                valid_cols(g, off, &x0, &x1);
                for (int64_t y = 0; y < g->oh; y++) {
                    int64_t iy = y * g->sh - g->ph + i * g->dh;
                    if (iy < 0 || iy >= g->h) continue;
                    const T *restrict r = row + y * g->ow;
                    T *restrict dst = in + (c * g->h + iy) * g->w + off;
                    CONV_COLS(x0, x1, g->sw, { dst[x * STEP] += r[x]; });
                }
            }
}

/* item (sample n, group q) of one of the three kernels; cols is k*l scratch,
   acc the weight gradient being accumulated (o*k), tmp og*k scratch */
static void S(conv_item)(const conv_job *jb, int64_t item, T *cols, T *acc, T *tmp) {
    const conv_geom *g = jb->g;
    int64_t n = item / g->groups, q = item % g->groups;
    int64_t xoff = (n * g->c + q * g->cg) * g->h * g->w, yoff = (n * g->o + q * g->og) * g->l;
    const T *a = jb->a, *b = jb->b;
    T *y = jb->y;
    bool pw = pointwise(g);
    if (jb->which == RUN_FWD) { /* a = x, b = w, y = conv output */
        const T *c = pw ? a + xoff : cols;
        if (!pw) S(im2col)(g, a + xoff, cols);
        S(gemm)(g->og, g->l, g->k, b + q * g->og * g->k, g->k, 1, c, g->l, 1, y + yoff, g->l,
                1);
    } else if (jb->which == RUN_BWD_INPUT) { /* a = conv output grad, b = w, y = x */
        if (pw) {
            S(gemm)(g->k, g->l, g->og, b + q * g->og * g->k, 1, g->k, a + yoff, g->l, 1,
                    y + xoff, g->l, 1);
            return;
        }
        S(gemm)(g->k, g->l, g->og, b + q * g->og * g->k, 1, g->k, a + yoff, g->l, 1, cols,
                g->l, 1);
        memset(y + xoff, 0, (size_t)(g->cg * g->h * g->w) * sizeof(T));
        S(col2im)(g, cols, y + xoff);
    } else { /* a = x, b = conv output grad: acc_q += b_g @ im2col(a_g)^T */
        const T *c = pw ? a + xoff : cols;
        if (!pw) S(im2col)(g, a + xoff, cols);
        S(gemm)(g->og, g->k, g->l, b + yoff, g->l, 1, c, 1, g->l, tmp, g->k, 1);
        T *restrict d = acc + q * g->og * g->k;
        for (int64_t i = 0; i < g->og * g->k; i++) d[i] += tmp[i];
    }
}

static void S(conv_slot)(conv_job *jb, int64_t s) {
    const conv_geom *g = jb->g;
    T *cols = (T *)(jb->scratch + (size_t)s * jb->slot), *tmp = cols + jb->ncols;
    int64_t items = g->n * g->groups;
    if (jb->which == RUN_BWD_WEIGHT) {
        /* a static share of the items, so that the sums' order depends only on the
           slot count */
        T *acc = s == 0 ? (T *)jb->y : tmp + g->og * g->k;
        if (s) memset(acc, 0, (size_t)(g->o * g->k) * sizeof(T));
        for (int64_t it = items * s / jb->slots; it < items * (s + 1) / jb->slots; it++)
            S(conv_item)(jb, it, cols, acc, tmp);
        return;
    }
    for (;;) {
        int64_t it = atomic_fetch_add_explicit(&jb->next, 1, memory_order_relaxed);
        if (it >= items) return;
        S(conv_item)(jb, it, cols, NULL, NULL);
    }
}

#undef T
#undef S
