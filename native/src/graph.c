/* graph.c - grad mode, topological order, backward and the gradient store.
 *
 * The core loop reads as micrograd's: sort the tracked nodes (iteratively,
 * so a million-node chain needs no deep C stack), seed the root, walk the
 * order handing each node's gradient to its op's backward, and accumulate
 * what comes back into a map keyed by tensor id.  A gradient leaves the map
 * when its node consumes it, so intermediates are freed as the walk goes.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

struct tvec_ {
    ad_tensor **items;
    int64_t len, cap;
};

_Thread_local int ad_grad_enabled = 1;
_Thread_local int ad_anomaly_enabled = 0;
static _Atomic(ad_site_fn) site_callback;

AD_API int ad_is_grad_enabled(void) { return ad_grad_enabled; }
AD_API int ad_set_grad_enabled(int enabled) {
    int prev = ad_grad_enabled;
    ad_grad_enabled = enabled != 0;
    return prev;
}

/* ---- checkpointing ------------------------------------------------------------
 * burn's balanced checkpointer on this graph: a node recorded under
 * AD_CHECKPOINT_BALANCED for a memory-bound op is marked recompute (ops.c) and
 * keeps all its inputs; every node that reads its output holds a shell (the
 * output's id, layout and node, no storage), so the value dies when the caller
 * drops it.  Backward recomputes a shell's value when a formula reads it
 * (materialize), into a per-pass cache keyed by id that lets go of the value
 * once the walk passes the tensor itself: every reader of a value comes
 * before it in the order, and so does every recomputation that reads it. */
_Thread_local int ad_checkpoint_mode = AD_CHECKPOINT_NONE;

AD_API int ad_get_checkpoint_strategy(void) { return ad_checkpoint_mode; }
AD_API ad_status ad_set_checkpoint_strategy(int strategy, int *prev) {
    if (strategy != AD_CHECKPOINT_NONE && strategy != AD_CHECKPOINT_BALANCED)
        return ad_fail(AD_ERR_VALUE, "checkpointing: unknown strategy %d (known: "
                       "AD_CHECKPOINT_NONE = 0, AD_CHECKPOINT_BALANCED = 1)", strategy);
    if (prev) *prev = ad_checkpoint_mode;
    ad_checkpoint_mode = strategy;
    return AD_OK;
}

/* burn marks an op memory-bound when recomputing it is cheap next to keeping
   its output: the registry's MEM ops (one cheap instruction per element,
   views, copies, reductions), and the SIMD polynomial ops on float32 (GELU,
   exp, tanh, ...: one vector pass, as cheap as reading the value back).  On
   float64 those run libm per element, as the MATH ops always do: kept, as
   are GEMM, convolution and the softmax family. */
bool ad_recompute_op(int op, int dtype) {
    int c = ad_ops[op].cost;
    return c == COST_MEM || (c == COST_SIMD && dtype == AD_FLOAT32);
}

ad_tensor *ad_graph_input(const ad_tensor *x) {
    if (!x->node || !x->node->recompute || ad_is_shell(x)) return ad_ref(x);
    ad_tensor *s;
    if (ad_tensor_view(x, T_SHAPE(x), T_STRIDES(x), x->ndim, x->offset, &s)) return NULL;
    /* x holds the storage too, so this never frees it */
    atomic_fetch_sub_explicit(&s->storage->refs, 1, memory_order_relaxed);
    s->storage = NULL;
    s->id = x->id;
    s->node = x->node;
    atomic_fetch_add_explicit(&x->node->refs, 1, memory_order_relaxed);
    return s;
}

static ad_status recompute_fail(const ad_tensor *t, int i, const char *what, uint64_t then,
                                uint64_t now) {
    const ad_node *n = t->node;
    const ad_tensor *x = node_in(n)[i];
    char tail[96] = "";
    if (then != now)
        snprintf(tail, sizeof tail, " (version %llu when recorded, now %llu)",
                 (unsigned long long)then, (unsigned long long)now);
    return ad_fail(AD_ERR_GRAPH,
                   "backward: the output of %s (tensor id %llu, %s) was not kept "
                   "(checkpointing(\"balanced\")) and is recomputed from input %d (tensor id "
                   "%llu, %s), which %s%s; recompute the forward after Var.set",
                   ad_node_name(n), (unsigned long long)t->id, ad_tdesc(t), i,
                   (unsigned long long)x->id, ad_tdesc(x), what, tail);
}

/* Reruns t's op on its inputs (shells among them already in cache) and puts
   the value, carrying t's id and node, in cache. */
