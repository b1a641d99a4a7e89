/* opargs.h - the typed arguments of the op families whose integer arguments
 * need more than a read: convolution, pooling, slice.  Each layout (the
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

#endif
