/* opargs.h - the typed arguments of the op families whose integer arguments
 * need more than a read: convolution, pooling, slice, reduce, the lanes
 * (logsumexp, softmax, cumsum), cat, pad and the index ops.  Each layout (the
 * header's, for ad_op_call) is decoded and range-checked here, in one place,
 * and the forward functions, backward.c and the validators read the struct.
 *
 * Every size formula is computed with overflow checks: an argument that
 * would wrap is rejected with AD_ERR_VALUE naming that argument. */
#ifndef AD_OPARGS_H
#define AD_OPARGS_H

#include "internal.h"

/* conv2d             {sh, sw, ph, pw, dh, dw, groups}
   conv_transpose2d   {sh, sw, ph, pw, dh, dw, groups, oph, opw}
   conv2d_weight_grad {kh, kw, sh, sw, ph, pw, dh, dw, groups}
   (kh, kw: conv2d_weight_grad only; oph, opw: conv_transpose2d only) */
typedef struct conv_args {
    int64_t sh, sw, ph, pw, dh, dw, groups, oph, opw, kh, kw;
} conv_args;
ad_status conv_args_decode(int op, const int64_t *ia, conv_args *c);
/* Writes c in op's layout (what backward passes on to the next op). */
int conv_args_encode(int op, const conv_args *c, int64_t *ia);

/* max_pool2d, max_pool2d_backward {kh, kw, sh, sw, ph, pw, dh, dw} */
typedef struct pool_args {
    int64_t kh, kw, sh, sw, ph, pw, dh, dw;
} pool_args;
ad_status pool_args_decode(int op, const int64_t *ia, pool_args *p);

/* The length of a window sweep along one spatial dim:
   (in + 2 pad - dil (k - 1) - 1) / stride + 1.  AD_ERR_SHAPE when the dilated
   kernel does not fit the padded input (`x` names it in the message),
   AD_ERR_VALUE when a term overflows. */
ad_status win_out(int op, const char *axis, int64_t in, int64_t k, int64_t stride, int64_t pad,
                  int64_t dil, const ad_tensor *x, int64_t *out);

/* slice {dim, start, step, len}: the len elements start, start + step, ...
   along dim, every one inside x (dim normalized; step != 0). */
typedef struct slice_args {
    int dim;
    int64_t start, step, len;
} slice_args;
ad_status slice_args_decode(const int64_t *ia, const ad_tensor *x, slice_args *s);

/* sum, mean, max, min, prod {keepdim, dims...}: no dims reduces all; a dim
   out of range or given twice is an error naming op. */
typedef struct reduce_args {
    bool keepdim;
    bool reduced[AD_MAX_DIMS];
    int64_t kshape[AD_MAX_DIMS]; /* x's shape with the reduced dims as 1 */
    int64_t shape[AD_MAX_DIMS];  /* the output's shape */
    int ndim, count_reduced;     /* the output's ndim; how many dims reduce */
    int64_t reduce_numel;        /* elements folded into each output element */
} reduce_args;
ad_status reduce_args_decode(int op, const int64_t *ia, int n_iargs, const ad_tensor *x,
                             reduce_args *r);

/* A dim of x: in [-nd, nd) with nd = max(x's ndim, 1) (a 0-d tensor has one
   dim of size 1), normalized.  AD_ERR_INDEX naming op otherwise. */
ad_status dim_arg_decode(int op, int64_t dim, const ad_tensor *x, int *out);

/* logsumexp {dim, keepdim}; softmax, log_softmax {dim}; cumsum {dim, reverse}.
   flag: keepdim for logsumexp, reverse for cumsum, log for log_softmax. */
typedef struct lane_args {
    int dim;
    bool flag;
} lane_args;
ad_status lane_args_decode(int op, const int64_t *ia, const ad_tensor *x, lane_args *l);

/* index_select, index_add, gather, scatter_add {dim}: a dim of input 0. */
typedef struct index_args {
    int dim;
} index_args;
ad_status index_args_decode(int op, const int64_t *ia, const ad_tensor *x, index_args *a);

/* cat {dim, size_0, ..., size_{n-1}}: a dim of input 0 (which must have
   dims), then each input's size along it, checked against the input (an
   input of another rank is left to the caller's shape check). */
typedef struct cat_args {
    int dim;
    const int64_t *sizes; /* n_in of them, into the caller's iargs */
    int64_t total;        /* their sum: the output's size along dim */
} cat_args;
ad_status cat_args_decode(int op, const int64_t *ia, int n_iargs, const ad_tensor *const *in,
                          int n_in, cat_args *c);
/* {dim} alone completed in ia (1 + n_in of them) with each input's size along
   dim (0 where dim is out of range or an input's rank differs: the decode
   and the shape check name those); returns ia */
const int64_t *cat_args_complete(int64_t dim, const ad_tensor *const *in, int n_in, int64_t *ia);

/* pad {before, after} pairs from the last dim backwards (at most ndim of x
   pairs; a negative amount crops), fargs {value} (representable in x's
   dtype).  before/after are per dim of x, 0 where not given. */
typedef struct pad_args {
    int n_pairs;
    int64_t before[AD_MAX_DIMS], after[AD_MAX_DIMS];
    int64_t shape[AD_MAX_DIMS]; /* the output's */
    double value;
} pad_args;
ad_status pad_args_decode(int op, const int64_t *ia, int n_iargs, const double *fa,
                          const ad_tensor *x, pad_args *p);

#endif
