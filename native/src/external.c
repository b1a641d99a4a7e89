#define _POSIX_C_SOURCE 200809L
/* external.c - storages over memory the library does not own: a caller's
 * buffer with a release callback (numpy arrays, DLPack producers) and private
 * mappings of files (ad.load).  Such a storage is never written: only Vars are
 * written in place, and a Var always owns a copy. */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "internal.h"

typedef struct ext_storage {
    ad_storage base;
    ad_release_fn release;
    void *ctx;
} ext_storage;

void ad_external_free(ad_storage *s) {
    ext_storage *e = (ext_storage *)s;
    if (e->release) e->release(e->ctx);
    ad_mfree(e);
}

/* Where a zero-size tensor over a NULL pointer points: never read, but
   consumers (numpy's array interface) want a non-NULL address. */
static _Alignas(64) unsigned char empty_data[64];

/* The element offsets [lo, hi] that a view of shape/strides reaches from
   element 0, checked against int64 overflow in elements and in bytes. */
static ad_status view_extent(const char *op, const int64_t *shape, const int64_t *strides,
                             int ndim, size_t isz, int64_t *lo, int64_t *hi) {
    int64_t l = 0, h = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] <= 1) continue;
        int64_t span;
        if (__builtin_mul_overflow(shape[i] - 1, strides[i], &span) ||
            (span < 0 ? __builtin_add_overflow(l, span, &l) : __builtin_add_overflow(h, span, &h)))
            return ad_fail(AD_ERR_VALUE, "%s: strides overflow for shape %s", op,
                           ad_fmt_shape(shape, ndim));
    }
    int64_t n, bytes;
    if (__builtin_sub_overflow(h, l, &n) || __builtin_add_overflow(n, 1, &n) ||
        __builtin_mul_overflow(n, (int64_t)isz, &bytes) ||
        __builtin_mul_overflow(l, (int64_t)isz, &bytes))
        return ad_fail(AD_ERR_VALUE, "%s: strides overflow for shape %s", op,
                       ad_fmt_shape(shape, ndim));
    *lo = l;
    *hi = h;
    return AD_OK;
}

static ad_status make_external(const char *op, void *data, int dtype, const int64_t *shape,
                               const int64_t *strides, int ndim, int readonly,
                               ad_release_fn release, void *ctx, ad_tensor **out) {
    if (!out || (ndim > 0 && !shape))
        return ad_fail(AD_ERR_VALUE, "%s: NULL argument", op);
    int64_t numel;
    ad_status st = ad_check_shape(op, shape, ndim, dtype, &numel);
    if (st) return st;
    size_t isz = ad_dtype_size_(dtype);
    int64_t cstrides[AD_MAX_DIMS];
    if (!strides) {
        int64_t s = 1;
        for (int i = ndim - 1; i >= 0; i--) {
            cstrides[i] = s;
            s *= shape[i] ? shape[i] : 1;
        }
        strides = cstrides;
    }
    int64_t lo = 0, hi = 0, offset = 0;
    char *base;
    size_t nbytes;
    if (numel == 0) {
        /* nothing is ever read: keep any layout, point at a harmless address */
        base = data ? (char *)data : (char *)empty_data;
        nbytes = 0;
    } else {
        if (!data) return ad_fail(AD_ERR_VALUE, "%s: NULL data for %lld elements", op,
                                  (long long)numel);
        if ((uintptr_t)data % isz)
            return ad_fail(AD_ERR_VALUE, "%s: data address %p is not aligned to %s (%zu bytes)",
                           op, data, ad_dtype_name_(dtype), isz);
        if ((st = view_extent(op, shape, strides, ndim, isz, &lo, &hi))) return st;
        uintptr_t p = (uintptr_t)data, below = (uintptr_t)(-lo) * isz,
                  above = (uintptr_t)hi * isz + isz - 1;
        if (p < below || UINTPTR_MAX - p < above)
            return ad_fail(AD_ERR_VALUE, "%s: the view of shape %s wraps the address space", op,
                           ad_fmt_shape(shape, ndim));
        base = (char *)data + lo * (int64_t)isz;
        nbytes = (size_t)(hi - lo + 1) * isz;
        offset = -lo;
    }
    ext_storage *e = ad_malloc(sizeof *e);
    if (!e) return ad_fail_nomem(op);
    atomic_init(&e->base.refs, 0); /* the view below takes the only reference */
    atomic_init(&e->base.version, 0);
    atomic_init(&e->base.seq, 0); /* even: no write in progress (ad_malloc does not zero) */
    e->base.nbytes = nbytes;
    e->base.data = base;
    e->base.inline_data = false;
    e->base.external = true;
    e->base.readonly = readonly != 0;
    e->base.var_data = false;
    e->release = release;
    e->ctx = ctx;
    /* a prototype carrying only what ad_tensor_view reads (dtype, storage) */
    ad_tensor proto;
    memset(&proto, 0, sizeof proto);
    proto.dtype = (uint8_t)dtype;
    proto.storage = &e->base;
    st = ad_tensor_view(&proto, shape, strides, ndim, offset, out);
    if (st) {
        ad_mfree(e); /* the caller keeps ctx: release is not called on failure */
        return st;
    }
    return AD_OK;
}

