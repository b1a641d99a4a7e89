/* matmul.c - the matmul op: batch dims broadcast numpy-style, operands in
 * any strided layout (transposed views go straight to the packed GEMM). */
#include <string.h>

#include "cpu.h"
#include "gemm.h"
#include "strided.h"

ad_status fwd_matmul(const op_args *args, ad_tensor **out) {
    const ad_tensor *a = args->in[0], *b = args->in[1];
    if (a->ndim < 2 || b->ndim < 2)
        return ad_fail(AD_ERR_SHAPE, "matmul: operands need at least 2 dims, got %s and %s",
                       ad_tdesc(a), ad_tdesc(b));
    if (a->dtype != b->dtype || !ad_dtype_is_float(a->dtype))
        return ad_fail(AD_ERR_DTYPE,
                       "matmul: operands must share a float dtype, got %s and %s", ad_tdesc(a),
                       ad_tdesc(b));
    int64_t m = T_SHAPE(a)[a->ndim - 2], k = T_SHAPE(a)[a->ndim - 1];
    int64_t k2 = T_SHAPE(b)[b->ndim - 2], n = T_SHAPE(b)[b->ndim - 1];
    if (k != k2)
        return ad_fail(AD_ERR_SHAPE, "matmul: inner dims differ, %s @ %s (%lld vs %lld)",
                       ad_tdesc(a), ad_tdesc(b), (long long)k, (long long)k2);
    int64_t shape[AD_MAX_DIMS];
    int bnd;
    ad_status st = ad_broadcast_shapes("matmul", T_SHAPE(a), a->ndim - 2, T_SHAPE(b), b->ndim - 2, shape,
                                       &bnd);
    if (st)
        return ad_fail(AD_ERR_SHAPE, "matmul: batch dims of %s and %s cannot be broadcast "
                       "together", ad_tdesc(a), ad_tdesc(b));
    if (bnd + 2 > AD_MAX_DIMS) return ad_fail(AD_ERR_SHAPE, "matmul: too many dims");
    shape[bnd] = m;
    shape[bnd + 1] = n;
    ad_tensor *y;
    if ((st = ad_tensor_empty(a->dtype, shape, bnd + 2, &y))) return st;
    int64_t batch = 1;
    for (int i = 0; i < bnd; i++) batch *= shape[i];
    if (y->numel == 0) {
        *out = y;
        return AD_OK;
    }
    /* per-batch element offsets (0-stride where a batch dim broadcasts) */
    int64_t sa[AD_MAX_DIMS], sb[AD_MAX_DIMS];
    {
        /* strides of the batch dims only, right-aligned against shape[0:bnd] */
        int la = bnd - (a->ndim - 2), lb = bnd - (b->ndim - 2);
        for (int i = 0; i < bnd; i++) {
            int ia = i - la, ib = i - lb;
            sa[i] = (ia < 0 || T_SHAPE(a)[ia] == 1) ? 0 : T_STRIDES(a)[ia];
            sb[i] = (ib < 0 || T_SHAPE(b)[ib] == 1) ? 0 : T_STRIDES(b)[ib];
        }
    }
    int64_t small[3 * 16], *offs = small;
    if (batch > 16) {
        offs = ad_malloc((size_t)batch * 3 * sizeof *offs);
        if (!offs) {
            ad_tensor_release(y);
            return ad_fail_nomem("matmul");
        }
    }
    int64_t *ao = offs, *bo = offs + batch, *co = offs + 2 * batch;
    int64_t idx[AD_MAX_DIMS] = {0}, oa = 0, ob = 0;
    for (int64_t i = 0; i < batch; i++) {
        ao[i] = oa;
        bo[i] = ob;
        co[i] = i * m * n;
        for (int d = bnd - 1; d >= 0; d--) {
            oa += sa[d];
            ob += sb[d];
            if (++idx[d] < shape[d]) break;
            oa -= sa[d] * shape[d];
            ob -= sb[d] * shape[d];
            idx[d] = 0;
        }
    }
    int64_t rsa = T_STRIDES(a)[a->ndim - 2], csa = T_STRIDES(a)[a->ndim - 1];
    int64_t rsb = T_STRIDES(b)[b->ndim - 2], csb = T_STRIDES(b)[b->ndim - 1];
    if (a->dtype == AD_FLOAT32)
        gemm_batch_f32(batch, ao, bo, co, m, n, k, ad_ptr(a), rsa, csa, ad_ptr(b), rsb, csb,
                       ad_ptr(y), n, 1);
    else
        gemm_batch_f64(batch, ao, bo, co, m, n, k, ad_ptr(a), rsa, csa, ad_ptr(b), rsb, csb,
                       ad_ptr(y), n, 1);
    if (offs != small) ad_mfree(offs);
    *out = y;
    return AD_OK;
}

AD_API const char *ad_gemm_kernel(void) { return gemm_kernel_name(); }
AD_API void ad_gemm_force_portable(int on) { gemm_set_kernel(on ? "portable" : "auto"); }
AD_API ad_status ad_gemm_set_kernel(const char *name) {
    if (gemm_set_kernel(name))
        return ad_fail(AD_ERR_VALUE,
                       "gemm kernel '%s' is not available (use \"auto\", \"avx512\", \"avx2\" "
                       "or \"portable\", at most \"%s\": this CPU's best level, capped by "
                       "PYAUTODIFF_ISA / PYAUTODIFF_PORTABLE)",
                       name ? name : "", ad_isa_name(ad_cpu_isa()));
    return AD_OK;
}
