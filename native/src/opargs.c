/* opargs.c - decoding and range checks of the typed op arguments (opargs.h). */
#include <string.h>

#include "opargs.h"

#define BIG 2147483647 /* 2^31 - 1: every stride, padding, dilation, group count */

/* A pair of arguments (h, w) inside [lo, BIG], else AD_ERR_VALUE naming it. */
static ad_status pair_in(int op, const char *what, int64_t h, int64_t w, int64_t lo) {
    if (h >= lo && h <= BIG && w >= lo && w <= BIG) return AD_OK;
    return ad_fail(AD_ERR_VALUE, "%s: %s (%lld, %lld) must be between %lld and 2^31-1",
                   OP_NAME(op), what, (long long)h, (long long)w, (long long)lo);
}

ad_status conv_args_decode(int op, const int64_t *ia, conv_args *c) {
    *c = (conv_args){0};
    if (op == AD_OP_CONV2D_WEIGHT_GRAD) {
        c->kh = ia[0], c->kw = ia[1];
        ia += 2;
    }
    c->sh = ia[0], c->sw = ia[1], c->ph = ia[2], c->pw = ia[3];
    c->dh = ia[4], c->dw = ia[5], c->groups = ia[6];
    if (op == AD_OP_CONV_TRANSPOSE2D) c->oph = ia[7], c->opw = ia[8];
    ad_status st;
    if ((st = pair_in(op, "stride", c->sh, c->sw, 1)) ||
        (st = pair_in(op, "padding", c->ph, c->pw, 0)) ||
        (st = pair_in(op, "dilation", c->dh, c->dw, 1)))
        return st;
    if (c->groups < 1 || c->groups > BIG)
        return ad_fail(AD_ERR_VALUE, "%s: groups %lld must be between 1 and 2^31-1",
                       OP_NAME(op), (long long)c->groups);
    if (op == AD_OP_CONV2D_WEIGHT_GRAD && (st = pair_in(op, "kernel size", c->kh, c->kw, 1)))
        return st;
    /* PyTorch's rule (and the Python layer's): below the stride or the dilation */
    if (c->oph < 0 || c->opw < 0 || (c->oph >= c->sh && c->oph >= c->dh) ||
        (c->opw >= c->sw && c->opw >= c->dw))
        return ad_fail(AD_ERR_VALUE, "%s: output padding (%lld, %lld) must be non-negative and "
                       "smaller than the stride (%lld, %lld) or the dilation (%lld, %lld)",
                       OP_NAME(op), (long long)c->oph, (long long)c->opw, (long long)c->sh,
                       (long long)c->sw, (long long)c->dh, (long long)c->dw);
    return AD_OK;
}

int conv_args_encode(int op, const conv_args *c, int64_t *ia) {
    int n = 0;
    if (op == AD_OP_CONV2D_WEIGHT_GRAD) ia[n++] = c->kh, ia[n++] = c->kw;
    const int64_t common[7] = {c->sh, c->sw, c->ph, c->pw, c->dh, c->dw, c->groups};
    for (int i = 0; i < 7; i++) ia[n++] = common[i];
    if (op == AD_OP_CONV_TRANSPOSE2D) ia[n++] = c->oph, ia[n++] = c->opw;
    return n;
}

ad_status pool_args_decode(int op, const int64_t *ia, pool_args *p) {
    *p = (pool_args){ia[0], ia[1], ia[2], ia[3], ia[4], ia[5], ia[6], ia[7]};
    ad_status st;
    if ((st = pair_in(op, "kernel size", p->kh, p->kw, 1)) ||
        (st = pair_in(op, "stride", p->sh, p->sw, 1)) ||
        (st = pair_in(op, "padding", p->ph, p->pw, 0)) ||
        (st = pair_in(op, "dilation", p->dh, p->dw, 1)))
        return st;
    if (2 * p->ph > p->kh || 2 * p->pw > p->kw) /* no overflow: both below 2^31 */
        return ad_fail(AD_ERR_VALUE, "%s: padding (%lld, %lld) must be at most half the kernel "
                       "size (%lld, %lld)", OP_NAME(op), (long long)p->ph, (long long)p->pw,
                       (long long)p->kh, (long long)p->kw);
    return AD_OK;
}

