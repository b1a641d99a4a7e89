/*
 * pyautodiff.h - the public, stable C ABI of pyautodiff.
 *
 * Everything a caller sees is here: opaque handles, status codes, op kinds and
 * the functions that create tensors, run ops, record the graph and run
 * backward.  Rules:
 *   - every exported symbol starts with ad_;
 *   - handles are opaque; a handle returned to the caller is a new reference
 *     that the caller ends with ad_tensor_release / ad_gradstore_release
 *     (both accept NULL);
 *   - every fallible call returns ad_status and writes results through
 *     out-pointers; ad_last_error() is the message of the last failure on the
 *     calling thread;
 *   - enum values are append-only: never renumber, only add at the end;
 *   - NULL: every function checks its pointer arguments.  A fallible call
 *     given a NULL it needs returns AD_ERR_VALUE with a message naming the
 *     argument (and, when `out` is non-NULL, sets *out to NULL first); a
 *     getter given a NULL handle returns the "no tensor" value noted at it;
 *     a NULL array with a zero count is fine;
 *   - threads: tensors are immutable except through ad_var_set /
 *     ad_var_axpy, which backward detects (AD_ERR_GRAPH, never a torn
 *     gradient); a gradient store may be shared between threads.
 *
 * The region between the cffi markers is also read by bindings/build_cffi.py;
 * keep it free of preprocessor logic other than whole '#' lines.
 */
#ifndef PYAUTODIFF_H
#define PYAUTODIFF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define AD_API __attribute__((visibility("default")))
#else
#define AD_API
#endif

#define AD_ABI_MAJOR 1
#define AD_ABI_MINOR 12

/* cffi:begin */

typedef struct ad_tensor ad_tensor;
typedef struct ad_gradstore ad_gradstore;

typedef enum ad_status {
    AD_OK = 0,
    AD_ERR_SHAPE = 1,     /* incompatible or invalid shapes            */
    AD_ERR_DTYPE = 2,     /* dtype not supported by the op, mismatch   */
    AD_ERR_INDEX = 3,     /* dim or index out of range                 */
    AD_ERR_VALUE = 4,     /* bad argument value                        */
    AD_ERR_GRAPH = 5,     /* graph state: backward, set, versions      */
    AD_ERR_NOMEM = 6,     /* allocation failed                         */
    AD_ERR_INTERNAL = 7   /* a bug in pyautodiff                       */
} ad_status;

typedef enum ad_dtype {
    AD_FLOAT32 = 0,
    AD_FLOAT64 = 1,
    AD_INT64 = 2,
    AD_INT32 = 3,
    AD_UINT8 = 4,
    AD_BOOL = 5
} ad_dtype;

