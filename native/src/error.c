/* error.c - the thread-local last error (libgit2's git_error_last model). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

static _Thread_local char last_error[1024];

AD_API const char *ad_last_error(void) { return last_error; }

ad_status ad_fail(ad_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return st;
}

ad_status ad_fail_nomem(const char *what) {
    return ad_fail(AD_ERR_NOMEM, "%s: out of memory", what);
}

/* A small ring so that one message can format several shapes. */
static _Thread_local char shape_ring[6][160];
static _Thread_local int shape_next;

const char *ad_fmt_shape(const int64_t *shape, int ndim) {
    char *buf = shape_ring[shape_next];
    shape_next = (shape_next + 1) % 6;
    size_t n = 0, cap = sizeof shape_ring[0];
    n += (size_t)snprintf(buf + n, cap - n, "(");
    for (int i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, ndim == 1 ? ",)" : ")");
    return buf;
}

const char *ad_tdesc(const ad_tensor *t) {
    char *buf = shape_ring[shape_next];
    shape_next = (shape_next + 1) % 6;
    const char *shape = ad_fmt_shape(T_SHAPE(t), t->ndim);
    snprintf(buf, sizeof shape_ring[0], "%s %s", ad_dtype_name_(t->dtype), shape);
    return buf;
}
