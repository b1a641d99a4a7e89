/* graph.c - grad mode, topological order, backward and the gradient store.
 *
 * The core loop reads as micrograd's: sort the tracked nodes (iteratively,
 * so a million-node chain needs no deep C stack), seed the root, walk the
 * order handing each node's gradient to its op's backward, and accumulate
 * what comes back into a map keyed by tensor id.  A gradient leaves the map
 * when its node consumes it, so intermediates are freed as the walk goes.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

_Thread_local int ad_grad_enabled = 1;
_Thread_local int ad_anomaly_enabled = 0;
static _Atomic(ad_site_fn) site_callback;

AD_API int ad_is_grad_enabled(void) { return ad_grad_enabled; }
AD_API int ad_set_grad_enabled(int enabled) {
    int prev = ad_grad_enabled;
    ad_grad_enabled = enabled != 0;
    return prev;
}

/* ---- anomaly mode ------------------------------------------------------------ */
AD_API void ad_set_site_callback(ad_site_fn fn) { atomic_store(&site_callback, fn); }
AD_API int ad_is_anomaly_enabled(void) { return ad_anomaly_enabled; }
AD_API int ad_set_anomaly_enabled(int enabled) {
    int prev = ad_anomaly_enabled;
    ad_anomaly_enabled = enabled != 0;
    return prev;
}
AD_API const char *ad_tensor_site(const ad_tensor *t) {
    return t->node && t->node->site ? t->node->site : "";
}

char *ad_anomaly_site(void) {
    ad_site_fn fn = atomic_load(&site_callback);
    const char *s = fn ? fn() : NULL;
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *copy = ad_malloc(n);
    if (copy) memcpy(copy, s, n);
    return copy;
}

/* true when a float tensor holds a NaN or an Inf (anomaly mode only) */
static bool has_nonfinite(const ad_tensor *t) {
    const int64_t *shape = T_SHAPE(t), *strides = T_STRIDES(t);
    int64_t idx[AD_MAX_DIMS] = {0};
    if (t->numel == 0) return false;
    const char *base = ad_ptr(t);
    size_t es = ad_dtype_size_(t->dtype);
    for (int64_t k = 0; k < t->numel; k++) {
        int64_t off = 0;
        for (int d = 0; d < t->ndim; d++) off += idx[d] * strides[d];
        double v = t->dtype == AD_FLOAT32 ? (double)*(const float *)(base + off * (int64_t)es)
                                          : *(const double *)(base + off * (int64_t)es);
        if (!isfinite(v)) return true;
        for (int d = t->ndim - 1; d >= 0; d--) {
            if (++idx[d] < shape[d]) break;
            idx[d] = 0;
        }
    }
    return false;
}

static ad_status anomaly_check(const ad_tensor *t, ad_tensor *const *gr) {
    const ad_node *n = t->node;
    for (int i = 0; i < n->n_in; i++) {
        if (!gr[i] || !ad_dtype_is_float(gr[i]->dtype) || !has_nonfinite(gr[i])) continue;
        char shapes[256] = "";
        size_t len = 0;
        ad_tensor **in = node_in(n);
        for (int j = 0; j < n->n_in && len < sizeof shapes; j++)
            len += (size_t)snprintf(shapes + len, sizeof shapes - len, "%s%s", j ? ", " : "",
                                    in[j] ? ad_tdesc(in[j]) : "(untracked)");
        return ad_fail(AD_ERR_GRAPH,
                       "backward: the backward of %s (inputs %s; output %s) produced a "
                       "non-finite gradient for input %d; the op was created at %s",
                       ad_ops[n->op].name, shapes, ad_tdesc(t), i,
                       n->site ? n->site : "an unknown site (created outside detect_anomaly)");
    }
    return AD_OK;
}

struct ad_gradstore {
    id_map map; /* id -> ad_tensor* gradient (owned reference) */
};

/* ---- topological order ----------------------------------------------------- */
typedef struct {
    ad_tensor **items;
    int64_t len, cap;
} tvec;

static ad_status tvec_push(tvec *v, ad_tensor *t) {
    if (v->len == v->cap) {
        int64_t cap = v->cap ? v->cap * 2 : 64;
        ad_tensor **items = ad_malloc((size_t)cap * sizeof *items);
        if (!items) return ad_fail_nomem("sorted_nodes");
        if (v->len) memcpy(items, v->items, (size_t)v->len * sizeof *items);
        ad_mfree(v->items);
        v->items = items;
        v->cap = cap;
    }
    v->items[v->len++] = t;
    return AD_OK;
}

/* Tracked nodes reachable from root that reach a variable, root first and
 * every node before its inputs (reverse post-order of an explicit-stack DFS).
 * The pointers are borrowed: root keeps them all alive. */
