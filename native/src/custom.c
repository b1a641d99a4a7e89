/* custom.c - custom ops: a node whose backward is a caller's callback
 * (Python's ad.Function through cffi `extern "Python"`).
 *
 * The node is an ordinary node of the CUSTOM row, so the sort, the version
 * checks, anomaly mode and the freeing loop treat it like any other; its four
 * integer arguments carry the caller's context, the callback, the release
 * function and the op's own name (an owned copy). */
#include <string.h>

#include "internal.h"

enum { CX_CTX, CX_BACKWARD, CX_RELEASE, CX_NAME, CX_COUNT };

static void put_ptr(int64_t *slot, const void *p) {
    intptr_t v = (intptr_t)p;
    memcpy(slot, &v, sizeof v);
}
static void *get_ptr(const int64_t *slot) {
    intptr_t v;
    memcpy(&v, slot, sizeof v);
    return (void *)v;
}
/* function pointers travel through a union: ISO C has no conversion between
   object and function pointers */
typedef union {
    ad_custom_backward_fn backward;
    ad_custom_release_fn release;
    int64_t word;
} fn_word;

static const char *custom_name(const ad_node *n) { return get_ptr(&node_iargs(n)[CX_NAME]); }

ad_status fwd_custom(const struct op_args *a, ad_tensor **out) {
    (void)a;
    *out = NULL;
    return ad_fail(AD_ERR_VALUE, "custom: a custom op is recorded by ad_custom_record "
                                 "(ad.Function.apply), it cannot be called as an op");
}

ad_status bw_custom(const ad_node *n, const ad_tensor *out, const ad_tensor *grad,
                    ad_tensor **grads) {
    const int64_t *ia = node_iargs(n);
    fn_word fw = {.word = ia[CX_BACKWARD]};
    const char *name = custom_name(n);
    ad_tensor *g[AD_MAX_INPUTS] = {NULL};
    ad_status st = fw.backward(get_ptr(&ia[CX_CTX]), grad, out, g, n->n_in);
    if (st) {
        for (int i = 0; i < n->n_in; i++) ad_tensor_release(g[i]);
        return ad_fail(st, "%s: backward failed (status %d)", name, (int)st);
    }
    /* a C caller's callback gets the same checks Python's does */
    ad_tensor **in = node_in(n);
    for (int i = 0; i < n->n_in && !st; i++) {
        if (!g[i] || !in[i]) continue;
        if (g[i]->ndim != in[i]->ndim ||
            memcmp(T_SHAPE(g[i]), T_SHAPE(in[i]), in[i]->ndim * sizeof(int64_t)))
            st = ad_fail(AD_ERR_SHAPE, "%s: backward returned a gradient %s for input %d, "
                                       "which is %s", name, ad_tdesc(g[i]), i, ad_tdesc(in[i]));
        else if (g[i]->dtype != in[i]->dtype)
            st = ad_fail(AD_ERR_DTYPE, "%s: backward returned a gradient %s for input %d, "
                                       "which is %s", name, ad_tdesc(g[i]), i, ad_tdesc(in[i]));
    }
    for (int i = 0; i < n->n_in; i++) {
        if (st) ad_tensor_release(g[i]);
        else grads[i] = g[i];
    }
    return st;
}

void ad_node_finalize(ad_node *n) {
    ad_uncount_saved(n);
    if (n->op != AD_OP_CUSTOM) return;
    int64_t *ia = node_iargs(n);
    fn_word fw = {.word = ia[CX_RELEASE]};
    fw.release(get_ptr(&ia[CX_CTX]));
    ad_mfree(get_ptr(&ia[CX_NAME]));
}

const char *ad_node_name(const ad_node *n) {
    return n->op == AD_OP_CUSTOM ? custom_name(n) : ad_ops[n->op].name;
}

AD_API const char *ad_tensor_op_name(const ad_tensor *t) {
    if (!t || !t->node) return NULL;
    return ad_node_name(t->node);
}

AD_API ad_status ad_custom_record(const char *name, const ad_tensor *const *inputs, int n_inputs,
                                  const ad_tensor *output, const ad_tensor *const *saved,
                                  int n_saved, ad_custom_backward_fn backward,
                                  ad_custom_release_fn release, void *ctx, ad_tensor **out) {
    return ad_custom_record_window(name, inputs, n_inputs, output, saved, n_saved, backward,
                                   release, ctx, NULL, out);
}

