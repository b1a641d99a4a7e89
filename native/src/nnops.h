/* nnops.h - forward functions of the indexing, joining and neural-network
 * ops (index.c, nn.c, conv.c) and the small helpers they share. */
#ifndef AD_NNOPS_H
#define AD_NNOPS_H

#include "internal.h"

ad_status fwd_cat(const op_args *a, ad_tensor **out);
ad_status fwd_pad(const op_args *a, ad_tensor **out);
ad_status fwd_index_select(const op_args *a, ad_tensor **out);
ad_status fwd_index_add(const op_args *a, ad_tensor **out);
ad_status fwd_gather(const op_args *a, ad_tensor **out);
ad_status fwd_scatter_add(const op_args *a, ad_tensor **out);
ad_status fwd_mse_loss(const op_args *a, ad_tensor **out);
ad_status fwd_cross_entropy(const op_args *a, ad_tensor **out);
ad_status fwd_nll_loss(const op_args *a, ad_tensor **out);
/* mse_loss's gradient for input 0 in one native pass (no create_graph): x
   and y the input and target (one shape and float dtype, any layout), g the
   gradient of the reduced loss (one value; r = 1 mean, 2 sum) */
ad_status ad_mse_loss_grad(const ad_tensor *x, const ad_tensor *y, const ad_tensor *g,
                           int64_t r, ad_tensor **dx);
/* cross_entropy's (ce) or nll_loss's gradient for input 0 in one native pass
   (no create_graph): x (N, C), t the targets, g the loss's gradient (one
   value for reduction r = 1 or 2, (N,) for 0); x's data is read for ce only. */
ad_status ad_class_loss_grad(const ad_tensor *x, const ad_tensor *t, const ad_tensor *g,
                             int64_t r, bool ce, ad_tensor **dx);
/* softmax's (log false) or log_softmax's gradient along dim in one native
   pass (no create_graph), y the forward's output and g its gradient (y's
   shape and dtype, any layout): y (g - sum(g y)) or g - e^y sum(g). */
ad_status ad_softmax_grad(const ad_tensor *y, const ad_tensor *g, int64_t dim, bool log,
                          ad_tensor **dx);
ad_status fwd_layer_norm(const op_args *a, ad_tensor **out);
/* layer_norm's gradient as one native pass (no create_graph): dx of x's
   shape; dw, db of the normalized shape when asked for, else NULL. */
ad_status ad_layer_norm_grad(const ad_tensor *x, const ad_tensor *w, const ad_tensor *g,
                             int64_t k, double eps, bool want_w, bool want_b, ad_tensor **dx,
                             ad_tensor **dw, ad_tensor **db);
ad_status fwd_dropout(const op_args *a, ad_tensor **out);
ad_status fwd_conv2d(const op_args *a, ad_tensor **out);
ad_status fwd_conv_transpose2d(const op_args *a, ad_tensor **out);
ad_status fwd_conv2d_weight_grad(const op_args *a, ad_tensor **out);
ad_status fwd_max_pool2d(const op_args *a, ad_tensor **out);
ad_status fwd_max_pool2d_backward(const op_args *a, ad_tensor **out);
ad_status fwd_max_pool2d_gather(const op_args *a, ad_tensor **out);

/* The max pool's three walks: the window maxima (y output-shaped), the
   gradient routed to each window's argmax (gy output-shaped, y x-shaped) and
   the argmax's element of an x-shaped gy (y output-shaped). */
enum { POOL_FWD, POOL_BWD, POOL_GATHER };
/* One plane's 2x2 stride-2 max pool in AVX2 vectors (pool_avx2.c; nn.c's
   pool_2x2, the same bits): oh x ow windows of the w-wide x; the backward
   writes the windows' 2 oh x 2 ow elements of y and, when w is odd, leaves
   the last column of those rows for the caller to zero. */
void ad_pool2x2_avx2_f32(int kind, int64_t w, int64_t oh, int64_t ow, const float *x,
                         const float *gy, float *y);
void ad_pool2x2_avx2_f64(int kind, int64_t w, int64_t oh, int64_t ow, const double *x,
                         const double *gy, double *y);

/* x's elements in row-major order: x's own memory when contiguous, else a
   contiguous copy in *tmp (release it afterwards; NULL when not needed). */
ad_status nn_contig(const ad_tensor *x, ad_tensor **tmp, const void **data);

/* An integer index tensor (int64 or int32, any layout) as a new contiguous
   int64 buffer (ad_mfree it); DTypeError names the op for other dtypes. */
ad_status nn_index_buf(const char *op, const ad_tensor *idx, const char *what, int64_t **buf);

#endif