/* Op kinds.  Append-only: a value once shipped never changes meaning. */
typedef enum ad_op {
    AD_OP_NONE = 0,
    /* elementwise binary (two tensors, numpy broadcasting) */
    AD_OP_ADD = 1,
    AD_OP_SUB = 2,
    AD_OP_MUL = 3,
    AD_OP_DIV = 4,
    /* elementwise unary */
    AD_OP_NEG = 5,
    AD_OP_EXP = 6,
    AD_OP_LOG = 7,
    AD_OP_SQR = 8,
    AD_OP_SQRT = 9,
    AD_OP_RELU = 10,
    AD_OP_TANH = 11,
    /* tensor op scalar: fargs = {scalar}; ad_scalar_op's `reversed` puts the
       scalar on the left (1 - t, 2 / t) */
    AD_OP_ADD_SCALAR = 12,
    AD_OP_MUL_SCALAR = 13,
    AD_OP_RSUB_SCALAR = 14,   /* s - t */
    AD_OP_RDIV_SCALAR = 15,   /* s / t */
    AD_OP_POW_SCALAR = 16,    /* t ** s */
    /* reductions: iargs = {keepdim, dims...} (no dims: all); argmax/argmin
       take iargs = {keepdim} (flattened) or {keepdim, dim} */
    AD_OP_SUM = 17,
    AD_OP_MEAN = 18,
    AD_OP_MAX = 19,
    AD_OP_MIN = 20,
    AD_OP_ARGMAX = 21,        /* untracked, int64 */
    AD_OP_ARGMIN = 22,        /* untracked, int64 */
    /* comparisons: untracked, bool */
    AD_OP_EQ = 23,
    AD_OP_NE = 24,
    AD_OP_LT = 25,
    AD_OP_LE = 26,
    AD_OP_GT = 27,
    AD_OP_GE = 28,
    /* layout / views */
    AD_OP_RESHAPE = 29,       /* iargs = the new shape (one -1 is inferred) */
    AD_OP_PERMUTE = 30,       /* iargs = a permutation of the dims; transpose, t() are permutes */
    AD_OP_SLICE = 31,         /* iargs = {dim, start, step, len}: the len elements start,
                                 start + step, ... along dim (step >= 1); narrow and basic indexing */
    AD_OP_BROADCAST = 32,     /* iargs = the target shape; squeeze/unsqueeze are reshapes */
    AD_OP_CONTIGUOUS = 33,
    AD_OP_TO_DTYPE = 34,      /* iargs = {dtype}; float->float differentiable, to integer untracked */
    AD_OP_MATMUL = 35,
    AD_OP_POW_RSCALAR = 36,   /* s ** t */
    AD_OP_COPY = 37,          /* detached copy (Var.from_tensor, Var(data)) */
    AD_OP_DIV_SCALAR = 38,    /* t / s */
    /* 40..79: elementwise math, reductions, softmax family */
    AD_OP_ABS = 40,
    AD_OP_RECIP = 41,
    AD_OP_SIN = 42,
    AD_OP_COS = 43,
    AD_OP_SIGMOID = 44,
    AD_OP_GELU = 45,          /* tanh approximation */
    AD_OP_GELU_ERF = 46,
    AD_OP_ERF = 47,
    AD_OP_SILU = 48,
    AD_OP_SOFTPLUS = 49,
    AD_OP_ELU = 50,           /* fargs = {alpha} */
    AD_OP_LOG1P = 51,
    AD_OP_EXPM1 = 52,
    AD_OP_FLOOR = 53,         /* floor/ceil/round/sign: zero gradient */
    AD_OP_CEIL = 54,
    AD_OP_ROUND = 55,         /* half to even */
    AD_OP_SIGN = 56,
    AD_OP_CLAMP = 57,         /* fargs = {min, max}; -inf/inf for none */
    AD_OP_MAXIMUM = 58,       /* binary; ties split the gradient */
    AD_OP_MINIMUM = 59,
    AD_OP_POW = 60,           /* a ** b, both tensors */
    AD_OP_WHERE = 61,         /* inputs (cond bool, a, b), broadcast */
    AD_OP_PROD = 62,          /* reduction: iargs = {keepdim, dims...} */
    /* lanes along one dim.  Here and below, a dim is in [-nd, nd) with nd =
       max(ndim of input 0, 1) (a 0-d tensor has one dim of size 1);
       AD_ERR_INDEX otherwise */
    AD_OP_LOGSUMEXP = 63,     /* iargs = {dim, keepdim} */
    AD_OP_SOFTMAX = 64,       /* iargs = {dim} */
    AD_OP_LOG_SOFTMAX = 65,   /* iargs = {dim} */
    AD_OP_CUMSUM = 66,        /* iargs = {dim, reverse}: reverse != 0 sums from the end */
    /* 80..139: indexing, joining, neural-network ops */
    AD_OP_CAT = 80,           /* 1..8 inputs of one dtype and rank >= 1, equal but on dim;
                                 iargs = {dim, size_0, ..., size_{n-1}}: each input's size
                                 along dim (a wrong count or size: AD_ERR_VALUE), or {dim}
                                 alone: the call takes the sizes from the inputs */
    AD_OP_PAD = 81,           /* iargs = {before, after} pairs, the first pair for the last dim,
                                 at most ndim pairs (else AD_ERR_VALUE); a negative amount
                                 crops (below size 0: AD_ERR_SHAPE); fargs = {value}, which
                                 must fit the dtype */
    AD_OP_INDEX_SELECT = 82,  /* (x, idx int 1-d); iargs = {dim} */
    AD_OP_INDEX_ADD = 83,     /* (x, idx, src): x with src[.., i, ..] added at idx[i]; iargs = {dim} */
    AD_OP_GATHER = 84,        /* (x, idx): out[..i..] = x[..idx[..i..]..]; iargs = {dim} */
    AD_OP_SCATTER_ADD = 85,   /* (x, idx, src): x with src added at idx along dim; iargs = {dim} */
    AD_OP_MSE_LOSS = 86,      /* (x, y); iargs = {reduction: 0 none, 1 mean, 2 sum} */
    AD_OP_CROSS_ENTROPY = 87, /* (logits (N, C), target int (N,)); iargs = {reduction} */
    AD_OP_NLL_LOSS = 88,      /* (logp (N, C), target int (N,)); iargs = {reduction} */
    AD_OP_LAYER_NORM = 89,    /* (x[, weight[, bias]]); iargs = {k normalized trailing dims}; fargs = {eps} */
    AD_OP_DROPOUT = 90,       /* iargs = {seed}; fargs = {p} */
    AD_OP_CONV2D = 91,        /* (x NCHW, w (O, C/g, kh, kw)); iargs = {sh, sw, ph, pw, dh, dw, groups} */
    AD_OP_CONV_TRANSPOSE2D = 92, /* (x, w (Cin, Cout/g, kh, kw)); iargs = {sh, sw, ph, pw, dh, dw, groups, oph, opw} */
    AD_OP_CONV2D_WEIGHT_GRAD = 93, /* (x, gy); iargs = {kh, kw, sh, sw, ph, pw, dh, dw, groups} */
    AD_OP_MAX_POOL2D = 94,    /* x NCHW; iargs = {kh, kw, sh, sw, ph, pw, dh, dw} */
    AD_OP_MAX_POOL2D_BACKWARD = 95, /* (x, gy); iargs as max_pool2d */
    AD_OP_MAX_POOL2D_GATHER = 96, /* (x, t x-shaped); iargs as max_pool2d: t read at each window's first maximum of x */
    AD_OP_LINEAR = 120,       /* (x (..., in), w (out, in)[, b (out,)]): x @ w^T + b */
    AD_OP_LINEAR_ACT = 121,   /* the same with iargs = {act: ad_linear_act}, applied to the sum */
    AD_OP_CUSTOM = 150,       /* a Python ad.Function: recorded by ad_custom_record only */
    AD_OP__COUNT = 160        /* table size; grows when a range fills */
} ad_op;

