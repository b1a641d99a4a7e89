/* test_abi.c - the C ABI used from plain C, no Python: build a small graph
 * with a Var, run backward, check the gradient, check error reporting and
 * that every handle is released. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "pyautodiff.h"

static int failures;

#define CHECK(cond)                                                          \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                      \
        }                                                                    \
    } while (0)

int main(void) {
    CHECK(ad_abi_version() / 1000 == AD_ABI_MAJOR);
    int64_t live0 = ad_live_tensors();

    /* loss = sum((x @ w)^2) with w a Var: dloss/dw = 2 x^T (x w) */
    const float xv[4] = {1, 2, 3, 4}, wv[4] = {0.5f, -1, 2, 0};
    const int64_t shape[2] = {2, 2};
    ad_tensor *x = NULL, *w0 = NULL, *w = NULL, *y = NULL, *y2 = NULL, *loss = NULL;
    CHECK(ad_tensor_from_data(xv, sizeof xv, AD_FLOAT32, shape, 2, &x) == AD_OK);
    CHECK(ad_tensor_from_data(wv, sizeof wv, AD_FLOAT32, shape, 2, &w0) == AD_OK);
    CHECK(ad_var_from_tensor(w0, &w) == AD_OK);
    CHECK(ad_tensor_is_variable(w) && !ad_tensor_is_variable(w0));
    CHECK(ad_binary(AD_OP_MATMUL, x, w, &y) == AD_OK);
    CHECK(ad_unary(AD_OP_SQR, y, &y2) == AD_OK);
    int64_t keepdim = 0;
    const ad_tensor *in[1] = {y2};
    CHECK(ad_op_call(AD_OP_SUM, in, 1, &keepdim, 1, NULL, 0, &loss) == AD_OK);
    CHECK(ad_tensor_ndim(loss) == 0 && ad_tensor_track_op(loss));
    CHECK(ad_tensor_op(loss) == AD_OP_SUM && strcmp(ad_op_name(AD_OP_SUM), "sum") == 0);

    ad_gradstore *grads = NULL;
    CHECK(ad_backward(loss, NULL, NULL, 0, &grads) == AD_OK);
    CHECK(ad_gradstore_len(grads) == 1);
    ad_tensor *gw = NULL, *gx = NULL;
    CHECK(ad_gradstore_get(grads, w, &gw) == AD_OK && gw != NULL);
    CHECK(ad_gradstore_get(grads, x, &gx) == AD_OK && gx == NULL); /* untracked: none */
    float g[4] = {0};
    CHECK(ad_tensor_copy_to(gw, g, sizeof g) == AD_OK);
    const float want[4] = {66, -20, 94, -28};
    for (int i = 0; i < 4; i++) CHECK(fabsf(g[i] - want[i]) < 1e-4f);

    /* errors come back as status codes with a message, never an abort */
    ad_tensor *bad = NULL;
    const int64_t shape3[1] = {3};
    ad_tensor *v3 = NULL;
    CHECK(ad_tensor_full(1.0, AD_FLOAT32, shape3, 1, &v3) == AD_OK);
    CHECK(ad_binary(AD_OP_ADD, x, v3, &bad) == AD_ERR_SHAPE && bad == NULL);
    CHECK(strstr(ad_last_error(), "add") != NULL);
    ad_gradstore *none = NULL;
    CHECK(ad_backward(y, NULL, NULL, 0, &none) == AD_ERR_SHAPE && none == NULL);
    CHECK(ad_var_set(w, w) == AD_ERR_GRAPH);

    ad_tensor_release(gw);
    ad_gradstore_release(grads);
    ad_tensor *all[] = {x, w0, w, y, y2, loss, v3};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ad_tensor_release(all[i]);
    ad_tensor_release(NULL);
    ad_gradstore_release(NULL);
    CHECK(ad_live_tensors() == live0);

    if (failures) {
        fprintf(stderr, "test_abi: %d failures\n", failures);
        return 1;
    }
    printf("test_abi: all checks passed\n");
    return 0;
}