static ad_status recompute_one(id_map *cache, const ad_tensor *t) {
    ad_node *n = t->node;
    ad_tensor **in = node_in(n);
    const uint64_t *ver = node_versions(n);
    const ad_tensor *args[AD_MAX_INPUTS];
    uint64_t seq[AD_MAX_INPUTS] = {0};
    if (!n->recompute)
        return ad_fail(AD_ERR_INTERNAL, "backward: a shell of %s, which is not recomputed",
                       ad_node_name(n));
    for (int i = 0; i < n->n_in; i++) {
        if (!in[i])
            return ad_fail(AD_ERR_INTERNAL, "backward: %s (checkpointed) lost input %d",
                           ad_node_name(n), i);
        if (ad_is_shell(in[i])) {
            args[i] = *map_get(cache, in[i]->id);
            continue;
        }
        /* the version checks of the value about to be recomputed: a write
           since recording, or one in progress, would give new data */
        args[i] = in[i];
        seq[i] = atomic_load_explicit(&in[i]->storage->seq, memory_order_acquire);
        uint64_t now = atomic_load(&in[i]->storage->version);
        if (seq[i] & 1) return recompute_fail(t, i, "was being written in place", 0, 0);
        if (now != ver[i])
            return recompute_fail(t, i, "was modified in place after it was recorded", ver[i],
                                  now);
    }
    int mode = ad_set_grad_enabled(0);
    ad_tensor *r = NULL;
    ad_status st = ad_call(n->op, args, n->n_in, node_iargs(n), n->n_iargs, node_fargs(n),
                           n->n_fargs, &r);
    ad_set_grad_enabled(mode);
    if (st) return st;
    atomic_thread_fence(memory_order_acquire);
    for (int i = 0; i < n->n_in; i++)
        if (!ad_is_shell(in[i]) &&
            atomic_load_explicit(&in[i]->storage->seq, memory_order_relaxed) != seq[i]) {
            ad_tensor_release(r);
            return recompute_fail(t, i, "was written in place while it was read", 0, 0);
        }
    if (r->ndim != t->ndim || r->dtype != t->dtype ||
        memcmp(T_SHAPE(r), T_SHAPE(t), t->ndim * sizeof(int64_t))) {
        ad_tensor_release(r);
        return ad_fail(AD_ERR_INTERNAL, "backward: recomputing %s gave %s, not %s",
                       ad_node_name(n), ad_tdesc(r), ad_tdesc(t));
    }
    /* r is ours alone (no node: grad mode was off) and becomes a copy of t */
    r->id = t->id;
    r->node = n;
    atomic_fetch_add_explicit(&n->refs, 1, memory_order_relaxed);
    if ((st = map_put(cache, t->id, r))) ad_tensor_release(r);
    return st;
}

static ad_status tvec_push(struct tvec_ *v, ad_tensor *t);

/* The value of x (borrowed from cache): x itself unless it is a shell, else
   recomputed with every shell it depends on (an explicit stack: a long
   chain of checkpointed ops needs no deep C stack). */
static ad_status materialize(id_map *cache, const ad_tensor *x, const ad_tensor **out) {
    *out = x;
    if (!ad_is_shell(x)) return AD_OK;
    void **v = map_get(cache, x->id);
    if (v) {
        *out = *v;
        return AD_OK;
    }
    struct tvec_ stack = {0};
    ad_status st = tvec_push(&stack, (ad_tensor *)x);
    while (!st && stack.len) {
        ad_tensor *t = stack.items[stack.len - 1];
        if (map_get(cache, t->id)) {
            stack.len--;
            continue;
        }
        ad_tensor **in = node_in(t->node);
        bool ready = true;
        for (int i = 0; i < t->node->n_in && !st; i++)
            if (in[i] && ad_is_shell(in[i]) && !map_get(cache, in[i]->id)) {
                st = tvec_push(&stack, in[i]);
                ready = false;
            }
        if (st || !ready) continue;
        st = recompute_one(cache, t);
        stack.len--;
    }
    ad_mfree(stack.items);
    if (!st) *out = *map_get(cache, x->id);
    return st;
}

static void release_map_values(id_map *m);

/* out may be vals itself (sorted_nodes turns its borrowed pointers into
   references in place) */
static ad_status materialize_all(ad_tensor *const *vals, int64_t k, ad_tensor **out) {
    id_map cache;
    ad_status st = map_init(&cache, 8);
    if (st) return st;
    int64_t i = 0;
    for (; i < k; i++) {
        const ad_tensor *v = NULL;
        if (vals[i] && (st = materialize(&cache, vals[i], &v))) break;
        out[i] = v ? ad_ref(v) : NULL;
    }
    release_map_values(&cache);
    if (!st) return AD_OK;
    for (int64_t j = 0; j < k; j++) {
        if (j < i) ad_tensor_release(out[j]);
        out[j] = NULL;
    }
    return st;
}

