/* optim.c - in-place updates of Vars for optimizers.
 *
 * ad_var_axpy (var += alpha * x) and one fused call per optimizer (SGD, Adam /
 * AdamW, RMSprop) that reads the gradient once and updates the weights and
 * the state buffers in a single pass, with no temporary the size of the
 * weights.  The per-element arithmetic transcribes PyTorch's single-tensor
 * implementation (torch/optim/{sgd,adam,rmsprop}.py) operation by operation,
 * in the same order, so float64 trajectories match it to the last bits.
 *
 * Aliasing: the rule of ad_var_set.  The read-only input (the update or the
 * gradient) may view the storage of a tensor being written (a detached view
 * of the Var, say); it is then copied first, so it is never read while being
 * written.  Written tensors (the Var and the state buffers) must each have
 * their own storage: two of them sharing one is refused (AD_ERR_VALUE). */
#include <math.h>
#include <string.h>

#include "parallel.h"
#include "strided.h"

/* tools/build.py compiles this file with -fno-math-errno: sqrt's errno is
   its only side effect, and without it the loops vectorise (GCC ignores the
   flag in a pragma or attribute). */

/* Every in-place write is bracketed exactly as ad_var_set's is: the seqlock
   makes a backward running concurrently fail instead of reading a torn value,
   and the end bumps the version, so a graph that saved the old value refuses
   to use it.  A write section is exclusive, so the storages are entered in
   address order: two calls that name the same buffers in swapped roles (a
   state buffer of one parameter passed as another's parameter) cannot each
   hold one and wait for the other. */
#define MAX_BUFS 3

typedef struct {
    ad_storage *s[MAX_BUFS + 1];
    int n;
} write_set;

static void begin_writes(write_set *w, ad_tensor *var, ad_tensor *const *bufs, int nbufs) {
    w->n = 0;
    for (int i = -1; i < nbufs; i++) {
        ad_tensor *t = i < 0 ? var : bufs[i];
        if (!t) continue;
        int j = w->n++;
        for (; j > 0 && (uintptr_t)w->s[j - 1] > (uintptr_t)t->storage; j--) w->s[j] = w->s[j - 1];
        w->s[j] = t->storage;
    }
    for (int i = 0; i < w->n; i++) ad_storage_write_begin(w->s[i]);
}

static void end_writes(const write_set *w) {
    for (int i = w->n - 1; i >= 0; i--) ad_storage_write_end(w->s[i]);
}

/* A contiguous copy of t (a new reference in *out). */
static ad_status contiguous_copy(const ad_tensor *t, ad_tensor **out) {
    ad_status st = ad_tensor_empty(t->dtype, T_SHAPE(t), t->ndim, out);
    if (st) return st;
    ad_copy_strided(t, ad_ptr(*out));
    return AD_OK;
}

/* ---- axpy --------------------------------------------------------------------- */
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
    if (!var || !x)
        return ad_fail(AD_ERR_VALUE, "axpy: %s is NULL", !var ? "var" : "x");
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
    ad_tensor *copy = NULL;
    if (ad_storage_overlap(x->storage, var->storage)) { /* x views the Var: read it first */
        ad_status st = contiguous_copy(x, &copy);
        if (st) return st;
        x = copy;
    }
    broadcast_strides(x, T_SHAPE(var), var->ndim, xs);
    const int64_t *strides[2] = {T_STRIDES(var), xs};
    size_t es[2] = {ad_dtype_size_(var->dtype), ad_dtype_size_(var->dtype)};
    nditer it;
    nditer_init(&it, 2, var->ndim, T_SHAPE(var), strides, es);
    char *base[2] = {ad_ptr(var), ad_ptr(x)};
    axpy_ctx c = {alpha, var->dtype};
    write_set w;
    begin_writes(&w, var, NULL, 0);
    nditer_run(&it, base, axpy_inner, &c);
    end_writes(&w);
    ad_tensor_release(copy);
    return AD_OK;
}