AD_API ad_status ad_tensor_from_external(void *data, int dtype, const int64_t *shape,
                                         const int64_t *strides, int ndim, int readonly,
                                         ad_release_fn release, void *ctx, ad_tensor **out) {
    return make_external("from_external", data, dtype, shape, strides, ndim, readonly, release,
                         ctx, out);
}

/* For dlpack.c: same, with the caller's op name in messages. */
ad_status ad_external_tensor_(const char *op, void *data, int dtype, const int64_t *shape,
                              const int64_t *strides, int ndim, int readonly,
                              ad_release_fn release, void *ctx, ad_tensor **out) {
    return make_external(op, data, dtype, shape, strides, ndim, readonly, release, ctx, out);
}

AD_API int ad_tensor_is_readonly(const ad_tensor *t) { return t && t->storage->readonly; }
AD_API int ad_tensor_is_external(const ad_tensor *t) { return t && t->storage->external; }

/* ---- file mappings ----------------------------------------------------------- */
struct ad_mapping {
    atomic_long refs;
    void *data;
    size_t size;
};

AD_API ad_status ad_mapping_open(int fd, ad_mapping **out) {
    if (!out) return ad_fail(AD_ERR_VALUE, "mapping: NULL argument");
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        return ad_fail(AD_ERR_VALUE, "mapping: cannot stat file descriptor %d: %s", fd,
                       strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return ad_fail(AD_ERR_VALUE, "mapping: file descriptor %d is not a regular file", fd);
    if ((uint64_t)sb.st_size > (uint64_t)INT64_MAX / 2)
        return ad_fail(AD_ERR_VALUE, "mapping: file too large");
    ad_mapping *m = ad_malloc(sizeof *m);
    if (!m) return ad_fail_nomem("mapping");
    atomic_init(&m->refs, 1);
    m->size = (size_t)sb.st_size;
    m->data = NULL;
    if (m->size) {
        /* private and writable: pages stay shared with the page cache until
           written, and a consumer that ignores DLPack's read-only flag writes
           its own copy instead of faulting or changing the file */
        void *p = mmap(NULL, m->size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int err = errno;
            ad_mfree(m);
            return ad_fail(err == ENOMEM ? AD_ERR_NOMEM : AD_ERR_VALUE,
                           "mapping: mmap of %zu bytes failed: %s", (size_t)sb.st_size,
                           strerror(err));
        }
        m->data = p;
    }
    *out = m;
    return AD_OK;
}

AD_API void ad_mapping_release(ad_mapping *m) {
    if (!m || atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) != 1) return;
    if (m->data) munmap(m->data, m->size);
    ad_mfree(m);
}

AD_API const void *ad_mapping_data(const ad_mapping *m) { return m ? m->data : NULL; }
AD_API int64_t ad_mapping_size(const ad_mapping *m) { return m ? (int64_t)m->size : 0; }

static void mapping_unref(void *ctx) { ad_mapping_release(ctx); }

AD_API ad_status ad_tensor_from_mapping(ad_mapping *m, int64_t offset, int dtype,
                                        const int64_t *shape, int ndim, ad_tensor **out) {
    if (!m || !out || (ndim > 0 && !shape))
        return ad_fail(AD_ERR_VALUE, "from_mapping: NULL argument");
    int64_t numel;
    ad_status st = ad_check_shape("from_mapping", shape, ndim, dtype, &numel);
    if (st) return st;
    size_t isz = ad_dtype_size_(dtype);
    uint64_t nbytes = (uint64_t)numel * isz; /* ad_check_shape bounds numel * 16 */
    if (offset < 0 || (uint64_t)offset > m->size || nbytes > m->size - (uint64_t)offset)
        return ad_fail(AD_ERR_VALUE,
                       "from_mapping: bytes [%lld, %llu) of %s %s fall outside the %zu mapped "
                       "bytes",
                       (long long)offset, (unsigned long long)((uint64_t)offset + nbytes),
                       ad_dtype_name_(dtype), ad_fmt_shape(shape, ndim), m->size);
    char *p = m->data ? (char *)m->data + offset : NULL;
    if (numel && (uintptr_t)p % isz) /* alignment the format does not promise: copy */
        return ad_tensor_from_data(p, nbytes, dtype, shape, ndim, out);
    atomic_fetch_add_explicit(&m->refs, 1, memory_order_relaxed);
    st = make_external("from_mapping", p, dtype, shape, NULL, ndim, 1, mapping_unref, m, out);
    if (st) ad_mapping_release(m);
    return st;
}