ad_status ad_materialize_all(ad_tensor *const *vals, int k, ad_tensor **out) {
    return materialize_all(vals, k, out);
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
    return t && t->node && t->node->site ? t->node->site : "";
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
                       ad_node_name(n), shapes, ad_tdesc(t), i,
                       n->site ? n->site : "an unknown site (created outside detect_anomaly)");
    }
    return AD_OK;
}

/* A store may be shared between threads: every access to its map holds its
 * lock, and no code path ever holds two store locks at once (extend copies
 * the source's entries out first), so stores cannot deadlock each other.
 * Live stores are linked in a registry so that fork() can take every store
 * lock first (ad_gradstore_fork_*): a child never inherits a map that another
 * thread was in the middle of changing. */
struct ad_gradstore {
    pthread_mutex_t lock;
    id_map map; /* id -> ad_tensor* gradient (owned reference) */
    ad_gradstore *prev, *next; /* registry links, under registry_lock */
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static ad_gradstore *registry;

void ad_gradstore_fork_prepare(void) {
    pthread_mutex_lock(&registry_lock);
    for (ad_gradstore *g = registry; g; g = g->next) pthread_mutex_lock(&g->lock);
}

void ad_gradstore_fork_parent(void) {
    for (ad_gradstore *g = registry; g; g = g->next) pthread_mutex_unlock(&g->lock);
    pthread_mutex_unlock(&registry_lock);
}

void ad_gradstore_fork_child(void) {
    for (ad_gradstore *g = registry; g; g = g->next) pthread_mutex_init(&g->lock, NULL);
    pthread_mutex_init(&registry_lock, NULL);
}

#define NULL_ARG(fn, name)                                                               \
    ad_fail(AD_ERR_VALUE, "%s: argument '%s' is NULL", fn, name)

/* ---- topological order ----------------------------------------------------- */
typedef struct tvec_ tvec;

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

AD_API ad_status ad_graph_read_window(const ad_tensor *root, const ad_tensor *const *vars,
                                      int n_vars, uint64_t *window) {
    if (!root || !window || (n_vars && !vars))
        return NULL_ARG("graph_read_window", !root ? "root" : !window ? "window" : "vars");
    if (n_vars < 0 || n_vars > AD_MAX_INPUTS)
        return ad_fail(AD_ERR_VALUE, "graph_read_window: takes 0 to %d vars, got %d",
                       AD_MAX_INPUTS, n_vars);
    for (int k = 0; k < n_vars; k++)
        if (!vars[k]) return ad_fail(AD_ERR_VALUE, "graph_read_window: var %d is NULL", k);
    ad_read_window now;
    ad_read_window_open(&now, vars, n_vars);
    tvec order;
    ad_status st = sort_nodes(root, &order);
    if (st) return st;
    /* the storage a node read, as its recorded version: a seq is twice the
       version while no write is in progress (write_begin and write_end each
       add one), an odd one marks an overlapped read */
    bool seen[AD_MAX_INPUTS] = {false};
    for (int64_t j = 0; j < order.len; j++) {
        const ad_node *n = order.items[j]->node;
        if (!n) continue;
        ad_tensor **in = node_in(n);
        const uint64_t *ver = node_versions(n);
        for (int i = 0; i < n->n_in; i++) {
            if (!in[i] || ad_is_shell(in[i])) continue;
            for (int k = 0; k < n_vars; k++) {
                if (in[i]->storage != vars[k]->storage) continue;
                bool torn = (n->torn >> i) & 1;
                if (!seen[k]) {
                    seen[k] = true;
                    now.seq[k] = torn ? 1 : 2 * ver[i];
                    now.ver[k] = ver[i];
                } else if (torn || ver[i] != now.ver[k]) {
                    now.seq[k] |= 1;
                }
            }
        }
    }
    ad_mfree(order.items);
    for (int k = 0; k < n_vars; k++) window[2 * k] = now.seq[k], window[2 * k + 1] = now.ver[k];
    return AD_OK;
}

AD_API ad_status ad_sorted_nodes(const ad_tensor *t, ad_tensor ***out, int64_t *n) {
    if (!out || !n) return NULL_ARG("sorted_nodes", !out ? "out" : "n");
    *out = NULL;
    *n = 0;
    if (!t) return NULL_ARG("sorted_nodes", "t");
    tvec order;
    ad_status st = sort_nodes(t, &order);
    if (st) return st;
    /* a checkpointed tensor is handed out recomputed, never as a shell */
    if ((st = materialize_all(order.items, order.len, order.items))) {
        ad_mfree(order.items);
        return st;
    }
    *out = order.items;
    *n = order.len;
    return AD_OK;
}

/* ---- backward ----------------------------------------------------------------- */
static ad_status check_versions(const ad_node *n, const ad_tensor *t) {
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
                           ad_node_name(n), i, (unsigned long long)in[i]->id,
                           ad_tdesc(in[i]), (unsigned long long)ver[i],
                           (unsigned long long)now);
    }
    if (n->saves_output) {
        uint64_t now = atomic_load(&t->storage->version);
        if (now != n->out_version)
            return ad_fail(AD_ERR_GRAPH,
                           "backward: the output of %s (tensor id %llu, %s) saved for backward "
                           "was modified in place (version %llu at save, now %llu)",
                           ad_node_name(n), (unsigned long long)t->id, ad_tdesc(t),
                           (unsigned long long)n->out_version, (unsigned long long)now);
    }
    return AD_OK;
}

