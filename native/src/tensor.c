/* tensor.c - storage, tensors as views over it, and their iterative release. */
#include <math.h>
#include <sched.h>
#include <string.h>

#include "ew.h"
#include "internal.h"

#define NULL_ARG(fn, name) ad_fail(AD_ERR_VALUE, "%s: argument '%s' is NULL", fn, name)

static atomic_uint_least64_t next_id = 1;

/* ---- dtypes -------------------------------------------------------------- */
static const struct {
    const char *name;
    size_t size;
    bool is_float;
} dtypes[] = {
    [AD_FLOAT32] = {"float32", 4, true}, [AD_FLOAT64] = {"float64", 8, true},
    [AD_INT64] = {"int64", 8, false},    [AD_INT32] = {"int32", 4, false},
    [AD_UINT8] = {"uint8", 1, false},    [AD_BOOL] = {"bool", 1, false},
};

bool ad_dtype_valid(int d) { return d >= 0 && d <= AD_BOOL; }
size_t ad_dtype_size_(int d) { return dtypes[d].size; }
bool ad_dtype_is_float(int d) { return dtypes[d].is_float; }
const char *ad_dtype_name_(int d) { return ad_dtype_valid(d) ? dtypes[d].name : "?"; }
AD_API const char *ad_dtype_name(int d) { return ad_dtype_valid(d) ? dtypes[d].name : NULL; }
AD_API size_t ad_dtype_size(int d) { return ad_dtype_valid(d) ? dtypes[d].size : 0; }
AD_API int ad_abi_version(void) { return AD_ABI_MAJOR * 1000 + AD_ABI_MINOR; }

/* ---- storage --------------------------------------------------------------- */
/* Data up to INLINE_MAX bytes lives in the storage's own allocation: one
   malloc and one free per tensor instead of two, and no posix_memalign (the
   costliest part of a small op after the call itself).  Up to INLINE_SMALL
   bytes it is 16-byte aligned, as malloc's blocks; above, 64-byte aligned as
   ad_data_alloc's, for the vector loops. */
enum { INLINE_SMALL = 256, INLINE_MAX = 4096 };

static size_t inline_align(size_t nbytes) { return nbytes <= INLINE_SMALL ? 16 : 64; }

/* the allocation of a storage whose nbytes of data live inline (the header,
   the alignment's slack, the data), from ad_small_alloc */
static size_t inline_alloc_size(size_t nbytes) {
    return sizeof(ad_storage) + inline_align(nbytes) + nbytes;
}

static ad_storage *storage_new(size_t nbytes) {
    ad_storage *s;
    if (nbytes <= INLINE_MAX && !AD_EXACT_ALLOC) {
        s = ad_small_alloc(inline_alloc_size(nbytes));
        if (!s) return NULL;
        size_t align = inline_align(nbytes);
        uintptr_t d = ((uintptr_t)s + sizeof *s + align - 1) & ~(uintptr_t)(align - 1);
        s->data = (void *)d;
        s->inline_data = true;
        ad_live_bytes_add((long long)nbytes); /* raises memory_stats' peak too */
    } else {
        s = ad_malloc(sizeof *s);
        if (!s) return NULL;
        s->data = ad_data_alloc(nbytes);
        if (!s->data) {
            ad_mfree(s);
            return NULL;
        }
        s->inline_data = false;
    }
    atomic_init(&s->refs, 1);
    atomic_init(&s->version, 0);
    atomic_init(&s->seq, 0);
    s->nbytes = nbytes;
    s->external = s->readonly = s->var_data = false;
    return s;
}

static void storage_release(ad_storage *s) {
    if (!s || atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) != 1) return;
    if (s->external) {
        ad_external_free(s);
        return;
    }
    if (s->inline_data) {
        atomic_fetch_sub_explicit(&ad_live_byte_count, (long long)s->nbytes, memory_order_relaxed);
        ad_small_free(s, inline_alloc_size(s->nbytes));
        return;
    }
    ad_data_free(s->data, s->nbytes);
    ad_mfree(s);
}

/* fork() waits for the in-place writes in flight and keeps new ones out
   until it is done (ad_storage_writes_fork_*): a child that inherited a
   storage with an odd seq from a writer thread it does not have would spin
   forever in its next write to that Var, and fail every backward over it.
   A thread enters this gate once however many storages it writes at once
   (an optimizer's parameter and its state buffers): a nested wait on a
   closed gate would deadlock against the fork waiting for this thread. */
