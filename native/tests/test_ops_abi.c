/* test_ops_abi.c - every op kind called through the generic entry point,
 * ad_op_call, with its arguments laid out exactly as pyautodiff.h documents
 * them, and the result's dtype and shape checked.  An op the registry knows
 * (ad_op_info) without a row here fails the test: adding an op means adding
 * its row.  Plain C, no Python. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "pyautodiff.h"

static int failures;

#define CHECK(cond, ...)                                                    \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                 \
            fprintf(stderr, __VA_ARGS__);                                   \
            fprintf(stderr, "\n");                                          \
            failures++;                                                     \
        }                                                                   \
    } while (0)

/* the input pool */
enum { X, Y, Y3, W32, COND, IDX1, IDX2, SRC, TGT, NW, NB, IMG, KER, IMGO, POOLG, N_POOL };

#define L(...) {__VA_ARGS__}
typedef struct row {
    int op;
    int in[3], n_in;
    int64_t iargs[10];
    int n_iargs;
    double fargs[2];
    int n_fargs;
    int dtype; /* expected */
    int ndim;
    int64_t shape[4];
} row;

#define F64 AD_FLOAT64
#define U(op) {op, L(X), 1, L(0), 0, L(0), 0, F64, 2, L(2, 3)}
#define B(op, dt) {op, L(X, Y), 2, L(0), 0, L(0), 0, dt, 2, L(2, 3)}
#define S(op, v) {op, L(X), 1, L(0), 0, L(v), 1, F64, 2, L(2, 3)}
#define R(op, dt) {op, L(X), 1, L(0, 1), 2, L(0), 0, dt, 1, L(2)}