ad_status win_out(int op, const char *axis, int64_t in, int64_t k, int64_t stride, int64_t pad,
                  int64_t dil, const ad_tensor *x, int64_t *out) {
    int64_t span, padded;
    if (__builtin_add_overflow(in, 2 * pad, &padded))
        return ad_fail(AD_ERR_VALUE, "%s: %s size %lld plus padding %lld overflows (input %s)",
                       OP_NAME(op), axis, (long long)in, (long long)pad, ad_tdesc(x));
    if (k < 1 || __builtin_mul_overflow(dil, k - 1, &span) || span >= padded)
        return ad_fail(AD_ERR_SHAPE, "%s: kernel %s %lld with dilation %lld is larger than the "
                       "padded input %s (padding %lld)", OP_NAME(op), axis, (long long)k,
                       (long long)dil, ad_tdesc(x), (long long)pad);
    *out = (padded - span - 1) / stride + 1;
    return AD_OK;
}

ad_status slice_args_decode(const int64_t *ia, const ad_tensor *x, slice_args *s) {
    int64_t d = ia[0], start = ia[1], step = ia[2], len = ia[3];
    if (d < -x->ndim || d >= x->ndim)
        return ad_fail(AD_ERR_INDEX, "slice: dim %lld out of range for %s", (long long)d,
                       ad_tdesc(x));
    if (d < 0) d += x->ndim;
    int64_t size = T_SHAPE(x)[d], last;
    if (step == 0) return ad_fail(AD_ERR_VALUE, "slice: step must not be zero");
    if (len < 0 || (len > 0 && (start < 0 || start >= size)) ||
        (len > 1 && (__builtin_mul_overflow(len - 1, step, &last) ||
                     __builtin_add_overflow(start, last, &last) || last < 0 || last >= size)))
        return ad_fail(AD_ERR_INDEX,
                       "slice: %lld elements from %lld by step %lld out of range for dim %lld "
                       "of %s",
                       (long long)len, (long long)start, (long long)step, (long long)d,
                       ad_tdesc(x));
    *s = (slice_args){(int)d, start, step, len};
    return AD_OK;
}

ad_status reduce_args_decode(int op, const int64_t *ia, int n_iargs, const ad_tensor *x,
                             reduce_args *r) {
    const int64_t *dims = ia + 1;
    int ndims = n_iargs - 1;
    r->keepdim = ia[0] != 0;
    memset(r->reduced, 0, sizeof r->reduced);
    if (ndims == 0)
        for (int i = 0; i < x->ndim; i++) r->reduced[i] = true;
    for (int i = 0; i < ndims; i++) {
        int64_t d = dims[i];
        if (x->ndim ? d < -x->ndim || d >= x->ndim : d != 0 && d != -1) /* 0-d: 0 or -1 */
            return ad_fail(AD_ERR_INDEX, "%s: dim %lld out of range for %s (%d dims)",
                           OP_NAME(op), (long long)d, ad_tdesc(x), x->ndim);
        if (x->ndim == 0) continue;
        if (d < 0) d += x->ndim;
        if (r->reduced[d])
            return ad_fail(AD_ERR_VALUE, "%s: dim %lld given twice", OP_NAME(op),
                           (long long)dims[i]);
        r->reduced[d] = true;
    }
    r->ndim = 0;
    r->count_reduced = 0;
    r->reduce_numel = 1;
    for (int i = 0; i < x->ndim; i++) {
        r->kshape[i] = r->reduced[i] ? 1 : T_SHAPE(x)[i];
        if (r->reduced[i]) {
            r->count_reduced++;
            r->reduce_numel *= T_SHAPE(x)[i];
        }
        if (!r->reduced[i] || r->keepdim) r->shape[r->ndim++] = r->kshape[i];
    }
    return AD_OK;
}

ad_status dim_arg_decode(int op, int64_t dim, const ad_tensor *x, int *out) {
    int nd = x->ndim ? x->ndim : 1;
    if (dim < -nd || dim >= nd)
        return ad_fail(AD_ERR_INDEX, "%s: dim %lld out of range for %s (%d dims)", OP_NAME(op),
                       (long long)dim, ad_tdesc(x), x->ndim);
    *out = (int)(dim < 0 ? dim + nd : dim);
    return AD_OK;
}

