/* optim.c - in-place updates of Vars for optimizers: var += alpha * x, with
 * no temporary the size of the weights (PyTorch's SGD updates in place too). */
#include "strided.h"

typedef struct {
    double alpha;
    int dtype;
} axpy_ctx;

static void axpy_inner(void *ctx, int64_t n, char **p, const int64_t *s) {
    const axpy_ctx *c = ctx;
    if (c->dtype == AD_FLOAT32) {
        float *y = (float *)p[0];
        const float *x = (const float *)p[1];
        const float a = (float)c->alpha;
        if (s[0] == 1 && s[1] == 1)
            for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
        else
            for (int64_t i = 0; i < n; i++) y[i * s[0]] += a * x[i * s[1]];
    } else {
        double *y = (double *)p[0];
        const double *x = (const double *)p[1];
        if (s[0] == 1 && s[1] == 1)
            for (int64_t i = 0; i < n; i++) y[i] += c->alpha * x[i];
        else
            for (int64_t i = 0; i < n; i++) y[i * s[0]] += c->alpha * x[i * s[1]];
    }
}

AD_API ad_status ad_var_axpy(ad_tensor *var, double alpha, const ad_tensor *x) {
    if (!var->is_variable)
        return ad_fail(AD_ERR_GRAPH, "axpy: the target (id %llu) is not a variable",
                       (unsigned long long)var->id);
    if (x->dtype != var->dtype)
        return ad_fail(AD_ERR_DTYPE, "axpy: dtype mismatch, variable %s, update %s",
                       ad_tdesc(var), ad_tdesc(x));
    int64_t xs[AD_MAX_DIMS];
    bool ok = x->ndim <= var->ndim;
    for (int i = 0; ok && i < x->ndim; i++) {
        int64_t a = T_SHAPE(x)[i], b = T_SHAPE(var)[var->ndim - x->ndim + i];
        ok = a == b || a == 1;
    }
    if (!ok)
        return ad_fail(AD_ERR_SHAPE, "axpy: update %s does not broadcast to variable %s",
                       ad_tdesc(x), ad_tdesc(var));
    broadcast_strides(x, T_SHAPE(var), var->ndim, xs);
    const int64_t *strides[2] = {T_STRIDES(var), xs};
    size_t es[2] = {ad_dtype_size_(var->dtype), ad_dtype_size_(var->dtype)};
    nditer it;
    nditer_init(&it, 2, var->ndim, T_SHAPE(var), strides, es);
    char *base[2] = {ad_ptr(var), ad_ptr(x)};
    axpy_ctx c = {alpha, var->dtype};
    nditer_run(&it, base, axpy_inner, &c);
    atomic_fetch_add(&var->storage->version, 1);
    return AD_OK;
}