/* ---- argument checks shared by the optimizers ------------------------------------ */
static ad_status check_param(const char *op, const ad_tensor *var) {
    if (!var) return ad_fail(AD_ERR_VALUE, "%s: var is NULL", op);
    if (!var->is_variable)
        return ad_fail(AD_ERR_GRAPH, "%s: the parameter (id %llu, %s) is not a variable", op,
                       (unsigned long long)var->id, ad_tdesc(var));
    if (!ad_dtype_is_float(var->dtype))
        return ad_fail(AD_ERR_DTYPE, "%s: parameter %s is not float32 or float64", op,
                       ad_tdesc(var));
    if (!ad_is_contiguous(var))
        return ad_fail(AD_ERR_VALUE, "%s: parameter %s is not contiguous", op, ad_tdesc(var));
    return AD_OK;
}

/* grad or a state buffer `name` must have the parameter's shape and dtype. */
static ad_status check_like(const char *op, const char *name, const ad_tensor *var,
                            const ad_tensor *t) {
    if (!t) return ad_fail(AD_ERR_VALUE, "%s: %s is NULL", op, name);
    if (t->ndim != var->ndim ||
        memcmp(T_SHAPE(t), T_SHAPE(var), (size_t)var->ndim * sizeof(int64_t)) != 0)
        return ad_fail(AD_ERR_SHAPE, "%s: %s %s does not have the shape of parameter %s", op,
                       name, ad_tdesc(t), ad_tdesc(var));
    if (t->dtype != var->dtype)
        return ad_fail(AD_ERR_DTYPE, "%s: %s %s does not have the dtype of parameter %s", op,
                       name, ad_tdesc(t), ad_tdesc(var));
    return AD_OK;
}

/* Checks grad and the written buffers (NULL entries are unused ones), and
   sets *g to the gradient to read: grad itself, or a contiguous copy (a new
   reference in *copy) when it is strided or views a written tensor. */
static ad_status check_update(const char *op, ad_tensor *var, const ad_tensor *grad,
                              ad_tensor *const *bufs, const char *const *names, int nbufs,
                              const ad_tensor **g, ad_tensor **copy) {
    *copy = NULL;
    ad_status st = check_param(op, var);
    if (!st) st = check_like(op, "grad", var, grad);
    if (st) return st;
    bool alias = ad_storage_overlap(grad->storage, var->storage);
    for (int i = 0; i < nbufs; i++) {
        const ad_tensor *b = bufs[i];
        if (!b) continue;
        if ((st = check_like(op, names[i], var, b))) return st;
        if (b->is_variable)
            return ad_fail(AD_ERR_VALUE, "%s: %s (id %llu) is a variable, not a state buffer", op,
                           names[i], (unsigned long long)b->id);
        if (!ad_is_contiguous(b))
            return ad_fail(AD_ERR_VALUE, "%s: %s %s is not contiguous", op, names[i],
                           ad_tdesc(b));
        if (ad_storage_overlap(b->storage, var->storage))
            return ad_fail(AD_ERR_VALUE, "%s: %s shares its storage with the parameter", op,
                           names[i]);
        if (b->storage->readonly) /* e.g. a state tensor straight from ad.load's mapping */
            return ad_fail(AD_ERR_VALUE, "%s: %s %s is read-only memory", op, names[i],
                           ad_tdesc(b));
        for (int j = 0; j < i; j++)
            if (bufs[j] && ad_storage_overlap(bufs[j]->storage, b->storage))
                return ad_fail(AD_ERR_VALUE, "%s: %s and %s share one storage", op, names[j],
                               names[i]);
        alias = alias || ad_storage_overlap(grad->storage, b->storage);
    }
    *g = grad;
    if (alias || !ad_is_contiguous(grad)) {
        if ((st = contiguous_copy(grad, copy))) return st;
        *g = *copy;
    }
    return AD_OK;
}

/* ---- fused kernels -------------------------------------------------------------- */
/* One job: contiguous arrays of n elements; state pointers NULL when unused.
   Every scalar is rounded to the element type once, as PyTorch passes a
   Python float to a kernel of the tensor's dtype. */
typedef struct {
    int dtype;
    int64_t n;
    char *p, *b0, *b1, *b2;
    const char *g;
    double s[8];
    int flags;
} opt_job;

/* Parallel blocks: big enough to amortise a wake-up, small enough to share
   a busy machine's cores.  The result does not depend on the split. */
#define OPT_BLOCK ((int64_t)1 << 14)
#define OPT_PAR_MIN ((int64_t)1 << 16)

