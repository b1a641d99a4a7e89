/* internal.h - the native model shared by every source file (never installed).
 *
 * Storage: a refcounted buffer with a version counter.  Tensor: a view
 * (shape, strides, offset) over a storage plus an optional op record (node).
 * A node holds its inputs, the storage versions of the values its backward
 * reads, and the op's integer/float arguments, all in one allocation.
 */
#ifndef AD_INTERNAL_H
#define AD_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Under AddressSanitizer (GCC and clang define __SANITIZE_ADDRESS__ /
   __has_feature(address_sanitizer)) every block is allocated at its exact
   size, none is kept for reuse and no tensor's data sits inside its
   storage's allocation, so that a read one element past any tensor is
   reported: the 64-byte rounding, the block caches and the inline data hid
   small overruns (a strided bias read past its end went unreported). */
#if defined(__SANITIZE_ADDRESS__)
#define AD_EXACT_ALLOC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define AD_EXACT_ALLOC 1
#endif
#endif
#ifndef AD_EXACT_ALLOC
#define AD_EXACT_ALLOC 0
#endif

/* the library defines the testing hooks too: declare them */
#define AD_TESTING
#include "../include/pyautodiff.h"

#define AD_MAX_DIMS 16
#define AD_MAX_INPUTS 8

/* ---- allocation (alloc.c): counted, failure-injectable ------------------ */
void *ad_malloc(size_t n);
/* n bytes of an ad_malloc'd block from a 64-byte boundary (*raw: the block
   to ad_mfree), for a kernel's scratch: malloc's 16-byte alignment has
   every other 32-byte vector straddle a cache line (matmul.c's dot path:
   float32 (128x512) @ (512x4) 5.5 or 7.5 us by the heap's state, Zen 4) */
void *ad_malloc_aligned(size_t n, void **raw);
void *ad_calloc(size_t n);
void ad_mfree(void *p);
/* ad_malloc / ad_mfree for blocks whose size the caller knows again when it
   frees them (a tensor, a storage with inline data): blocks of at most 4.5
   KiB come from per-thread free lists (alloc.c).  A block from one must go
   back through the other (a list's blocks are of their class's size). */
void *ad_small_alloc(size_t n);
void ad_small_free(void *p, size_t n);
/* Whether the test hook ad_testing_fail_alloc_after is counting down: the
   quick calls then decline, so that the failure lands in the ordinary path
   and its message. */
bool ad_alloc_failure_armed(void);
/* Large aligned buffers for tensor data (64-byte aligned). */
void *ad_data_alloc(size_t n);
void ad_data_free(void *p, size_t n);
extern atomic_llong ad_live_tensor_count;
extern atomic_llong ad_live_byte_count;
struct ad_node;
struct op_args;
/* memory_stats (memory.c): adds n to the live bytes and raises the peak. */
void ad_live_bytes_add(long long n);
/* Counts the distinct storages of the values node n keeps for backward (its
   saved inputs, and out when saves_output) into saved_bytes; stores the
   amount in n->saved_bytes so that ad_node_finalize takes it back. */
void ad_node_count_saved(struct ad_node *n, const ad_tensor *out);
/* Called on a node about to be freed: uncounts it, releases a custom op's
   context (custom.c). */
void ad_node_finalize(struct ad_node *n);
/* memory.c: counts the distinct storages of vals[0..k) as node n's saved
   bytes (n->saved_bytes, and n->saved_var_bytes for Vars' own buffers);
   ad_uncount_saved takes a node's amounts back. */
void ad_count_storages(struct ad_node *n, const ad_tensor *const *vals, int k);
void ad_uncount_saved(const struct ad_node *n);
/* The forward of the CUSTOM row: a custom op is recorded, never called. */
ad_status fwd_custom(const struct op_args *a, ad_tensor **out);