static ad_status sort_nodes(const ad_tensor *root, tvec *order) {
    tvec post = {0}, stack = {0};
    id_map seen; /* id -> 1 (no variable below) or 2 (reaches a variable) */
    ad_status st = map_init(&seen, 64);
    if (st) return st;
    order->items = NULL;
    order->len = order->cap = 0;
    if (!ad_tracks(root)) goto done;
    /* the stack holds tensors; a tensor appears twice: first to expand its
       inputs, then (tagged by a NULL marker before it) to finish it */
    if ((st = tvec_push(&stack, (ad_tensor *)root))) goto done;
    while (stack.len) {
        ad_tensor *t = stack.items[--stack.len];
        bool finishing = false;
        if (t == NULL) { /* marker: the next item is finished */
            t = stack.items[--stack.len];
            finishing = true;
        }
        if (!finishing) {
            if (map_get(&seen, t->id)) continue;
            if ((st = map_put(&seen, t->id, (void *)1))) goto done;
            if ((st = tvec_push(&stack, t)) || (st = tvec_push(&stack, NULL))) goto done;
            if (t->node) {
                ad_tensor **in = node_in(t->node);
                for (int i = t->node->n_in - 1; i >= 0; i--)
                    if ((t->node->tracked & (1u << i)) && !map_get(&seen, in[i]->id))
                        if ((st = tvec_push(&stack, in[i]))) goto done;
            }
            continue;
        }
        bool reaches = t->is_variable;
        if (t->node) {
            ad_tensor **in = node_in(t->node);
            for (int i = 0; i < t->node->n_in && !reaches; i++)
                if (t->node->tracked & (1u << i)) {
                    void **v = map_get(&seen, in[i]->id);
                    reaches = v && *v == (void *)2;
                }
        }
        if (reaches) {
            *map_get(&seen, t->id) = (void *)2;
            if ((st = tvec_push(&post, t))) goto done;
        }
    }
    /* reverse post-order */
    for (int64_t i = 0, j = post.len - 1; i < j; i++, j--) {
        ad_tensor *x = post.items[i];
        post.items[i] = post.items[j];
        post.items[j] = x;
    }
    *order = post;
    post.items = NULL;
done:
    ad_mfree(post.items);
    ad_mfree(stack.items);
    map_free(&seen);
    return st;
}

AD_API ad_status ad_sorted_nodes(const ad_tensor *t, ad_tensor ***out, int64_t *n) {
    tvec order;
    ad_status st = sort_nodes(t, &order);
    if (st) return st;
    for (int64_t i = 0; i < order.len; i++) ad_ref(order.items[i]);
    *out = order.items;
    *n = order.len;
    return AD_OK;
}

/* ---- backward ----------------------------------------------------------------- */
static ad_status check_versions(const ad_tensor *t) {
    const ad_node *n = t->node;
    ad_tensor **in = node_in(n);
    const uint64_t *ver = node_versions(n);
    for (int i = 0; i < n->n_in; i++) {
        if (!(n->saved & (1u << i))) continue;
        uint64_t now = atomic_load(&in[i]->storage->version);
        if (now != ver[i])
            return ad_fail(AD_ERR_GRAPH,
                           "backward: a value saved by %s (input %d: tensor id %llu, %s) was "
                           "modified in place after it was saved (version %llu at save, now "
                           "%llu); recompute the forward after Var.set",
                           ad_ops[n->op].name, i, (unsigned long long)in[i]->id,
                           ad_tdesc(in[i]), (unsigned long long)ver[i],
                           (unsigned long long)now);
    }
    if (n->saves_output) {
        uint64_t now = atomic_load(&t->storage->version);
        if (now != n->out_version)
            return ad_fail(AD_ERR_GRAPH,
                           "backward: the output of %s (tensor id %llu, %s) saved for backward "
                           "was modified in place (version %llu at save, now %llu)",
                           ad_ops[n->op].name, (unsigned long long)t->id, ad_tdesc(t),
                           (unsigned long long)n->out_version, (unsigned long long)now);
    }
    return AD_OK;
}

/* Adds g (consumed) into the map entry of id. */
static ad_status accumulate(id_map *grads, uint64_t id, ad_tensor *g) {
    void **slot = map_get(grads, id);
    if (!slot) {
        ad_status st = map_put(grads, id, g);
        if (st) ad_tensor_release(g);
        return st;
    }
    ad_tensor *sum, *old = *slot;
    ad_status st = ad_call2(AD_OP_ADD, old, g, &sum);
    ad_tensor_release(g);
    if (st) return st;
    ad_tensor_release(old);
    *slot = sum;
    return AD_OK;
}

static void release_map_values(id_map *m) {
    for (int64_t i = 0; i < m->cap; i++)
        if (m->keys && m->keys[i]) ad_tensor_release(m->vals[i]);
    map_free(m);
}