static atomic_int writes_closed;
static atomic_long writes_active;
static _Thread_local int tl_write_depth;

static void writes_enter(void) {
    for (;;) {
        while (atomic_load(&writes_closed)) sched_yield();
        atomic_fetch_add(&writes_active, 1);
        if (!atomic_load(&writes_closed)) return; /* seq_cst: the fork sees this one */
        atomic_fetch_sub(&writes_active, 1);
    }
}

void ad_storage_writes_fork_prepare(void) {
    atomic_store(&writes_closed, 1);
    while (atomic_load(&writes_active)) sched_yield();
}

void ad_storage_writes_fork_parent(void) { atomic_store(&writes_closed, 0); }

void ad_storage_writes_fork_child(void) {
    /* a thread that was backing out of the closed gate is gone */
    atomic_store(&writes_active, 0);
    atomic_store(&writes_closed, 0);
}

/* Writers take turns: a writer waits until seq is even, then claims the write
   by making it odd; readers never wait (they detect and fail, graph.c). */
void ad_storage_write_begin(ad_storage *s) {
    if (tl_write_depth++ == 0) writes_enter();
    for (unsigned spin = 0;; spin++) {
        uint64_t q = atomic_load_explicit(&s->seq, memory_order_relaxed);
        if (!(q & 1) && atomic_compare_exchange_weak_explicit(&s->seq, &q, q + 1,
                                                              memory_order_acquire,
                                                              memory_order_relaxed))
            break;
        if (spin > 64) sched_yield();
    }
    /* the odd seq is visible before any byte of the write */
    atomic_thread_fence(memory_order_release);
}

void ad_storage_write_end(ad_storage *s) {
    atomic_fetch_add_explicit(&s->version, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->seq, 1, memory_order_release);
    if (--tl_write_depth == 0) atomic_fetch_sub(&writes_active, 1);
}

void ad_read_window_open(ad_read_window *w, const ad_tensor *const *in, int n_in) {
    w->n = n_in;
    for (int i = 0; i < n_in; i++) {
        const ad_storage *s = in[i]->storage;
        w->seq[i] = s ? atomic_load_explicit(&s->seq, memory_order_acquire) : 0;
        w->ver[i] = s ? atomic_load(&s->version) : 0;
    }
}

unsigned ad_read_window_torn(const ad_read_window *w, const ad_tensor *const *in) {
    unsigned torn = 0;
    atomic_thread_fence(memory_order_acquire); /* the op's reads happen before */
    for (int i = 0; i < w->n; i++) {
        const ad_storage *s = in[i]->storage;
        if (s && ((w->seq[i] & 1) ||
                  atomic_load_explicit(&s->seq, memory_order_relaxed) != w->seq[i]))
            torn |= 1u << i;
    }
    return torn;
}

AD_API ad_status ad_read_window_take(const ad_tensor *const *inputs, int n_inputs,
                                     uint64_t *window) {
    if (!window) return NULL_ARG("read_window_take", "window");
    if (n_inputs < 0 || n_inputs > AD_MAX_INPUTS || (n_inputs && !inputs))
        return ad_fail(AD_ERR_VALUE, "read_window_take: takes 0 to %d inputs, got %d%s",
                       AD_MAX_INPUTS, n_inputs, n_inputs && !inputs ? " (inputs is NULL)" : "");
    for (int i = 0; i < n_inputs; i++)
        if (!inputs[i]) return ad_fail(AD_ERR_VALUE, "read_window_take: input %d is NULL", i);
    ad_read_window w;
    ad_read_window_open(&w, inputs, n_inputs);
    for (int i = 0; i < n_inputs; i++) window[2 * i] = w.seq[i], window[2 * i + 1] = w.ver[i];
    return AD_OK;
}

