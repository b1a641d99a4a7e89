/* dlpack.c - DLPack both ways (https://dmlc.github.io/dlpack/latest/).
 *
 * Export: a DLManagedTensor[Versioned] whose manager holds an untracked view of
 * the tensor, i.e. one native reference to its storage, until the consumer
 * calls the deleter.  Import: an external storage whose release callback calls
 * the producer's deleter, once, when the last native reference dies.  The
 * structs are DLPack's ABI (1.0 layout, unchanged since), spelled here so that
 * the library needs no DLPack header. */
#include <string.h>

#include "internal.h"

typedef struct {
    uint32_t major, minor;
} DLPackVersion;

enum { kDLCPU = 1 };
enum { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBool = 6 };
#define DLPACK_FLAG_BITMASK_READ_ONLY (1ULL << 0)
#define DLPACK_FLAG_BITMASK_IS_COPIED (1ULL << 1)

typedef struct {
    int32_t device_type; /* a C enum: int-sized */
    int32_t device_id;
} DLDevice;

typedef struct {
    uint8_t code, bits;
    uint16_t lanes;
} DLDataType;

typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;

static const DLDataType dl_types[] = {
    [AD_FLOAT32] = {kDLFloat, 32, 1}, [AD_FLOAT64] = {kDLFloat, 64, 1},
    [AD_INT64] = {kDLInt, 64, 1},     [AD_INT32] = {kDLInt, 32, 1},
    [AD_UINT8] = {kDLUInt, 8, 1},     [AD_BOOL] = {kDLBool, 8, 1},
};

static int dtype_from_dl(DLDataType t) {
    if (t.lanes != 1) return -1;
    for (int d = 0; d <= AD_BOOL; d++)
        if (dl_types[d].code == t.code && dl_types[d].bits == t.bits) return d;
    return -1;
}

/* ---- export ---------------------------------------------------------------------- */
typedef struct dl_export {
    union {
        DLManagedTensor legacy;
        DLManagedTensorVersioned versioned;
    } m;
    ad_tensor *view; /* keeps the storage alive; its dims are the DLPack shape/strides */
} dl_export;

static void export_free(dl_export *x) {
    ad_tensor_release(x->view);
    ad_mfree(x);
}
static void legacy_deleter(DLManagedTensor *m) { export_free(m->manager_ctx); }
static void versioned_deleter(DLManagedTensorVersioned *m) { export_free(m->manager_ctx); }

AD_API ad_status ad_tensor_to_dlpack(const ad_tensor *t, int versioned, int copied,
                                     void **out) {
    if (!t || !out) return ad_fail(AD_ERR_VALUE, "__dlpack__: NULL argument");
    dl_export *x = ad_calloc(sizeof *x);
    if (!x) return ad_fail_nomem("__dlpack__");
    ad_status st = ad_tensor_view(t, T_SHAPE(t), T_STRIDES(t), t->ndim, t->offset, &x->view);
    if (st) {
        ad_mfree(x);
        return st;
    }
    DLTensor dl = {
        .data = ad_ptr(x->view),
        .device = {kDLCPU, 0},
        .ndim = x->view->ndim,
        .dtype = dl_types[t->dtype],
        .shape = T_SHAPE(x->view),
        .strides = T_STRIDES(x->view),
        .byte_offset = 0,
    };
    if (versioned) {
        x->m.versioned.version = (DLPackVersion){1, 0};
        x->m.versioned.manager_ctx = x;
        x->m.versioned.deleter = versioned_deleter;
        /* tensors are immutable; a copy made for the consumer is its own */
        x->m.versioned.flags =
            copied ? DLPACK_FLAG_BITMASK_IS_COPIED : DLPACK_FLAG_BITMASK_READ_ONLY;
        x->m.versioned.dl_tensor = dl;
        *out = &x->m.versioned;
    } else {
        x->m.legacy.dl_tensor = dl;
        x->m.legacy.manager_ctx = x;
        x->m.legacy.deleter = legacy_deleter;
        *out = &x->m.legacy;
    }
    return AD_OK;
}

AD_API void ad_dlpack_delete(void *managed, int versioned) {
    if (!managed) return;
    if (versioned) {
        DLManagedTensorVersioned *m = managed;
        if (m->deleter) m->deleter(m);
    } else {
        DLManagedTensor *m = managed;
        if (m->deleter) m->deleter(m);
    }
}

/* ---- import ------------------------------------------------------------------------ */
static void release_legacy(void *m) { ad_dlpack_delete(m, 0); }
static void release_versioned(void *m) { ad_dlpack_delete(m, 1); }

AD_API ad_status ad_tensor_from_dlpack(void *managed, int versioned, ad_tensor **out) {
    if (!managed || !out) return ad_fail(AD_ERR_VALUE, "from_dlpack: NULL argument");
    const DLTensor *dl;
    int readonly = 0;
    if (versioned) {
        const DLManagedTensorVersioned *m = managed;
        if (m->version.major != 1)
            return ad_fail(AD_ERR_VALUE,
                           "from_dlpack: the producer's DLPack version %u.%u is not supported "
                           "(major version 1 is)",
                           m->version.major, m->version.minor);
        readonly = (m->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0;
        dl = &m->dl_tensor;
    } else {
        dl = &((const DLManagedTensor *)managed)->dl_tensor;
    }
    if (dl->device.device_type != kDLCPU)
        return ad_fail(AD_ERR_VALUE,
                       "from_dlpack: only CPU memory (device type 1) is supported, got device "
                       "type %d",
                       (int)dl->device.device_type);
    int dtype = dtype_from_dl(dl->dtype);
    if (dtype < 0)
        return ad_fail(AD_ERR_DTYPE,
                       "from_dlpack: DLPack dtype (code %u, %u bits, %u lanes) is not supported "
                       "(float32, float64, int64, int32, uint8, bool are)",
                       dl->dtype.code, dl->dtype.bits, dl->dtype.lanes);
    if (dl->ndim < 0 || dl->ndim > AD_MAX_DIMS)
        return ad_fail(AD_ERR_SHAPE, "from_dlpack: %d dims, at most %d supported", (int)dl->ndim,
                       AD_MAX_DIMS);
    if (dl->ndim > 0 && !dl->shape) return ad_fail(AD_ERR_VALUE, "from_dlpack: NULL shape");
    char *data = dl->data ? (char *)dl->data + dl->byte_offset : NULL;
    return ad_external_tensor_("from_dlpack", data, dtype, dl->shape, dl->strides, dl->ndim,
                               readonly, versioned ? release_versioned : release_legacy,
                               managed, out);
}
