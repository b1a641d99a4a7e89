/* strided.h - the n-d iterator every kernel family shares: broadcasting
 * strides, size-1 dims dropped, adjacent dims coalesced, and an inner 1-d
 * loop handed to a typed kernel (numpy's iterator, much reduced). */
#ifndef AD_STRIDED_H
#define AD_STRIDED_H

#include "internal.h"

#define ITER_MAX_OPS 4

/* Inner loop over n elements: ptrs[k] advance by strides[k] elements. */
typedef void (*inner_fn)(void *ctx, int64_t n, char **ptrs, const int64_t *strides);

/* A whole plane of the last two dims (rows x cols) in one call: ptrs[k] at
   operand k's first element of the plane, rstep[k] its byte step along the
   rows, cstep[k] its element step along the columns (inner_fn's strides).
   Returns false, having written nothing, when it does not take the layout:
   the plane is then walked row by row with the inner_fn. */
typedef bool (*plane_fn)(void *ctx, int64_t rows, int64_t cols, char **ptrs,
                         const int64_t *rstep, const int64_t *cstep);

typedef struct nditer {
    int nops, ndim;
    int64_t shape[AD_MAX_DIMS];
    int64_t strides[ITER_MAX_OPS][AD_MAX_DIMS]; /* elements */
    size_t elsize[ITER_MAX_OPS];
    /* 1: every element's result is independent of the others and of the
       order (elementwise ops, copies; never a reduction's accumulation), so
       nditer_run may walk the last two dims in tiles (a transposed operand);
       nditer_init sets 0 */
    int any_order;
    /* tried on every plane before its rows (ndim >= 2); nditer_init sets NULL */
    plane_fn plane;
} nditer;

/* strides[k] are the element strides of operand k over `shape` (0 where it
   broadcasts).  Dims are coalesced; operand 0 is usually the output. */
void nditer_init(nditer *it, int nops, int ndim, const int64_t *shape,
                 const int64_t *const *strides, const size_t *elsize);
void nditer_run(const nditer *it, char **base, inner_fn fn, void *ctx);

/* Iterations of at least this many elements are split over threads (a
   quarter of a float32 MiB: torch's grain is 32768). 2^18 left 2 threads
   idle on what a training step's ops mostly are: Zen 4, 2 threads, the pool
   warm, float32 add 2^16 / 1e5 / 2e5 elements 8.0 / 13.4 / 27.8 us -> 5.6 /
   10.2 / 16.0 (numpy 8.4 / 13.7 / 26.6, torch's 2 threads 6.0 / 10.1 /
   18.4), sum() 4.5 -> 3.4 us at 1e5. A call after the pool has slept (it
   spins for ~0.3 ms after a loop) waits for the other core to wake: a
   2^16-element add right after a 30 ms sleep took 115 us instead of 70. */
#define ITER_PAR_MIN ((int64_t)1 << 16)

/* Target elements per block of parallel work. */
#define ITER_PAR_BLOCK ((int64_t)1 << 15)

/* Calls fn(ctx, k) once for every k < nblocks, over the thread pool when
   nblocks > 1.  Each thread has a contiguous share of the blocks and claims
   them one at a time from its share's counter (a cache line of its own), then
   helps with the other shares: a thread that is descheduled (a busy machine)
   holds up at most one block, and the threads do not trade one counter's
   cache line for every block (one shared counter cost ~0.3 us a block: the
   float32 maps' 2048-element blocks ran 15-25% slower at 2 threads).
   fn must not depend on which thread runs it. */
void par_blocks(int64_t nblocks, void (*fn)(void *ctx, int64_t k), void *ctx);

/* nditer_run split over the thread pool when the iteration is large: the
   outermost dim along which operand 0 (the output) moves is cut into ranges,
   so no two threads write one output element and every element is visited by
   exactly one call of fn, as in nditer_run (elementwise results are the same
   for any thread count).  Runs serially when that dim does not exist (a full
   reduction: see reduce.c) or the iteration is small. */
void nditer_run_par(const nditer *it, char **base, inner_fn fn, void *ctx);

/* nditer_run_par for an inner loop `cost` times as expensive per element as
   a copy (a libm call: ~64): threads join from ITER_PAR_MIN / cost elements,
   in blocks of ITER_PAR_BLOCK / cost. */
void nditer_run_par_cost(const nditer *it, char **base, inner_fn fn, void *ctx, int cost);

/* The sub-iteration covering [begin, end) of dim d: shape[d] shrunk and the
   base pointers moved to begin. */
void nditer_slice(const nditer *it, char *const *base, int d, int64_t begin, int64_t end,
                  nditer *sub, char **sub_base);

int64_t nditer_numel(const nditer *it);

/* The copy of a transposed plane (transpose_avx2.c), for elements of 4 and 8
   bytes: dst[r, c] at dst + r drs + c es from src + c scs + r es, for r < rows
   and c < cols (steps in bytes; rows contiguous in src, columns in dst). */
void ad_transpose4_avx2(int64_t rows, int64_t cols, char *dst, int64_t drs, const char *src,
                        int64_t scs);
void ad_transpose8_avx2(int64_t rows, int64_t cols, char *dst, int64_t drs, const char *src,
                        int64_t scs);

/* The strides of t seen through a broadcast to out_shape (right-aligned). */
void broadcast_strides(const ad_tensor *t, const int64_t *out_shape, int out_ndim,
                       int64_t *strides);

#endif