/* ---- shapes ------------------------------------------------------------------ */
ad_status ad_check_shape(const char *op, const int64_t *shape, int ndim, int dtype,
                         int64_t *numel) {
    if (ndim < 0 || ndim > AD_MAX_DIMS)
        return ad_fail(AD_ERR_SHAPE, "%s: %d dims requested, at most %d supported", op, ndim,
                       AD_MAX_DIMS);
    if (!ad_dtype_valid(dtype)) return ad_fail(AD_ERR_DTYPE, "%s: unknown dtype %d", op, dtype);
    /* nz, the product of the nonzero sizes, is the largest contiguous stride:
       it must fit even when a 0 size makes the tensor empty */
    int64_t nz = 1;
    bool overflow = false, empty = false;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return ad_fail(AD_ERR_SHAPE, "%s: negative size %lld in shape %s", op,
                           (long long)shape[i], ad_fmt_shape(shape, ndim));
        if (!shape[i]) empty = true;
        else if (nz > INT64_MAX / shape[i]) overflow = true;
        else nz *= shape[i];
    }
    int64_t n = empty ? 0 : nz;
    if (overflow || (uint64_t)nz > (uint64_t)(INT64_MAX / 16) / ad_dtype_size_(dtype))
        return ad_fail(AD_ERR_VALUE, "%s: shape %s of %s has too many elements to allocate", op,
                       ad_fmt_shape(shape, ndim), ad_dtype_name_(dtype));
    *numel = n;
    return AD_OK;
}

/* a tensor's allocation: the header and its dims (ad_small_alloc's) */
static size_t tensor_size(int ndim) {
    return sizeof(ad_tensor) + 2 * (size_t)ndim * sizeof(int64_t);
}

static void tensor_free(ad_tensor *t) { ad_small_free(t, tensor_size(t->ndim)); }

static ad_tensor *tensor_alloc(int ndim) {
    ad_tensor *t = ad_small_alloc(tensor_size(ndim));
    if (!t) return NULL;
    atomic_init(&t->refs, 1);
    t->ndim = (uint8_t)ndim;
    t->is_variable = 0;
    t->pad_ = 0;
    t->id = atomic_fetch_add_explicit(&next_id, 1, memory_order_relaxed);
    t->offset = 0;
    t->node = NULL;
    atomic_fetch_add_explicit(&ad_live_tensor_count, 1, memory_order_relaxed);
    return t;
}

static void contiguous_strides(const int64_t *shape, int ndim, int64_t *strides) {
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= shape[i] ? shape[i] : 1;
    }
}

ad_status ad_tensor_empty(int dtype, const int64_t *shape, int ndim, ad_tensor **out) {
    int64_t numel = 0;
    ad_status st = ad_check_shape("empty", shape, ndim, dtype, &numel);
    if (st) return st;
    ad_tensor *t = tensor_alloc(ndim);
    if (!t) return ad_fail_nomem("tensor");
    t->storage = storage_new((size_t)numel * ad_dtype_size_(dtype));
    if (!t->storage) {
        tensor_free(t);
        atomic_fetch_sub(&ad_live_tensor_count, 1);
        return ad_fail(AD_ERR_NOMEM, "out of memory allocating %s of %s",
                       ad_fmt_shape(shape, ndim), ad_dtype_name_(dtype));
    }
    t->dtype = (uint8_t)dtype;
    t->numel = numel;
    if (ndim) memcpy(T_SHAPE(t), shape, (size_t)ndim * sizeof *shape); /* 0-d: shape may be NULL */
    contiguous_strides(shape, ndim, T_STRIDES(t));
    *out = t;
    return AD_OK;
}

/* ad_tensor_empty for a shape already checked (like's own, or 0-d), without a
   message on failure: the quick calls (ops.c) decline instead. */
static ad_tensor *tensor_new_checked(int dtype, const int64_t *shape, int nd, int64_t numel) {
    ad_tensor *t = tensor_alloc(nd);
    if (!t) return NULL;
    t->storage = storage_new((size_t)numel * ad_dtype_size_(dtype));
    if (!t->storage) {
        tensor_free(t);
        atomic_fetch_sub(&ad_live_tensor_count, 1);
        return NULL;
    }
    t->dtype = (uint8_t)dtype;
    t->numel = numel;
    if (nd) memcpy(T_SHAPE(t), shape, (size_t)nd * sizeof(int64_t));
    contiguous_strides(T_SHAPE(t), nd, T_STRIDES(t));
    return t;
}

ad_tensor *ad_tensor_new_like(int dtype, const ad_tensor *like) {
    return tensor_new_checked(dtype, T_SHAPE(like), like->ndim, like->numel);
}