/* linear_act's activations, applied in the product's epilogue */
typedef enum ad_linear_act {
    AD_LINEAR_NONE = 0,
    AD_LINEAR_RELU = 1,
    AD_LINEAR_TANH = 2,
    AD_LINEAR_SIGMOID = 3
} ad_linear_act;

/* What an op is, from the op registry (native/src/ops.def): how Python
   builds its methods, and what a tool (checkpointing, a tracer) reads. */
typedef enum ad_op_family {
    AD_FAMILY_OTHER = 0,
    AD_FAMILY_UNARY = 1,      /* elementwise, one tensor, no arguments */
    AD_FAMILY_SCALAR = 2,     /* elementwise, one tensor and float arguments */
    AD_FAMILY_BINARY = 3,     /* elementwise, two broadcast tensors */
    AD_FAMILY_COMPARE = 4,    /* elementwise, two broadcast tensors, bool out */
    AD_FAMILY_REDUCE = 5,     /* iargs = {keepdim, dims...} */
    AD_FAMILY_LAYOUT = 6,     /* views, copies and conversions */
    AD_FAMILY_LANES = 7,      /* along one dim: softmax, logsumexp, cumsum */
    AD_FAMILY_INDEX = 8,      /* indexing and joining */
    AD_FAMILY_NN = 9          /* losses, normalization, convolution, pooling */
} ad_op_family;

typedef struct ad_op_info_t {
    const char *name;         /* "exp" */
    const char *args;         /* argument schema: "iargs: dim, keepdim; fargs: eps", "" */
    const char *doc;          /* one line */
    int n_inputs;             /* -1: variadic */
    int n_iargs;              /* -1: variadic */
    int n_fargs;
    int family;               /* ad_op_family */
    int differentiable;       /* 0: the output never tracks */
    int memory_bound;         /* 1: cheap to recompute (burn's MemoryBound) */
    unsigned dtypes;          /* bit d: elementwise kernel for dtype d; 0: not elementwise */
} ad_op_info_t;

/* ---- library ---------------------------------------------------------- */
/* Message of the last failed call on this thread ("" if none). */
AD_API const char *ad_last_error(void);
/* major * 1000 + minor; a caller refuses a library of another major. */
AD_API int ad_abi_version(void);
/* Name of an op kind ("add", "matmul", ...), or NULL for an unknown value. */
AD_API const char *ad_op_name(int op);
/* Fills *out for an op kind; AD_ERR_VALUE for an unknown one.  The strings
   are static. */
AD_API ad_status ad_op_info(int op, ad_op_info_t *out);
/* Name of a dtype ("float32", ...), or NULL. */
AD_API const char *ad_dtype_name(int dtype);
AD_API size_t ad_dtype_size(int dtype);

/* ---- tensors: creation and release ------------------------------------ */
/* A new contiguous tensor of `shape`, copying `nbytes` of `data` (row-major,
   dtype elements; nbytes must equal numel * dtype size).  data NULL gives
   zeros.  shape may be NULL only when ndim is 0 (also for full and random);
   out NULL: AD_ERR_VALUE. */
AD_API ad_status ad_tensor_from_data(const void *data, size_t nbytes, int dtype,
                                     const int64_t *shape, int ndim, ad_tensor **out);
/* A tensor filled with one value. */
AD_API ad_status ad_tensor_full(double value, int dtype, const int64_t *shape, int ndim,
                                ad_tensor **out);
/* start + i * step for i < n. */
AD_API ad_status ad_tensor_arange(double start, double step, int64_t n, int dtype,
                                  ad_tensor **out);
/* Pseudo-random normal (kind 0) or uniform [0,1) (kind 1) values from seed. */
AD_API ad_status ad_tensor_random(int kind, uint64_t seed, int dtype, const int64_t *shape,
                                  int ndim, ad_tensor **out);
/* Adds a reference (for a caller that stores the handle twice). */
AD_API void ad_tensor_retain(ad_tensor *t);
/* Ends a reference; frees iteratively when it was the last. NULL is fine. */
AD_API void ad_tensor_release(ad_tensor *t);

/* ---- tensors: properties ----------------------------------------------- */
/* On a NULL handle: ndim, dtype and numel return -1; id, version, the flags
   and same_storage return 0; op AD_OP_NONE; data NULL; shape and strides
   write nothing (nor with a NULL destination); site returns "". */
AD_API int ad_tensor_ndim(const ad_tensor *t);
AD_API int ad_tensor_dtype(const ad_tensor *t);
AD_API int64_t ad_tensor_numel(const ad_tensor *t);
/* Copies ndim sizes / strides (elements) into the caller's array. */
AD_API void ad_tensor_shape(const ad_tensor *t, int64_t *shape);
AD_API void ad_tensor_strides(const ad_tensor *t, int64_t *strides);
AD_API uint64_t ad_tensor_id(const ad_tensor *t);
AD_API int ad_tensor_is_variable(const ad_tensor *t);
AD_API int ad_tensor_track_op(const ad_tensor *t);
AD_API int ad_tensor_is_contiguous(const ad_tensor *t);
/* The recorded op kind (AD_OP_NONE when none). */
AD_API int ad_tensor_op(const ad_tensor *t);
/* Address of element 0 of the view (inside the storage), and the storage's
   version counter.  The memory stays valid while the tensor lives. */
