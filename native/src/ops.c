/* ops.c - the op table and the one entry every op goes through.
 *
 * A row names the op, its arity, its forward function (by family), its
 * backward (backward.c, NULL for ops whose output is never tracked) and which
 * values each input's gradient reads, so that a node keeps only those
 * (burn: mul keeps rhs only when lhs is tracked).
 */
#include <string.h>

#include "internal.h"
#include "nnops.h"
#include "opargs.h"

#define OUT 0x80 /* needs bit: the output */
#define I0 0x01
#define I1 0x02
#define I2 0x04
#define UNPAREN(...) __VA_ARGS__

/* The backward functions (backward.c).  A row whose backward is `none`
   declares bw_none, which is never defined: the table reads it as NULL. */
#define OP(ID, NUM, name, n_in, n_iargs, n_fargs, fam, fwd, bw, needs, cost, args, doc) \
    ad_status bw_##bw(const ad_node *, const ad_tensor *, const ad_tensor *, ad_tensor **);
#include "ops.def"
#define bw_none NULL

/* The header's enum is the ABI; a row that disagrees with it fails here. */
#define OP(ID, NUM, ...) \
    _Static_assert(AD_OP_##ID == NUM, "ops.def: AD_OP_" #ID " is not " #NUM " in pyautodiff.h");
#include "ops.def"

const op_def ad_ops[AD_OP__COUNT] = {
#define OP(ID, NUM, name, n_in, n_iargs, n_fargs, fam, fwd, bw, needs, cost, args, doc) \
    [AD_OP_##ID] = {name, n_in, n_iargs, n_fargs, fam, COST_##cost, fwd, bw_##bw,          \
                    {UNPAREN needs}, args, doc},
#include "ops.def"
};

AD_API const char *ad_op_name(int op) {
    return (op > 0 && op < AD_OP__COUNT && ad_ops[op].name) ? ad_ops[op].name : NULL;
}

/* Builds the node of a tracked op: inputs that track or whose value a tracked
   input's gradient reads, the versions of the values backward will read, and
   the op's arguments, in one allocation. */
static ad_status record(int op, const op_def *def, const op_args *a, unsigned tracked,
                        const ad_read_window *w, ad_tensor *y) {
    unsigned saved = 0;
    for (int i = 0; i < a->n_in; i++)
        if (tracked & (1u << i)) saved |= def->needs[def->n_in < 0 ? 0 : (i < 4 ? i : 3)];
    size_t words = 2 * (size_t)a->n_in + (size_t)a->n_iargs + (size_t)a->n_fargs;
    ad_node *n = ad_malloc(sizeof *n + words * sizeof(uint64_t));
    if (!n) return ad_fail_nomem(def->name);
    n->op = (int16_t)op;
    n->n_in = (uint8_t)a->n_in;
    n->n_iargs = (uint8_t)a->n_iargs;
    n->n_fargs = (uint8_t)a->n_fargs;
    n->tracked = (uint8_t)tracked;
    n->saved = (uint8_t)(saved & 0x7f);
    n->saves_output = (saved & OUT) != 0;
    n->out_version = 0;
    /* a recompute node keeps every input: backward reruns the op on them */
    n->recompute = ad_checkpoint_mode && ad_recompute_op(op, y->dtype);
    n->torn = (uint8_t)ad_read_window_torn(w, a->in);
    atomic_init(&n->refs, 1);
    n->site = ad_anomaly_enabled ? ad_anomaly_site() : NULL;
    ad_tensor **in = node_in(n);
    uint64_t *ver = node_versions(n);
    for (int i = 0; i < a->n_in; i++) {
        bool keep = n->recompute || ((tracked | saved) & (1u << i));
        in[i] = keep ? ad_graph_input(a->in[i]) : NULL;
        ver[i] = !(keep && in[i]) ? 0 : w->n ? w->ver[i] : ad_graph_version(a->in[i]);
        if (keep && !in[i]) {
            for (int j = 0; j < i; j++) ad_tensor_release(in[j]);
            ad_mfree((void *)n->site);
            ad_mfree(n);
            return ad_fail_nomem(def->name);
        }
    }
    if (a->n_iargs) memcpy(node_iargs(n), a->iargs, a->n_iargs * sizeof(int64_t));
    if (a->n_fargs) memcpy(node_fargs(n), a->fargs, a->n_fargs * sizeof(double));
    if (n->saves_output) n->out_version = atomic_load(&y->storage->version);
    ad_node_count_saved(n, y); /* memory_stats: saved_bytes */
    y->node = n;
    return AD_OK;
}

static const char *plural(int n) { return n == 1 ? "" : "s"; }

/* The message for a call whose counts or arrays do not match the row; kept
   out of ad_call so that the common path is a few compares. */
static ad_status bad_call(const op_def *def, const ad_tensor *const *in, int n_in,
                          const int64_t *iargs, int n_iargs, const double *fargs, int n_fargs) {
    const char *nm = def->name, *sig = def->args[0] ? def->args : "no arguments";
    if (def->n_in >= 0 && n_in != def->n_in)
        return ad_fail(AD_ERR_VALUE, "%s: takes %d tensor input%s, got %d", nm, def->n_in,
                       plural(def->n_in), n_in);
    if (n_in < 1 || n_in > AD_MAX_INPUTS)
        return ad_fail(AD_ERR_VALUE, "%s: takes 1 to %d tensor inputs, got %d", nm,
                       AD_MAX_INPUTS, n_in);
    if (!in) return ad_fail(AD_ERR_VALUE, "%s: the inputs array is NULL", nm);
    if (def->n_iargs >= 0 && n_iargs != def->n_iargs)
        return ad_fail(AD_ERR_VALUE, "%s: takes %d integer argument%s (%s), got %d", nm,
                       def->n_iargs, plural(def->n_iargs), sig, n_iargs);
    if (n_iargs < 0 || n_iargs > 64)
        return ad_fail(AD_ERR_VALUE, "%s: takes 0 to 64 integer arguments (%s), got %d", nm, sig,
                       n_iargs);
    if (def->family == AD_FAMILY_REDUCE && n_iargs < 1)
        return ad_fail(AD_ERR_VALUE, "%s: missing the keepdim argument (%s)", nm, sig);
    if (n_iargs && !iargs)
        return ad_fail(AD_ERR_VALUE, "%s: the integer arguments array is NULL (n_iargs %d)", nm,
                       n_iargs);
    if (n_fargs != def->n_fargs)
        return ad_fail(AD_ERR_VALUE, "%s: takes %d float argument%s (%s), got %d", nm,
                       def->n_fargs, plural(def->n_fargs), sig, n_fargs);
    if (n_fargs && !fargs)
        return ad_fail(AD_ERR_VALUE, "%s: the float arguments array is NULL (n_fargs %d)", nm,
                       n_fargs);
    for (int i = 0; i < n_in; i++)
        if (!in[i]) return ad_fail(AD_ERR_VALUE, "%s: input %d is NULL", nm, i);
    return ad_fail(AD_ERR_INTERNAL, "%s: call rejected without a reason", nm);
}

ad_status ad_call(int op, const ad_tensor *const *in, int n_in, const int64_t *iargs,
                  int n_iargs, const double *fargs, int n_fargs, ad_tensor **out) {
    if (!out) return ad_fail(AD_ERR_VALUE, "%s: the out pointer is NULL",
                             op > 0 && op < AD_OP__COUNT && ad_ops[op].name ? ad_ops[op].name
                                                                            : "op call");
    *out = NULL;
    if (op <= 0 || op >= AD_OP__COUNT || !ad_ops[op].forward)
        return ad_fail(AD_ERR_VALUE, "op call: unknown op kind %d", op);
    const op_def *def = &ad_ops[op];
    bool ok = n_in >= 1 && n_in <= AD_MAX_INPUTS && in && (def->n_in < 0 || n_in == def->n_in) &&
              n_iargs >= 0 && n_iargs <= 64 && (def->n_iargs < 0 || n_iargs == def->n_iargs) &&
              (n_iargs == 0 || iargs) && n_fargs == def->n_fargs && (n_fargs == 0 || fargs) &&
              (def->family != AD_FAMILY_REDUCE || n_iargs >= 1);
    for (int i = 0; ok && i < n_in; i++) ok = in[i] != NULL;
    if (!ok) return bad_call(def, in, n_in, iargs, n_iargs, fargs, n_fargs);
    /* cat's sizes may be left to the call ({dim} alone): the node records
       them (its backward splits g by them, and an untracked input is not
       kept) */
    int64_t cat_ia[1 + AD_MAX_INPUTS];
    if (op == AD_OP_CAT && n_iargs == 1)
        iargs = cat_args_complete(iargs[0], in, n_in, cat_ia), n_iargs = 1 + n_in;

    op_args a = {op, in, n_in, iargs, n_iargs, fargs, n_fargs};
    ad_tensor *y = NULL;
    ad_read_window w = {.n = 0};
    if (def->backward && ad_grad_enabled) ad_read_window_open(&w, in, n_in);
    ad_status st = def->forward(&a, &y);
    if (st) return st;

    unsigned tracked = 0;
    if (def->backward && ad_grad_enabled && ad_dtype_is_float(y->dtype))
        for (int i = 0; i < n_in; i++)
            if (ad_tracks(in[i])) tracked |= 1u << i;
    /* an op that returned its input unchanged (contiguous of a contiguous
       tensor, to_dtype to the same dtype) records nothing */
    for (int i = 0; i < n_in && tracked; i++)
        if (y == in[i]) tracked = 0;
    if (tracked && (st = record(op, def, &a, tracked, &w, y))) {
        ad_tensor_release(y);
        return st;
    }
    *out = y;
    return AD_OK;
}

ad_status ad_call1(int op, const ad_tensor *x, ad_tensor **out) {
    return ad_call(op, &x, 1, NULL, 0, NULL, 0, out);
}

ad_status ad_call2(int op, const ad_tensor *a, const ad_tensor *b, ad_tensor **out) {
    const ad_tensor *in[2] = {a, b};
    return ad_call(op, in, 2, NULL, 0, NULL, 0, out);
}

ad_status ad_calls(int op, const ad_tensor *x, double s, ad_tensor **out) {
    return ad_call(op, &x, 1, NULL, 0, &s, 1, out);
}

AD_API ad_status ad_op_call(int op, const ad_tensor *const *inputs, int n_inputs,
                            const int64_t *iargs, int n_iargs, const double *fargs, int n_fargs,
                            ad_tensor **out) {
    return ad_call(op, inputs, n_inputs, iargs, n_iargs, fargs, n_fargs, out);
}
AD_API ad_status ad_unary(int op, const ad_tensor *x, ad_tensor **out) {
    if (op > 0 && op < AD_OP__COUNT && ad_ops[op].forward && ad_ops[op].n_in != 1)
        return ad_fail(AD_ERR_VALUE, "%s is not a unary op", ad_ops[op].name);
    return ad_call1(op, x, out);
}
AD_API ad_status ad_binary(int op, const ad_tensor *a, const ad_tensor *b, ad_tensor **out) {
    return ad_call2(op, a, b, out);
}
AD_API ad_status ad_scalar_op(int op, const ad_tensor *x, double s, ad_tensor **out) {
    return ad_calls(op, x, s, out);
}

/* ---- quick calls ---------------------------------------------------------------
 * The common small call without ad_call's checks and messages: contiguous
 * same-shape operands (ad_ew_quick_*), then ad_call's recording.  NULL
 * declines: anything else, every error, anomaly mode (its site
 * callback) and an armed allocation-failure hook go to the ordinary call,
 * which gives the same result or the error.  They never wait for a lock
 * another caller can hold for long, never call into the caller, and bound
 * their work, so a binding may keep its interpreter lock across them. */
static ad_tensor *quick_finish(int op, const op_def *def, const ad_tensor *const *in, int n_in,
                               const int64_t *iargs, int n_iargs, const double *fargs,
                               int n_fargs, const ad_read_window *w, ad_tensor *y) {
    if (!y) return NULL;
    unsigned tracked = 0;
    if (def->backward && ad_grad_enabled && ad_dtype_is_float(y->dtype))
        for (int i = 0; i < n_in; i++)
            if (ad_tracks(in[i])) tracked |= 1u << i;
    if (tracked) {
        op_args a = {op, in, n_in, iargs, n_iargs, fargs, n_fargs};
        if (record(op, def, &a, tracked, w, y)) {
            ad_tensor_release(y);
            return NULL;
        }
    }
    return y;
}

/* ad_call's window around the quick kernel, taken where it may record */
static void quick_window(const op_def *def, ad_read_window *w, const ad_tensor *const *in,
                         int n_in) {
    w->n = 0;
    if (def->backward && ad_grad_enabled)
        for (int i = 0; i < n_in; i++)
            if (ad_tracks(in[i])) {
                ad_read_window_open(w, in, n_in);
                return;
            }
}

static bool quick_ok(int op, int n_in, int n_fargs) {
    if (op <= 0 || op >= AD_OP__COUNT || ad_anomaly_enabled || ad_alloc_failure_armed())
        return false;
    const op_def *def = &ad_ops[op];
    return def->n_in == n_in && def->n_iargs == 0 && def->n_fargs == n_fargs;
}

AD_API ad_tensor *ad_binary_quick(int op, const ad_tensor *a, const ad_tensor *b) {
    if (!a || !b || !quick_ok(op, 2, 0)) return NULL;
    const op_def *def = &ad_ops[op];
    if (def->forward != fwd_binary && def->forward != fwd_compare) return NULL;
    const ad_tensor *in[2] = {a, b};
    ad_read_window w;
    quick_window(def, &w, in, 2);
    return quick_finish(op, def, in, 2, NULL, 0, NULL, 0, &w,
                        ad_ew_quick_binary(op, def->forward == fwd_compare ? AD_BOOL : a->dtype,
                                           a, b));
}

AD_API ad_tensor *ad_unary_quick(int op, const ad_tensor *x) {
    if (!x || !quick_ok(op, 1, 0) || ad_ops[op].forward != fwd_unary) return NULL;
    ad_read_window w;
    quick_window(&ad_ops[op], &w, &x, 1);
    return quick_finish(op, &ad_ops[op], &x, 1, NULL, 0, NULL, 0, &w,
                        ad_ew_quick_unary(op, x, 0));
}

AD_API ad_tensor *ad_scalar_quick(int op, const ad_tensor *x, double s) {
    /* integer tensors: the binding checks the scalar against the dtype's range
       on the ordinary path first, and fwd_scalar rejects a fractional one */
    if (!x || !ad_dtype_is_float(x->dtype) || !quick_ok(op, 1, 1) ||
        ad_ops[op].forward != fwd_scalar)
        return NULL;
    ad_read_window w;
    quick_window(&ad_ops[op], &w, &x, 1);
    return quick_finish(op, &ad_ops[op], &x, 1, NULL, 0, &s, 1, &w, ad_ew_quick_unary(op, x, s));
}

AD_API ad_tensor *ad_reduce_quick(int op, const ad_tensor *x) {
    static const int64_t keepdim[1] = {0}; /* the ordinary call's iargs: over every dim */
    if (!x || (op != AD_OP_SUM && op != AD_OP_MEAN && op != AD_OP_PROD && op != AD_OP_MAX &&
               op != AD_OP_MIN) ||
        ad_anomaly_enabled || ad_alloc_failure_armed())
        return NULL;
    ad_read_window w;
    quick_window(&ad_ops[op], &w, &x, 1);
    return quick_finish(op, &ad_ops[op], &x, 1, keepdim, 1, NULL, 0, &w,
                        ad_reduce_quick_all(op, x));
}

/* whether shape[0:nd) is x's shape with only dims of size 1 dropped or added
   (a reshape that is always a view, whatever x's strides) */
static bool unit_dims_only(const ad_tensor *x, const int64_t *shape, int nd) {
    const int64_t *xs = T_SHAPE(x);
    int i = 0, j = 0;
    for (;;) {
        while (i < x->ndim && xs[i] == 1) i++;
        while (j < nd && shape[j] == 1) j++;
        if (i == x->ndim || j == nd) return i == x->ndim && j == nd;
        if (xs[i++] != shape[j++]) return false;
    }
}

AD_API ad_tensor *ad_view_quick(int op, const ad_tensor *x, const int64_t *iargs, int n_iargs) {
    if (!x ||
        (op != AD_OP_PERMUTE && op != AD_OP_SLICE && op != AD_OP_RESHAPE && op != AD_OP_BROADCAST) ||
        ad_anomaly_enabled || ad_alloc_failure_armed() || n_iargs < 0 || n_iargs > AD_MAX_DIMS ||
        (n_iargs && !iargs))
        return NULL;
    const op_def *def = &ad_ops[op];
    /* a reshape of a strided tensor may copy it (unbounded work), unless it
       only drops or adds dims of size 1 */
    if ((def->n_iargs >= 0 && n_iargs != def->n_iargs) ||
        (op == AD_OP_RESHAPE && !ad_is_contiguous(x) && !unit_dims_only(x, iargs, n_iargs)))
        return NULL;
    op_args a = {op, &x, 1, iargs, n_iargs, NULL, 0};
    ad_tensor *y = NULL;
    if (def->forward(&a, &y)) return NULL;
    if (y == x) return y; /* returned unchanged: nothing recorded, as ad_call */
    const ad_read_window none = {.n = 0}; /* a view reads no element */
    return quick_finish(op, def, &x, 1, iargs, n_iargs, NULL, 0, &none, y);
}

AD_API ad_status ad_op_info(int op, ad_op_info_t *out) {
    if (!out) return ad_fail(AD_ERR_VALUE, "ad_op_info: the out pointer is NULL");
    if (op <= 0 || op >= AD_OP__COUNT || !ad_ops[op].forward)
        return ad_fail(AD_ERR_VALUE, "ad_op_info: unknown op kind %d", op);
    const op_def *d = &ad_ops[op];
    *out = (ad_op_info_t){
        .name = d->name,
        .args = d->args,
        .doc = d->doc,
        .n_inputs = d->n_in,
        .n_iargs = d->n_iargs,
        .n_fargs = d->n_fargs,
        .family = d->family,
        .differentiable = d->backward != NULL,
        .memory_bound = d->cost == COST_MEM,
        .dtypes = ad_ew_dtypes(op),
    };
    return AD_OK;
}