/* ---- errors (error.c) --------------------------------------------------- */
ad_status ad_fail(ad_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Prefixes the current message with "op: " context, keeping the status. */
ad_status ad_fail_nomem(const char *what);
/* Formats a shape "(2, 3)" into buf (thread-local ring of buffers). */
const char *ad_fmt_shape(const int64_t *shape, int ndim);

/* ---- storage and tensors (tensor.c) ------------------------------------ */
typedef struct ad_storage {
    atomic_long refs;
    atomic_uint_least64_t version;
    size_t nbytes;
    void *data;
    bool inline_data; /* data lives right after this header */
    bool external;    /* memory not owned: external.c frees it (ad_external_free) */
    bool readonly;    /* external memory that must never be written */
    bool var_data;    /* a Var's own buffer (ad_var_from_tensor): memory_stats
                         counts what graphs keep of it apart (saved_var_bytes) */
    /* seqlock of in-place writes (odd while one is in progress): see
       ad_storage_write_begin */
    atomic_uint_least64_t seq;
} ad_storage;

/* Frees an external storage (its refcount reached zero): calls its release
   callback once, then frees the header (external.c). */
void ad_external_free(ad_storage *s);
/* ad_tensor_from_external with `op` naming the caller in error messages. */
ad_status ad_external_tensor_(const char *op, void *data, int dtype, const int64_t *shape,
                              const int64_t *strides, int ndim, int readonly,
                              ad_release_fn release, void *ctx, ad_tensor **out);

/* Every in-place write into a storage that a graph may have saved (Var.set,
 * optimizer updates) is bracketed by these two: begin waits for any other
 * writer, then makes seq odd; end bumps `version` (do not bump it yourself)
 * and makes seq even again.  Backward samples seq before a formula reads its
 * saved values and compares after (graph.c), so a concurrent write raises
 * AD_ERR_GRAPH instead of producing a torn gradient. */
void ad_storage_write_begin(ad_storage *s);
void ad_storage_write_end(ad_storage *s);

/* An on/off switch from the environment, read once into *cache (-1 before):
   on unless `name` is set to "0" (PYAUTODIFF_HUGEPAGES, PYAUTODIFF_WINOGRAD). */
bool ad_env_switch(atomic_int *cache, const char *name);

/* Whether two storages share memory: the same storage, or two headers over
 * one range of bytes (a Var re-imported through DLPack or from_numpy is an
 * external storage over the Var's own buffer).  In-place writers use it for
 * their alias checks; comparing headers alone misses the second case. */
static inline bool ad_storage_overlap(const ad_storage *a, const ad_storage *b) {
    if (a == b) return true;
    uintptr_t pa = (uintptr_t)a->data, pb = (uintptr_t)b->data;
    return a->nbytes && b->nbytes && pa < pb + b->nbytes && pb < pa + a->nbytes;
}

typedef struct ad_node ad_node;

struct ad_tensor {
    atomic_int refs;
    uint8_t dtype;
    uint8_t ndim;
    uint8_t is_variable;
    uint8_t pad_;
    uint64_t id;
    ad_storage *storage; /* reused as the free-list link while dying */
    int64_t offset;      /* elements */
    int64_t numel;
    ad_node *node;
    int64_t dims[];      /* shape[ndim] then strides[ndim] (elements) */
};

#define T_SHAPE(t) ((t)->dims)
#define T_STRIDES(t) ((t)->dims + (t)->ndim)

struct ad_node {
    int16_t op;
    uint8_t n_in;
    uint8_t n_iargs;
    uint8_t n_fargs;
    uint8_t tracked;      /* bit i: input i tracks (gets a gradient) */
    uint8_t saved;        /* bit i: input i's value is read by backward */
    uint8_t saves_output; /* backward reads the output */
    /* checkpointing("balanced") recorded it: its output is not kept; the
       nodes that read it hold a shell instead (ad_graph_input), and backward
       recomputes the value from in[] (all kept, versions taken) */
    uint8_t recompute;
    /* bit i: input i was being written in place (Var.set, an optimizer step
       on another thread) while the forward read it, so the output may mix old
       and new values: backward refuses the node (ad_read_window) */
    uint8_t torn;
    /* the tensors that carry this node: its output, and the shells and
       recomputed copies of that output (same id); the last one frees it */
    atomic_int refs;
    uint64_t out_version;
    const char *site;     /* anomaly mode: where the op was created */
    int64_t saved_bytes;  /* counted into memory_stats' saved_bytes (memory.c) */
    int64_t saved_var_bytes; /* ... and into its saved_var_bytes */
    /* tail: ad_tensor *in[n_in]; uint64_t version[n_in];
             int64_t iargs[n_iargs]; double fargs[n_fargs] */
    uint64_t tail[];
};

static inline ad_tensor **node_in(const ad_node *n) { return (ad_tensor **)n->tail; }
static inline uint64_t *node_versions(const ad_node *n) { return (uint64_t *)n->tail + n->n_in; }
static inline int64_t *node_iargs(const ad_node *n) { return (int64_t *)n->tail + 2 * n->n_in; }
static inline double *node_fargs(const ad_node *n) {
    return (double *)((int64_t *)n->tail + 2 * n->n_in + n->n_iargs);
}

/* double -> int64 truncating toward zero, NaN to 0 and out-of-range values
   saturated: a direct out-of-range cast is undefined behaviour in C.  Float
   to integer conversions and a double argument of an integer kernel go
   through it. */
static inline int64_t ad_sat_i64(double v) {
    if (v != v) return 0;
    if (v >= 9.2233720368547758e18) return INT64_MAX;
    if (v <= -9.2233720368547758e18) return INT64_MIN;
    return (int64_t)v;
}

size_t ad_dtype_size_(int dtype);
bool ad_dtype_is_float(int dtype);
bool ad_dtype_valid(int dtype);
const char *ad_dtype_name_(int dtype);

/* A new tensor with a fresh contiguous storage (uninitialised data). */
ad_status ad_tensor_empty(int dtype, const int64_t *shape, int ndim, ad_tensor **out);
/* A fresh contiguous tensor of like's shape and the given dtype; NULL when
   out of memory (no message set). */
ad_tensor *ad_tensor_new_like(int dtype, const ad_tensor *like);
ad_tensor *ad_tensor_new_0d(int dtype);
/* A new tensor viewing t's storage with the given layout (untracked). */
ad_status ad_tensor_view(const ad_tensor *t, const int64_t *shape, const int64_t *strides,
                         int ndim, int64_t offset, ad_tensor **out);
ad_status ad_tensor_zeros(int dtype, const int64_t *shape, int ndim, ad_tensor **out);
ad_tensor *ad_ref(const ad_tensor *t);
bool ad_is_contiguous(const ad_tensor *t);
static inline void *ad_ptr(const ad_tensor *t) {
    return (char *)t->storage->data + t->offset * (int64_t)ad_dtype_size_(t->dtype);
}
static inline bool ad_tracks(const ad_tensor *t) { return t->is_variable || t->node != NULL; }
/* AD_OK when v converts to dtype (integer dtypes: its truncation fits, not NaN
   or inf), else AD_ERR_VALUE naming op. */
ad_status ad_check_fill_value(const char *op, int dtype, double v);
/* Checks a shape (non-negative sizes, rank, element count and byte size that
   do not overflow) and returns its element count in *numel. */
ad_status ad_check_shape(const char *op, const int64_t *shape, int ndim, int dtype,
                         int64_t *numel);
const char *ad_tdesc(const ad_tensor *t); /* "float32 (2, 3)" */
/* The name of a node's op for messages: an ad.Function's class name for a
   custom node (custom.c). */
const char *ad_node_name(const ad_node *n);

/* ---- grad mode (graph.c) ------------------------------------------------ */
extern _Thread_local int ad_grad_enabled;
/* ---- checkpointing (graph.c) ----------------------------------------------
 * A shell is a tensor header with no storage: the id, layout and node of the
 * output of a recompute node, which is what the nodes reading that output
 * hold, so that the value itself dies with the caller's last reference.
 * Shells live only inside nodes: backward recomputes their values, and the
 * introspection calls hand out recomputed copies, never a shell. */
extern _Thread_local int ad_checkpoint_mode; /* AD_CHECKPOINT_* */
static inline bool ad_is_shell(const ad_tensor *t) { return t->storage == NULL; }
/* Whether record() marks a node of op with output dtype as recompute under
   the current mode: the registry's memory-bound ops (cost MEM) and the
   float32 SIMD elementwise ones (one vector pass: cheap to recompute). */
bool ad_recompute_op(int op, int dtype);
/* What a node being recorded holds for input x: a shell when x is the output
   of a recompute node, else a new reference to x.  NULL when out of memory. */
ad_tensor *ad_graph_input(const ad_tensor *x);
/* out[i] = a new reference to vals[i], or to its recomputed value when it is
   a shell (one recomputation per id over the call); NULL stays NULL.  On
   failure nothing is returned (all out[i] NULL). */
ad_status ad_materialize_all(ad_tensor *const *vals, int k, ad_tensor **out);
/* The version a node records for x (0 for a shell: its value is checked
   through the node that recomputes it). */
static inline uint64_t ad_graph_version(const ad_tensor *x) {
    return x->storage ? atomic_load(&x->storage->version) : 0;
}
/* The in-place write check of a forward read (the seqlock of
   ad_storage_write_begin, forward's side): ad_read_window_open samples each
   input storage's sequence number and version before the op reads them,
   ad_read_window_torn says after which inputs a write overlapped (bit i).
   The node records the versions sampled before, so a write that lands
   between the read and the recording is caught by backward's version check
   rather than taken for the value the forward read. */
typedef struct {
    uint64_t seq[AD_MAX_INPUTS];
    uint64_t ver[AD_MAX_INPUTS];
    int n; /* 0: not sampled (grad mode off); the node then takes versions now */
} ad_read_window;
void ad_read_window_open(ad_read_window *w, const ad_tensor *const *in, int n_in);
unsigned ad_read_window_torn(const ad_read_window *w, const ad_tensor *const *in);
extern _Thread_local int ad_anomaly_enabled;
/* The creation site for a node in anomaly mode (a new ad_malloc'd string or
   NULL). */
char *ad_anomaly_site(void);

/* ---- ops (ops.c) --------------------------------------------------------- */
typedef struct op_args {
    int op; /* the op kind: kernels and messages read it here */
    const ad_tensor *const *in;
    int n_in;
    const int64_t *iargs;
    int n_iargs;
    const double *fargs;
    int n_fargs;
} op_args;

typedef ad_status (*op_forward_fn)(const op_args *a, ad_tensor **out);
/* Computes the gradient of each tracked input (grads[i], new references; the
   caller passes NULLs and handles only the tracked ones). */
typedef ad_status (*op_backward_fn)(const ad_node *node, const ad_tensor *out,
                                    const ad_tensor *grad, ad_tensor **grads);

/* Work per element (ops.def's cost column): MEM ops are memory-bound
   (cheap to recompute, burn's MemoryBound); the others compute-bound. */
enum { COST_MEM = 1, COST_MATH, COST_SIMD, COST_COMPUTE };

typedef struct op_def {
    const char *name;
    int8_t n_in;        /* -1: variadic (>= 1) */
    int8_t n_iargs;     /* -1: variadic */
    int8_t n_fargs;
    uint8_t family;     /* AD_FAMILY_* */
    uint8_t cost;       /* COST_* */
    op_forward_fn forward;
    op_backward_fn backward; /* NULL: never recorded (untracked outputs) */
    /* needs[i]: mask of inputs whose value the gradient of input i reads
       (bit 7: the output).  needs is indexed by input, up to 4 inputs;
       variadic ops use needs[0] for every input. */
    uint8_t needs[4];
    const char *args; /* argument schema, "iargs: ...; fargs: ..." */
    const char *doc;  /* one line */
} op_def;

extern const op_def ad_ops[AD_OP__COUNT];

/* Runs an op: validates, computes, records a node when an input tracks and
   grad mode is on.  All internal code calls ops through this. */
ad_status ad_call(int op, const ad_tensor *const *in, int n_in, const int64_t *iargs,
                  int n_iargs, const double *fargs, int n_fargs, ad_tensor **out);
ad_status ad_call1(int op, const ad_tensor *x, ad_tensor **out);
ad_status ad_call2(int op, const ad_tensor *a, const ad_tensor *b, ad_tensor **out);
ad_status ad_calls(int op, const ad_tensor *x, double s, ad_tensor **out);

/* forward functions, by family (elementwise.c, reduce.c, shape.c, matmul.c) */
ad_status fwd_binary(const op_args *a, ad_tensor **out);
ad_status fwd_compare(const op_args *a, ad_tensor **out);
ad_status fwd_unary(const op_args *a, ad_tensor **out);
ad_status fwd_scalar(const op_args *a, ad_tensor **out);
ad_status fwd_reduce(const op_args *a, ad_tensor **out);
ad_status fwd_argreduce(const op_args *a, ad_tensor **out);
ad_status fwd_reshape(const op_args *a, ad_tensor **out);
ad_status fwd_permute(const op_args *a, ad_tensor **out);
ad_status fwd_slice(const op_args *a, ad_tensor **out);
ad_status fwd_broadcast(const op_args *a, ad_tensor **out);
ad_status fwd_contiguous(const op_args *a, ad_tensor **out);
ad_status fwd_to_dtype(const op_args *a, ad_tensor **out);
ad_status fwd_copy(const op_args *a, ad_tensor **out);
ad_status fwd_matmul(const op_args *a, ad_tensor **out);
ad_status fwd_linear(const op_args *a, ad_tensor **out);
/* linear's backward without create_graph (matmul.c): gz = g * act'(y) (g itself
   for no activation) and, when want_b, its sums over the leading dims in the
   same pass (*gb, (n,)); new references. */
ad_status ad_linear_gradz(int act, const ad_tensor *g, const ad_tensor *y, bool want_b,
                          ad_tensor **gz, ad_tensor **gb);
/* elementwise math, softmax family (elementwise.c, lanes.c) */
ad_status fwd_clamp(const op_args *a, ad_tensor **out);
ad_status fwd_where(const op_args *a, ad_tensor **out);
ad_status fwd_logsumexp(const op_args *a, ad_tensor **out);
ad_status fwd_softmax(const op_args *a, ad_tensor **out);
ad_status fwd_cumsum(const op_args *a, ad_tensor **out);

/* The elementwise quick paths (elementwise.c): a new tensor, or NULL when the
   operands are not contiguous, of one shape and dtype and small, or memory
   ran out (no message set). */
ad_tensor *ad_ew_quick_binary(int op, int out_dtype, const ad_tensor *a, const ad_tensor *b);
ad_tensor *ad_ew_quick_unary(int op, const ad_tensor *x, double s);
/* The reductions' (reduce.c): sum, mean, prod, max or min of every element of
   a small contiguous tensor (keepdim false) as a new 0-d tensor, or NULL (the
   same conditions, an op or dtype the ordinary call converts or rejects). */
ad_tensor *ad_reduce_quick_all(int op, const ad_tensor *x);

#define OP_NAME(op) (ad_ops[op].name)

/* Bit d set: the elementwise kernel table has dtype d for op (0 for ops that
   are not elementwise kernels: their forward checks dtypes itself). */
unsigned ad_ew_dtypes(int op);

/* Copies src (any layout) into the contiguous buffer dst of src's dtype. */
void ad_copy_strided(const ad_tensor *src, void *dst);
/* dst[...] = src[...]: same shape and dtype, any layouts, not overlapping
   (the elements are copied in any order). */
void ad_assign(ad_tensor *dst, const ad_tensor *src);
/* Converts src (any layout) into the contiguous buffer dst of dtype. */
void ad_convert_strided(const ad_tensor *src, void *dst, int dtype);

/* Broadcast shape of a and b into out (ndim *out_ndim); error names op. */
ad_status ad_broadcast_shapes(const char *op, const int64_t *a, int an, const int64_t *b,
                              int bn, int64_t *out, int *out_ndim);

/* Sum of g over the dims that broadcasting added to reach `shape`, reshaped
   to `shape`: one reduction pass whatever the number of dims. */
ad_status ad_sum_to_shape(const ad_tensor *g, const int64_t *shape, int ndim,
                          ad_tensor **out);

/* ---- id map (map.c): open addressing, uint64 id -> pointer -------------- */
typedef struct id_map {
    uint64_t *keys; /* 0 = empty */
    void **vals;
    int64_t cap, len;
} id_map;
ad_status map_init(id_map *m, int64_t cap_hint);
void map_free(id_map *m);
void **map_get(const id_map *m, uint64_t key);       /* NULL if absent */
ad_status map_put(id_map *m, uint64_t key, void *val); /* insert or replace */
void *map_del(id_map *m, uint64_t key);               /* returns old value or NULL */

/* ---- fork safety ---------------------------------------------------------
 * One pthread_atfork registration (alloc.c) takes every native lock before
 * fork() in a fixed order (in-place writes in flight, gradient stores, then
 * the thread pool, then the block caches: the order in which code paths nest
 * them) and releases or re-initialises them after, so a child never inherits
 * a lock held by a thread that does not exist there (nor a storage's seqlock
 * left odd by one: tensor.c). */
void ad_storage_writes_fork_prepare(void);
void ad_storage_writes_fork_parent(void);
void ad_storage_writes_fork_child(void);
void ad_gradstore_fork_prepare(void);
void ad_gradstore_fork_parent(void);
void ad_gradstore_fork_child(void);
void par_fork_prepare(void);
void par_fork_parent(void);
void par_fork_child(void);

#endif