AD_API void *ad_tensor_data(const ad_tensor *t);
AD_API uint64_t ad_tensor_version(const ad_tensor *t);
/* 1 if a and b view the same storage. */
AD_API int ad_tensor_same_storage(const ad_tensor *a, const ad_tensor *b);
/* Copies the elements in row-major order into dst (nbytes must be numel *
   dtype size; dst may be NULL only when that is 0). */
AD_API ad_status ad_tensor_copy_to(const ad_tensor *t, void *dst, size_t nbytes);

/* ---- variables and graph ------------------------------------------------ */
/* A new Var holding a copy of t (float dtypes only).  On a Var returns a new
   reference to that same Var. */
AD_API ad_status ad_var_from_tensor(const ad_tensor *t, ad_tensor **out);
/* Writes src into the Var in place and bumps its storage version.  Safe to
   call while another thread runs backward over a graph that saved the Var:
   the write is bracketed by a sequence lock that backward checks after
   reading a saved value, so that backward fails with AD_ERR_GRAPH naming
   the tensor instead of using a half-written value.  Concurrent writers to
   one Var take turns. */
AD_API ad_status ad_var_set(ad_tensor *var, const ad_tensor *src);
/* var += alpha * x in place (an optimizer step without temporaries); x must
   have the Var's shape (or broadcast to it) and dtype.  Bumps the version.
   An x that views the Var's storage is copied before the write. */
AD_API ad_status ad_var_axpy(ad_tensor *var, double alpha, const ad_tensor *x);

/* ---- optimizer updates ---------------------------------------------------
   One fused in-place step of one parameter, with PyTorch's single-tensor
   formulas (torch.optim.SGD / Adam / AdamW / RMSprop, maximize=False) in
   their order of operations.  var: a contiguous float32/float64 Var.  grad:
   its gradient (same shape and dtype; any layout; if it views the storage of
   a tensor being written it is copied first).  State buffers: contiguous,
   non-variable tensors of the Var's shape and dtype, created as zeros by the
   caller, that only these calls write; each needs its own storage.  NULL for
   an optional buffer means the option is off.  The caller keeps the step
   count and validates hyper-parameters (only non-finite ones are refused
   here, AD_ERR_VALUE).  Bumps the version of the Var and of every buffer
   written.  Shape/dtype mismatches give AD_ERR_SHAPE/AD_ERR_DTYPE naming the
   argument. */
/* SGD.  momentum_buf is required when momentum != 0 (ignored otherwise);
   first_step != 0 initialises it to the (decayed) gradient, as torch does
   when the buffer is None. */
AD_API ad_status ad_optim_sgd(ad_tensor *var, const ad_tensor *grad, ad_tensor *momentum_buf,
                              double lr, double momentum, double dampening,
                              double weight_decay, int nesterov, int first_step);
/* Adam (decoupled == 0) or AdamW (decoupled != 0: the weight is multiplied
   by 1 - lr * weight_decay).  step: this update's count, from 1.
   max_exp_avg_sq non-NULL turns amsgrad on. */
AD_API ad_status ad_optim_adam(ad_tensor *var, const ad_tensor *grad, ad_tensor *exp_avg,
                               ad_tensor *exp_avg_sq, ad_tensor *max_exp_avg_sq, int64_t step,
                               double lr, double beta1, double beta2, double eps,
                               double weight_decay, int decoupled);
/* RMSprop.  momentum_buf is required when momentum > 0 (ignored otherwise);
   grad_avg non-NULL turns centered on. */
AD_API ad_status ad_optim_rmsprop(ad_tensor *var, const ad_tensor *grad, ad_tensor *square_avg,
                                  ad_tensor *momentum_buf, ad_tensor *grad_avg, double lr,
                                  double alpha, double eps, double weight_decay,
                                  double momentum);
/* A new untracked tensor sharing t's storage (t itself when untracked). */
AD_API ad_status ad_tensor_detach(const ad_tensor *t, ad_tensor **out);
/* The tracked nodes reachable from t that reach a variable, root first, each
   node before its inputs.  *out is an array of new references owned by the
   caller: release each, then ad_free(*out). */
AD_API ad_status ad_sorted_nodes(const ad_tensor *t, ad_tensor ***out, int64_t *n);
AD_API void ad_free(void *p);

/* ---- ops --------------------------------------------------------------- */
/* The generic entry: op over inputs with integer and float arguments (see
   the op enum for each op's arguments). */
AD_API ad_status ad_op_call(int op, const ad_tensor *const *inputs, int n_inputs,
                            const int64_t *iargs, int n_iargs,
                            const double *fargs, int n_fargs, ad_tensor **out);
