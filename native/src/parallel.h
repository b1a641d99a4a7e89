/* Internal: a small persistent pthread pool for data-parallel loops. */
#ifndef PYAUTODIFF_PARALLEL_H
#define PYAUTODIFF_PARALLEL_H

#include <stdint.h>

/* Runs fn(ctx, begin, end) over [0, n) split into at most par_num_threads()
   contiguous chunks, the calling thread taking one of them. Runs inline when
   n <= 1, when one thread is configured, or when the pool is already in use
   (a nested call, or another thread's loop): callers never deadlock and never
   wait for someone else's work. */
void par_for(int64_t n, void (*fn)(void *ctx, int64_t begin, int64_t end), void *ctx);

/* As par_for, but each index is its own chunk, claimed by whichever thread
   is free: a thread that is descheduled (a core shared with another
   process's spinning threads) then delays one small chunk, not half the loop. */
void par_for_dyn(int64_t n, void (*fn)(void *ctx, int64_t begin, int64_t end), void *ctx);

/* The configured thread count (ad_set_num_threads, else PYAUTODIFF_NUM_THREADS,
   else the number of online CPUs). */
int par_num_threads(void);

#endif