AD_API ad_status ad_custom_record_window(const char *name, const ad_tensor *const *inputs,
                                         int n_inputs, const ad_tensor *output,
                                         const ad_tensor *const *saved, int n_saved,
                                         ad_custom_backward_fn backward,
                                         ad_custom_release_fn release, void *ctx,
                                         const uint64_t *window, ad_tensor **out) {
    const char *nm = name ? name : "custom";
    if (!out) return ad_fail(AD_ERR_VALUE, "%s: the out pointer is NULL", nm);
    *out = NULL;
    if (!name || !output || !backward || !release)
        return ad_fail(AD_ERR_VALUE, "%s: argument '%s' is NULL", nm,
                       !name ? "name" : !output ? "output" : !backward ? "backward" : "release");
    if (n_inputs < 1 || n_inputs > AD_MAX_INPUTS || !inputs)
        return ad_fail(AD_ERR_VALUE, "%s: takes 1 to %d tensor inputs, got %d%s", nm,
                       AD_MAX_INPUTS, n_inputs, inputs ? "" : " (inputs is NULL)");
    if (n_saved < 0 || (n_saved > 0 && !saved))
        return ad_fail(AD_ERR_VALUE, "%s: n_saved is %d with saved %s", nm, n_saved,
                       saved ? "given" : "NULL");
    for (int i = 0; i < n_inputs; i++)
        if (!inputs[i]) return ad_fail(AD_ERR_VALUE, "%s: input %d is NULL", nm, i);
    ad_tensor *y;
    ad_status st = ad_tensor_view(output, T_SHAPE(output), T_STRIDES(output), output->ndim,
                                  output->offset, &y);
    if (st) return st;
    unsigned tracked = 0;
    if (ad_grad_enabled && ad_dtype_is_float(output->dtype))
        for (int i = 0; i < n_inputs; i++)
            if (ad_tracks(inputs[i])) tracked |= 1u << i;
    if (!tracked) {
        *out = y;
        return AD_OK;
    }
    unsigned savedmask = 0;
    bool saves_output = false;
    for (int k = 0; k < n_saved; k++) {
        if (!saved[k]) continue;
        for (int i = 0; i < n_inputs; i++)
            if (saved[k] == inputs[i]) savedmask |= 1u << i;
        if (saved[k]->storage == output->storage) saves_output = true;
    }
    size_t nlen = strlen(name) + 1;
    char *copy = ad_malloc(nlen);
    ad_node *n = copy ? ad_malloc(sizeof *n + (2 * (size_t)n_inputs + CX_COUNT) * sizeof(uint64_t))
                      : NULL;
    if (!n) {
        ad_mfree(copy);
        ad_tensor_release(y);
        return ad_fail_nomem(nm);
    }
    memcpy(copy, name, nlen);
    n->op = AD_OP_CUSTOM;
    n->n_in = (uint8_t)n_inputs;
    n->n_iargs = CX_COUNT;
    n->n_fargs = 0;
    n->tracked = (uint8_t)tracked;
    n->saved = (uint8_t)savedmask;
    n->saves_output = saves_output;
    n->out_version = saves_output ? atomic_load(&y->storage->version) : 0;
    n->recompute = 0; /* the callback's values are Python's: never recomputed */
    /* the caller's sample from before its forward read the inputs (else none:
       the versions now) */
    ad_read_window w = {.n = window ? n_inputs : 0};
    for (int i = 0; i < w.n; i++) w.seq[i] = window[2 * i], w.ver[i] = window[2 * i + 1];
    n->torn = (uint8_t)ad_read_window_torn(&w, inputs);
    atomic_init(&n->refs, 1);
    n->site = ad_anomaly_enabled ? ad_anomaly_site() : NULL;
    ad_tensor **in = node_in(n);
    uint64_t *ver = node_versions(n);
    for (int i = 0; i < n_inputs; i++) {
        bool keep = (tracked | savedmask) & (1u << i);
        /* an input the callback reads is kept whole (ctx holds it anyway, and
           the version check reads it); one it does not may be a shell */
        in[i] = !keep ? NULL : savedmask & (1u << i) ? ad_ref(inputs[i])
                                                     : ad_graph_input(inputs[i]);
        ver[i] = !(keep && in[i]) ? 0 : w.n ? w.ver[i] : ad_graph_version(inputs[i]);
        if (keep && !in[i]) {
            for (int j = 0; j < i; j++) ad_tensor_release(in[j]);
            ad_mfree((void *)n->site);
            ad_mfree(n);
            ad_mfree(copy);
            ad_tensor_release(y);
            return ad_fail_nomem(nm);
        }
    }
    int64_t *ia = node_iargs(n);
    put_ptr(&ia[CX_CTX], ctx);
    ia[CX_BACKWARD] = ((fn_word){.backward = backward}).word;
    ia[CX_RELEASE] = ((fn_word){.release = release}).word;
    put_ptr(&ia[CX_NAME], copy);
    ad_count_storages(n, saved, n_saved);
    y->node = n;
    *out = y;
    return AD_OK;
}