/* Fast paths for the common shapes of call. */
AD_API ad_status ad_unary(int op, const ad_tensor *x, ad_tensor **out);
AD_API ad_status ad_binary(int op, const ad_tensor *a, const ad_tensor *b, ad_tensor **out);
AD_API ad_status ad_scalar_op(int op, const ad_tensor *x, double s, ad_tensor **out);

/* ---- backward and the gradient store ------------------------------------ */
/* Backpropagates from root.  grad may be NULL for a root with one element.
   retain: tensors whose gradients are kept although they are not variables
   (NULL entries are skipped; retain may be NULL when n_retain is 0). */
AD_API ad_status ad_backward(const ad_tensor *root, const ad_tensor *grad,
                             const ad_tensor *const *retain, int n_retain,
                             ad_gradstore **out);
/* ad_backward with flags: AD_BACKWARD_CREATE_GRAPH records the backward
   pass itself (grad mode on for the formulas, seeds and sums), so the
   gradients can be differentiated again. */
enum { AD_BACKWARD_CREATE_GRAPH = 1 };
AD_API ad_status ad_backward_ex(const ad_tensor *root, const ad_tensor *grad,
                                const ad_tensor *const *retain, int n_retain, int flags,
                                ad_gradstore **out);
/* ad_backward_ex that calls ready(ctx, t, grad) once for every tensor whose
   gradient the store will hold (each Var, each retained tensor), on the
   calling thread, as soon as that gradient is final: all of t's
   contributions are summed and the store's entry will be exactly grad.  The
   walk goes from the root towards the leaves, so the last layers' gradients
   come first.  t and grad are borrowed for the call (ad_tensor_retain to keep
   them).  The callback runs with grad mode off (on under
   AD_BACKWARD_CREATE_GRAPH) and must not run a backward of its own over this
   graph.  A status other than AD_OK stops backward, which returns it (with a
   message naming t) and no store.  ready NULL: ad_backward_ex. (ABI 1.4) */
typedef ad_status (*ad_grad_ready_fn)(void *ctx, const ad_tensor *t, const ad_tensor *grad);
AD_API ad_status ad_backward_hooked(const ad_tensor *root, const ad_tensor *grad,
                                    const ad_tensor *const *retain, int n_retain, int flags,
                                    ad_grad_ready_fn ready, void *ctx, ad_gradstore **out);
AD_API ad_status ad_gradstore_new(ad_gradstore **out);
AD_API void ad_gradstore_release(ad_gradstore *g);
/* *out = new reference to the gradient of t, or NULL when absent. */
AD_API ad_status ad_gradstore_get(const ad_gradstore *g, const ad_tensor *t, ad_tensor **out);
/* Sets the gradient of t (shape must match t's). */
AD_API ad_status ad_gradstore_insert(ad_gradstore *g, const ad_tensor *t, const ad_tensor *grad);
/* Removes t's gradient; *out (may be NULL) receives it as a new reference. */
AD_API ad_status ad_gradstore_remove(ad_gradstore *g, const ad_tensor *t, ad_tensor **out);
AD_API int64_t ad_gradstore_len(const ad_gradstore *g);
/* Adds every gradient of src into dst (summing where both have one). */
AD_API ad_status ad_gradstore_extend(ad_gradstore *dst, const ad_gradstore *src);
/* The i-th entry: the id of the tensor it belongs to and a new reference to
   its gradient.  The store keys by id and never keeps the tensor alive. */
AD_API ad_status ad_gradstore_item(const ad_gradstore *g, int64_t i, uint64_t *id,
                                   ad_tensor **grad);
/* Replaces the gradient of the tensor with this id (as ad_gradstore_item
   reports it; the tensor itself may be gone) by grad, which must have the
   old gradient's shape and dtype.  A missing id is AD_ERR_INDEX. */
AD_API ad_status ad_gradstore_replace_id(ad_gradstore *g, uint64_t id, const ad_tensor *grad);
/* Every entry at once, from one consistent snapshot: *ids (and *grads when
   grads is not NULL) become arrays of *n ids and new references, owned by
   the caller (release each gradient, then ad_free both arrays).  Every
   gradstore function may be called from several threads on one store (each
   holds the store's lock); ad_gradstore_len returns -1 for a NULL store.
   (ABI 1.2) */
AD_API ad_status ad_gradstore_items(const ad_gradstore *g, uint64_t **ids, ad_tensor ***grads,
                                    int64_t *n);

/* ---- grad mode (thread-local) -------------------------------------------- */
AD_API int ad_is_grad_enabled(void);
/* Returns the previous mode. */
AD_API int ad_set_grad_enabled(int enabled);

/* ---- anomaly mode (thread-local) ------------------------------------------ */
/* While on, every recorded node stores the site (e.g. "file.py:12") that the
   registered callback returns at the moment the op is created, and backward
   fails with AD_ERR_GRAPH at the first op whose backward produced a NaN or an
   Inf, naming the op, its shapes and that site.  Off: nothing is recorded. */
typedef const char *(*ad_site_fn)(void);
AD_API void ad_set_site_callback(ad_site_fn fn);
AD_API int ad_set_anomaly_enabled(int enabled); /* returns the previous mode */
AD_API int ad_is_anomaly_enabled(void);
/* The creation site recorded for t's op ("" when none). */
AD_API const char *ad_tensor_site(const ad_tensor *t);