/* The seqlock half of the check (ad_storage_write_begin/end): the sequence
 * numbers of the storages the formula will read are taken before it runs
 * (odd: a write is in progress) and compared after it has read them, so a
 * write from another thread that overlaps the read is an error, never a torn
 * gradient.  Taken before check_versions, so a write that completes in
 * between is caught by the second look. */
typedef struct {
    const ad_tensor *t[AD_MAX_INPUTS + 1];
    int input[AD_MAX_INPUTS + 1]; /* -1: the output */
    uint64_t seq[AD_MAX_INPUTS + 1];
    int n;
} seq_snapshot;

static ad_status seq_fail(const ad_node *n, const ad_tensor *t, int input, const char *when) {
    char what[48];
    if (input < 0) snprintf(what, sizeof what, "the output");
    else snprintf(what, sizeof what, "input %d", input);
    return ad_fail(AD_ERR_GRAPH,
                   "backward: a value saved by %s (%s: tensor id %llu, %s) was being written in "
                   "place %s backward read it (Var.set or an in-place update from another "
                   "thread); finish the writes before backward, or recompute the forward",
                   ad_node_name(n), what, (unsigned long long)t->id, ad_tdesc(t), when);
}

static ad_status seq_take(const ad_node *n, const ad_tensor *t, seq_snapshot *s) {
    ad_tensor **in = node_in(n);
    s->n = 0;
    for (int i = 0; i <= n->n_in; i++) {
        const ad_tensor *x = i < n->n_in ? in[i] : t;
        if (i < n->n_in ? !(n->saved & (1u << i)) : !n->saves_output) continue;
        uint64_t q = atomic_load_explicit(&x->storage->seq, memory_order_acquire);
        if (q & 1) return seq_fail(n, x, i < n->n_in ? i : -1, "when");
        s->t[s->n] = x;
        s->input[s->n] = i < n->n_in ? i : -1;
        s->seq[s->n++] = q;
    }
    return AD_OK;
}

static ad_status seq_recheck(const ad_node *n, const seq_snapshot *s) {
    atomic_thread_fence(memory_order_acquire); /* the formula's reads happen before */
    for (int k = 0; k < s->n; k++)
        if (atomic_load_explicit(&s->t[k]->storage->seq, memory_order_relaxed) != s->seq[k])
            return seq_fail(n, s->t[k], s->input[k], "while");
    return AD_OK;
}

/* A node whose forward read an input while another thread wrote it in place
   (ad_read_window): its output, and so the gradient, may mix old and new
   values. */
