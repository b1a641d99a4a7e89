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

_Thread_local int ad_current_op;

#define OUT 0x80 /* needs bit: the output */
#define I0 0x01
#define I1 0x02

/* backward functions (backward.c) */
#define BW(name) ad_status bw_##name(const ad_node *, const ad_tensor *, const ad_tensor *, ad_tensor **);
BW(add) BW(sub) BW(mul) BW(div) BW(neg) BW(exp) BW(log) BW(sqr) BW(sqrt) BW(relu) BW(tanh)
BW(add_scalar) BW(mul_scalar) BW(rsub_scalar) BW(div_scalar) BW(rdiv_scalar) BW(pow_scalar)
BW(pow_rscalar) BW(sum) BW(mean) BW(maxmin) BW(reshape) BW(permute) BW(slice) BW(broadcast)
BW(identity) BW(to_dtype) BW(matmul)
/* elementwise math, reductions, softmax family */
BW(abs) BW(recip) BW(sin) BW(cos) BW(sigmoid) BW(gelu) BW(gelu_erf) BW(erf) BW(silu)
BW(softplus) BW(elu) BW(log1p) BW(expm1) BW(zero) BW(clamp) BW(maximum) BW(minimum) BW(pow)
BW(where) BW(prod) BW(logsumexp) BW(softmax) BW(log_softmax) BW(cumsum)
BW(cat) BW(pad) BW(index_select) BW(index_add) BW(gather) BW(scatter_add) BW(mse_loss)
BW(cross_entropy) BW(nll_loss) BW(layer_norm) BW(dropout) BW(conv2d) BW(conv_transpose2d)
BW(max_pool2d)
#undef BW