/* ---- threads ------------------------------------------------------------ */
/* The thread count of parallel loops: by default the CPUs in this process's
   affinity mask; PYAUTODIFF_NUM_THREADS or this call may ask for more (at
   most 256), which works but prints one warning per process on stderr.  A
   worker that cannot be started (memory, thread limits) leaves the loops on
   fewer threads.  After fork() the child starts its own workers on its first
   parallel loop; every native lock is fork-safe. */
AD_API ad_status ad_set_num_threads(int n);
AD_API int ad_get_num_threads(void);
/* Name of the GEMM micro-kernel in use. */
AD_API const char *ad_gemm_kernel(void);
/* The SIMD level the reductions run at ("avx2" or "portable"): the CPU's
   best, capped by PYAUTODIFF_ISA / PYAUTODIFF_PORTABLE. (ABI 1.2) */
AD_API const char *ad_reduce_kernel(void);
/* The level of the compiler-vectorised elementwise kernels (binary, unary,
   tensor-scalar): "avx512", "avx2" or "portable".  "avx2" also at the
   AVX-512 level on a CPU that runs 512-bit ops as two 256-bit halves (AMD
   Zen 4), where those memory-bound loops are faster in 256-bit vectors;
   PYAUTODIFF_VEC_BITS=256|512 overrides that choice.  Same bits either way.
   (ABI 1.9) */
AD_API const char *ad_ew_kernel(void);

/* ---- external memory, DLPack, file mappings (ABI 1.2) -------------------- */
/* A release callback: called exactly once, with its ctx, when the last
   native reference to a storage over external memory dies (possibly on
   another thread than the one that created it). */
typedef void (*ad_release_fn)(void *ctx);
/* A tensor over memory the library does not own.  data is the address of
   element 0; strides are in elements (NULL: row-major contiguous) and may be
   zero or negative; the memory spanned must be aligned to the dtype size.
   readonly 1 says the memory must never be written: the library never writes
   any external memory anyway (only Vars are written, and a Var always owns
   its storage).  On success the storage owns ctx and calls release(ctx) (if
   release is not NULL) when its last reference dies; on failure release is
   not called and the caller keeps ownership.  External bytes are not counted
   by ad_live_bytes (the library did not allocate them); the tensors are
   counted by ad_live_tensors. */
AD_API ad_status ad_tensor_from_external(void *data, int dtype, const int64_t *shape,
                                         const int64_t *strides, int ndim, int readonly,
                                         ad_release_fn release, void *ctx, ad_tensor **out);
/* 1 if t views external memory marked read-only. */
AD_API int ad_tensor_is_readonly(const ad_tensor *t);
/* 1 if t views memory the library does not own (external or mapped). */
AD_API int ad_tensor_is_external(const ad_tensor *t);
/* DLPack export: *out receives a new DLManagedTensorVersioned (versioned 1,
   DLPack 1.0 layout, READ_ONLY flag set: tensors are immutable) or a legacy
   DLManagedTensor (versioned 0).  It holds a native reference to t's storage
   (through an untracked view) until its deleter runs.  copied 1 says t is a
   copy made for the consumer: flagged IS_COPIED and writable instead. */
AD_API ad_status ad_tensor_to_dlpack(const ad_tensor *t, int versioned, int copied,
                                     void **out);
/* Calls managed->deleter(managed) (a capsule destructor's job); NULL is fine. */
AD_API void ad_dlpack_delete(void *managed, int versioned);
/* DLPack import: a tensor viewing the producer's CPU memory.  On success the
   new storage owns managed and calls its deleter exactly once, when its last
   reference dies; on failure the caller still owns managed. */
AD_API ad_status ad_tensor_from_dlpack(void *managed, int versioned, ad_tensor **out);

/* A private, copy-on-write mapping of a whole open file (fd may be closed
   afterwards).  Refcounted: each tensor made from it holds a reference. */
typedef struct ad_mapping ad_mapping;
AD_API ad_status ad_mapping_open(int fd, ad_mapping **out);
AD_API void ad_mapping_release(ad_mapping *m);
/* The mapped bytes (NULL for an empty file) and their count. */
AD_API const void *ad_mapping_data(const ad_mapping *m);
AD_API int64_t ad_mapping_size(const ad_mapping *m);
/* A read-only contiguous tensor over bytes [offset, offset + numel * dtype
   size) of m, keeping m alive.  Bytes not aligned to the dtype size are
   copied into an owned storage instead. */
AD_API ad_status ad_tensor_from_mapping(ad_mapping *m, int64_t offset, int dtype,
                                        const int64_t *shape, int ndim, ad_tensor **out);

/* ---- diagnostics (tests) ---------------------------------------------- */
/* Live tensor handles and live storage bytes in this process. */
AD_API int64_t ad_live_tensors(void);
AD_API int64_t ad_live_bytes(void);


