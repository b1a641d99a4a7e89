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

/* gemm_bsrc's packer (gemm.h) for im2col(x) of one (sample, group) with x
   at ctx: B's row p = (c, i, j), column l = (y, x).  A panel's nr columns
   are a few runs of output pixels, each within one output row (listed once
   per panel); row p of the panel takes each run from one input row at
   stride sw, zeros where the window leaves the image.  The conv2d forward
   packs the GEMM's B this way instead of writing im2col (k x l, 2.4 MB for
   64 channels at 32 x 32) and packing that. */
#define CONV_PACK_RUNS 32 /* runs of a panel: at most NR, 32 at the widest */
_Static_assert(GEMM_AVX512_F32_NR <= CONV_PACK_RUNS && GEMM_AVX512_F64_NR <= CONV_PACK_RUNS &&
                   GEMM_AVX2_F32_NR <= CONV_PACK_RUNS && GEMM_AVX2_F64_NR <= CONV_PACK_RUNS,
               "a panel's runs outnumber im2col_pack's arrays"); /* portable: NR 8 */
static void S(im2col_pack)(const void *ctx, int64_t p0, int64_t kb, int64_t j0, int64_t nb,
                           int nr, void *dst)
{
    const conv_bsrc *bs = ctx;
    const conv_geom *g = bs->g;
    const int64_t khw = g->kh * g->kw;
    int64_t ry[CONV_PACK_RUNS], rx[CONV_PACK_RUNS], rn[CONV_PACK_RUNS], rl[CONV_PACK_RUNS];
    T *d = dst;
    for (int64_t q0 = 0; q0 < nb; q0 += nr, d += (int64_t)nr * kb) {
        int64_t w = min64(nr, nb - q0), runs = 0;
        for (int64_t t = 0, l = j0 + q0; t < w; runs++) { /* at most nr runs */
            rl[runs] = t, ry[runs] = l / g->ow, rx[runs] = l % g->ow;
            rn[runs] = min64(g->ow - rx[runs], w - t);
            t += rn[runs], l += rn[runs];
        }
        int64_t c = p0 / khw, i = p0 % khw / g->kw, j = p0 % g->kw;
        for (int64_t p = 0; p < kb; p++) {
            T *row = d + p * nr;
            const T *plane = (const T *)bs->x + c * g->h * g->w;
            int64_t off = j * g->dw - g->pw, x0, x1, iy0 = i * g->dh - g->ph;
            valid_cols(g, off, &x0, &x1);
            for (int64_t s = 0; s < runs; s++) {
                /* output columns [xs, xe) to r[0 .. xe - xs) */
                T *restrict r = row + rl[s];
                int64_t xs = rx[s], xe = xs + rn[s], iy = ry[s] * g->sh + iy0;
                if (iy < 0 || iy >= g->h) {
                    memset(r, 0, (size_t)(xe - xs) * sizeof(T));
                    continue;
                }
                const T *restrict src = plane + iy * g->w + off;
                int64_t a = x0 < xs ? xs : x0 > xe ? xe : x0;
                int64_t b = x1 < a ? a : x1 > xe ? xe : x1;
                for (int64_t x = xs; x < a; x++) r[x - xs] = 0;
                if (g->sw == 1) /* libc's copy runs at the CPU's vector width */
                    memcpy(r + (a - xs), src + a, (size_t)(b - a) * sizeof(T));
                else
                    for (int64_t x = a; x < b; x++) r[x - xs] = src[x * g->sw];
                for (int64_t x = b; x < xe; x++) r[x - xs] = 0;
            }
            for (int64_t t = w; t < nr; t++) /* a partial last panel's padding */
                row[t] = 0;
            if (++j == g->kw) {
                j = 0;
                if (++i == g->kh) i = 0, c++;
            }
        }
    }
}
#undef CONV_PACK_RUNS

