/* shape.c - layout ops: reshape, permute, slice, broadcast (views sharing
 * storage where the layout allows), contiguous, to_dtype and copy. */
#include <string.h>

#include "opargs.h"
#include "strided.h"

/* Strides for viewing t with new_shape without copying, or false when the
 * layout cannot express it (then the caller copies).  Walks groups of old
 * dims that are contiguous among themselves and splits them into new dims. */
static bool view_strides(const ad_tensor *t, const int64_t *new_shape, int new_nd,
                         int64_t *new_strides) {
    const int64_t *shape = T_SHAPE(t), *strides = T_STRIDES(t);
    if (t->numel == 0 || ad_is_contiguous(t)) {
        int64_t s = 1;
        for (int i = new_nd - 1; i >= 0; i--) {
            new_strides[i] = s;
            s *= new_shape[i] ? new_shape[i] : 1;
        }
        return true;
    }
    /* PyTorch's computeStride: old dims split into chunks that are contiguous
       among themselves; each chunk must map onto whole new dims */
    int view_d = new_nd - 1;
    int64_t base = strides[t->ndim - 1], tensor_numel = 1, view_numel = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        tensor_numel *= shape[d];
        if (d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensor_numel * base)) {
            while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
                new_strides[view_d] = view_numel * base;
                view_numel *= new_shape[view_d];
                view_d--;
            }
            if (view_numel != tensor_numel) return false;
            if (d > 0) {
                base = strides[d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    return view_d == -1;
}

ad_status fwd_reshape(const op_args *a, ad_tensor **out) {
    const ad_tensor *x = a->in[0];
    int nd = a->n_iargs;
    int64_t shape[AD_MAX_DIMS];
    if (nd > AD_MAX_DIMS)
        return ad_fail(AD_ERR_SHAPE, "reshape: %d dims requested, at most %d", nd, AD_MAX_DIMS);
    int infer = -1;
    int64_t known = 1;
    for (int i = 0; i < nd; i++) {
        shape[i] = a->iargs[i];
        if (shape[i] == -1) {
            if (infer >= 0)
                return ad_fail(AD_ERR_SHAPE, "reshape: only one dim can be -1 in %s",
                               ad_fmt_shape(a->iargs, nd));
            infer = i;
        } else if (shape[i] < 0) {
            return ad_fail(AD_ERR_SHAPE, "reshape: invalid size %lld in %s",
                           (long long)shape[i], ad_fmt_shape(a->iargs, nd));
        } else if (shape[i] && known > INT64_MAX / shape[i]) {
            return ad_fail(AD_ERR_SHAPE, "reshape: shape %s is too large",
                           ad_fmt_shape(a->iargs, nd));
        } else {
            known *= shape[i];
        }
    }
    if (infer >= 0) {
        if (known == 0 || x->numel % known)
            return ad_fail(AD_ERR_SHAPE, "reshape: cannot reshape %s into %s", ad_tdesc(x),
                           ad_fmt_shape(a->iargs, nd));
        shape[infer] = x->numel / known;
        known *= shape[infer];
    }
    if (known != x->numel)
        return ad_fail(AD_ERR_SHAPE, "reshape: cannot reshape %s (%lld elements) into %s",
                       ad_tdesc(x), (long long)x->numel, ad_fmt_shape(a->iargs, nd));
    /* an empty result's other sizes must still give strides that fit */
    int64_t numel;
    ad_status cst = ad_check_shape("reshape", shape, nd, x->dtype, &numel);
    if (cst) return cst;
    int64_t strides[AD_MAX_DIMS];
    if (view_strides(x, shape, nd, strides))
        return ad_tensor_view(x, shape, strides, nd, x->offset, out);
    ad_tensor *y;
    ad_status st = ad_tensor_empty(x->dtype, shape, nd, &y);
    if (st) return st;
    ad_copy_strided(x, y->storage->data);
    *out = y;
    return AD_OK;
}

ad_status fwd_permute(const op_args *a, ad_tensor **out) {
    const ad_tensor *x = a->in[0];
    if (a->n_iargs != x->ndim)
        return ad_fail(AD_ERR_SHAPE, "permute: %d dims given for %s", a->n_iargs, ad_tdesc(x));
    int64_t shape[AD_MAX_DIMS], strides[AD_MAX_DIMS];
    bool seen[AD_MAX_DIMS] = {false};
    for (int i = 0; i < x->ndim; i++) {
        int64_t d = a->iargs[i];
        if (d < -x->ndim || d >= x->ndim)
            return ad_fail(AD_ERR_INDEX, "permute: dim %lld out of range for %s", (long long)d,
                           ad_tdesc(x));
        if (d < 0) d += x->ndim;
        if (seen[d])
            return ad_fail(AD_ERR_VALUE, "permute: dim %lld repeated in %s", (long long)d,
                           ad_fmt_shape(a->iargs, a->n_iargs));
        seen[d] = true;
        shape[i] = T_SHAPE(x)[d];
        strides[i] = T_STRIDES(x)[d];
    }
    return ad_tensor_view(x, shape, strides, x->ndim, x->offset, out);
}

ad_status fwd_slice(const op_args *a, ad_tensor **out) {
    const ad_tensor *x = a->in[0];
    slice_args sl;
    ad_status st = slice_args_decode(a->iargs, x, &sl);
    if (st) return st;
    int d = sl.dim;
    int64_t shape[AD_MAX_DIMS], strides[AD_MAX_DIMS];
    memcpy(shape, T_SHAPE(x), x->ndim * sizeof *shape);
    memcpy(strides, T_STRIDES(x), x->ndim * sizeof *strides);
    shape[d] = sl.len;
    /* step only matters for len > 1 (then it is bounded by the dim's size);
       any step is accepted for len <= 1 and must not overflow the stride */
    strides[d] = sl.len > 1 ? T_STRIDES(x)[d] * sl.step : T_STRIDES(x)[d];
    int64_t offset = x->offset + (sl.len > 0 ? sl.start * T_STRIDES(x)[d] : 0);
    return ad_tensor_view(x, shape, strides, x->ndim, offset, out);
}

ad_status fwd_broadcast(const op_args *a, ad_tensor **out) {
    const ad_tensor *x = a->in[0];
    int nd = a->n_iargs;
    const int64_t *shape = a->iargs;
    bool ok = nd >= x->ndim && nd <= AD_MAX_DIMS;
    for (int i = 0; ok && i < x->ndim; i++) {
        int64_t s = T_SHAPE(x)[i], t = shape[nd - x->ndim + i];
        ok = s == t || s == 1;
    }
    for (int i = 0; ok && i < nd; i++) ok = shape[i] >= 0;
    if (!ok)
        return ad_fail(AD_ERR_SHAPE, "broadcast_to: cannot broadcast %s to %s", ad_tdesc(x),
                       ad_fmt_shape(shape, nd));
    int64_t numel; /* the view's element count must fit, as a new tensor's must */
    ad_status st = ad_check_shape("broadcast_to", shape, nd, x->dtype, &numel);
    if (st) return st;
    int64_t strides[AD_MAX_DIMS];
    broadcast_strides(x, shape, nd, strides);
    return ad_tensor_view(x, shape, strides, nd, x->offset, out);
}

ad_status fwd_contiguous(const op_args *a, ad_tensor **out) {
    const ad_tensor *x = a->in[0];
    if (ad_is_contiguous(x)) {
        *out = ad_ref(x);
        return AD_OK;
    }
    return fwd_copy(a, out);
}

ad_status fwd_copy(const op_args *a, ad_tensor **out) {
    const ad_tensor *x = a->in[0];
    ad_tensor *y;
    ad_status st = ad_tensor_empty(x->dtype, T_SHAPE(x), x->ndim, &y);
    if (st) return st;
    ad_copy_strided(x, y->storage->data);
    *out = y;
    return AD_OK;
}

ad_status fwd_to_dtype(const op_args *a, ad_tensor **out) {
    const ad_tensor *x = a->in[0];
    int64_t dtype = a->iargs[0];
    if (dtype < 0 || dtype > AD_BOOL)
        return ad_fail(AD_ERR_DTYPE, "to_dtype: unknown dtype %lld", (long long)dtype);
    if (dtype == x->dtype) {
        *out = ad_ref(x);
        return AD_OK;
    }
    ad_tensor *y;
    ad_status st = ad_tensor_empty((int)dtype, T_SHAPE(x), x->ndim, &y);
    if (st) return st;
    ad_convert_strided(x, y->storage->data, (int)dtype);
    *out = y;
    return AD_OK;
}