/* ---- memory report (ABI 1.3) ----------------------------------------------
   live_bytes: tensor data alive now; peak_bytes: the most live_bytes has been
   since the process started or the last ad_reset_peak_memory; saved_bytes:
   what recorded graphs keep for backward: for every live node, the byte size
   of each distinct storage among the values its backward reads (its saved
   inputs, its output when the formula reads it, or the tensors a custom op
   saved), counted once per node however many of those values view it.  A
   node recorded under AD_CHECKPOINT_BALANCED for a memory-bound op (ABI 1.4)
   counts all its inputs and not its output, and a value it did not keep
   counts nothing in the nodes that read it.  From ABI 1.7 a Var's own buffer
   (the Var or a view of it) is not in saved_bytes but in
   ad_saved_var_bytes(), by the same rule: parameters are alive with or
   without a graph, so saved_bytes is what the graphs hold beyond them. */
typedef struct ad_memory_stats_t {
    int64_t live_bytes;
    int64_t peak_bytes;
    int64_t saved_bytes;
} ad_memory_stats_t;
AD_API void ad_memory_stats(ad_memory_stats_t *out);
/* Sets peak_bytes to the current live_bytes. */
AD_API void ad_reset_peak_memory(void);
/* The Var buffers that live graphs read in backward, counted like
   saved_bytes (ABI 1.7). */
AD_API int64_t ad_saved_var_bytes(void);

/* ---- graph introspection (ABI 1.3) --------------------------------------- */
/* The inputs of t's recorded node: *n = its input count (0 for a tensor with
   no node); parents[i] (i < min(*n, cap)) = a new reference to input i, or
   NULL where the node keeps no reference (an untracked input whose value
   backward does not read).  *tracked: bit i when input i gets a gradient;
   *saved: bit i when backward reads input i's value, bit 7 when it reads the
   output (for a node of 8 inputs bit 7 is ambiguous: ask ad_tensor_saved).
   parents may be NULL when cap is 0. */
AD_API ad_status ad_tensor_parents(const ad_tensor *t, ad_tensor **parents, int cap, int *n,
                                   unsigned *tracked, unsigned *saved);
/* What the backward of t's node reads: *inputs bit i for input i's value,
   *output 1 for t's own value (0 and 0 for a tensor with no node).  As
   ad_tensor_parents' *saved, but unambiguous for a node of 8 inputs.
   (ABI 1.6) */
AD_API ad_status ad_tensor_saved(const ad_tensor *t, unsigned *inputs, int *output);
/* The name of t's op: the registry's, or a custom op's own name; NULL when
   t has no node.  Valid while t lives. */
AD_API const char *ad_tensor_op_name(const ad_tensor *t);

/* ---- custom ops (ABI 1.3) ------------------------------------------------
   A custom op's forward runs in the caller; ad_custom_record then records one
   node (op AD_OP_CUSTOM) whose backward calls `backward` with the caller's
   ctx: given grad (the output's gradient) and out (the output), it stores a
   new reference (or NULL: no gradient) in grads[i] for each of the n inputs
   and returns AD_OK, or a failure status (the library then fails backward
   naming the op).  `release` is called once with ctx when the node is freed.
   *out: a new tensor viewing `output` (a fresh handle, so that the node never
   attaches to a tensor the caller holds), tracked when grad mode is on, the
   output is a float tensor and an input tracks.  saved: tensors the backward
   will read (version-checked like a built-in op's, counted in saved_bytes).
   On AD_OK with ad_tensor_op(*out) == AD_OP_CUSTOM the node owns ctx;
   otherwise ctx stays the caller's and release is never called. */
typedef ad_status (*ad_custom_backward_fn)(void *ctx, const ad_tensor *grad,
                                           const ad_tensor *out, ad_tensor **grads, int n);
typedef void (*ad_custom_release_fn)(void *ctx);
AD_API ad_status ad_custom_record(const char *name, const ad_tensor *const *inputs, int n_inputs,
                                  const ad_tensor *output, const ad_tensor *const *saved,
                                  int n_saved, ad_custom_backward_fn backward,
                                  ad_custom_release_fn release, void *ctx, ad_tensor **out);

/* ---- checkpointing (ABI 1.4) ---------------------------------------------
   The strategy applied to the ops this thread records (thread-local, as grad
   mode).  AD_CHECKPOINT_NONE: a node keeps the values its backward reads.
   AD_CHECKPOINT_BALANCED (burn's balanced checkpointer): a node of a
   memory-bound op (ad_op_info's memory_bound, and the SIMD elementwise ops on
   float32: one pass over the data) keeps all its inputs and marks its output
   as not kept: the nodes that read that output keep its id, layout and node
   only, so the value dies with the caller's last reference.  Backward
   recomputes such a value from the op's inputs when a formula reads it
   (recursively; once per backward pass), after checking that none of those
   inputs was written in place since it was recorded (AD_ERR_GRAPH), so
   gradients are bit-identical to AD_CHECKPOINT_NONE.  Compute-bound ops
   (matmul, convolution, softmax family, libm-heavy elementwise ops) keep
   theirs.  ad_set_checkpoint_strategy: AD_ERR_VALUE for an unknown strategy;
   *prev (may be NULL) gets the previous one. */
typedef enum ad_checkpoint_strategy {
    AD_CHECKPOINT_NONE = 0,
    AD_CHECKPOINT_BALANCED = 1
} ad_checkpoint_strategy;
AD_API ad_status ad_set_checkpoint_strategy(int strategy, int *prev);
AD_API int ad_get_checkpoint_strategy(void);