/* The stride-1 forward's B from a padded copy of the image, xp: cg planes
   of hp x wp (the image, ph rows and pw columns of zeros around it), then
   WIDE_SLACK zeros.  B's column s of the wide grid, oh rows of wp columns
   (each row's last (kw - 1) dw past the output's ow), reads row p = (c, i, j)
   at xp[c hp wp + i dh wp + j dw + s]: every row of a panel is one copy of nr
   elements.  The product is og rows of oh x wp; wide_unpack gathers the
   output's columns from it. */
static void S(wide_pad)(const conv_geom *g, const T *in, T *xp, int64_t hp, int64_t wp) {
    for (int64_t c = 0; c < g->cg; c++) {
        T *d = xp + c * hp * wp;
        memset(d, 0, (size_t)(g->ph * wp) * sizeof(T));
        for (int64_t y = 0; y < g->h; y++) {
            T *restrict row = d + (g->ph + y) * wp;
            memset(row, 0, (size_t)g->pw * sizeof(T));
            memcpy(row + g->pw, in + (c * g->h + y) * g->w, (size_t)g->w * sizeof(T));
            memset(row + g->pw + g->w, 0, (size_t)g->pw * sizeof(T));
        }
        memset(d + (g->ph + g->h) * wp, 0, (size_t)((hp - g->ph - g->h) * wp) * sizeof(T));
    }
    memset(xp + g->cg * hp * wp, 0, (size_t)WIDE_SLACK(g) * sizeof(T));
}

/* item's padded image at cols and the packers' context for it; returns the
   buffer after it and its slack (the wide product, og x oh x wp) */
static T *S(wide_begin)(const conv_geom *g, const T *in, T *cols, conv_bsrc *src) {
    int64_t hp = g->h + 2 * g->ph, wp = g->w + 2 * g->pw;
    S(wide_pad)(g, in, cols, hp, wp);
    *src = (conv_bsrc){g, cols, hp, wp};
    return cols + g->cg * hp * wp + WIDE_SLACK(g);
}

static void S(wide_pack)(const void *ctx, int64_t p0, int64_t kb, int64_t j0, int64_t nb,
                         int nr, void *dst) {
    const conv_bsrc *bs = ctx;
    const conv_geom *g = bs->g;
    const int64_t khw = g->kh * g->kw, plane = bs->hp * bs->wp;
    T *d = dst;
    for (int64_t q0 = 0; q0 < nb; q0 += nr, d += (int64_t)nr * kb) {
        int64_t w = min64(nr, nb - q0);
        int64_t c = p0 / khw, i = p0 % khw / g->kw, j = p0 % g->kw;
        const T *base = (const T *)bs->x + j0 + q0;
        for (int64_t p = 0; p < kb; p++) {
            T *restrict row = d + p * nr;
            const T *restrict src = base + c * plane + i * g->dh * bs->wp + j * g->dw;
            if (w == nr) {
                switch (nr) {
                case 32: memcpy(row, src, 32 * sizeof(T)); break;
                case 16: memcpy(row, src, 16 * sizeof(T)); break;
                case 8: memcpy(row, src, 8 * sizeof(T)); break;
                default: memcpy(row, src, (size_t)nr * sizeof(T)); break;
                }
            } else {
                memcpy(row, src, (size_t)w * sizeof(T));
                memset(row + w, 0, (size_t)(nr - w) * sizeof(T));
            }
            if (++j == g->kw) {
                j = 0;
                if (++i == g->kh) i = 0, c++;
            }
        }
    }
}

/* The stride-1 weight gradient's B, the wide im2col transposed: row s of
   the wide grid, column p' = (i kw + j) cg + c (window offset major, so that
   a panel's columns within one offset are plane elements apart) reads
   xp[c hp wp + i dh wp + j dw + s].  A panel within one offset is one
   transposing pack (the AVX2 one where the CPU has it), else element by
   element. */