ad_status lane_args_decode(int op, const int64_t *ia, const ad_tensor *x, lane_args *l) {
    l->flag = op == AD_OP_LOG_SOFTMAX || ((op == AD_OP_LOGSUMEXP || op == AD_OP_CUMSUM) && ia[1]);
    return dim_arg_decode(op, ia[0], x, &l->dim);
}

ad_status index_args_decode(int op, const int64_t *ia, const ad_tensor *x, index_args *a) {
    return dim_arg_decode(op, ia[0], x, &a->dim);
}

const int64_t *cat_args_complete(int64_t dim, const ad_tensor *const *in, int n_in,
                                 int64_t *ia) {
    int nd = in[0]->ndim;
    bool ok = dim >= -nd && dim < nd;
    int d = (int)(dim < 0 ? dim + nd : dim);
    ia[0] = dim;
    for (int i = 0; i < n_in; i++)
        ia[1 + i] = ok && in[i]->ndim == nd ? T_SHAPE(in[i])[d] : 0;
    return ia;
}

ad_status cat_args_decode(int op, const int64_t *ia, int n_iargs, const ad_tensor *const *in,
                          int n_in, cat_args *c) {
    if (n_iargs != 1 + n_in)
        return ad_fail(AD_ERR_VALUE, "%s: takes the dim and one size per input (%d integer "
                       "arguments), got %d", OP_NAME(op), 1 + n_in, n_iargs);
    if (in[0]->ndim == 0)
        return ad_fail(AD_ERR_SHAPE, "%s: zero-dimensional tensors cannot be concatenated",
                       OP_NAME(op));
    ad_status st = dim_arg_decode(op, ia[0], in[0], &c->dim);
    if (st) return st;
    c->sizes = ia + 1;
    c->total = 0;
    for (int i = 0; i < n_in; i++) {
        const ad_tensor *x = in[i];
        if (x->ndim == in[0]->ndim && c->sizes[i] != T_SHAPE(x)[c->dim])
            return ad_fail(AD_ERR_VALUE, "%s: size argument %lld does not match input %d (%s)",
                           OP_NAME(op), (long long)c->sizes[i], i, ad_tdesc(x));
        c->total += x->ndim == in[0]->ndim ? c->sizes[i] : 0;
    }
    return AD_OK;
}

ad_status pad_args_decode(int op, const int64_t *ia, int n_iargs, const double *fa,
                          const ad_tensor *x, pad_args *p) {
    p->value = fa[0];
    ad_status st = ad_check_fill_value(OP_NAME(op), x->dtype, p->value);
    if (st) return st;
    if (n_iargs % 2 || n_iargs / 2 > x->ndim)
        return ad_fail(AD_ERR_VALUE, "%s: needs before/after pairs for at most %d dims, got "
                       "%d values for %s", OP_NAME(op), x->ndim, n_iargs, ad_tdesc(x));
    p->n_pairs = n_iargs / 2;
    memset(p->before, 0, sizeof p->before);
    memset(p->after, 0, sizeof p->after);
    memcpy(p->shape, T_SHAPE(x), x->ndim * sizeof *p->shape);
    const int64_t lim = INT64_MAX / 4; /* l + r and the crops below cannot overflow */
    for (int j = 0; j < p->n_pairs; j++) {
        int d = x->ndim - 1 - j;
        int64_t l = ia[2 * j], r = ia[2 * j + 1];
        if (l < -lim || l > lim || r < -lim || r > lim ||
            __builtin_add_overflow(T_SHAPE(x)[d], l + r, &p->shape[d]))
            return ad_fail(AD_ERR_VALUE, "%s: padding (%lld, %lld) of dim %d is too large for "
                           "%s", OP_NAME(op), (long long)l, (long long)r, d, ad_tdesc(x));
        if (p->shape[d] < 0)
            return ad_fail(AD_ERR_SHAPE, "%s: padding (%lld, %lld) makes dim %d of %s negative",
                           OP_NAME(op), (long long)l, (long long)r, d, ad_tdesc(x));
        p->before[d] = l;
        p->after[d] = r;
    }
    return AD_OK;
}