/* ---- quick calls (ABI 1.5) -------------------------------------------------
   For a binding whose per-call cost matters at small sizes.  Not fallible in
   the usual sense: they return a new reference, or NULL when they decline,
   and then the caller makes the ordinary call (ad_binary, ad_unary,
   ad_scalar_op, ad_tensor_release), which does the work or reports the
   error.  They take only elementwise ops over contiguous operands of one
   shape and dtype and a bounded size (at most 131072 elements, some tens of
   microseconds of work, fewer elements for costlier ops), give the ordinary
   call's result to the bit (recorded the same way), and never block on
   another thread or call back into the caller, so a binding may keep its
   interpreter lock across them.  ad_tensor_release_quick returns 1 when it
   ended the reference, 0 (changing nothing) when ad_tensor_release must:
   the last reference of a tensor over external memory, or of one whose graph
   node would take more than its own plain inputs down with it.
   ad_reduce_quick (ABI 1.8) is ad_op_call's AD_OP_SUM, MEAN, PROD, MAX or MIN
   over every dim with keepdim 0 (iargs {0}), for a contiguous operand of
   fewer than 65536 elements whose dtype the reduction keeps (float32,
   float64, int64; MAX and MIN any dtype but bool); 0-d operands are declined. */
AD_API ad_tensor *ad_binary_quick(int op, const ad_tensor *a, const ad_tensor *b);
AD_API ad_tensor *ad_unary_quick(int op, const ad_tensor *x);
AD_API ad_tensor *ad_scalar_quick(int op, const ad_tensor *x, double s);
AD_API ad_tensor *ad_reduce_quick(int op, const ad_tensor *x);
AD_API int ad_tensor_release_quick(ad_tensor *t);
/* ad_view_quick (ABI 1.10) is ad_op_call's AD_OP_PERMUTE, AD_OP_SLICE or
   AD_OP_RESHAPE (of a contiguous x, or one that only drops or adds dims of
   size 1: always a view), and from ABI 1.11 AD_OP_BROADCAST, with those
   iargs: a view, whatever x's size. */
AD_API ad_tensor *ad_view_quick(int op, const ad_tensor *x, const int64_t *iargs, int n_iargs);

/* ---- forward reads racing in-place writes (ABI 1.12) ----------------------
   A built-in op samples its inputs' in-place write state before it reads
   them; a node whose read overlapped a write (Var.set or an optimizer step on
   another thread) makes backward fail with AD_ERR_GRAPH, and a write after
   the read is caught by the version check.  A custom op's forward runs in
   the caller, so the caller takes that sample:
   ad_read_window_take fills window[0 .. 2 n_inputs) for the inputs, before
   the forward reads them; ad_custom_record_window is ad_custom_record whose
   node is checked against that window (window NULL: ad_custom_record).
   ad_graph_read_window fills window[0 .. 2 n_vars) for vars as the nodes of
   root's graph read them (the versions recorded; a var read at two versions,
   or by a node whose read overlapped a write, is marked as overlapped), for
   a caller that ran those ops to compute a custom op's output (a
   checkpointed block); a var no node reads gets its state now. */
AD_API ad_status ad_read_window_take(const ad_tensor *const *inputs, int n_inputs,
                                     uint64_t *window);
AD_API ad_status ad_graph_read_window(const ad_tensor *root, const ad_tensor *const *vars,
                                      int n_vars, uint64_t *window);
AD_API ad_status ad_custom_record_window(const char *name, const ad_tensor *const *inputs,
                                         int n_inputs, const ad_tensor *output,
                                         const ad_tensor *const *saved, int n_saved,
                                         ad_custom_backward_fn backward,
                                         ad_custom_release_fn release, void *ctx,
                                         const uint64_t *window, ad_tensor **out);

/* cffi:end */

/* ---- testing hooks: NOT part of the stable ABI ---------------------------
 * Declared only for a caller that defines AD_TESTING before including this
 * header (as zstd's ZSTD_STATIC_LINKING_ONLY): the test suite, the fuzzers.
 * They may change or disappear in any release; the symbols stay exported so
 * that the library a user installs is the one the tests ran. */
#ifdef AD_TESTING
/* cffi-testing:begin */
/* Makes the n-th native allocation from now fail (n >= 1); 0 disarms. */
AD_API void ad_testing_fail_alloc_after(int64_t n);
/* Fills every new small or header block with `byte` (0-255) until called
   with -1, so that a field left uninitialised shows. */
AD_API void ad_testing_poison_allocs(int byte);
/* Forces a GEMM micro-kernel level ("avx512", "avx2", "portable"; "auto"
   restores run-time dispatch). AD_ERR_VALUE if the CPU lacks it. */
AD_API ad_status ad_gemm_set_kernel(const char *name);
/* Makes the GEMM's per-thread packing buffers unobtainable (bit 0: A's
   block, bit 1: B's panel) until called with 0, as when out of memory: the
   products then take their unpacked fallback. */
AD_API void ad_testing_gemm_packbuf_fail(int mask);
/* cffi-testing:end */
#endif

#ifdef __cplusplus
}
#endif
#endif /* PYAUTODIFF_H */