ad_tensor *ad_tensor_new_0d(int dtype) { return tensor_new_checked(dtype, NULL, 0, 1); }

ad_status ad_tensor_zeros(int dtype, const int64_t *shape, int ndim, ad_tensor **out) {
    ad_status st = ad_tensor_empty(dtype, shape, ndim, out);
    if (!st) memset((*out)->storage->data, 0, (*out)->storage->nbytes);
    return st;
}

ad_status ad_tensor_view(const ad_tensor *src, const int64_t *shape, const int64_t *strides,
                         int ndim, int64_t offset, ad_tensor **out) {
    ad_tensor *t = tensor_alloc(ndim);
    if (!t) return ad_fail_nomem("view");
    t->dtype = src->dtype;
    t->storage = src->storage;
    atomic_fetch_add_explicit(&t->storage->refs, 1, memory_order_relaxed);
    t->offset = offset;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    t->numel = n;
    if (ndim) { /* 0-d: shape and strides may be NULL */
        memcpy(T_SHAPE(t), shape, (size_t)ndim * sizeof *shape);
        memcpy(T_STRIDES(t), strides, (size_t)ndim * sizeof *strides);
    }
    *out = t;
    return AD_OK;
}

ad_tensor *ad_ref(const ad_tensor *t) {
    ad_tensor *m = (ad_tensor *)t;
    atomic_fetch_add_explicit(&m->refs, 1, memory_order_relaxed);
    return m;
}

AD_API void ad_tensor_retain(ad_tensor *t) {
    if (t) ad_ref(t);
}

/* Frees without recursion: tensors whose count reaches zero go on a list
 * linked through their (already released) storage pointer, so a chain of a
 * million nodes frees in constant stack and without allocating. */
AD_API void ad_tensor_release(ad_tensor *t) {
    if (!t || atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) != 1) return;
    storage_release(t->storage);
    t->storage = NULL;
    ad_tensor *dying = t;
    while (dying) {
        ad_tensor *x = dying;
        dying = (ad_tensor *)x->storage;
        ad_node *n = x->node;
        /* a node is shared by its output's shells and recomputed copies */
        if (n && atomic_fetch_sub_explicit(&n->refs, 1, memory_order_acq_rel) == 1) {
            ad_tensor **in = node_in(n);
            for (int i = 0; i < n->n_in; i++) {
                ad_tensor *p = in[i];
                if (!p || atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) != 1)
                    continue;
                storage_release(p->storage);
                p->storage = (ad_storage *)dying;
                dying = p;
            }
            ad_node_finalize(n); /* saved_bytes; a custom op's context (custom.c) */
            ad_mfree((void *)n->site);
            ad_mfree(n);
        }
        tensor_free(x);
        atomic_fetch_sub_explicit(&ad_live_tensor_count, 1, memory_order_relaxed);
    }
}

/* A release whose work is bounded, so that it may run without giving up the
 * GIL (bindings/build_cffi.py): it frees t, its storage and its node when
 * that node is t's alone and every input the node holds either outlives it
 * (another reference) or is a plain tensor (no node of its own).  Anything
 * else -- a graph that would come down with t, a custom op's node (its
 * release runs Python code), memory shared with another library (its
 * release callback) -- is left to ad_tensor_release, untouched.  The count
 * is only lowered from above 1 by compare-and-swap, so a concurrent release
 * cannot leave it at 0 unfreed; at 1 the caller holds the only reference, so
 * nobody can add one (nor make a shell that shares the node). */
static bool plain(const ad_tensor *t) {
    return !t->node && t->storage && !t->storage->external;
}