static void S(wide_packt)(const void *ctx, int64_t p0, int64_t kb, int64_t j0, int64_t nb,
                          int nr, void *dst) {
    const conv_bsrc *bs = ctx;
    const conv_geom *g = bs->g;
    const int64_t plane = bs->hp * bs->wp;
    const T *xp = (const T *)bs->x + p0;
    T *d = dst;
#if defined(__x86_64__) || defined(__i386__)
    const bool avx2 = nr > 1 && ad_cpu_isa() >= AD_ISA_AVX2;
#endif
#define WIDE_COL(col) /* column col's first element (row p0) */                             \
    (xp + (col) % g->cg * plane + (col) / g->cg / g->kw * g->dh * bs->wp +                 \
     (col) / g->cg % g->kw * g->dw)
    for (int64_t q0 = 0; q0 < nb; q0 += nr, d += (int64_t)nr * kb) {
        int64_t w = min64(nr, nb - q0), col = j0 + q0;
        bool simd = false;
#if defined(__x86_64__) || defined(__i386__)
        simd = avx2 && w == nr && col % g->cg + nr <= g->cg;
        if (simd) S(packbt_avx2)(kb, WIDE_COL(col), plane, d, nr);
#endif
        if (!simd) {
            for (int64_t u = 0; u < w; u++) {
                const T *restrict src = WIDE_COL(col + u);
                for (int64_t r = 0; r < kb; r++) d[r * nr + u] = src[r];
            }
            for (int64_t r = 0; r < kb && w < nr; r++)
                memset(d + r * nr + w, 0, (size_t)(nr - w) * sizeof(T));
        }
        /* rows s past an output row's ow read pixels wrapped in from the next
           row: zeros, so that a non-finite one never meets gy's zeros there
           (0 * inf is NaN, where the gradient has no such term) */
        for (int64_t s0 = p0 - p0 % bs->wp + g->ow; s0 < p0 + kb; s0 += bs->wp)
            for (int64_t s = s0 < p0 ? p0 : s0, e = min64(s0 + bs->wp - g->ow, p0 + kb); s < e;
                 s++)
                memset(d + (s - p0) * nr, 0, (size_t)nr * sizeof(T));
    }
#undef WIDE_COL
}

/* the output's og rows of oh x ow from the wide product's og rows of oh x wp */
static void S(wide_unpack)(const conv_geom *g, const T *cw, int64_t wp, T *y) {
    for (int64_t o = 0; o < g->og; o++)
        for (int64_t r = 0; r < g->oh; r++)
            memcpy(y + (o * g->oh + r) * g->ow, cw + (o * g->oh + r) * wp,
                   (size_t)g->ow * sizeof(T));
}

/* conv_transpose2d's weight (o, cg, kh, kw) as the weight (c, og, kh, kw) of
   the conv2d that computes it at stride 1 (transpose_as_conv): each group's
   in and out channels swapped, the window turned half round; false when a
   weight is not finite */