static const row rows[] = {
    B(AD_OP_ADD, F64), B(AD_OP_SUB, F64), B(AD_OP_MUL, F64), B(AD_OP_DIV, F64),
    B(AD_OP_MAXIMUM, F64), B(AD_OP_MINIMUM, F64), B(AD_OP_POW, F64),
    B(AD_OP_EQ, AD_BOOL), B(AD_OP_NE, AD_BOOL), B(AD_OP_LT, AD_BOOL), B(AD_OP_LE, AD_BOOL),
    B(AD_OP_GT, AD_BOOL), B(AD_OP_GE, AD_BOOL),
    U(AD_OP_NEG), U(AD_OP_EXP), U(AD_OP_LOG), U(AD_OP_SQR), U(AD_OP_SQRT), U(AD_OP_RELU),
    U(AD_OP_TANH), U(AD_OP_ABS), U(AD_OP_RECIP), U(AD_OP_SIN), U(AD_OP_COS), U(AD_OP_SIGMOID),
    U(AD_OP_GELU), U(AD_OP_GELU_ERF), U(AD_OP_ERF), U(AD_OP_SILU), U(AD_OP_SOFTPLUS),
    U(AD_OP_LOG1P), U(AD_OP_EXPM1), U(AD_OP_FLOOR), U(AD_OP_CEIL), U(AD_OP_ROUND),
    U(AD_OP_SIGN), U(AD_OP_CONTIGUOUS), U(AD_OP_COPY),
    S(AD_OP_ADD_SCALAR, 2), S(AD_OP_MUL_SCALAR, 2), S(AD_OP_RSUB_SCALAR, 2),
    S(AD_OP_RDIV_SCALAR, 2), S(AD_OP_POW_SCALAR, 2), S(AD_OP_POW_RSCALAR, 2),
    S(AD_OP_DIV_SCALAR, 2), S(AD_OP_ELU, 1),
    {AD_OP_CLAMP, L(X), 1, L(0), 0, L(-1, 1), 2, F64, 2, L(2, 3)},
    /* reductions {keepdim, dims...} */
    R(AD_OP_SUM, F64), R(AD_OP_MEAN, F64), R(AD_OP_MAX, F64), R(AD_OP_MIN, F64),
    R(AD_OP_PROD, F64), R(AD_OP_ARGMAX, AD_INT64), R(AD_OP_ARGMIN, AD_INT64),
    {AD_OP_SUM, L(X), 1, L(1, 0), 2, L(0), 0, F64, 2, L(1, 3)},
    {AD_OP_SUM, L(X), 1, L(0), 1, L(0), 0, F64, 0, L(0)},
    {AD_OP_ARGMAX, L(X), 1, L(0), 1, L(0), 0, AD_INT64, 0, L(0)},
    /* layout */
    {AD_OP_RESHAPE, L(X), 1, L(3, -1), 2, L(0), 0, F64, 2, L(3, 2)},
    {AD_OP_PERMUTE, L(X), 1, L(1, 0), 2, L(0), 0, F64, 2, L(3, 2)},
    {AD_OP_SLICE, L(X), 1, L(1, 0, 2, 2), 4, L(0), 0, F64, 2, L(2, 2)},
    {AD_OP_BROADCAST, L(X), 1, L(4, 2, 3), 3, L(0), 0, F64, 3, L(4, 2, 3)},
    {AD_OP_TO_DTYPE, L(X), 1, L(AD_FLOAT32), 1, L(0), 0, AD_FLOAT32, 2, L(2, 3)},
    {AD_OP_MATMUL, L(X, W32), 2, L(0), 0, L(0), 0, F64, 2, L(2, 2)},
    /* lanes */
    {AD_OP_LOGSUMEXP, L(X), 1, L(1, 0), 2, L(0), 0, F64, 1, L(2)},
    {AD_OP_SOFTMAX, L(X), 1, L(1), 1, L(0), 0, F64, 2, L(2, 3)},
    {AD_OP_LOG_SOFTMAX, L(X), 1, L(-1), 1, L(0), 0, F64, 2, L(2, 3)},
    {AD_OP_CUMSUM, L(X), 1, L(1, 1), 2, L(0), 0, F64, 2, L(2, 3)},
    {AD_OP_WHERE, L(COND, X, Y), 3, L(0), 0, L(0), 0, F64, 2, L(2, 3)},
    /* indexing and joining */
    {AD_OP_CAT, L(X, X), 2, L(0, 2, 2), 3, L(0), 0, F64, 2, L(4, 3)},
    {AD_OP_PAD, L(X), 1, L(1, 2), 2, L(0), 1, F64, 2, L(2, 6)},
    {AD_OP_PAD, L(X), 1, L(0, 0, 1, 1), 4, L(7), 1, F64, 2, L(4, 3)},
    {AD_OP_INDEX_SELECT, L(X, IDX1), 2, L(1), 1, L(0), 0, F64, 2, L(2, 2)},
    {AD_OP_INDEX_ADD, L(X, IDX1, SRC), 3, L(1), 1, L(0), 0, F64, 2, L(2, 3)},
    {AD_OP_GATHER, L(X, IDX2), 2, L(1), 1, L(0), 0, F64, 2, L(2, 2)},
    {AD_OP_SCATTER_ADD, L(X, IDX2, SRC), 3, L(1), 1, L(0), 0, F64, 2, L(2, 3)},
    /* neural-network ops */
    {AD_OP_MSE_LOSS, L(X, Y3), 2, L(1), 1, L(0), 0, F64, 0, L(0)},
    {AD_OP_MSE_LOSS, L(X, Y3), 2, L(0), 1, L(0), 0, F64, 2, L(2, 3)},
    {AD_OP_CROSS_ENTROPY, L(X, TGT), 2, L(2), 1, L(0), 0, F64, 0, L(0)},
    {AD_OP_NLL_LOSS, L(X, TGT), 2, L(0), 1, L(0), 0, F64, 1, L(2)},
    {AD_OP_LAYER_NORM, L(X, NW, NB), 3, L(1), 1, L(1e-5), 1, F64, 2, L(2, 3)},
    {AD_OP_LAYER_NORM, L(X), 1, L(2), 1, L(1e-5), 1, F64, 2, L(2, 3)},
    {AD_OP_DROPOUT, L(X), 1, L(42), 1, L(0.5), 1, F64, 2, L(2, 3)},
    {AD_OP_CONV2D, L(IMG, KER), 2, L(1, 1, 0, 0, 1, 1, 1), 7, L(0), 0, F64, 4, L(1, 4, 3, 3)},
    {AD_OP_CONV2D, L(IMG, KER), 2, L(2, 1, 1, 0, 1, 2, 1), 7, L(0), 0, F64, 4, L(1, 4, 3, 1)},
    {AD_OP_CONV_TRANSPOSE2D, L(IMGO, KER), 2, L(1, 1, 0, 0, 1, 1, 1, 0, 0), 9, L(0), 0, F64, 4,
     L(1, 2, 5, 5)},
    {AD_OP_CONV_TRANSPOSE2D, L(IMGO, KER), 2, L(2, 2, 1, 1, 1, 1, 1, 1, 0), 9, L(0), 0, F64, 4,
     L(1, 2, 6, 5)},
    {AD_OP_CONV2D_WEIGHT_GRAD, L(IMG, IMGO), 2, L(3, 3, 1, 1, 0, 0, 1, 1, 1), 9, L(0), 0, F64,
     4, L(4, 2, 3, 3)},
    {AD_OP_MAX_POOL2D, L(IMG), 1, L(2, 2, 2, 2, 0, 0, 1, 1), 8, L(0), 0, F64, 4, L(1, 2, 2, 2)},
    {AD_OP_MAX_POOL2D, L(IMG), 1, L(3, 3, 1, 2, 1, 1, 2, 1), 8, L(0), 0, F64, 4, L(1, 2, 3, 3)},
    {AD_OP_MAX_POOL2D_BACKWARD, L(IMG, POOLG), 2, L(2, 2, 2, 2, 0, 0, 1, 1), 8, L(0), 0, F64, 4,
     L(1, 2, 5, 5)},
    {AD_OP_MAX_POOL2D_GATHER, L(IMG, IMG), 2, L(2, 2, 2, 2, 0, 0, 1, 1), 8, L(0), 0, F64, 4,
     L(1, 2, 2, 2)},
    {AD_OP_LINEAR, L(X, Y3), 2, L(0), 0, L(0), 0, F64, 2, L(2, 2)},
    {AD_OP_LINEAR_ACT, L(X, Y3), 2, L(1), 1, L(0), 0, F64, 2, L(2, 2)},
};