/* torch.maximum: NaN if either is NaN. */
#define MAXNAN(a, b) ((a) != (a) ? (a) : (b) != (b) ? (b) : (a) > (b) ? (a) : (b))

/* The kernels are compiled for AVX2 too and picked at load time (as in
   reduce.c); no FMA is enabled, so every ISA gives the same bits. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define OPT_TARGET __attribute__((target_clones("avx2", "default")))
#else
#define OPT_TARGET
#endif
#define INLINE static inline __attribute__((always_inline))

enum { SGD_NESTEROV = 1, SGD_FIRST = 2, ADAM_DECOUPLED = 1 };

/* torch's lerp(s, e, w) = w < 0.5 ? s + w * (e - s) : e - (e - s) * (1 - w),
   written as base + coeff * (e - s) (coeff = w - 1 in the second form: the
   same bits, since rounding is symmetric) so that the branch, which depends
   on w only, leaves the loop. */
#define LERP(near_s, coeff, s, e) (((near_s) ? (s) : (e)) + (coeff) * ((e) - (s)))

/* The kernels are written once, in the template header optim_dtype.h, and
   instantiated here per float dtype. */
#define T float
#define S(name) name##_f32
#define SQRT sqrtf
#include "optim_dtype.h"

#define T double
#define S(name) name##_f64
#define SQRT sqrt
#include "optim_dtype.h"

typedef void (*opt_kernel)(const opt_job *j, int64_t lo, int64_t hi);

typedef struct {
    const opt_job *job;
    opt_kernel fn;
} opt_run_ctx;

static void opt_block(void *ctx, int64_t k) {
    const opt_run_ctx *c = ctx;
    int64_t lo = k * OPT_BLOCK, hi = lo + OPT_BLOCK;
    c->fn(c->job, lo, hi < c->job->n ? hi : c->job->n);
}

static void opt_run(const opt_job *j, opt_kernel f32, opt_kernel f64) {
    opt_kernel fn = j->dtype == AD_FLOAT32 ? f32 : f64;
    if (j->n < OPT_PAR_MIN) {
        fn(j, 0, j->n);
        return;
    }
    opt_run_ctx c = {j, fn};
    par_blocks((j->n + OPT_BLOCK - 1) / OPT_BLOCK, opt_block, &c);
}

/* The checked update j between the write brackets of var and bufs; afterwards the Var and
   every buffer written get a new version, and the gradient copy check_update made (if any)
   is released. */
static ad_status opt_apply(const opt_job *j, opt_kernel f32, opt_kernel f64, ad_tensor *var,
                           ad_tensor *const *bufs, int nbufs, ad_tensor *copy) {
    write_set w;
    begin_writes(&w, var, bufs, nbufs);
    opt_run(j, f32, f64);
    ad_tensor_release(copy);
    end_writes(&w);
    return AD_OK;
}

/* The first non-finite hyperparameter, named, as an error. */
static ad_status check_finite(const char *op, const char *const *names, const double *vals,
                              int n) {
    for (int i = 0; i < n; i++)
        if (!isfinite(vals[i]))
            return ad_fail(AD_ERR_VALUE, "%s: %s is %g (not finite)", op, names[i], vals[i]);
    return AD_OK;
}

AD_API ad_status ad_optim_sgd(ad_tensor *var, const ad_tensor *grad, ad_tensor *momentum_buf,
                              double lr, double momentum, double dampening, double weight_decay,
                              int nesterov, int first_step) {
    const char *op = "optim_sgd";
    ad_status st;
    static const char *const hyper[4] = {"lr", "momentum", "dampening", "weight_decay"};
    if ((st = check_finite(op, hyper, (double[4]){lr, momentum, dampening, weight_decay}, 4)))
        return st;
    if (momentum != 0 && !momentum_buf)
        return ad_fail(AD_ERR_VALUE, "%s: momentum %g needs a momentum_buf", op, momentum);
    ad_tensor *bufs[1] = {momentum != 0 ? momentum_buf : NULL};
    static const char *const names[1] = {"momentum_buf"};
    const ad_tensor *g;
    ad_tensor *copy;
    if ((st = check_update(op, var, grad, bufs, names, 1, &g, &copy))) return st;
    opt_job j = {var->dtype, ad_tensor_numel(var), ad_ptr(var), bufs[0] ? ad_ptr(bufs[0]) : NULL,
                 NULL, NULL, ad_ptr(g), {lr, momentum, 1 - dampening, weight_decay},
                 (nesterov ? SGD_NESTEROV : 0) | (first_step ? SGD_FIRST : 0)};
    return opt_apply(&j, sgd_f32, sgd_f64, var, bufs, 1, copy);
}