static bool S(flip_weight)(const conv_geom *g, const T *w, T *f) {
    const int64_t khw = g->kh * g->kw;
    bool finite = true;
    for (int64_t q = 0; q < g->groups; q++)
        for (int64_t o = 0; o < g->og; o++)
            for (int64_t c = 0; c < g->cg; c++) {
                const T *restrict s = w + ((q * g->og + o) * g->cg + c) * khw;
                T *restrict d = f + ((q * g->cg + c) * g->og + o) * khw;
                for (int64_t t = 0; t < khw; t++) {
                    d[khw - 1 - t] = s[t];
                    finite &= isfinite(s[t]) != 0;
                }
            }
    return finite;
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

/* ---- Winograd F(2x2, 3x3) (conv.c: wino_fits says where) ----------------------------
   Each 2x2 output tile is A^T [U . V] A with U = G g G^T the 4x4 transform
   of a 3x3 filter and V = B^T d B that of the tile's 4x4 input d (Lavin and
   Gray, "Fast Algorithms for Convolutional Neural Networks"): summed over the
   channels, the 16 positions p of U . V are 16 products U_p (og x cg) @ V_p
   (cg x tiles), 16 multiply-adds a tile and channel pair where the direct
   convolution takes 36. */

/* u[p][o][c] = (G g G^T)[p] for the o x cg filters at w (all groups, the
   layout of the weight gradient's sums, wino_wgrad_finish):
   G = (1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1) */
static void S(wino_weights)(const conv_geom *g, const T *w, T *u) {
    const int64_t oc = g->o * g->cg;
    for (int64_t f = 0; f < oc; f++) {
        const T *k = w + f * 9;
        T t[4][3]; /* G g */
        for (int j = 0; j < 3; j++) {
            t[0][j] = k[j];
            t[1][j] = (k[j] + k[3 + j] + k[6 + j]) / 2;
            t[2][j] = (k[j] - k[3 + j] + k[6 + j]) / 2;
            t[3][j] = k[6 + j];
        }
        for (int i = 0; i < 4; i++) { /* (G g) G^T */
            u[(4 * i + 0) * oc + f] = t[i][0];
            u[(4 * i + 1) * oc + f] = (t[i][0] + t[i][1] + t[i][2]) / 2;
            u[(4 * i + 2) * oc + f] = (t[i][0] - t[i][1] + t[i][2]) / 2;
            u[(4 * i + 3) * oc + f] = t[i][2];
        }
    }
}

/* One (sample, group) item: x its cg x h x w input, u its filters'
   transforms (position 0's og x cg rows of this group, o x cg apart for the
   others), y its og x oh x ow output.  The input is
   copied once with its padding and zeros to whole tiles (cg x hp x wp), each
   row as its even columns then its odd ones; then blocks of whole tile rows
   go through V (16 x cg x tb), the 16 GEMMs into M (16 x og x tb) and the
   output transform, the blocks spread over `parts` threads with a V, an M
   and two output rows (2 x 2 tw) each.  The transforms' loops run along a
   tile row with every operand contiguous there (the even / odd split turns
   the tiles' overlapping columns 2 tx .. 2 tx + 3 into E[tx], O[tx],
   E[tx + 1], O[tx + 1]), so the compiler vectorises them. */
typedef struct S(wino_ctx) {
    const conv_geom *g;
    const T *xp, *u;
    T *y, *vm;
    int64_t th, tw, hp, wp, rows, tb, vps, mps, part, blocks;
    int parts;
} S(wino_ctx);

/* Four of V's planes for a tile row's tw tiles: B^T's row x + s y (s = +-1,
   exact) of the tile's padded rows at its columns 2 tx .. 2 tx + 3 (each
   row its even columns, then from `odd` on its odd ones: a = e[tx], b =
   o[tx], c = e[tx + 1], d = o[tx + 1]), then B across them.  Helpers with
   restrict operands, so that the compiler vectorises along the tile row. */
static void S(wino_bt)(int64_t tw, const T *restrict x, const T *restrict y, T s, int64_t odd,
                       T *restrict v0, T *restrict v1, T *restrict v2, T *restrict v3) {
    for (int64_t tx = 0; tx < tw; tx++) {
        T a = x[tx] + s * y[tx], b = x[odd + tx] + s * y[odd + tx];
        T c = x[tx + 1] + s * y[tx + 1], d = x[odd + tx + 1] + s * y[odd + tx + 1];
        v0[tx] = a - c, v1[tx] = b + c, v2[tx] = c - b, v3[tx] = b - d;
    }
}

/* Two output rows (2 tw each) of a tile row from M's 16 planes (md, mps
   apart): A^T on the rows (positions j, 4 + j, 8 + j, 12 + j) at each
   column j, then A across them */
static void S(wino_at)(int64_t tw, const T *restrict md, int64_t mps, T *restrict y0,
                       T *restrict y1) {
    for (int64_t tx = 0; tx < tw; tx++) {
        T a0 = md[tx] + md[4 * mps + tx] + md[8 * mps + tx];
        T a1 = md[mps + tx] + md[5 * mps + tx] + md[9 * mps + tx];
        T a2 = md[2 * mps + tx] + md[6 * mps + tx] + md[10 * mps + tx];
        T a3 = md[3 * mps + tx] + md[7 * mps + tx] + md[11 * mps + tx];
        T b0 = md[4 * mps + tx] - md[8 * mps + tx] - md[12 * mps + tx];
        T b1 = md[5 * mps + tx] - md[9 * mps + tx] - md[13 * mps + tx];
        T b2 = md[6 * mps + tx] - md[10 * mps + tx] - md[14 * mps + tx];
        T b3 = md[7 * mps + tx] - md[11 * mps + tx] - md[15 * mps + tx];
        y0[2 * tx] = a0 + a1 + a2, y0[2 * tx + 1] = a1 - a2 - a3;
        y1[2 * tx] = b0 + b1 + b2, y1[2 * tx + 1] = b1 - b2 - b3;
    }
}

/* V = B^T d B, B^T = (1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1), for the nr
   tile rows from ty0 */
static void S(wino_v)(const S(wino_ctx) *w, int64_t ty0, int64_t nr, T *v) {
    const int64_t tw = w->tw, wp = w->wp, vps = w->vps, odd = tw + 1; /* a row's odd columns */
    for (int64_t c = 0; c < w->g->cg; c++)
        for (int64_t ty = 0; ty < nr; ty++) {
            const T *r0 = w->xp + (c * w->hp + 2 * (ty0 + ty)) * wp;
            const T *r1 = r0 + wp, *r2 = r1 + wp, *r3 = r2 + wp;
            T *vd = v + c * w->tb + ty * tw;
            /* B^T's rows: r0 - r2, r1 + r2, r2 - r1, r1 - r3 */
            S(wino_bt)(tw, r0, r2, -1, odd, vd, vd + vps, vd + 2 * vps, vd + 3 * vps);
            S(wino_bt)(tw, r1, r2, 1, odd, vd + 4 * vps, vd + 5 * vps, vd + 6 * vps, vd + 7 * vps);
            S(wino_bt)(tw, r2, r1, -1, odd, vd + 8 * vps, vd + 9 * vps, vd + 10 * vps,
                       vd + 11 * vps);
            S(wino_bt)(tw, r1, r3, -1, odd, vd + 12 * vps, vd + 13 * vps, vd + 14 * vps,
                       vd + 15 * vps);
        }
}

/* blocks [b0, b1) with the V, M and output rows at vm */
static void S(wino_blocks)(const S(wino_ctx) *w, int64_t b0, int64_t b1, T *vm) {
    const conv_geom *g = w->g;
    const int64_t tw = w->tw, tb = w->tb, vps = w->vps, mps = w->mps, cg = g->cg, og = g->og;
    T *v = vm, *m = v + 16 * vps, *rows = m + 16 * mps, *y = w->y;
    for (int64_t b = b0; b < b1; b++) {
        const int64_t ty0 = b * w->rows, nr = min64(w->rows, w->th - ty0), nb = nr * tw;
        S(wino_v)(w, ty0, nr, v);
        for (int p = 0; p < 16; p++)
            S(gemm)(og, nb, cg, w->u + p * g->o * cg, cg, 1, v + p * vps, tb, 1, m + p * mps, tb,
                    1);
        /* Y = A^T M A, A^T = (1 1 1 0; 0 1 -1 -1): two whole output rows of
           the tile row, then their first ow columns into the output */
        for (int64_t o = 0; o < og; o++)
            for (int64_t ty = 0; ty < nr; ty++) {
                const int64_t oy = 2 * (ty0 + ty);
                S(wino_at)(tw, m + o * tb + ty * tw, mps, rows, rows + 2 * tw);
                T *yo = y + (o * g->oh + oy) * g->ow;
                memcpy(yo, rows, (size_t)g->ow * sizeof(T));
                if (oy + 1 < g->oh) memcpy(yo + g->ow, rows + 2 * tw, (size_t)g->ow * sizeof(T));
            }
    }
}

static void S(wino_parts)(void *ctx, int64_t s0, int64_t s1) {
    const S(wino_ctx) *w = ctx;
    for (int64_t s = s0; s < s1; s++)
        S(wino_blocks)(w, w->blocks * s / w->parts, w->blocks * (s + 1) / w->parts,
                       w->vm + s * w->part);
}

/* The item's geometry in w and its input x padded into scratch: the image
   at (ph, pw), zeros around, each row (built in the first part's output
   rows: 4 tw >= wp elements) stored as its even columns, then its odd */
static void S(wino_begin)(S(wino_ctx) *w, const conv_geom *g, const T *x, T *scratch) {
    w->g = g;
    w->th = (g->oh + 1) / 2, w->tw = (g->ow + 1) / 2, w->hp = 2 * w->th + 2, w->wp = 2 * w->tw + 2;
    w->rows = WINO_ROWS(w->tw), w->tb = w->rows * w->tw;
    w->vps = WINO_PLANE(g->cg * w->tb), w->mps = WINO_PLANE(g->og * w->tb); /* position planes */
    w->part = 16 * (w->vps + w->mps) + 4 * w->tw;
    w->blocks = (w->th + w->rows - 1) / w->rows;
    const int64_t hp = w->hp, wp = w->wp, odd = w->tw + 1;
    T *xp = scratch, *tmp = xp + g->cg * hp * wp + 16 * (w->vps + w->mps);
    w->xp = xp, w->vm = xp + g->cg * hp * wp;
    const int64_t x0 = min64(g->pw, wp), x1 = min64(g->pw + g->w, wp);
    for (int64_t c = 0; c < g->cg; c++)
        for (int64_t r = 0; r < hp; r++) {
            T *restrict d = xp + (c * hp + r) * wp;
            int64_t iy = r - g->ph;
            if (iy < 0 || iy >= g->h) {
                memset(d, 0, (size_t)wp * sizeof(T));
                continue;
            }
            memset(tmp, 0, (size_t)x0 * sizeof(T));
            memcpy(tmp + x0, x + (c * g->h + iy) * g->w, (size_t)(x1 - x0) * sizeof(T));
            memset(tmp + x1, 0, (size_t)(wp - x1) * sizeof(T));
            for (int64_t j = 0; j < odd; j++) d[j] = tmp[2 * j], d[odd + j] = tmp[2 * j + 1];
        }
}

static void S(wino_item)(const conv_geom *g, const T *x, const T *u, T *y, T *scratch,
                         int parts) {
    S(wino_ctx) w = {.u = u, .y = y, .parts = parts};
    S(wino_begin)(&w, g, x, scratch);
    if (parts > 1) par_for(parts, S(wino_parts), &w);
    else S(wino_blocks)(&w, 0, w.blocks, w.vm);
}

/* Four of the output gradient's transformed planes for a tile row: A's row
   h = a x + b y (a, b in {0, 1, -1}, exact) of the tile's two gradient rows,
   each as its even columns (xe, ye) and odd ones (xo, yo), then A^T across
   (A = (1 0; 1 1; 1 -1; 0 -1)) */
static void S(wino_gt)(int64_t tw, const T *restrict xe, const T *restrict xo,
                       const T *restrict ye, const T *restrict yo, T a, T b, T *restrict v0,
                       T *restrict v1, T *restrict v2, T *restrict v3) {
    for (int64_t tx = 0; tx < tw; tx++) {
        T he = a * xe[tx] + b * ye[tx], ho = a * xo[tx] + b * yo[tx];
        v0[tx] = he, v1[tx] = he + ho, v2[tx] = he - ho, v3[tx] = -ho;
    }
}

/* The weight gradient's item (x its input, gy its og x oh x ow output
   gradient): each 4x4 position p of the filters' transform U gets sum over
   the tiles of (A gy_t A^T)_p V_t,p, since y_t = A^T (U . V_t) A is linear in
   U: du_p += Gy_p (og x tiles) @ V_p^T (tiles x cg), 16 GEMMs a block of tile
   rows (through tmp, og x cg).  du: position 0's rows of this group, dps
   apart for the others; run() turns the sums into G^T dU G. */
static void S(wino_wgrad)(const conv_geom *g, const T *x, const T *gy, T *scratch, T *tmp, T *du,
                          int64_t dps) {
    S(wino_ctx) w = {0};
    S(wino_begin)(&w, g, x, scratch);
    const int64_t tw = w.tw, tb = w.tb, vps = w.vps, gps = w.mps, cg = g->cg, og = g->og;
    T *v = w.vm, *gt = v + 16 * vps, *rows = gt + 16 * gps;
    for (int64_t b = 0; b < w.blocks; b++) {
        const int64_t ty0 = b * w.rows, nr = min64(w.rows, w.th - ty0), nb = nr * tw;
        S(wino_v)(&w, ty0, nr, v);
        for (int64_t o = 0; o < og; o++)
            for (int64_t ty = 0; ty < nr; ty++) {
                /* the tile row's two gradient rows, zeros past oh and ow, as
                   even and odd columns: e0, o0, e1, o1 (tw each) */
                const int64_t oy = 2 * (ty0 + ty);
                for (int r = 0; r < 2; r++) {
                    T *e = rows + 2 * r * tw, *od = e + tw;
                    if (oy + r >= g->oh) {
                        memset(e, 0, (size_t)(2 * tw) * sizeof(T));
                        continue;
                    }
                    const T *src = gy + (o * g->oh + oy + r) * g->ow;
                    for (int64_t tx = 0; tx < tw; tx++) {
                        e[tx] = src[2 * tx];
                        od[tx] = 2 * tx + 1 < g->ow ? src[2 * tx + 1] : 0;
                    }
                }
                const T *e0 = rows, *o0 = rows + tw, *e1 = rows + 2 * tw, *o1 = rows + 3 * tw;
                T *gd = gt + o * tb + ty * tw;
                /* A's rows: g0, g0 + g1, g0 - g1, -g1 */
                S(wino_gt)(tw, e0, o0, e1, o1, 1, 0, gd, gd + gps, gd + 2 * gps, gd + 3 * gps);
                S(wino_gt)(tw, e0, o0, e1, o1, 1, 1, gd + 4 * gps, gd + 5 * gps, gd + 6 * gps,
                           gd + 7 * gps);
                S(wino_gt)(tw, e0, o0, e1, o1, 1, -1, gd + 8 * gps, gd + 9 * gps, gd + 10 * gps,
                           gd + 11 * gps);
                S(wino_gt)(tw, e0, o0, e1, o1, 0, -1, gd + 12 * gps, gd + 13 * gps,
                           gd + 14 * gps, gd + 15 * gps);
            }
        for (int p = 0; p < 16; p++) {
            S(gemm)(og, cg, nb, gt + p * gps, tb, 1, v + p * vps, 1, tb, tmp, cg, 1);
            T *restrict d = du + p * dps;
            for (int64_t i = 0; i < og * cg; i++) d[i] += tmp[i];
        }
    }
}

/* the weight gradient from the positions' sums du (16 x o x cg): dW = G^T
   dU G, G^T = (1 1/2 1/2 0; 0 1/2 -1/2 0; 0 1/2 1/2 1) */
static void S(wino_wgrad_finish)(const conv_geom *g, const T *du, T *dw) {
    const int64_t oc = g->o * g->cg;
    for (int64_t f = 0; f < oc; f++) {
        T d[4][4], t[3][4];
        for (int p = 0; p < 16; p++) d[p / 4][p % 4] = du[p * oc + f];
        for (int j = 0; j < 4; j++) {
            t[0][j] = d[0][j] + (d[1][j] + d[2][j]) / 2;
            t[1][j] = (d[1][j] - d[2][j]) / 2;
            t[2][j] = (d[1][j] + d[2][j]) / 2 + d[3][j];
        }
        T *k = dw + f * 9;
        for (int i = 0; i < 3; i++) {
            k[3 * i] = t[i][0] + (t[i][1] + t[i][2]) / 2;
            k[3 * i + 1] = (t[i][1] - t[i][2]) / 2;
            k[3 * i + 2] = (t[i][1] + t[i][2]) / 2 + t[i][3];
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
        const T *w = b + q * g->og * g->k;
        if (jb->wino) {
            S(wino_item)(g, a + xoff, (const T *)jb->wino + q * g->og * g->cg, y + yoff, cols,
                         jb->wino_parts);
            return;
        }
        if (jb->wide) {
            conv_bsrc src;
            T *cw = S(wide_begin)(g, a + xoff, cols, &src);
            gemm_bsrc bs = {S(wide_pack), &src};
            int64_t nw = g->oh * src.wp;
            S(gemm_bsrc)(g->og, nw, g->k, w, g->k, 1, &bs, cw, nw);
            S(wide_unpack)(g, cw, src.wp, y + yoff);
            return;
        }
        if (jb->packs) {
            conv_bsrc src = {g, a + xoff, 0, 0};
            gemm_bsrc bs = {S(im2col_pack), &src};
            S(gemm_bsrc)(g->og, g->l, g->k, w, g->k, 1, &bs, y + yoff, g->l);
            return;
        }
        if (!pw) S(im2col)(g, a + xoff, cols);
        S(gemm)(g->og, g->l, g->k, w, g->k, 1, pw ? a + xoff : cols, g->l, 1, y + yoff, g->l, 1);
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
    } else if (jb->wino_w) { /* a = x, b = conv output grad: Winograd position sums */
        S(wino_wgrad)(g, a + xoff, b + yoff, cols, tmp, acc + q * g->og * g->cg, g->o * g->cg);
    } else if (jb->wide) { /* the weight gradient over the wide grid */
        conv_bsrc src;
        T *gw = S(wide_begin)(g, a + xoff, cols, &src);
        const int64_t khw = g->kh * g->kw, wp = src.wp, nw = g->oh * wp;
        for (int64_t o = 0; o < g->og; o++) /* gy's rows, zero past each output row */
            for (int64_t r = 0; r < g->oh; r++) {
                T *restrict row = gw + (o * g->oh + r) * wp;
                memcpy(row, b + yoff + (o * g->oh + r) * g->ow, (size_t)g->ow * sizeof(T));
                memset(row + g->ow, 0, (size_t)(wp - g->ow) * sizeof(T));
            }
        gemm_bsrc bs = {S(wide_packt), &src};
        S(gemm_bsrc)(g->og, g->k, nw, gw, nw, 1, &bs, tmp, g->k);
        T *restrict d = acc + q * g->og * g->k;
        for (int64_t o = 0; o < g->og; o++) /* columns (i, j, c) -> the weight's (c, i, j) */
            for (int64_t t = 0; t < khw; t++)
                for (int64_t c = 0; c < g->cg; c++)
                    d[o * g->k + c * khw + t] += tmp[o * g->k + t * g->cg + c];
    } else { /* a = x, b = conv output grad: acc_q += b_g @ im2col(a_g)^T */
        const T *c = pw ? a + xoff : cols;
        if (!pw) S(im2col)(g, a + xoff, cols);
        if (!pw && g->k <= CONV_DOTS_MAX && g->og <= CONV_DOTS_MAX)
            S(gemm_dots)(g->og, g->k, g->l, b + yoff, g->l, c, g->l, tmp, g->k);
        else
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
        if (jb->wino_w) { /* Winograd: every slot sums the positions (16 x o x cg) */
            acc = tmp + g->og * g->cg;
            memset(acc, 0, (size_t)(16 * g->o * g->cg) * sizeof(T));
        } else if (s) {
            memset(acc, 0, (size_t)(g->o * g->k) * sizeof(T));
        }
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