/* Layouts the header rules out, each with the status it documents. */
typedef struct bad_row {
    int op;
    int in[3], n_in;
    int64_t iargs[6];
    int n_iargs;
    double farg;
    int n_fargs;
    ad_status st;
} bad_row;

static const bad_row bad_rows[] = {
    {AD_OP_CAT, L(X, X), 2, L(0, 2), 2, 0, 0, AD_ERR_VALUE},         /* a size missing */
    {AD_OP_CAT, L(X, X), 2, L(0, 2, 3), 3, 0, 0, AD_ERR_VALUE},      /* a wrong size */
    {AD_OP_CAT, L(X, X), 2, L(2, 3, 3), 3, 0, 0, AD_ERR_INDEX},      /* dim out of range */
    {AD_OP_PAD, L(X), 1, L(1), 1, 0, 1, AD_ERR_VALUE},               /* half a pair */
    {AD_OP_PAD, L(X), 1, L(1, 1, 1, 1, 1, 1), 6, 0, 1, AD_ERR_VALUE}, /* more pairs than dims */
    {AD_OP_PAD, L(X), 1, L(-2, -2), 2, 0, 1, AD_ERR_SHAPE},          /* cropped below 0 */
    {AD_OP_PAD, L(IDX1), 1, L(1, 1), 2, 1e300, 1, AD_ERR_VALUE},     /* beyond int64 */
    {AD_OP_LOGSUMEXP, L(X), 1, L(2, 0), 2, 0, 0, AD_ERR_INDEX},
    {AD_OP_SOFTMAX, L(X), 1, L(-3), 1, 0, 0, AD_ERR_INDEX},
    {AD_OP_LOG_SOFTMAX, L(X), 1, L(2), 1, 0, 0, AD_ERR_INDEX},
    {AD_OP_CUMSUM, L(X), 1, L(5, 0), 2, 0, 0, AD_ERR_INDEX},
    {AD_OP_INDEX_SELECT, L(X, IDX1), 2, L(2), 1, 0, 0, AD_ERR_INDEX},
    {AD_OP_INDEX_ADD, L(X, IDX1, SRC), 3, L(-3), 1, 0, 0, AD_ERR_INDEX},
    {AD_OP_GATHER, L(X, IDX2), 2, L(2), 1, 0, 0, AD_ERR_INDEX},
    {AD_OP_SCATTER_ADD, L(X, IDX2, SRC), 3, L(-3), 1, 0, 0, AD_ERR_INDEX},
};