const op_def ad_ops[AD_OP__COUNT] = {
    /*                 name          in iargs fargs forward          backward        needs */
    [AD_OP_ADD] = {"add", 2, 0, 0, fwd_binary, bw_add, {0, 0}},
    [AD_OP_SUB] = {"sub", 2, 0, 0, fwd_binary, bw_sub, {0, 0}},
    [AD_OP_MUL] = {"mul", 2, 0, 0, fwd_binary, bw_mul, {I1, I0}},
    [AD_OP_DIV] = {"div", 2, 0, 0, fwd_binary, bw_div, {I1, I1 | OUT}},
    [AD_OP_NEG] = {"neg", 1, 0, 0, fwd_unary, bw_neg, {0}},
    [AD_OP_EXP] = {"exp", 1, 0, 0, fwd_unary, bw_exp, {OUT}},
    [AD_OP_LOG] = {"log", 1, 0, 0, fwd_unary, bw_log, {I0}},
    [AD_OP_SQR] = {"sqr", 1, 0, 0, fwd_unary, bw_sqr, {I0}},
    [AD_OP_SQRT] = {"sqrt", 1, 0, 0, fwd_unary, bw_sqrt, {OUT}},
    [AD_OP_RELU] = {"relu", 1, 0, 0, fwd_unary, bw_relu, {OUT}},
    [AD_OP_TANH] = {"tanh", 1, 0, 0, fwd_unary, bw_tanh, {OUT}},
    [AD_OP_ADD_SCALAR] = {"add_scalar", 1, 0, 1, fwd_scalar, bw_add_scalar, {0}},
    [AD_OP_MUL_SCALAR] = {"mul_scalar", 1, 0, 1, fwd_scalar, bw_mul_scalar, {0}},
    [AD_OP_RSUB_SCALAR] = {"rsub_scalar", 1, 0, 1, fwd_scalar, bw_rsub_scalar, {0}},
    [AD_OP_RDIV_SCALAR] = {"rdiv_scalar", 1, 0, 1, fwd_scalar, bw_rdiv_scalar, {I0 | OUT}},
    [AD_OP_POW_SCALAR] = {"pow_scalar", 1, 0, 1, fwd_scalar, bw_pow_scalar, {I0}},
    [AD_OP_SUM] = {"sum", 1, -1, 0, fwd_reduce, bw_sum, {0}},
    [AD_OP_MEAN] = {"mean", 1, -1, 0, fwd_reduce, bw_mean, {0}},
    [AD_OP_MAX] = {"max", 1, -1, 0, fwd_reduce, bw_maxmin, {I0 | OUT}},
    [AD_OP_MIN] = {"min", 1, -1, 0, fwd_reduce, bw_maxmin, {I0 | OUT}},
    [AD_OP_ARGMAX] = {"argmax", 1, -1, 0, fwd_argreduce, NULL, {0}},
    [AD_OP_ARGMIN] = {"argmin", 1, -1, 0, fwd_argreduce, NULL, {0}},
    [AD_OP_EQ] = {"eq", 2, 0, 0, fwd_compare, NULL, {0}},
    [AD_OP_NE] = {"ne", 2, 0, 0, fwd_compare, NULL, {0}},
    [AD_OP_LT] = {"lt", 2, 0, 0, fwd_compare, NULL, {0}},
    [AD_OP_LE] = {"le", 2, 0, 0, fwd_compare, NULL, {0}},
    [AD_OP_GT] = {"gt", 2, 0, 0, fwd_compare, NULL, {0}},
    [AD_OP_GE] = {"ge", 2, 0, 0, fwd_compare, NULL, {0}},
    [AD_OP_RESHAPE] = {"reshape", 1, -1, 0, fwd_reshape, bw_reshape, {0}},
    [AD_OP_PERMUTE] = {"permute", 1, -1, 0, fwd_permute, bw_permute, {0}},
    [AD_OP_SLICE] = {"slice", 1, 4, 0, fwd_slice, bw_slice, {0}},
    [AD_OP_BROADCAST] = {"broadcast_to", 1, -1, 0, fwd_broadcast, bw_broadcast, {0}},
    [AD_OP_CONTIGUOUS] = {"contiguous", 1, 0, 0, fwd_contiguous, bw_identity, {0}},
    [AD_OP_TO_DTYPE] = {"to_dtype", 1, 1, 0, fwd_to_dtype, bw_to_dtype, {0}},
    [AD_OP_MATMUL] = {"matmul", 2, 0, 0, fwd_matmul, bw_matmul, {I1, I0}},
    [AD_OP_POW_RSCALAR] = {"pow_rscalar", 1, 0, 1, fwd_scalar, bw_pow_rscalar, {OUT}},
    [AD_OP_COPY] = {"copy", 1, 0, 0, fwd_copy, bw_identity, {0}},
    [AD_OP_DIV_SCALAR] = {"div_scalar", 1, 0, 1, fwd_scalar, bw_div_scalar, {0}},
    /* ---- elementwise math, reductions, softmax family (40..79) ---- */
    [AD_OP_ABS] = {"abs", 1, 0, 0, fwd_unary, bw_abs, {I0}},
    [AD_OP_RECIP] = {"recip", 1, 0, 0, fwd_unary, bw_recip, {OUT}},
    [AD_OP_SIN] = {"sin", 1, 0, 0, fwd_unary, bw_sin, {I0}},
    [AD_OP_COS] = {"cos", 1, 0, 0, fwd_unary, bw_cos, {I0}},
    [AD_OP_SIGMOID] = {"sigmoid", 1, 0, 0, fwd_unary, bw_sigmoid, {OUT}},
    [AD_OP_GELU] = {"gelu", 1, 0, 0, fwd_unary, bw_gelu, {I0}},
    [AD_OP_GELU_ERF] = {"gelu_erf", 1, 0, 0, fwd_unary, bw_gelu_erf, {I0}},
    [AD_OP_ERF] = {"erf", 1, 0, 0, fwd_unary, bw_erf, {I0}},
    [AD_OP_SILU] = {"silu", 1, 0, 0, fwd_unary, bw_silu, {I0}},
    [AD_OP_SOFTPLUS] = {"softplus", 1, 0, 0, fwd_unary, bw_softplus, {I0}},
    [AD_OP_ELU] = {"elu", 1, 0, 1, fwd_scalar, bw_elu, {I0}},
    [AD_OP_LOG1P] = {"log1p", 1, 0, 0, fwd_unary, bw_log1p, {I0}},
    [AD_OP_EXPM1] = {"expm1", 1, 0, 0, fwd_unary, bw_expm1, {OUT}},
    [AD_OP_FLOOR] = {"floor", 1, 0, 0, fwd_unary, bw_zero, {0}},
    [AD_OP_CEIL] = {"ceil", 1, 0, 0, fwd_unary, bw_zero, {0}},
    [AD_OP_ROUND] = {"round", 1, 0, 0, fwd_unary, bw_zero, {0}},
    [AD_OP_SIGN] = {"sign", 1, 0, 0, fwd_unary, bw_zero, {0}},
    [AD_OP_CLAMP] = {"clamp", 1, 0, 2, fwd_clamp, bw_clamp, {I0}},
    [AD_OP_MAXIMUM] = {"maximum", 2, 0, 0, fwd_binary, bw_maximum, {I0 | I1, I0 | I1}},
    [AD_OP_MINIMUM] = {"minimum", 2, 0, 0, fwd_binary, bw_minimum, {I0 | I1, I0 | I1}},
    [AD_OP_POW] = {"pow", 2, 0, 0, fwd_binary, bw_pow, {I0 | I1, I0 | I1 | OUT}},
    [AD_OP_WHERE] = {"where", 3, 0, 0, fwd_where, bw_where, {0, I0, I0}},
    [AD_OP_PROD] = {"prod", 1, -1, 0, fwd_reduce, bw_prod, {I0}},
    [AD_OP_LOGSUMEXP] = {"logsumexp", 1, 2, 0, fwd_logsumexp, bw_logsumexp, {I0 | OUT}},
    [AD_OP_SOFTMAX] = {"softmax", 1, 1, 0, fwd_softmax, bw_softmax, {OUT}},
    [AD_OP_LOG_SOFTMAX] = {"log_softmax", 1, 1, 0, fwd_softmax, bw_log_softmax, {OUT}},
    [AD_OP_CUMSUM] = {"cumsum", 1, 2, 0, fwd_cumsum, bw_cumsum, {0}},
    /* ---- indexing, joining, neural-network ops (80..139) ---- */
    [AD_OP_CAT] = {"cat", -1, -1, 0, fwd_cat, bw_cat, {0}},
    [AD_OP_PAD] = {"pad", 1, -1, 1, fwd_pad, bw_pad, {0}},
    [AD_OP_INDEX_SELECT] = {"index_select", 2, 1, 0, fwd_index_select, bw_index_select, {I1}},
    [AD_OP_INDEX_ADD] = {"index_add", 3, 1, 0, fwd_index_add, bw_index_add, {0, 0, I1}},
    [AD_OP_GATHER] = {"gather", 2, 1, 0, fwd_gather, bw_gather, {I1}},
    [AD_OP_SCATTER_ADD] = {"scatter_add", 3, 1, 0, fwd_scatter_add, bw_scatter_add, {0, 0, I1}},
    [AD_OP_MSE_LOSS] = {"mse_loss", 2, 1, 0, fwd_mse_loss, bw_mse_loss, {I0 | I1, I0 | I1}},
    [AD_OP_CROSS_ENTROPY] = {"cross_entropy", 2, 1, 0, fwd_cross_entropy, bw_cross_entropy,
                             {I0 | I1}},
    [AD_OP_NLL_LOSS] = {"nll_loss", 2, 1, 0, fwd_nll_loss, bw_nll_loss, {I1}},
    [AD_OP_LAYER_NORM] = {"layer_norm", -1, 1, 1, fwd_layer_norm, bw_layer_norm, {I0 | I1}},
    [AD_OP_DROPOUT] = {"dropout", 1, 1, 1, fwd_dropout, bw_dropout, {0}},
    [AD_OP_CONV2D] = {"conv2d", 2, 7, 0, fwd_conv2d, bw_conv2d, {I1, I0}},
    [AD_OP_CONV_TRANSPOSE2D] = {"conv_transpose2d", 2, 9, 0, fwd_conv_transpose2d,
                                bw_conv_transpose2d, {I1, I0}},
    [AD_OP_CONV2D_WEIGHT_GRAD] = {"conv2d_weight_grad", 2, 9, 0, fwd_conv2d_weight_grad, NULL,
                                  {0}},
    [AD_OP_MAX_POOL2D] = {"max_pool2d", 1, 8, 0, fwd_max_pool2d, bw_max_pool2d, {I0}},
    [AD_OP_MAX_POOL2D_BACKWARD] = {"max_pool2d_backward", 2, 8, 0, fwd_max_pool2d_backward,
                                   NULL, {0}},
};