AD_API int ad_tensor_release_quick(ad_tensor *t) {
    if (!t) return 1;
    int r = atomic_load_explicit(&t->refs, memory_order_relaxed);
    while (r > 1)
        if (atomic_compare_exchange_weak_explicit(&t->refs, &r, r - 1, memory_order_acq_rel,
                                                  memory_order_relaxed))
            return 1;
    if (!t->storage || t->storage->external) return 0;
    ad_node *n = t->node;
    if (n) {
        if (n->op == AD_OP_CUSTOM || atomic_load_explicit(&n->refs, memory_order_relaxed) != 1)
            return 0;
        ad_tensor **in = node_in(n);
        for (int i = 0; i < n->n_in; i++)
            if (in[i] && atomic_load_explicit(&in[i]->refs, memory_order_relaxed) == 1 &&
                !plain(in[i]))
                return 0;
    }
    /* pairs with the acq_rel decrements of the references released before */
    atomic_thread_fence(memory_order_acquire);
    if (n) {
        /* an input another thread released meanwhile may now end here: that
           race alone can make this call free more than a plain input */
        ad_tensor **in = node_in(n);
        for (int i = 0; i < n->n_in; i++) ad_tensor_release(in[i]);
        ad_node_finalize(n); /* saved_bytes */
        ad_mfree((void *)n->site);
        ad_mfree(n);
    }
    storage_release(t->storage);
    tensor_free(t);
    atomic_fetch_sub_explicit(&ad_live_tensor_count, 1, memory_order_relaxed);
    return 1;
}

bool ad_is_contiguous(const ad_tensor *t) {
    if (t->numel == 0) return true; /* no element to place (contiguous_strides' 0 dims) */
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        int64_t n = T_SHAPE(t)[i];
        if (n == 1) continue;
        if (T_STRIDES(t)[i] != s) return false;
        s *= n;
    }
    return true;
}

/* ---- creation ------------------------------------------------------------------ */
static ad_status create(const char *op, int dtype, const int64_t *shape, int ndim,
                        ad_tensor **out) {
    int64_t numel;
    ad_status st = ad_check_shape(op, shape, ndim, dtype, &numel);
    if (st) return st;
    return ad_tensor_empty(dtype, shape, ndim, out);
}

/* Pointer arguments of the creation functions: out always, shape when there
   are dims to read. */
static ad_status check_create_args(const char *op, const int64_t *shape, int ndim,
                                   ad_tensor **out) {
    if (!out) return NULL_ARG(op, "out");
    *out = NULL;
    if (!shape && ndim > 0)
        return ad_fail(AD_ERR_VALUE, "%s: argument 'shape' is NULL but ndim is %d", op, ndim);
    return AD_OK;
}

AD_API ad_status ad_tensor_from_data(const void *data, size_t nbytes, int dtype,
                                     const int64_t *shape, int ndim, ad_tensor **out) {
    ad_tensor *t = NULL;
    ad_status st0 = check_create_args("tensor", shape, ndim, out);
    if (st0) return st0;
    ad_status st = create("tensor", dtype, shape, ndim, &t);
    if (st) return st;
    if (data && nbytes != t->storage->nbytes) {
        size_t want = t->storage->nbytes;
        ad_tensor_release(t);
        return ad_fail(AD_ERR_VALUE, "tensor: %zu bytes given for shape %s of %s (%zu needed)",
                       nbytes, ad_fmt_shape(shape, ndim), ad_dtype_name_(dtype), want);
    }
    if (data) ew_copy(t->storage->data, data, nbytes);
    else memset(t->storage->data, 0, t->storage->nbytes);
    *out = t;
    return AD_OK;
}

enum { FILL_VALUE, FILL_ARANGE };
/* The fill kernel is written once, in the template header fill_dtype.h, and
   instantiated here per dtype (each_dtype.h) and for bool. */
#define DTYPE_TEMPLATE "fill_dtype.h"
#include "each_dtype.h"
#define T uint8_t
#define S(name) name##_bool
#define CAST(x) ((T)((x) != 0))
#include "fill_dtype.h"

/* t's elements from a generator (see fill_dtype.h) */
static inline __attribute__((always_inline)) void fill(ad_tensor *t, int kind, double a,
                                                       double b) {
    switch (t->dtype) {
    case AD_FLOAT32: fill_f32(t, kind, a, b); break;
    case AD_FLOAT64: fill_f64(t, kind, a, b); break;
    case AD_INT64: fill_i64(t, kind, a, b); break;
    case AD_INT32: fill_i32(t, kind, a, b); break;
    case AD_UINT8: fill_u8(t, kind, a, b); break;
    case AD_BOOL: fill_bool(t, kind, a, b); break;
    }
}

/* A double converts to an integer dtype only when its truncation fits (else
   the C conversion is undefined): NaN, inf and out-of-range values are errors. */