static ad_status torn_fail(const ad_node *n, const ad_tensor *t) {
    int i = __builtin_ctz(n->torn);
    const ad_tensor *x = node_in(n)[i];
    char what[80] = "a tensor not kept by the graph";
    if (x)
        snprintf(what, sizeof what, "tensor id %llu, %s", (unsigned long long)x->id,
                 ad_tdesc(x));
    return ad_fail(AD_ERR_GRAPH,
                   "backward: %s (tensor id %llu, %s) read input %d (%s) while it was being "
                   "written in place (Var.set or an in-place update from another thread), so "
                   "its value may mix old and new data; finish the writes before the forward, "
                   "or recompute it",
                   ad_node_name(n), (unsigned long long)t->id, ad_tdesc(t), i, what);
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

ad_status bw_zero(const ad_node *, const ad_tensor *, const ad_tensor *, ad_tensor **);

/* Under create_graph every gradient the formula gives must track when the
   incoming one does (a gradient is linear in it); one that does not was
   computed outside the library's ops and would silently cut the graph. */
static ad_status check_recorded(const ad_tensor *t, const ad_tensor *g, ad_tensor *const *gr) {
    const ad_node *n = t->node;
    if (!ad_tracks(g) || ad_ops[n->op].backward == bw_zero) return AD_OK;
    for (int i = 0; i < n->n_in; i++)
        if (gr[i] && (n->tracked & (1u << i)) && !ad_tracks(gr[i]))
            return ad_fail(AD_ERR_GRAPH,
                           "backward(create_graph=True): the backward of %s is not "
                           "differentiable (its gradient for input %d, %s, was not recorded), "
                           "so the gradient of tensor id %llu (%s) cannot be differentiated "
                           "again",
                           ad_tensor_op_name(t), i, ad_tdesc(gr[i]),
                           (unsigned long long)t->id, ad_tdesc(t));
    return AD_OK;
}

/* The node t's formula reads: n itself, or (*copy, freed by the caller) a
   copy whose saved inputs that are shells are their recomputed values, with
   the versions those have now (they were checked while recomputing); *out
   is the output's value when the formula reads it. */
static ad_status with_values(id_map *cache, const ad_tensor *t, ad_node **copy,
                             const ad_tensor **out) {
    const ad_node *n = t->node;
    ad_tensor **in = node_in(n);
    *copy = NULL;
    *out = t;
    bool need = n->saves_output && ad_is_shell(t);
    for (int i = 0; i < n->n_in; i++)
        need |= (n->saved & (1u << i)) && in[i] && ad_is_shell(in[i]);
    if (!need) return AD_OK;
    size_t size = sizeof *n + (2 * (size_t)n->n_in + n->n_iargs + n->n_fargs) * sizeof(uint64_t);
    ad_node *c = ad_malloc(size);
    if (!c) return ad_fail_nomem("backward");
    memcpy(c, n, size);
    ad_tensor **cin = node_in(c);
    uint64_t *ver = node_versions(c);
    ad_status st = AD_OK;
    for (int i = 0; i < n->n_in && !st; i++) {
        if (!((n->saved & (1u << i)) && in[i] && ad_is_shell(in[i]))) continue;
        const ad_tensor *v;
        if (!(st = materialize(cache, in[i], &v))) {
            cin[i] = (ad_tensor *)v;
            ver[i] = atomic_load(&v->storage->version);
        }
    }
    if (!st && n->saves_output && ad_is_shell(t) && !(st = materialize(cache, t, out)))
        c->out_version = atomic_load(&(*out)->storage->version);
    if (st) {
        ad_mfree(c);
        *out = t;
        return st;
    }
    *copy = c;
    return AD_OK;
}

AD_API ad_status ad_backward(const ad_tensor *root, const ad_tensor *grad,
                             const ad_tensor *const *retain, int n_retain, ad_gradstore **out) {
    return ad_backward_ex(root, grad, retain, n_retain, 0, out);
}

static ad_status run_backward(const ad_tensor *root, const ad_tensor *grad,
                              const ad_tensor *const *retain, int n_retain, int flags,
                              ad_grad_ready_fn ready, void *ready_ctx, ad_gradstore **out);

AD_API ad_status ad_backward_ex(const ad_tensor *root, const ad_tensor *grad,
                                const ad_tensor *const *retain, int n_retain, int flags,
                                ad_gradstore **out) {
    return run_backward(root, grad, retain, n_retain, flags, NULL, NULL, out);
}

AD_API ad_status ad_backward_hooked(const ad_tensor *root, const ad_tensor *grad,
                                    const ad_tensor *const *retain, int n_retain, int flags,
                                    ad_grad_ready_fn ready, void *ctx, ad_gradstore **out) {
    return run_backward(root, grad, retain, n_retain, flags, ready, ctx, out);
}

/* The store entry of t is final when the walk reaches t: the order puts every
   consumer of t before it, so all of t's contributions have been summed. */
static ad_status grad_ready(ad_grad_ready_fn ready, void *ctx, const ad_tensor *t,
                            const ad_tensor *g) {
    ad_status st = ready(ctx, t, g);
    if (st == AD_OK) return AD_OK;
    return ad_fail(st, "backward: the gradient-ready callback failed (status %d) for tensor "
                       "id %llu (%s)", (int)st, (unsigned long long)t->id, ad_tdesc(t));
}

static ad_status run_backward(const ad_tensor *root, const ad_tensor *grad,
                              const ad_tensor *const *retain, int n_retain, int flags,
                              ad_grad_ready_fn ready, void *ready_ctx, ad_gradstore **out) {
    if (!out) return NULL_ARG("backward", "out");
    *out = NULL;
    if (!root) return NULL_ARG("backward", "root");
    if (flags & ~AD_BACKWARD_CREATE_GRAPH)
        return ad_fail(AD_ERR_VALUE, "backward: unknown flags 0x%x (known: "
                       "AD_BACKWARD_CREATE_GRAPH = 1)", (unsigned)flags);
    bool create = flags & AD_BACKWARD_CREATE_GRAPH;
    if (n_retain < 0)
        return ad_fail(AD_ERR_VALUE, "backward: n_retain is %d, must be >= 0", n_retain);
    if (n_retain > 0 && !retain)
        return ad_fail(AD_ERR_VALUE, "backward: retain is NULL but n_retain is %d", n_retain);
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
    id_map grads = {0}, keep = {0}, recomputed = {0}; /* id -> checkpointed value */
    ad_gradstore *store = NULL;
    /* plain backward records nothing; create_graph records the formulas and
       the sums, whatever the caller's mode (as PyTorch) */
    int mode = ad_set_grad_enabled(create);
    if ((st = sort_nodes(root, &order))) goto fail;
    if ((st = map_init(&grads, 64)) || (st = map_init(&keep, n_retain + 1)) ||
        (st = map_init(&recomputed, 8)))
        goto fail;
    for (int i = 0; i < n_retain; i++)
        if (retain[i] && (st = map_put(&keep, retain[i]->id, (void *)1))) goto fail;
    if ((st = ad_gradstore_new(&store))) goto fail;
    if ((st = map_put(&grads, root->id, seed))) goto fail;
    seed = NULL; /* the map owns it now */

    for (int64_t k = 0; k < order.len; k++) {
        ad_tensor *t = order.items[k];
        ad_tensor *g = map_del(&grads, t->id);
        if (!g) { /* nothing flowed here */
            ad_tensor_release(map_del(&recomputed, t->id));
            continue;
        }
        if (t->is_variable || map_get(&keep, t->id)) {
            if ((st = map_put(&store->map, t->id, ad_ref(g)))) {
                ad_tensor_release(g);
                ad_tensor_release(g);
                goto fail;
            }
            if (ready && (st = grad_ready(ready, ready_ctx, t, g))) {
                ad_tensor_release(g);
                goto fail;
            }
        }
        const ad_node *n = t->node;
        if (!n) {
            ad_tensor_release(g);
            ad_tensor_release(map_del(&recomputed, t->id));
            continue;
        }
        if (n->torn) {
            ad_tensor_release(g);
            st = torn_fail(n, t);
            goto fail;
        }
        ad_tensor *gr[AD_MAX_INPUTS] = {NULL};
        seq_snapshot seqs;
        /* checkpointed values first: the checks below then read what the
           formula will */
        ad_node *copy = NULL;
        const ad_tensor *out = t;
        st = with_values(&recomputed, t, &copy, &out);
        const ad_node *use = copy ? copy : n;
        if (!st) st = seq_take(use, out, &seqs);
        if (!st) st = check_versions(use, out);
        if (!st) st = ad_ops[n->op].backward(use, out, g, gr);
        if (!st) st = seq_recheck(use, &seqs);
        ad_mfree(copy);
        ad_tensor_release(map_del(&recomputed, t->id)); /* its readers are all done */
        if (!st && create) st = check_recorded(t, g, gr);
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
    release_map_values(&recomputed);
    map_free(&keep);
    ad_mfree(order.items);
    *out = store;
    return AD_OK;
fail:
    ad_set_grad_enabled(mode);
    ad_tensor_release(seed);
    release_map_values(&grads);
    release_map_values(&recomputed);
    map_free(&keep);
    ad_mfree(order.items);
    ad_gradstore_release(store);
    return st;
}

/* ---- gradient store ----------------------------------------------------------- */
AD_API ad_status ad_gradstore_new(ad_gradstore **out) {
    if (!out) return NULL_ARG("GradStore", "out");
    *out = NULL;
    ad_gradstore *g = ad_calloc(sizeof *g);
    if (!g) return ad_fail_nomem("GradStore");
    ad_status st = map_init(&g->map, 8);
    if (st) {
        ad_mfree(g);
        return st;
    }
    pthread_mutex_init(&g->lock, NULL);
    pthread_mutex_lock(&registry_lock);
    g->next = registry;
    if (registry) registry->prev = g;
    registry = g;
    pthread_mutex_unlock(&registry_lock);
    *out = g;
    return AD_OK;
}

AD_API void ad_gradstore_release(ad_gradstore *g) {
    if (!g) return;
    pthread_mutex_lock(&registry_lock);
    if (g->prev) g->prev->next = g->next;
    else registry = g->next;
    if (g->next) g->next->prev = g->prev;
    pthread_mutex_unlock(&registry_lock);
    pthread_mutex_destroy(&g->lock);
    release_map_values(&g->map);
    ad_mfree(g);
}

/* The store's map under its lock (the lock is logically mutable state: a
   const store is still read under it). */
static id_map *lock_map(const ad_gradstore *g) {
    pthread_mutex_lock(&((ad_gradstore *)g)->lock);
    return &((ad_gradstore *)g)->map;
}
static void unlock_map(const ad_gradstore *g) { pthread_mutex_unlock(&((ad_gradstore *)g)->lock); }

AD_API ad_status ad_gradstore_get(const ad_gradstore *g, const ad_tensor *t, ad_tensor **out) {
    if (!out) return NULL_ARG("GradStore.get", "out");
    *out = NULL;
    if (!g || !t) return NULL_ARG("GradStore.get", !g ? "store" : "t");
    id_map *m = lock_map(g);
    void **v = map_get(m, t->id);
    *out = v ? ad_ref(*v) : NULL;
    unlock_map(g);
    return AD_OK;
}

AD_API ad_status ad_gradstore_insert(ad_gradstore *g, const ad_tensor *t, const ad_tensor *grad) {
    if (!g || !t || !grad)
        return NULL_ARG("GradStore.insert", !g ? "store" : !t ? "t" : "grad");
    if (grad->ndim != t->ndim || memcmp(T_SHAPE(grad), T_SHAPE(t), t->ndim * sizeof(int64_t)))
        return ad_fail(AD_ERR_SHAPE, "GradStore.insert: gradient %s does not match tensor %s",
                       ad_tdesc(grad), ad_tdesc(t));
    if (grad->dtype != t->dtype)
        return ad_fail(AD_ERR_DTYPE, "GradStore.insert: gradient %s does not match tensor %s",
                       ad_tdesc(grad), ad_tdesc(t));
    ad_tensor *r = ad_ref(grad), *old = NULL;
    id_map *m = lock_map(g);
    void **v = map_get(m, t->id);
    ad_status st = AD_OK;
    if (v) {
        old = *v;
        *v = r;
    } else if ((st = map_put(m, t->id, r))) {
        old = r;
    }
    unlock_map(g);
    ad_tensor_release(old); /* outside the lock: it may free a whole graph */
    return st;
}

AD_API ad_status ad_gradstore_remove(ad_gradstore *g, const ad_tensor *t, ad_tensor **out) {
    if (out) *out = NULL;
    if (!g || !t) return NULL_ARG("GradStore.remove", !g ? "store" : "t");
    id_map *m = lock_map(g);
    ad_tensor *old = map_del(m, t->id);
    unlock_map(g);
    if (out) *out = old;
    else ad_tensor_release(old);
    return AD_OK;
}

AD_API int64_t ad_gradstore_len(const ad_gradstore *g) {
    if (!g) return -1;
    int64_t n = lock_map(g)->len;
    unlock_map(g);
    return n;
}

/* The entries of g as parallel arrays of ids and new references (grads may be
   NULL: ids only), in one consistent snapshot. */
static ad_status snapshot(const ad_gradstore *g, uint64_t **ids, ad_tensor ***grads,
                          int64_t *n) {
    *ids = NULL;
    if (grads) *grads = NULL;
    *n = 0;
    id_map *m = lock_map(g);
    int64_t len = m->len;
    uint64_t *iv = ad_malloc((size_t)(len ? len : 1) * sizeof *iv);
    ad_tensor **gv = grads ? ad_malloc((size_t)(len ? len : 1) * sizeof *gv) : NULL;
    if (!iv || (grads && !gv)) {
        unlock_map(g);
        ad_mfree(iv);
        ad_mfree(gv);
        return ad_fail_nomem("GradStore.items");
    }
    int64_t k = 0;
    for (int64_t s = 0; s < m->cap; s++) {
        if (!m->keys[s]) continue;
        iv[k] = m->keys[s];
        if (gv) gv[k] = ad_ref(m->vals[s]);
        k++;
    }
    unlock_map(g);
    *ids = iv;
    if (grads) *grads = gv;
    *n = k;
    return AD_OK;
}

AD_API ad_status ad_gradstore_extend(ad_gradstore *dst, const ad_gradstore *src) {
    if (!dst || !src) return NULL_ARG("GradStore.extend", !dst ? "dst" : "src");
    if (dst == src) return ad_fail(AD_ERR_VALUE, "GradStore.extend: a store cannot extend itself");
    /* src's entries are copied out first: holding one lock at a time, two
       threads extending two stores from each other cannot deadlock */
    uint64_t *ids;
    ad_tensor **gs;
    int64_t n;
    ad_status st = snapshot(src, &ids, &gs, &n);
    if (st) return st;
    int mode = ad_set_grad_enabled(0);
    id_map *m = lock_map(dst);
    int64_t i = 0;
    for (; i < n && !st; i++) {
        ad_tensor *g = gs[i];
        void **v = map_get(m, ids[i]);
        if (v && (((ad_tensor *)*v)->ndim != g->ndim ||
                  memcmp(T_SHAPE((ad_tensor *)*v), T_SHAPE(g), g->ndim * sizeof(int64_t)))) {
            st = ad_fail(AD_ERR_SHAPE, "GradStore.extend: gradients of tensor id %llu differ "
                                       "in shape, %s and %s",
                         (unsigned long long)ids[i], ad_tdesc(*v), ad_tdesc(g));
            break;
        }
        st = accumulate(m, ids[i], g); /* consumes the reference */
    }
    unlock_map(dst);
    ad_set_grad_enabled(mode);
    for (; i < n; i++) ad_tensor_release(gs[i]);
    ad_mfree(ids);
    ad_mfree(gs);
    return st;
}

AD_API ad_status ad_gradstore_replace_id(ad_gradstore *g, uint64_t id, const ad_tensor *grad) {
    if (!g || !grad) return NULL_ARG("GradStore.replace_id", !g ? "store" : "grad");
    id_map *m = lock_map(g);
    void **v = map_get(m, id);
    ad_tensor *old = v ? *v : NULL;
    ad_status st = AD_OK;
    if (!old)
        st = ad_fail(AD_ERR_INDEX, "GradStore: no gradient for tensor id %llu",
                     (unsigned long long)id);
    else if (grad->ndim != old->ndim ||
             memcmp(T_SHAPE(grad), T_SHAPE(old), old->ndim * sizeof(int64_t)))
        st = ad_fail(AD_ERR_SHAPE, "GradStore: gradient %s cannot replace %s of tensor id %llu",
                     ad_tdesc(grad), ad_tdesc(old), (unsigned long long)id);
    else if (grad->dtype != old->dtype)
        st = ad_fail(AD_ERR_DTYPE, "GradStore: gradient %s cannot replace %s of tensor id %llu",
                     ad_tdesc(grad), ad_tdesc(old), (unsigned long long)id);
    else
        *v = ad_ref(grad); /* before the release: grad may be old itself */
    unlock_map(g);
    if (st == AD_OK) ad_tensor_release(old); /* outside the lock: it may free a whole graph */
    return st;
}

AD_API ad_status ad_gradstore_item(const ad_gradstore *g, int64_t i, uint64_t *id,
                                   ad_tensor **grad) {
    if (grad) *grad = NULL;
    if (!g || !id || !grad)
        return NULL_ARG("GradStore.item", !g ? "store" : !id ? "id" : "grad");
    id_map *m = lock_map(g);
    if (i < 0 || i >= m->len) {
        int64_t len = m->len;
        unlock_map(g);
        return ad_fail(AD_ERR_INDEX, "GradStore: item %lld out of range (%lld entries)",
                       (long long)i, (long long)len);
    }
    for (int64_t s = 0; s < m->cap; s++) {
        if (!m->keys[s]) continue;
        if (i-- == 0) {
            *id = m->keys[s];
            *grad = ad_ref(m->vals[s]);
            unlock_map(g);
            return AD_OK;
        }
    }
    unlock_map(g);
    return ad_fail(AD_ERR_INTERNAL, "GradStore: item lookup failed");
}

AD_API ad_status ad_gradstore_items(const ad_gradstore *g, uint64_t **ids, ad_tensor ***grads,
                                    int64_t *n) {
    if (ids) *ids = NULL;
    if (grads) *grads = NULL;
    if (n) *n = 0;
    if (!g || !ids || !n) return NULL_ARG("GradStore.items", !g ? "store" : !ids ? "ids" : "n");
    return snapshot(g, ids, grads, n);
}