AD_API ad_status ad_optim_adam(ad_tensor *var, const ad_tensor *grad, ad_tensor *exp_avg,
                               ad_tensor *exp_avg_sq, ad_tensor *max_exp_avg_sq, int64_t step,
                               double lr, double beta1, double beta2, double eps,
                               double weight_decay, int decoupled) {
    const char *op = decoupled ? "optim_adamw" : "optim_adam";
    ad_status st;
    static const char *const hyper[5] = {"lr", "beta1", "beta2", "eps", "weight_decay"};
    if ((st = check_finite(op, hyper, (double[5]){lr, beta1, beta2, eps, weight_decay}, 5)))
        return st;
    if (step < 1) return ad_fail(AD_ERR_VALUE, "%s: step %lld is not >= 1", op, (long long)step);
    ad_tensor *bufs[3] = {exp_avg, exp_avg_sq, max_exp_avg_sq};
    static const char *const names[3] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
    if (!exp_avg || !exp_avg_sq)
        return ad_fail(AD_ERR_VALUE, "%s: %s is NULL", op, !exp_avg ? names[0] : names[1]);
    const ad_tensor *g;
    ad_tensor *copy;
    if ((st = check_update(op, var, grad, bufs, names, 3, &g, &copy))) return st;
    /* The scalars as torch computes them in Python (float64): step is a
       float there, and the square root is `** 0.5`. */
    double bc1 = 1 - pow(beta1, (double)step), bc2 = 1 - pow(beta2, (double)step);
    double step_size = lr / bc1;
    opt_job j = {var->dtype,
                 ad_tensor_numel(var),
                 ad_ptr(var),
                 ad_ptr(exp_avg),
                 ad_ptr(exp_avg_sq),
                 max_exp_avg_sq ? ad_ptr(max_exp_avg_sq) : NULL,
                 ad_ptr(g),
                 {-step_size, 1 - beta1, beta2, 1 - beta2, pow(bc2, 0.5), eps, weight_decay,
                  decoupled ? 1 - lr * weight_decay : 1.0},
                 decoupled ? ADAM_DECOUPLED : 0};
    return opt_apply(&j, adam_f32, adam_f64, var, bufs, 3, copy);
}

AD_API ad_status ad_optim_rmsprop(ad_tensor *var, const ad_tensor *grad, ad_tensor *square_avg,
                                  ad_tensor *momentum_buf, ad_tensor *grad_avg, double lr,
                                  double alpha, double eps, double weight_decay,
                                  double momentum) {
    const char *op = "optim_rmsprop";
    ad_status st;
    static const char *const hyper[5] = {"lr", "alpha", "eps", "weight_decay", "momentum"};
    if ((st = check_finite(op, hyper, (double[5]){lr, alpha, eps, weight_decay, momentum}, 5)))
        return st;
    if (!square_avg) return ad_fail(AD_ERR_VALUE, "%s: square_avg is NULL", op);
    if (momentum > 0 && !momentum_buf)
        return ad_fail(AD_ERR_VALUE, "%s: momentum %g needs a momentum_buf", op, momentum);
    ad_tensor *bufs[3] = {square_avg, momentum > 0 ? momentum_buf : NULL, grad_avg};
    static const char *const names[3] = {"square_avg", "momentum_buf", "grad_avg"};
    const ad_tensor *g;
    ad_tensor *copy;
    if ((st = check_update(op, var, grad, bufs, names, 3, &g, &copy))) return st;
    opt_job j = {var->dtype,
                 ad_tensor_numel(var),
                 ad_ptr(var),
                 ad_ptr(square_avg),
                 bufs[1] ? ad_ptr(bufs[1]) : NULL,
                 grad_avg ? ad_ptr(grad_avg) : NULL,
                 ad_ptr(g),
                 {lr, alpha, 1 - alpha, eps, weight_decay, momentum},
                 0};
    return opt_apply(&j, rmsprop_f32, rmsprop_f64, var, bufs, 3, copy);
}