ad_status ad_check_fill_value(const char *op, int dtype, double v) {
    bool ok = true;
    switch (dtype) {
    case AD_INT64: ok = v >= -0x1p63 && v < 0x1p63; break;
    case AD_INT32: ok = v > -2147483649.0 && v < 2147483648.0; break;
    case AD_UINT8: ok = v > -1.0 && v < 256.0; break;
    default: break;
    }
    if (ok) return AD_OK;
    return ad_fail(AD_ERR_VALUE, "%s: value %g cannot be represented in %s", op, v,
                   ad_dtype_name_(dtype));
}

AD_API ad_status ad_tensor_full(double value, int dtype, const int64_t *shape, int ndim,
                                ad_tensor **out) {
    ad_tensor *t = NULL;
    ad_status st = check_create_args("full", shape, ndim, out);
    if (st) return st;
    st = ad_check_fill_value("full", dtype, value);
    if (st) return st;
    st = create("full", dtype, shape, ndim, &t);
    if (st) return st;
    fill(t, FILL_VALUE, value, 0);
    *out = t;
    return AD_OK;
}

AD_API ad_status ad_tensor_arange(double start, double step, int64_t n, int dtype,
                                  ad_tensor **out) {
    ad_tensor *t = NULL;
    ad_status st = check_create_args("arange", NULL, 0, out);
    if (st) return st;
    st = create("arange", dtype, &n, 1, &t);
    if (st) return st;
    double last = start + (double)(n - 1) * step;
    if (n > 0 && ((st = ad_check_fill_value("arange", dtype, start)) ||
                  (st = ad_check_fill_value("arange", dtype, last)))) {
        ad_tensor_release(t);
        return st;
    }
    fill(t, FILL_ARANGE, start, step);
    *out = t;
    return AD_OK;
}

AD_API ad_status ad_tensor_random(int kind, uint64_t seed, int dtype, const int64_t *shape,
                                  int ndim, ad_tensor **out) {
    ad_status st0 = check_create_args(kind ? "rand" : "randn", shape, ndim, out);
    if (st0) return st0;
    if (kind != 0 && kind != 1) return ad_fail(AD_ERR_VALUE, "random: unknown kind %d", kind);
    if (ad_dtype_valid(dtype) && !ad_dtype_is_float(dtype))
        return ad_fail(AD_ERR_DTYPE, "%s: dtype must be float32 or float64, got %s",
                       kind ? "rand" : "randn", ad_dtype_name_(dtype));
    ad_tensor *t = NULL;
    ad_status st = create(kind ? "rand" : "randn", dtype, shape, ndim, &t);
    if (st) return st;
    ew_random_job j = {.kind = kind ? EW_RAND_UNIFORM : EW_RAND_NORMAL, .dtype = dtype,
                       .seed = seed, .y = t->storage->data};
    ew_random(&j, t->numel);
    *out = t;
    return AD_OK;
}

/* ---- properties ------------------------------------------------------------------ */
/* A NULL handle reads as "no tensor": -1 for counts and dtype, 0 for flags
   and ids (a real id is never 0), NULL for data; nothing is written. */
AD_API int ad_tensor_ndim(const ad_tensor *t) { return t ? t->ndim : -1; }
AD_API int ad_tensor_dtype(const ad_tensor *t) { return t ? t->dtype : -1; }
AD_API int64_t ad_tensor_numel(const ad_tensor *t) { return t ? t->numel : -1; }
AD_API void ad_tensor_shape(const ad_tensor *t, int64_t *s) {
    if (t && s && t->ndim) memcpy(s, T_SHAPE(t), t->ndim * sizeof *s);
}
AD_API void ad_tensor_strides(const ad_tensor *t, int64_t *s) {
    if (t && s && t->ndim) memcpy(s, T_STRIDES(t), t->ndim * sizeof *s);
}
AD_API uint64_t ad_tensor_id(const ad_tensor *t) { return t ? t->id : 0; }
AD_API int ad_tensor_is_variable(const ad_tensor *t) { return t ? t->is_variable : 0; }
AD_API int ad_tensor_track_op(const ad_tensor *t) { return t ? ad_tracks(t) : 0; }
AD_API int ad_tensor_is_contiguous(const ad_tensor *t) { return t ? ad_is_contiguous(t) : 0; }
AD_API int ad_tensor_op(const ad_tensor *t) { return t && t->node ? t->node->op : AD_OP_NONE; }
AD_API void *ad_tensor_data(const ad_tensor *t) { return t ? ad_ptr(t) : NULL; }
AD_API uint64_t ad_tensor_version(const ad_tensor *t) {
    return t ? atomic_load(&t->storage->version) : 0;
}
AD_API int ad_tensor_same_storage(const ad_tensor *a, const ad_tensor *b) {
    return a && b && a->storage == b->storage;
}