static ad_status seed_gradient(const ad_tensor *root, const ad_tensor *grad, ad_tensor **out) {
    if (grad) {
        if (grad->ndim != root->ndim ||
            memcmp(T_SHAPE(grad), T_SHAPE(root), root->ndim * sizeof(int64_t)))
            return ad_fail(AD_ERR_SHAPE, "backward: grad has shape %s but the root has %s",
                           ad_fmt_shape(T_SHAPE(grad), grad->ndim), ad_tdesc(root));
        if (grad->dtype != root->dtype)
            return ad_fail(AD_ERR_DTYPE, "backward: grad is %s but the root is %s",
                           ad_tdesc(grad), ad_tdesc(root));
        *out = ad_ref(grad);
        return AD_OK;
    }
    if (root->numel != 1)
        return ad_fail(AD_ERR_SHAPE,
                       "backward: the root has shape %s; a gradient is implied only for a "
                       "root with one element, pass grad= for others",
                       ad_fmt_shape(T_SHAPE(root), root->ndim));
    return ad_tensor_full(1.0, root->dtype, T_SHAPE(root), root->ndim, out);
}

AD_API ad_status ad_backward(const ad_tensor *root, const ad_tensor *grad,
                             const ad_tensor *const *retain, int n_retain, ad_gradstore **out) {
    *out = NULL;
    if (!ad_tracks(root))
        return ad_fail(AD_ERR_GRAPH,
                       "backward: the root (tensor id %llu, %s) does not depend on any Var, so "
                       "there is nothing to differentiate",
                       (unsigned long long)root->id, ad_tdesc(root));
    if (!ad_dtype_is_float(root->dtype))
        return ad_fail(AD_ERR_DTYPE, "backward: the root must be a float tensor, got %s",
                       ad_tdesc(root));
    ad_tensor *seed;
    ad_status st = seed_gradient(root, grad, &seed);
    if (st) return st;

    tvec order = {0};
    id_map grads = {0}, keep = {0};
    ad_gradstore *store = NULL;
    int mode = ad_set_grad_enabled(0); /* backward records nothing (no create_graph yet) */
    if ((st = sort_nodes(root, &order))) goto fail;
    if ((st = map_init(&grads, 64)) || (st = map_init(&keep, n_retain + 1))) goto fail;
    for (int i = 0; i < n_retain; i++)
        if (retain[i] && (st = map_put(&keep, retain[i]->id, (void *)1))) goto fail;
    if ((st = ad_gradstore_new(&store))) goto fail;
    if ((st = map_put(&grads, root->id, seed))) goto fail;
    seed = NULL; /* the map owns it now */

    for (int64_t k = 0; k < order.len; k++) {
        ad_tensor *t = order.items[k];
        ad_tensor *g = map_del(&grads, t->id);
        if (!g) continue; /* nothing flowed here */
        if (t->is_variable || map_get(&keep, t->id)) {
            if ((st = map_put(&store->map, t->id, ad_ref(g)))) {
                ad_tensor_release(g);
                ad_tensor_release(g);
                goto fail;
            }
        }
        const ad_node *n = t->node;
        if (!n) {
            ad_tensor_release(g);
            continue;
        }
        ad_tensor *gr[AD_MAX_INPUTS] = {NULL};
        st = check_versions(t);
        if (!st) st = ad_ops[n->op].backward(n, t, g, gr);
        if (!st && (ad_anomaly_enabled || n->site)) st = anomaly_check(t, gr);
        ad_tensor_release(g);
        ad_tensor **in = node_in(n);
        for (int i = 0; i < n->n_in; i++) {
            if (!gr[i]) continue;
            if (st || !(n->tracked & (1u << i))) {
                ad_tensor_release(gr[i]);
                continue;
            }
            st = accumulate(&grads, in[i]->id, gr[i]);
        }
        if (st) goto fail;
    }
    ad_set_grad_enabled(mode);
    release_map_values(&grads);
    map_free(&keep);
    ad_mfree(order.items);
    *out = store;
    return AD_OK;
fail:
    ad_set_grad_enabled(mode);
    ad_tensor_release(seed);
    release_map_values(&grads);
    map_free(&keep);
    ad_mfree(order.items);
    ad_gradstore_release(store);
    return st;
}

/* ---- gradient store ----------------------------------------------------------- */
AD_API ad_status ad_gradstore_new(ad_gradstore **out) {
    ad_gradstore *g = ad_calloc(sizeof *g);
    if (!g) return ad_fail_nomem("GradStore");
    ad_status st = map_init(&g->map, 8);
    if (st) {
        ad_mfree(g);
        return st;
    }
    *out = g;
    return AD_OK;
}

