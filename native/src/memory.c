/* memory.c - the memory report (live, peak and saved bytes) and graph
 * introspection for to_dot.
 *
 * saved_bytes follows one rule: a live node counts, once each, the byte
 * sizes of the distinct storages among the values its backward reads (saved
 * inputs, the output when saves_output, a custom op's saved tensors).  Two
 * nodes that keep the same storage both count it: the figure is what the
 * graph holds, node by node, not a deduplicated footprint.  The amount is
 * stored in the node when it is recorded and taken back when it is freed, so
 * the counter never depends on the order storages die in.
 *
 * A Var's own buffer (and any view of it) is counted apart, in
 * saved_var_bytes (ABI 1.7): the parameters are alive with or without a
 * graph, so saved_bytes is what the graphs cost on top of them -- the
 * activations and other intermediate values that freeing the graphs (or
 * checkpointing) gives back. */
#include <string.h>

#include "internal.h"

static atomic_llong peak_byte_count;
static atomic_llong saved_byte_count;
static atomic_llong saved_var_byte_count; /* Vars' own buffers: ad_saved_var_bytes */

static void raise_peak(long long now) {
    long long peak = atomic_load_explicit(&peak_byte_count, memory_order_relaxed);
    while (now > peak && !atomic_compare_exchange_weak_explicit(
                             &peak_byte_count, &peak, now, memory_order_relaxed,
                             memory_order_relaxed)) {
    }
}

void ad_live_bytes_add(long long n) {
    raise_peak(atomic_fetch_add_explicit(&ad_live_byte_count, n, memory_order_relaxed) + n);
}

void ad_count_storages(ad_node *n, const ad_tensor *const *vals, int k) {
    int64_t sum = 0, var_sum = 0;
    for (int i = 0; i < k; i++) {
        if (!vals[i]) continue;
        const ad_storage *s = vals[i]->storage;
        if (!s) continue; /* a shell: checkpointed, nothing held */
        bool dup = false;
        for (int j = 0; j < i && !dup; j++) dup = vals[j] && vals[j]->storage == s;
        if (dup) continue;
        if (s->var_data) var_sum += (int64_t)s->nbytes;
        else sum += (int64_t)s->nbytes;
    }
    n->saved_bytes = sum;
    n->saved_var_bytes = var_sum;
    atomic_fetch_add_explicit(&saved_byte_count, sum, memory_order_relaxed);
    atomic_fetch_add_explicit(&saved_var_byte_count, var_sum, memory_order_relaxed);
}

void ad_uncount_saved(const ad_node *n) {
    atomic_fetch_sub_explicit(&saved_byte_count, n->saved_bytes, memory_order_relaxed);
    atomic_fetch_sub_explicit(&saved_var_byte_count, n->saved_var_bytes, memory_order_relaxed);
}

void ad_node_count_saved(ad_node *n, const ad_tensor *out) {
    const ad_tensor *vals[AD_MAX_INPUTS + 1];
    int k = 0;
    ad_tensor **in = node_in(n);
    /* a recompute node holds all its inputs for the rerun, and not its
       output (nothing does: its readers hold shells) */
    for (int i = 0; i < n->n_in; i++)
        if ((n->recompute && in[i]) || (n->saved & (1u << i))) vals[k++] = in[i];
    if (n->saves_output && !n->recompute) vals[k++] = out;
    ad_count_storages(n, vals, k);
}

AD_API void ad_memory_stats(ad_memory_stats_t *out) {
    if (!out) return;
    out->live_bytes = atomic_load(&ad_live_byte_count);
    out->peak_bytes = atomic_load(&peak_byte_count);
    out->saved_bytes = atomic_load(&saved_byte_count);
    /* a peak read before a concurrent allocation raised it */
    if (out->peak_bytes < out->live_bytes) out->peak_bytes = out->live_bytes;
}

AD_API int64_t ad_saved_var_bytes(void) { return atomic_load(&saved_var_byte_count); }

AD_API void ad_reset_peak_memory(void) {
    atomic_store(&peak_byte_count, atomic_load(&ad_live_byte_count));
}

AD_API ad_status ad_tensor_parents(const ad_tensor *t, ad_tensor **parents, int cap, int *n,
                                   unsigned *tracked, unsigned *saved) {
    if (!t || !n || !tracked || !saved)
        return ad_fail(AD_ERR_VALUE, "tensor_parents: argument '%s' is NULL",
                       !t ? "t" : !n ? "n" : !tracked ? "tracked" : "saved");
    if (cap < 0 || (cap > 0 && !parents))
        return ad_fail(AD_ERR_VALUE, "tensor_parents: cap is %d with parents %s", cap,
                       parents ? "given" : "NULL");
    *n = 0;
    *tracked = *saved = 0;
    const ad_node *nd = t->node;
    if (!nd) return AD_OK;
    ad_tensor **in = node_in(nd);
    /* a checkpointed input is handed out recomputed, never as a shell */
    ad_status st = ad_materialize_all(in, nd->n_in < cap ? nd->n_in : cap, parents);
    if (st) return st;
    *n = nd->n_in;
    *tracked = nd->tracked;
    *saved = nd->saved | (nd->saves_output ? 0x80u : 0u);
    return AD_OK;
}

AD_API ad_status ad_tensor_saved(const ad_tensor *t, unsigned *inputs, int *output) {
    if (!t || !inputs || !output)
        return ad_fail(AD_ERR_VALUE, "tensor_saved: argument '%s' is NULL",
                       !t ? "t" : !inputs ? "inputs" : "output");
    *inputs = t->node ? t->node->saved : 0u;
    *output = t->node && t->node->saves_output;
    return AD_OK;
}