static ad_tensor *make(int dtype, const void *data, size_t nbytes, int ndim, int64_t a, int64_t b,
                       int64_t c, int64_t d) {
    const int64_t shape[4] = {a, b, c, d};
    ad_tensor *t = NULL;
    if (data) CHECK(ad_tensor_from_data(data, nbytes, dtype, shape, ndim, &t) == AD_OK, "from_data");
    else CHECK(ad_tensor_random(1, (uint64_t)(a * 7 + b), dtype, shape, ndim, &t) == AD_OK, "random");
    return t;
}

int main(void) {
    int64_t live0 = ad_live_tensors();
    const double xv[6] = {0.5, 1.5, 0.25, 2.0, 0.75, 1.25}, yv[3] = {1.0, 0.5, 2.0};
    const uint8_t cv[6] = {1, 0, 1, 0, 0, 1};
    const int64_t i1[2] = {2, 0}, i2[4] = {0, 2, 1, 1}, tg[2] = {2, 0};
    ad_tensor *pool[N_POOL];
    pool[X] = make(F64, xv, sizeof xv, 2, 2, 3, 0, 0);
    pool[Y] = make(F64, yv, sizeof yv, 1, 3, 0, 0, 0);
    pool[Y3] = make(F64, NULL, 0, 2, 2, 3, 0, 0);
    pool[W32] = make(F64, NULL, 0, 2, 3, 2, 0, 0);
    pool[COND] = make(AD_BOOL, cv, sizeof cv, 2, 2, 3, 0, 0);
    pool[IDX1] = make(AD_INT64, i1, sizeof i1, 1, 2, 0, 0, 0);
    pool[IDX2] = make(AD_INT64, i2, sizeof i2, 2, 2, 2, 0, 0);
    pool[SRC] = make(F64, NULL, 0, 2, 2, 2, 0, 0);
    pool[TGT] = make(AD_INT64, tg, sizeof tg, 1, 2, 0, 0, 0);
    pool[NW] = make(F64, NULL, 0, 1, 3, 0, 0, 0);
    pool[NB] = make(F64, NULL, 0, 1, 3, 0, 0, 0);
    pool[IMG] = make(F64, NULL, 0, 4, 1, 2, 5, 5);
    pool[KER] = make(F64, NULL, 0, 4, 4, 2, 3, 3);
    pool[IMGO] = make(F64, NULL, 0, 4, 1, 4, 3, 3);
    pool[POOLG] = make(F64, NULL, 0, 4, 1, 2, 2, 2);

    int covered[AD_OP__COUNT] = {0};
    for (size_t r = 0; r < sizeof rows / sizeof *rows; r++) {
        const row *w = &rows[r];
        const char *name = ad_op_name(w->op);
        ad_op_info_t info;
        CHECK(ad_op_info(w->op, &info) == AD_OK, "op %d: no registry row", w->op);
        CHECK(info.n_inputs < 0 || info.n_inputs == w->n_in, "%s: header says %d inputs", name,
              info.n_inputs);
        CHECK(info.n_iargs < 0 || info.n_iargs == w->n_iargs, "%s: %d iargs", name, info.n_iargs);
        CHECK(info.n_fargs == w->n_fargs, "%s: %d fargs", name, info.n_fargs);
        covered[w->op] = 1;
        const ad_tensor *in[3];
        for (int i = 0; i < w->n_in; i++) in[i] = pool[w->in[i]];
        ad_tensor *y = NULL;
        ad_status st = ad_op_call(w->op, in, w->n_in, w->iargs, w->n_iargs, w->fargs, w->n_fargs,
                                  &y);
        CHECK(st == AD_OK, "row %zu (%s): status %d: %s", r, name, st, ad_last_error());
        if (st) continue;
        int64_t shape[4] = {0};
        CHECK(ad_tensor_dtype(y) == w->dtype, "%s: dtype %d", name, ad_tensor_dtype(y));
        CHECK(ad_tensor_ndim(y) == w->ndim, "row %zu (%s): ndim %d", r, name, ad_tensor_ndim(y));
        if (ad_tensor_ndim(y) == w->ndim) {
            ad_tensor_shape(y, shape);
            CHECK(!memcmp(shape, w->shape, (size_t)w->ndim * sizeof *shape),
                  "row %zu (%s): shape (%lld, %lld, %lld, %lld)", r, name, (long long)shape[0],
                  (long long)shape[1], (long long)shape[2], (long long)shape[3]);
        }
        if (w->op == AD_OP_SLICE) { /* {dim 1, start 0, step 2, len 2}: columns 0 and 2 */
            double v[4];
            CHECK(ad_tensor_copy_to(y, v, sizeof v) == AD_OK, "copy");
            CHECK(v[0] == 0.5 && v[1] == 0.25 && v[2] == 2.0 && v[3] == 1.25, "slice values");
        }
        ad_tensor_release(y);
    }
    for (int op = 1; op < AD_OP__COUNT; op++) {
        ad_op_info_t info;
        if (op == AD_OP_CUSTOM) { /* recorded by ad_custom_record only (custom.c) */
            ad_tensor *y = NULL;
            const ad_tensor *in1[1] = {pool[X]};
            int64_t ia[4] = {0};
            CHECK(ad_op_call(op, in1, 1, ia, 4, NULL, 0, &y) == AD_ERR_VALUE && !y,
                  "custom: callable through ad_op_call");
            continue;
        }
        if (ad_op_info(op, &info) == AD_OK)
            CHECK(covered[op], "%s (%d) has a registry row but no row in this test", info.name,
                  op);
    }
    for (size_t r = 0; r < sizeof bad_rows / sizeof *bad_rows; r++) {
        const bad_row *w = &bad_rows[r];
        const ad_tensor *in[3];
        for (int i = 0; i < w->n_in; i++) in[i] = pool[w->in[i]];
        ad_tensor *y = NULL;
        ad_status st = ad_op_call(w->op, in, w->n_in, w->iargs, w->n_iargs, &w->farg, w->n_fargs,
                                  &y);
        CHECK(st == w->st && !y, "bad row %zu (%s): status %d, expected %d (%s)", r,
              ad_op_name(w->op), st, w->st, ad_last_error());
        if (y) ad_tensor_release(y);
    }
    for (int i = 0; i < N_POOL; i++) ad_tensor_release(pool[i]);
    CHECK(ad_live_tensors() == live0, "leaked %lld tensors",
          (long long)(ad_live_tensors() - live0));
    if (failures) fprintf(stderr, "%d failures\n", failures);
    else printf("test_ops_abi: %zu calls ok, %zu bad layouts refused\n",
                sizeof rows / sizeof *rows, sizeof bad_rows / sizeof *bad_rows);
    return failures != 0;
}