AD_API ad_status ad_tensor_copy_to(const ad_tensor *t, void *dst, size_t nbytes) {
    if (!t) return NULL_ARG("copy_to", "t");
    size_t want = (size_t)t->numel * ad_dtype_size_(t->dtype);
    if (nbytes != want)
        return ad_fail(AD_ERR_VALUE, "copy_to: %zu bytes given for %s (%zu needed)", nbytes,
                       ad_tdesc(t), want);
    if (!dst && nbytes) return NULL_ARG("copy_to", "dst");
    if (nbytes) ad_copy_strided(t, dst);
    return AD_OK;
}

/* ---- variables ------------------------------------------------------------------ */
AD_API ad_status ad_var_from_tensor(const ad_tensor *t, ad_tensor **out) {
    if (!out) return NULL_ARG("Var", "out");
    *out = NULL;
    if (!t) return NULL_ARG("Var", "t");
    if (t->is_variable) {
        *out = ad_ref(t);
        return AD_OK;
    }
    if (!ad_dtype_is_float(t->dtype))
        return ad_fail(AD_ERR_DTYPE,
                       "Var: a variable must have a float dtype (float32 or float64), got %s",
                       ad_tdesc(t));
    ad_tensor *v;
    ad_status st = ad_tensor_empty(t->dtype, T_SHAPE(t), t->ndim, &v);
    if (st) return st;
    ad_copy_strided(t, v->storage->data);
    v->is_variable = 1;
    v->storage->var_data = true;
    *out = v;
    return AD_OK;
}

AD_API ad_status ad_var_set(ad_tensor *var, const ad_tensor *src) {
    if (!var || !src) return NULL_ARG("set", !var ? "var" : "src");
    if (!var->is_variable)
        return ad_fail(AD_ERR_GRAPH, "set: the target (id %llu) is not a variable",
                       (unsigned long long)var->id);
    if (var->storage == src->storage)
        return ad_fail(AD_ERR_GRAPH, "cannot set a variable to a tensor that is derived from "
                                     "its value");
    if (!ad_is_contiguous(var))
        return ad_fail(AD_ERR_GRAPH, "cannot set a non-contiguous variable");
    if (var->storage->readonly) /* never: a Var owns its storage; kept as a guard */
        return ad_fail(AD_ERR_GRAPH, "set: the variable's memory is read-only");
    if (var->ndim != src->ndim ||
        memcmp(T_SHAPE(var), T_SHAPE(src), var->ndim * sizeof(int64_t)) != 0)
        return ad_fail(AD_ERR_SHAPE, "set: shape mismatch, variable %s, source %s",
                       ad_tdesc(var), ad_tdesc(src));
    if (var->dtype != src->dtype)
        return ad_fail(AD_ERR_DTYPE, "set: dtype mismatch, variable %s, source %s",
                       ad_tdesc(var), ad_tdesc(src));
    /* src over the Var's bytes through another storage (a DLPack or numpy
       re-import): copy it out first, so that it is never read while written */
    ad_tensor *copy = NULL;
    if (ad_storage_overlap(var->storage, src->storage)) {
        ad_status st = ad_tensor_empty(src->dtype, T_SHAPE(src), src->ndim, &copy);
        if (st) return st;
        ad_copy_strided(src, ad_ptr(copy));
        src = copy;
    }
    ad_storage_write_begin(var->storage);
    ad_copy_strided(src, ad_ptr(var));
    ad_storage_write_end(var->storage);
    ad_tensor_release(copy);
    return AD_OK;
}

AD_API ad_status ad_tensor_detach(const ad_tensor *t, ad_tensor **out) {
    if (!out) return NULL_ARG("detach", "out");
    *out = NULL;
    if (!t) return NULL_ARG("detach", "t");
    if (!ad_tracks(t)) {
        *out = ad_ref(t);
        return AD_OK;
    }
    return ad_tensor_view(t, T_SHAPE(t), T_STRIDES(t), t->ndim, t->offset, out);
}
