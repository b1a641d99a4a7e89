/* strided.h - the n-d iterator every kernel family shares: broadcasting
 * strides, size-1 dims dropped, adjacent dims coalesced, and an inner 1-d
 * loop handed to a typed kernel (numpy's iterator, much reduced). */
#ifndef AD_STRIDED_H
#define AD_STRIDED_H

#include "internal.h"

#define ITER_MAX_OPS 4

typedef struct nditer {
    int nops, ndim;
    int64_t shape[AD_MAX_DIMS];
    int64_t strides[ITER_MAX_OPS][AD_MAX_DIMS]; /* elements */
    size_t elsize[ITER_MAX_OPS];
} nditer;

/* Inner loop over n elements: ptrs[k] advance by strides[k] elements. */
typedef void (*inner_fn)(void *ctx, int64_t n, char **ptrs, const int64_t *strides);

/* strides[k] are the element strides of operand k over `shape` (0 where it
   broadcasts).  Dims are coalesced; operand 0 is usually the output. */
void nditer_init(nditer *it, int nops, int ndim, const int64_t *shape,
                 const int64_t *const *strides, const size_t *elsize);
void nditer_run(const nditer *it, char **base, inner_fn fn, void *ctx);

/* The strides of t seen through a broadcast to out_shape (right-aligned). */
void broadcast_strides(const ad_tensor *t, const int64_t *out_shape, int out_ndim,
                       int64_t *strides);

#endif