AD_API void ad_gradstore_release(ad_gradstore *g) {
    if (!g) return;
    release_map_values(&g->map);
    ad_mfree(g);
}

AD_API ad_status ad_gradstore_get(const ad_gradstore *g, const ad_tensor *t, ad_tensor **out) {
    void **v = map_get(&g->map, t->id);
    *out = v ? ad_ref(*v) : NULL;
    return AD_OK;
}

AD_API ad_status ad_gradstore_insert(ad_gradstore *g, const ad_tensor *t, const ad_tensor *grad) {
    if (grad->ndim != t->ndim || memcmp(T_SHAPE(grad), T_SHAPE(t), t->ndim * sizeof(int64_t)))
        return ad_fail(AD_ERR_SHAPE, "GradStore.insert: gradient %s does not match tensor %s",
                       ad_tdesc(grad), ad_tdesc(t));
    if (grad->dtype != t->dtype)
        return ad_fail(AD_ERR_DTYPE, "GradStore.insert: gradient %s does not match tensor %s",
                       ad_tdesc(grad), ad_tdesc(t));
    void **v = map_get(&g->map, t->id);
    if (v) {
        ad_tensor_release(*v);
        *v = ad_ref(grad);
        return AD_OK;
    }
    ad_tensor *r = ad_ref(grad);
    ad_status st = map_put(&g->map, t->id, r);
    if (st) ad_tensor_release(r);
    return st;
}

AD_API ad_status ad_gradstore_remove(ad_gradstore *g, const ad_tensor *t, ad_tensor **out) {
    ad_tensor *old = map_del(&g->map, t->id);
    if (out) *out = old;
    else ad_tensor_release(old);
    return AD_OK;
}

AD_API int64_t ad_gradstore_len(const ad_gradstore *g) { return g->map.len; }

AD_API ad_status ad_gradstore_extend(ad_gradstore *dst, const ad_gradstore *src) {
    if (dst == src) return ad_fail(AD_ERR_VALUE, "GradStore.extend: a store cannot extend itself");
    int mode = ad_set_grad_enabled(0);
    ad_status st = AD_OK;
    for (int64_t i = 0; i < src->map.cap && !st; i++) {
        if (!src->map.keys[i]) continue;
        ad_tensor *g = src->map.vals[i];
        void **v = map_get(&dst->map, src->map.keys[i]);
        if (v && (((ad_tensor *)*v)->ndim != g->ndim ||
                  memcmp(T_SHAPE((ad_tensor *)*v), T_SHAPE(g), g->ndim * sizeof(int64_t)))) {
            st = ad_fail(AD_ERR_SHAPE, "GradStore.extend: gradients of tensor id %llu differ "
                                       "in shape, %s and %s",
                         (unsigned long long)src->map.keys[i], ad_tdesc(*v), ad_tdesc(g));
            break;
        }
        st = accumulate(&dst->map, src->map.keys[i], ad_ref(g));
    }
    ad_set_grad_enabled(mode);
    return st;
}

AD_API ad_status ad_gradstore_replace_id(ad_gradstore *g, uint64_t id, const ad_tensor *grad) {
    void **v = map_get(&g->map, id);
    if (!v)
        return ad_fail(AD_ERR_INDEX, "GradStore: no gradient for tensor id %llu",
                       (unsigned long long)id);
    ad_tensor *old = *v;
    if (grad->ndim != old->ndim ||
        memcmp(T_SHAPE(grad), T_SHAPE(old), old->ndim * sizeof(int64_t)))
        return ad_fail(AD_ERR_SHAPE, "GradStore: gradient %s cannot replace %s of tensor id %llu",
                       ad_tdesc(grad), ad_tdesc(old), (unsigned long long)id);
    if (grad->dtype != old->dtype)
        return ad_fail(AD_ERR_DTYPE, "GradStore: gradient %s cannot replace %s of tensor id %llu",
                       ad_tdesc(grad), ad_tdesc(old), (unsigned long long)id);
    *v = ad_ref(grad); /* before the release: grad may be old itself */
    ad_tensor_release(old);
    return AD_OK;
}

AD_API ad_status ad_gradstore_item(const ad_gradstore *g, int64_t i, uint64_t *id,
                                   ad_tensor **grad) {
    if (i < 0 || i >= g->map.len)
        return ad_fail(AD_ERR_INDEX, "GradStore: item %lld out of range (%lld entries)",
                       (long long)i, (long long)g->map.len);
    for (int64_t s = 0; s < g->map.cap; s++) {
        if (!g->map.keys[s]) continue;
        if (i-- == 0) {
            *id = g->map.keys[s];
            *grad = ad_ref(g->map.vals[s]);
            return AD_OK;
        }
    }
    return ad_fail(AD_ERR_INTERNAL, "GradStore: item lookup failed");
}