AD_API const char *ad_op_name(int op) {
    return (op > 0 && op < AD_OP__COUNT && ad_ops[op].name) ? ad_ops[op].name : NULL;
}

/* Builds the node of a tracked op: inputs that track or whose value a tracked
   input's gradient reads, the versions of the values backward will read, and
   the op's arguments, in one allocation. */
static ad_status record(int op, const op_def *def, const op_args *a, unsigned tracked,
                        ad_tensor *y) {
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
    n->site = ad_anomaly_enabled ? ad_anomaly_site() : NULL;
    ad_tensor **in = node_in(n);
    uint64_t *ver = node_versions(n);
    for (int i = 0; i < a->n_in; i++) {
        bool keep = (tracked | saved) & (1u << i);
        in[i] = keep ? ad_ref(a->in[i]) : NULL;
        ver[i] = keep ? atomic_load(&a->in[i]->storage->version) : 0;
    }
    if (a->n_iargs) memcpy(node_iargs(n), a->iargs, a->n_iargs * sizeof(int64_t));
    if (a->n_fargs) memcpy(node_fargs(n), a->fargs, a->n_fargs * sizeof(double));
    if (n->saves_output) n->out_version = atomic_load(&y->storage->version);
    y->node = n;
    return AD_OK;
}

ad_status ad_call(int op, const ad_tensor *const *in, int n_in, const int64_t *iargs,
                  int n_iargs, const double *fargs, int n_fargs, ad_tensor **out) {
    if (!out) return ad_fail(AD_ERR_VALUE, "op call: out pointer is NULL");
    *out = NULL;
    if (op <= 0 || op >= AD_OP__COUNT || !ad_ops[op].forward)
        return ad_fail(AD_ERR_VALUE, "unknown op kind %d", op);
    const op_def *def = &ad_ops[op];
    if ((def->n_in >= 0 && n_in != def->n_in) || n_in < 1 || n_in > AD_MAX_INPUTS)
        return ad_fail(AD_ERR_VALUE, "%s: takes %d tensor inputs, got %d", def->name, def->n_in,
                       n_in);
    if ((def->n_iargs >= 0 && n_iargs != def->n_iargs) || n_iargs < 0 || n_iargs > 64 ||
        (n_iargs && !iargs))
        return ad_fail(AD_ERR_VALUE, "%s: takes %d integer arguments, got %d", def->name,
                       def->n_iargs, n_iargs);
    if (n_fargs != def->n_fargs || (n_fargs && !fargs))
        return ad_fail(AD_ERR_VALUE, "%s: takes %d float arguments, got %d", def->name,
                       def->n_fargs, n_fargs);
    for (int i = 0; i < n_in; i++)
        if (!in[i]) return ad_fail(AD_ERR_VALUE, "%s: input %d is NULL", def->name, i);
    /* reductions and argreductions take keepdim first */
    if ((def->forward == fwd_reduce || def->forward == fwd_argreduce) && n_iargs < 1)
        return ad_fail(AD_ERR_VALUE, "%s: missing keepdim argument", def->name);

    op_args a = {in, n_in, iargs, n_iargs, fargs, n_fargs};
    int outer = ad_current_op;
    ad_current_op = op;
    ad_tensor *y = NULL;
    ad_status st = def->forward(&a, &y);
    ad_current_op = outer;
    if (st) return st;

    unsigned tracked = 0;
    if (def->backward && ad_grad_enabled && ad_dtype_is_float(y->dtype))
        for (int i = 0; i < n_in; i++)
            if (ad_tracks(in[i])) tracked |= 1u << i;
    /* an op that returned its input unchanged (contiguous of a contiguous
       tensor, to_dtype to the same dtype) records nothing */
    for (int i = 0; i < n_in && tracked; i++)
        if (y == in[i]) tracked = 0;
    if (tracked && (st = record(op, def, &a, tracked, y))) {
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
