"""The cffi builder (API mode, out-of-line).

The declarations come from the public header itself, the region between its
cffi markers, so the binding can never drift from the ABI.
"""
import os
import re

import cffi

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADER = os.path.join(ROOT, "native", "include", "pyautodiff.h")
PKG = os.path.join(ROOT, "pyautodiff")


def region(text, marker):
    body = text.split(f"/* {marker}:begin */", 1)[1].split(f"/* {marker}:end */", 1)[0]
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    lines = [ln for ln in body.splitlines() if not ln.lstrip().startswith("#")]
    return re.sub(r"\bAD_API\s+", "", "\n".join(lines))


def cdef_from_header(path=HEADER):
    """The stable ABI plus the AD_TESTING hooks (the tests drive them through
    this module; they are declared apart so that C callers opt in)."""
    text = open(path).read()
    return region(text, "cffi") + "\n" + region(text, "cffi-testing")


# C helpers that need the Python C API (pyautodiff/interop.py): the DLPack
# capsule destructor, and the release callback of a tensor sharing a Python
# object's memory.  They run without Python code, so they are safe in any
# thread and during interpreter shutdown.  Also the C form of Tensor's
# finalizer (pyautodiff/tensor.py), which does call Python and runs, as every
# finalizer, with the GIL.
PY_HELPERS_CDEF = """
int _ad_install_finalizer(void);
int _ad_install_fast_methods(void);
int _ad_install_buffer(void);
int _ad_buffer_subclasses(void);
void _ad_custom_release_guarded(void *ctx);
void _ad_custom_shutdown(void);
void _ad_capsule_destructor(void *capsule);
void _ad_pyobject_release(void *obj);
const char *_ad_capsule_name(int which);
"""
PY_HELPERS_SOURCE = r"""
/* An ad.Function node's release when its graph dies: into Python
   (function.py), unless the interpreter is already shutting down (an atexit
   hook of function.py calls _ad_custom_shutdown), when cffi can no longer
   reach the callback and the process is ending anyway. */
static void _ad_custom_release(void *);
static volatile int _ad_custom_exiting;
static void _ad_custom_shutdown(void) { _ad_custom_exiting = 1; }
static void _ad_custom_release_guarded(void *ctx) {
    if (_ad_custom_exiting || !Py_IsInitialized()) return;
    _ad_custom_release(ctx);
}

static const char *const _ad_capsule_names[4] = {
    "dltensor", "dltensor_versioned", "used_dltensor", "used_dltensor_versioned"};

/* Static names: a capsule keeps a pointer to its name for its whole life. */
static const char *_ad_capsule_name(int which) {
    return which >= 0 && which < 4 ? _ad_capsule_names[which] : NULL;
}

/* Called (with the GIL) when a capsule made by Tensor.__dlpack__ dies.  A
   consumer that took the tensor renamed it "used_..." and owns it now. */
static void _ad_capsule_destructor(void *capsule) {
    PyObject *c = (PyObject *)capsule;
    if (PyCapsule_IsValid(c, _ad_capsule_names[1]))
        ad_dlpack_delete(PyCapsule_GetPointer(c, _ad_capsule_names[1]), 1);
    else if (PyCapsule_IsValid(c, _ad_capsule_names[0]))
        ad_dlpack_delete(PyCapsule_GetPointer(c, _ad_capsule_names[0]), 0);
}

/* Tensor.__del__ as the finalizer of Tensor and Var, in C: the same steps
   (pyautodiff/tensor.py) without the Python frame: a 1000-element add with
   its result's release took about 7200 instructions with the Python
   finalizer, 5800 with this one (callgrind), 615 -> 475 ns (thread time).
   Unlike the helpers above it runs Python code (the cffi calls below) and
   needs the GIL, which a finalizer always holds.  A tensor whose _h slot is
   empty is released already; else it takes its class's released form from
   tensor._RELEASED (as __class__ assignment does it for these
   layout-identical heap types) and its handle goes to
   ad_tensor_release_quick, then ad_tensor_release when that declines,
   through the same cffi functions the Python code calls.  A class without a
   released form yet takes the Python __del__.  Explicit t.__del__() calls
   still run the Python method.  tensor.py installs it through
   _ad_install_finalizer (which keeps the GIL, KEEP_GIL) for the classes in
   its _FAST_FINALIZE, once those have their released forms; any failure
   leaves the Python finalizer in place. */
#include <structmember.h> /* T_OBJECT_EX, T_PYSSIZET */
#ifndef Py_T_OBJECT_EX
#define Py_T_OBJECT_EX T_OBJECT_EX
#endif
#ifndef Py_T_PYSSIZET
#define Py_T_PYSSIZET T_PYSSIZET
#define Py_READONLY READONLY
#endif
#if PY_VERSION_HEX >= 0x030C0000 /* the pending exception, saved and put back */
#define AD_EXC_SAVE(e) PyObject *e = PyErr_GetRaisedException()
#define AD_EXC_RESTORE(e) PyErr_SetRaisedException(e)
#else
typedef struct { PyObject *t, *v, *tb; } ad_exc_state;
#define AD_EXC_SAVE(e) ad_exc_state e; PyErr_Fetch(&e.t, &e.v, &e.tb)
#define AD_EXC_RESTORE(e) PyErr_Restore(e.t, e.v, e.tb)
#endif
static PyObject *_ad_fin_released, *_ad_fin_quick, *_ad_fin_release, *_ad_fin_pydel;
static Py_ssize_t _ad_fin_offset;

static void _ad_tensor_finalize(PyObject *self) {
    PyObject *h = *(PyObject **)((char *)self + _ad_fin_offset);
    if (!h) return;
    AD_EXC_SAVE(exc);
    PyObject *rel = PyDict_GetItemWithError(_ad_fin_released, (PyObject *)Py_TYPE(self));
    if (!rel) {
        PyObject *r = PyErr_Occurred() ? NULL : PyObject_CallOneArg(_ad_fin_pydel, self);
        if (r) Py_DECREF(r);
        else PyErr_WriteUnraisable(_ad_fin_pydel);
        AD_EXC_RESTORE(exc);
        return;
    }
    PyTypeObject *old = Py_TYPE(self);
    Py_INCREF(rel);
    Py_SET_TYPE(self, (PyTypeObject *)rel);
    Py_DECREF(old);
    Py_INCREF(h); /* held across the calls; the slot keeps its own reference */
    PyObject *r = PyObject_CallOneArg(_ad_fin_quick, h);
    int done = r ? PyObject_IsTrue(r) : -1;
    Py_XDECREF(r);
    if (done == 0) {
        r = PyObject_CallOneArg(_ad_fin_release, h);
        if (r) Py_DECREF(r);
        else done = -1;
    }
    Py_DECREF(h);
    if (done < 0) PyErr_WriteUnraisable(self);
    AD_EXC_RESTORE(exc);
}

#define AD_TYPE(o) ((PyTypeObject *)(o))
static PyObject *_ad_type_entry(PyObject *cls, const char *name) { /* borrowed, or NULL */
    return PyDict_GetItemString(AD_TYPE(cls)->tp_dict, name);
}

/* the offset of Tensor's _h slot (an object member), or -1 */
static Py_ssize_t _ad_handle_offset(PyObject *base) {
    PyObject *slot = _ad_type_entry(base, "_h");
    if (!slot || Py_TYPE(slot) != &PyMemberDescr_Type ||
        ((PyMemberDescrObject *)slot)->d_member->type != Py_T_OBJECT_EX)
        return -1;
    return ((PyMemberDescrObject *)slot)->d_member->offset;
}

/* c is Tensor (base) or a subclass of its layout */
static int _ad_same_layout(PyObject *c, PyObject *base) {
    return PyType_Check(c) && PyType_IsSubtype(AD_TYPE(c), AD_TYPE(base)) &&
           AD_TYPE(c)->tp_basicsize == AD_TYPE(base)->tp_basicsize;
}

static int _ad_install_finalizer(void) {
    if (_ad_fin_released) return 0; /* installed already */
    PyObject *mod = PyImport_ImportModule("pyautodiff.tensor"), *classes = NULL;
    PyObject *rel = NULL, *quick = NULL, *release = NULL;
    if (!mod || !(classes = PyObject_GetAttrString(mod, "_FAST_FINALIZE")) ||
        !PyTuple_Check(classes) || PyTuple_GET_SIZE(classes) == 0)
        goto fail;
    PyObject *base = PyTuple_GET_ITEM(classes, 0); /* Tensor */
    if (!PyType_Check(base)) goto fail;
    Py_ssize_t offset = _ad_handle_offset(base);
    PyObject *pydel = _ad_type_entry(base, "__del__");
    if (offset < 0 || !pydel) goto fail;
    rel = PyObject_GetAttrString(mod, "_RELEASED");
    quick = PyObject_GetAttrString(mod, "_release_quick");
    release = PyObject_GetAttrString(mod, "_release");
    if (!rel || !PyDict_Check(rel) || !quick || !release) goto fail;
    /* each class: Tensor or a subclass of its layout that keeps its __del__,
       with a released form */
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(classes); i++) {
        PyObject *c = PyTuple_GET_ITEM(classes, i);
        if (!_ad_same_layout(c, base) ||
            _ad_type_entry(c, "__del__") != (c == base ? pydel : NULL) || !PyDict_GetItem(rel, c))
            goto fail;
    }
    _ad_fin_offset = offset;
    _ad_fin_released = rel;
    _ad_fin_quick = quick;
    _ad_fin_release = release;
    Py_INCREF(pydel);
    _ad_fin_pydel = pydel;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(classes); i++)
        AD_TYPE(PyTuple_GET_ITEM(classes, i))->tp_finalize = _ad_tensor_finalize;
    Py_DECREF(classes);
    Py_DECREF(mod);
    return 0;
fail:
    PyErr_Clear();
    Py_XDECREF(rel);
    Py_XDECREF(quick);
    Py_XDECREF(release);
    Py_XDECREF(classes);
    Py_XDECREF(mod);
    return -1;
}

/* Tensor's hottest methods in C: the unary methods without arguments
   (t.exp(), -t), + - * / @ with a tensor or a Python number, and the rows
   below.  Each is an _ad_fastmethod holding the Python method it stands for
   (tensor.py, _FAST_METHODS): it makes the same quick call that method makes
   first and builds the Tensor the same way.  When the quick call declines
   on operands it takes (a large or strided tensor, broadcasting: a float
   tensor's, for a number), it makes the ordinary call the method makes next
   (ad_unary, ad_binary, ad_scalar_op) and raises that call's error as the
   method raises it (through _lib.raise_status, so that a failure is not met
   twice); everything else goes to the Python method with the same
   arguments, which does the rest and raises what it raises.  No Python
   frame runs on these paths: a 1000-element add with its result's release took about 5900
   instructions with the Python methods, 3800 with these (callgrind).
   Introspection sees the Python method: __wrapped__ is it, and __doc__,
   __name__, __qualname__, __module__, __annotations__ and anything else this
   object lacks come from it, so inspect.signature and help() read as before.
   It binds as a function does (a method descriptor, so LOAD_METHOD and the
   operator slots call it with self first and no bound-method object).
   tensor.py installs the methods through _ad_install_fast_methods (KEEP_GIL)
   after the class is built; any failure leaves the Python methods in place;
   PYAUTODIFF_PYTHON_METHODS=1 keeps them throughout. */
/* REDUCE: over every dim; the layout methods (ad_view_quick): T t(), TRANSPOSE
   transpose(d0, d1), DIMS reshape / permute / broadcast_to with the ints as
   arguments or in one tuple or list (op: which), GETITEM t[key] for ints,
   slices and None; the readers, which return no tensor: SHAPE the getter of
   the shape (op 0) or strides (op 1) property (the row's attribute is a property: its
   fget is wrapped and the wrapper set as a new property's), ITEM item() of a
   one-element tensor; CALL tensor._call(op, inputs, iargs=(), fargs=()), the
   generic entry every other op takes (the row's first element is the module,
   whose function of that name the wrapper replaces): ad_op_call, the
   interpreter lock released around it as cffi releases it; FROM_NUMPY
   tensor.from_numpy(a) of a writable C-contiguous numpy array (exactly
   numpy.ndarray) of one of the dtypes, not empty: the copy its Python form
   makes first (interop.py), the array read through the buffer protocol
   (the module's function replaced as CALL's) */
enum { AD_FM_UNARY, AD_FM_BINARY, AD_FM_REDUCE, AD_FM_T, AD_FM_TRANSPOSE, AD_FM_DIMS,
       AD_FM_GETITEM, AD_FM_SHAPE, AD_FM_ITEM, AD_FM_CALL, AD_FM_FROM_NUMPY, AD_FM__COUNT };
/* a BINARY row's scalar op: a number becomes a 0-d tensor of a float tensor's
   dtype (the comparisons; tensor.py's _SCALAR_AS_TENSOR) */
enum { AD_FM_SCALAR_AS_TENSOR = -2 };
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *func; /* the Python method */
    int kind, op, sop, reflected, negate; /* sop: the tensor-scalar op, -1 none */
} _ad_fastmethod;

static PyTypeObject *_ad_fm_tensor; /* Tensor: the results' class */
static PyTypeObject *_ad_fm_classes[4]; /* the operands' classes read here, NULL-ended */
static struct _cffi_ctypedescr *_ad_fm_ctype; /* ad_tensor *, the handles' cffi type */
static Py_ssize_t _ad_fm_offset; /* of the _h slot */

/* the handle of an operand, or NULL (the Python method then decides).  Only
   instances of tensor._FAST_FINALIZE's classes themselves (Tensor, Var) have
   their slot read here: there it is what self._h reads.  A subclass may
   change attribute lookup, and a released tensor's class (a subclass) keeps
   its freed handle in the slot, its lookups raising instead. */
static ad_tensor *_ad_fm_handle(PyObject *o) {
    PyTypeObject *tp = Py_TYPE(o);
    int i = 0;
    while (_ad_fm_classes[i] && _ad_fm_classes[i] != tp) i++;
    if (!_ad_fm_classes[i]) return NULL;
    PyObject *h = *(PyObject **)((char *)o + _ad_fm_offset);
    if (!h) return NULL;
    char *p = _cffi_to_c_pointer(h, _ad_fm_ctype);
    if (!p) PyErr_Clear();
    return (ad_tensor *)p;
}

/* a Python float, or an int a double holds exactly (as the Python method's
   test: type(o) is float, or type(o) is int and |o| <= 2**53) */
static int _ad_fm_scalar(PyObject *o, double *s) {
    if (PyFloat_CheckExact(o)) {
        *s = PyFloat_AS_DOUBLE(o);
        return 1;
    }
    if (PyLong_CheckExact(o)) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (overflow || v < -(1LL << 53) || v > (1LL << 53)) return 0;
        *s = (double)v;
        return 1;
    }
    return 0;
}

/* drops a handle this module owns, as Tensor.__del__ does */
static void _ad_fm_drop(ad_tensor *r) {
    if (!ad_tensor_release_quick(r)) ad_tensor_release(r);
}

/* a Tensor owning the new handle r, as tensor.py's _new(Tensor) and t._h = h */
static PyObject *_ad_fm_wrap(ad_tensor *r) {
    PyObject *h = _cffi_from_c_pointer((char *)r, _ad_fm_ctype);
    PyObject *t = h ? _ad_fm_tensor->tp_alloc(_ad_fm_tensor, 0) : NULL;
    if (!t) {
        Py_XDECREF(h);
        _ad_fm_drop(r);
        return NULL;
    }
    *(PyObject **)((char *)t + _ad_fm_offset) = h;
    return t;
}

/* an exact Python int that fits int64 (bool, numpy ints and overflow: no) */
static int _ad_fm_int(PyObject *o, int64_t *v) {
    int overflow;
    if (!PyLong_CheckExact(o)) return 0;
    long long r = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (r == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    *v = (int64_t)r;
    return 1;
}

enum { AD_FM_MAX_DIMS = 16 }; /* the library's */

/* the items of an exact tuple or list of at most `most` */
static int _ad_fm_seq(PyObject *o, Py_ssize_t most, PyObject ***items, Py_ssize_t *n) {
    if (PyTuple_CheckExact(o)) {
        *items = &PyTuple_GET_ITEM(o, 0), *n = PyTuple_GET_SIZE(o);
    } else if (PyList_CheckExact(o)) {
        *items = PySequence_Fast_ITEMS(o), *n = PyList_GET_SIZE(o);
    } else {
        return 0;
    }
    return *n <= most;
}

/* items[0..n) into v when every one is an exact int in int64 (_ad_fm_int) */
static int _ad_fm_ints(PyObject *const *items, Py_ssize_t n, int64_t *v) {
    for (Py_ssize_t i = 0; i < n; i++)
        if (!_ad_fm_int(items[i], &v[i])) return 0;
    return 1;
}

/* dims d0 and d1 of an nd-dim x swapped, as transpose's permutation */
static ad_tensor *_ad_fm_swap(ad_tensor *x, int nd, int64_t d0, int64_t d1) {
    if (d0 < -nd || d0 >= nd || d1 < -nd || d1 >= nd) return NULL;
    int64_t perm[AD_FM_MAX_DIMS];
    for (int i = 0; i < nd; i++) perm[i] = i;
    d0 += d0 < 0 ? nd : 0;
    d1 += d1 < 0 ? nd : 0;
    perm[d0] = d1, perm[d1] = d0;
    return ad_view_quick(AD_OP_PERMUTE, x, perm, nd);
}

/* *out replaced by its view (op, iargs), the tensor it replaces dropped if
   *owned; 0: declined, *out unchanged */
static int _ad_fm_step(ad_tensor **out, int *owned, int op, const int64_t *iargs, int n) {
    ad_tensor *next = ad_view_quick(op, *out, iargs, n);
    if (!next) return 0;
    if (*owned) _ad_fm_drop(*out);
    *out = next, *owned = 1;
    return 1;
}

/* t[key] for an exact int, a slice, or a tuple of them (at most one per
   dim), as indexing.py's getitem: a slice that is not the whole dim a slice
   view, an int a slice of length 1, then one reshape dropping the ints'
   dims (*self: nothing to do, the result is x itself) */
static ad_tensor *_ad_fm_getitem(ad_tensor *x, PyObject *key, int *self) {
    PyObject *const *keys = &key;
    Py_ssize_t nk = 1;
    if (PyTuple_CheckExact(key)) {
        keys = PySequence_Fast_ITEMS(key);
        nk = PyTuple_GET_SIZE(key);
    }
    int nd = ad_tensor_ndim(x), nf = 0, owned = 0, d = 0;
    int64_t shape[AD_FM_MAX_DIMS], final[AD_FM_MAX_DIMS];
    if (nk < 1 || nd > AD_FM_MAX_DIMS) return NULL;
    ad_tensor_shape(x, shape);
    ad_tensor *out = x;
    for (Py_ssize_t k = 0; k < nk; k++) { /* key k, x's dim d */
        int64_t i, sl[4] = {d, 0, 1, 1};
        Py_ssize_t start, stop, step;
        if (nf == AD_FM_MAX_DIMS) goto decline;
        if (keys[k] == Py_None) { /* a new dim of size 1 */
            final[nf++] = 1;
            continue;
        }
        if (d == nd) goto decline; /* more indices than dims */
        if (_ad_fm_int(keys[k], &i)) {
            if (i < -shape[d] || i >= shape[d]) goto decline;
            sl[1] = i < 0 ? i + shape[d] : i;
        } else if (PySlice_Check(keys[k])) {
            if (PySlice_Unpack(keys[k], &start, &stop, &step) < 0) {
                PyErr_Clear();
                goto decline;
            }
            Py_ssize_t len = PySlice_AdjustIndices((Py_ssize_t)shape[d], &start, &stop, step);
            final[nf++] = len;
            if (start == 0 && step == 1 && len == shape[d]) {
                d++;
                continue;
            }
            sl[1] = len ? start : 0, sl[2] = step, sl[3] = len;
        } else {
            goto decline;
        }
        if (!_ad_fm_step(&out, &owned, AD_OP_SLICE, sl, 4)) goto decline;
        d++;
    }
    for (; d < nd; d++) {
        if (nf == AD_FM_MAX_DIMS) goto decline;
        final[nf++] = shape[d];
    }
    /* ints: their dims dropped; None: dims of size 1 added (as the Python
       method, only when that changes the shape) */
    int64_t cur[AD_FM_MAX_DIMS];
    ad_tensor_shape(out, cur);
    if ((ad_tensor_ndim(out) != nf || memcmp(cur, final, (size_t)nf * sizeof *cur)) &&
        !_ad_fm_step(&out, &owned, AD_OP_RESHAPE, final, nf))
        goto decline;
    if (!owned) *self = 1;
    return owned ? out : NULL;
decline:
    if (owned) _ad_fm_drop(out);
    return NULL;
}

/* the layout methods' quick view (NULL: the Python method runs; *self: the
   result is self) */
static ad_tensor *_ad_fm_view(int kind, int op, ad_tensor *x, PyObject *const *args,
                              Py_ssize_t n, int *self) {
    int64_t v[AD_FM_MAX_DIMS];
    if (kind == AD_FM_T) {
        int nd = ad_tensor_ndim(x);
        return n == 1 && nd >= 2 ? _ad_fm_swap(x, nd, -2, -1) : NULL;
    }
    if (kind == AD_FM_TRANSPOSE)
        return n == 3 && _ad_fm_int(args[1], &v[0]) && _ad_fm_int(args[2], &v[1])
                   ? _ad_fm_swap(x, ad_tensor_ndim(x), v[0], v[1])
                   : NULL;
    if (kind == AD_FM_GETITEM) return n == 2 ? _ad_fm_getitem(x, args[1], self) : NULL;
    /* reshape(2, 3) or reshape((2, 3)) / reshape([2, 3]), permute alike */
    PyObject **items;
    PyObject *const *dims = args + 1;
    Py_ssize_t nd = n - 1;
    if (n == 2 && _ad_fm_seq(args[1], AD_FM_MAX_DIMS, &items, &nd)) dims = items;
    else if (n < 2 || nd > AD_FM_MAX_DIMS) return NULL;
    return _ad_fm_ints(dims, nd, v) ? ad_view_quick(op, x, v, (int)nd) : NULL;
}

/* x's shape (op 0) or strides (op 1) as a tuple of ints */
static PyObject *_ad_fm_shape(const ad_tensor *x, int op) {
    int64_t v[AD_FM_MAX_DIMS];
    int nd = ad_tensor_ndim(x);
    if (nd > AD_FM_MAX_DIMS) return NULL;
    if (op) ad_tensor_strides(x, v);
    else ad_tensor_shape(x, v);
    PyObject *t = PyTuple_New(nd);
    for (int d = 0; t && d < nd; d++) {
        PyObject *e = PyLong_FromLongLong(v[d]);
        if (!e) Py_CLEAR(t);
        else PyTuple_SET_ITEM(t, d, e);
    }
    return t;
}

/* the one element of x as a Python float, int or bool (as numpy's item());
   NULL without an error for any other element count */
static PyObject *_ad_fm_item(const ad_tensor *x) {
    if (ad_tensor_numel(x) != 1) return NULL;
    const void *p = ad_tensor_data(x);
    switch (ad_tensor_dtype(x)) {
    case AD_FLOAT32: return PyFloat_FromDouble(*(const float *)p);
    case AD_FLOAT64: return PyFloat_FromDouble(*(const double *)p);
    case AD_INT64: return PyLong_FromLongLong(*(const int64_t *)p);
    case AD_INT32: return PyLong_FromLong(*(const int32_t *)p);
    case AD_UINT8: return PyLong_FromLong(*(const uint8_t *)p);
    case AD_BOOL: return PyBool_FromLong(*(const uint8_t *)p);
    default: return NULL;
    }
}

/* _call's arguments: op, a tuple or list of up to 8 tensors (of the classes
   read here), and tuples or lists of Python ints (_ad_fm_ints) and of
   Python floats or ints; 0 for anything else (other sequences, cffi arrays,
   bools, numpy scalars, too many), and the Python function takes them */
enum { AD_FM_MAX_ARGS = 64 };

static int _ad_fm_double(PyObject *o, double *v) {
    if (PyFloat_CheckExact(o)) {
        *v = PyFloat_AS_DOUBLE(o);
        return 1;
    }
    if (!PyLong_CheckExact(o)) return 0;
    *v = PyLong_AsDouble(o);
    if (*v == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

/* the result of ad_op_call, or NULL: declined, or the call failed (its
   status in *st) */
static ad_tensor *_ad_fm_opcall(PyObject *const *args, Py_ssize_t n, ad_status *st) {
    ad_tensor *in[8], *out = NULL;
    int64_t iv[AD_FM_MAX_ARGS];
    double fv[AD_FM_MAX_ARGS];
    PyObject **items;
    Py_ssize_t ni = 0, nf = 0, nt;
    int64_t op;
    if (n < 2 || n > 4 || !_ad_fm_int(args[0], &op) || op < 0 || op > INT32_MAX ||
        !_ad_fm_seq(args[1], 8, &items, &nt))
        return NULL;
    PyObject *held[8]; /* a list's items may leave it while the lock is released */
    for (Py_ssize_t i = 0; i < nt; i++)
        if (!(in[i] = _ad_fm_handle(held[i] = items[i]))) return NULL;
    if (n > 2 && (!_ad_fm_seq(args[2], AD_FM_MAX_ARGS, &items, &ni) || !_ad_fm_ints(items, ni, iv)))
        return NULL;
    if (n > 3) {
        if (!_ad_fm_seq(args[3], AD_FM_MAX_ARGS, &items, &nf)) return NULL;
        for (Py_ssize_t i = 0; i < nf; i++)
            if (!_ad_fm_double(items[i], &fv[i])) return NULL;
    }
    for (Py_ssize_t i = 0; i < nt; i++) Py_INCREF(held[i]);
    Py_BEGIN_ALLOW_THREADS
    *st = ad_op_call((int)op, (const ad_tensor *const *)in, (int)nt, ni ? iv : NULL, (int)ni,
                     nf ? fv : NULL, (int)nf, &out);
    Py_END_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < nt; i++) Py_DECREF(held[i]);
    return *st ? NULL : out;
}

/* from_numpy(a)'s copy, or NULL: declined (another type, a read-only,
   strided, empty or non-native array: the Python function decides), or
   the call failed (its status in *st).  (4, 4) float32, Zen 4: 1.5 -> 0.25
   us (torch.from_numpy, which shares, 1.1).  The lock is released around
   the copy from 64 KiB on (as cffi releases it for every call). */
static PyTypeObject *_ad_fm_ndarray; /* numpy.ndarray */
static ad_tensor *_ad_fm_from_numpy(PyObject *a, ad_status *st) {
    Py_buffer v;
    if (Py_TYPE(a) != _ad_fm_ndarray) return NULL;
    if (PyObject_GetBuffer(a, &v, PyBUF_RECORDS_RO) < 0) {
        PyErr_Clear();
        return NULL;
    }
    int dt = -1;
    if (v.format && v.format[0] && !v.format[1]) {
        switch (v.format[0]) {
        case 'f': dt = AD_FLOAT32; break;
        case 'd': dt = AD_FLOAT64; break;
        case 'l': case 'q': dt = AD_INT64; break;
        case 'i': dt = AD_INT32; break;
        case 'B': dt = AD_UINT8; break;
        case '?': dt = AD_BOOL; break;
        }
    }
    ad_tensor *out = NULL;
    int64_t shape[AD_FM_MAX_DIMS];
    if (dt >= 0 && v.itemsize == (Py_ssize_t)ad_dtype_size(dt) && !v.readonly && v.len > 0 &&
        v.ndim <= AD_FM_MAX_DIMS && PyBuffer_IsContiguous(&v, 'C')) {
        for (int d = 0; d < v.ndim; d++) shape[d] = v.shape[d];
        if (v.len < (1 << 16)) {
            *st = ad_tensor_from_data(v.buf, (size_t)v.len, dt, shape, v.ndim, &out);
        } else {
            Py_BEGIN_ALLOW_THREADS
            *st = ad_tensor_from_data(v.buf, (size_t)v.len, dt, shape, v.ndim, &out);
            Py_END_ALLOW_THREADS
        }
    }
    PyBuffer_Release(&v);
    return *st ? NULL : out;
}

/* the exception of a failed call, as the Python methods raise it
   (pyautodiff._lib.raise_status, fetched at install) */
static PyObject *_ad_fm_raise_status;
static PyObject *_ad_fm_raise(ad_status st) {
    PyObject *r = PyObject_CallFunction(_ad_fm_raise_status, "i", (int)st);
    if (r) { /* it returned: not a failure after all */
        Py_DECREF(r);
        PyErr_Format(PyExc_SystemError, "pyautodiff: status %d raised nothing", (int)st);
    }
    return NULL;
}

/* The ordinary call the Python method makes when the quick call declines
   (kind UNARY: ad_unary; BINARY: ad_binary with b, else ad_scalar_op with
   s), the lock released around it as cffi releases it; NULL and its status
   in *st when it fails (raised as the Python method raises it).  The
   caller's references keep the operands alive. */
static ad_tensor *_ad_fm_ordinary(int kind, int op, const ad_tensor *a, const ad_tensor *b,
                                  double s, ad_status *st) {
    ad_tensor *out = NULL;
    Py_BEGIN_ALLOW_THREADS
    *st = kind == AD_FM_UNARY ? ad_unary(op, a, &out)
          : b                 ? ad_binary(op, a, b, &out)
                              : ad_scalar_op(op, a, s, &out);
    Py_END_ALLOW_THREADS
    return *st ? NULL : out;
}

static PyObject *_ad_fm_call(PyObject *callable, PyObject *const *args, size_t nargsf,
                             PyObject *kwnames) {
    _ad_fastmethod *m = (_ad_fastmethod *)callable;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    ad_tensor *x, *r = NULL;
    ad_status st = 0; /* an ordinary call made here that failed */
    if (m->kind == AD_FM_CALL) {
        if (!kwnames) r = _ad_fm_opcall(args, n, &st);
    } else if (m->kind == AD_FM_FROM_NUMPY) {
        if (!kwnames && n == 1) r = _ad_fm_from_numpy(args[0], &st);
    } else if (!kwnames && n == 1 && m->kind >= AD_FM_SHAPE && (x = _ad_fm_handle(args[0]))) {
        PyObject *v = m->kind == AD_FM_SHAPE ? _ad_fm_shape(x, m->op) : _ad_fm_item(x);
        if (v || PyErr_Occurred()) return v;
    } else if (!kwnames && n >= 1 && m->kind >= AD_FM_T && m->kind <= AD_FM_GETITEM &&
               (x = _ad_fm_handle(args[0]))) {
        int self = 0;
        r = _ad_fm_view(m->kind, m->op, x, args, n, &self);
        if (self) {
            Py_INCREF(args[0]);
            return args[0];
        }
    } else if (!kwnames && n == 1 + (m->kind == AD_FM_BINARY) && (x = _ad_fm_handle(args[0]))) {
        if (m->kind == AD_FM_UNARY) {
            if (!(r = ad_unary_quick(m->op, x)))
                r = _ad_fm_ordinary(m->kind, m->op, x, NULL, 0.0, &st);
        } else if (m->kind == AD_FM_REDUCE) {
            r = ad_reduce_quick(m->op, x);
        } else if (PyObject_TypeCheck(args[1], _ad_fm_tensor)) { /* isinstance(o, Tensor) */
            ad_tensor *y = _ad_fm_handle(args[1]);
            if (y && m->reflected) {
                ad_tensor *t = x;
                x = y, y = t;
            }
            if (y && !(r = ad_binary_quick(m->op, x, y)))
                r = _ad_fm_ordinary(m->kind, m->op, x, y, 0.0, &st);
        } else {
            double s;
            int dt = ad_tensor_dtype(x);
            if (m->sop >= 0 && _ad_fm_scalar(args[1], &s)) {
                s = m->negate ? -s : s;
                /* an integer tensor's scalar: the Python method checks it first */
                r = ad_scalar_quick(m->sop, x, s);
                if (!r && (dt == AD_FLOAT32 || dt == AD_FLOAT64))
                    r = _ad_fm_ordinary(m->kind, m->sop, x, NULL, s, &st);
            } else if (m->sop == AD_FM_SCALAR_AS_TENSOR && (dt == AD_FLOAT32 || dt == AD_FLOAT64) &&
                       _ad_fm_scalar(args[1], &s)) {
                /* a float tensor's comparison with a number: the 0-d tensor of
                   its dtype the Python method makes (tensor._full_like_scalar),
                   then the binary op */
                ad_tensor *z = NULL;
                if (!(st = ad_tensor_full(s, dt, NULL, 0, &z))) {
                    r = _ad_fm_ordinary(m->kind, m->op, x, z, 0.0, &st);
                    _ad_fm_drop(z);
                }
            }
        }
    }
    if (r) return _ad_fm_wrap(r);
    /* a matmul's shape error may be numpy's 1-d promotion: the Python method's */
    if (st && !(st == AD_ERR_SHAPE && m->op == AD_OP_MATMUL)) return _ad_fm_raise(st);
    return PyObject_Vectorcall(m->func, args, nargsf, kwnames);
}

/* t.exp binds as a function: the object itself on the class, else a bound method */
static PyObject *_ad_fm_get(PyObject *self, PyObject *obj, PyObject *type) {
    (void)type;
    if (!obj || obj == Py_None) {
        Py_INCREF(self);
        return self;
    }
    return PyMethod_New(self, obj);
}

static PyObject *_ad_fm_getattro(PyObject *self, PyObject *name) {
    PyObject *func = ((_ad_fastmethod *)self)->func;
    if (PyUnicode_Check(name)) {
        if (PyUnicode_CompareWithASCIIString(name, "__wrapped__") == 0) {
            Py_INCREF(func);
            return func;
        }
        /* the type's own __doc__ and __module__ would shadow the method's */
        if (PyUnicode_CompareWithASCIIString(name, "__doc__") == 0 ||
            PyUnicode_CompareWithASCIIString(name, "__module__") == 0)
            return PyObject_GetAttr(func, name);
    }
    PyObject *r = PyObject_GenericGetAttr(self, name);
    if (r || !PyErr_ExceptionMatches(PyExc_AttributeError)) return r;
    PyErr_Clear();
    return PyObject_GetAttr(func, name);
}

/* pickled by name, as the function it stands for */
static PyObject *_ad_fm_reduce(PyObject *self, PyObject *unused) {
    (void)unused;
    return PyObject_GetAttrString(((_ad_fastmethod *)self)->func, "__qualname__");
}

static PyObject *_ad_fm_repr(PyObject *self) {
    return PyUnicode_FromFormat("<fast method %R>", ((_ad_fastmethod *)self)->func);
}

static void _ad_fm_dealloc(PyObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    Py_XDECREF(((_ad_fastmethod *)self)->func);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static PyMethodDef _ad_fm_methods[] = {
    {"__reduce__", _ad_fm_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};
static PyMemberDef _ad_fm_members[] = {
    {"__vectorcalloffset__", Py_T_PYSSIZET, offsetof(_ad_fastmethod, vectorcall), Py_READONLY, NULL},
    {NULL, 0, 0, 0, NULL}};
static PyType_Slot _ad_fm_slots[] = {
    {Py_tp_call, (void *)PyVectorcall_Call},
    {Py_tp_descr_get, (void *)_ad_fm_get},
    {Py_tp_getattro, (void *)_ad_fm_getattro},
    {Py_tp_repr, (void *)_ad_fm_repr},
    {Py_tp_dealloc, (void *)_ad_fm_dealloc},
    {Py_tp_methods, _ad_fm_methods},
    {Py_tp_members, _ad_fm_members},
    {0, NULL}};
static PyType_Spec _ad_fm_spec = {
    "pyautodiff._cffi.fast_method", sizeof(_ad_fastmethod), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR, _ad_fm_slots};

/* tensor._FAST_METHODS: (class, name, kind, op, scalar op or -1, reflected,
   negate) rows; each class's Python method of that name is wrapped and the
   wrapper set on the class in its place */
static int _ad_install_fast_methods(void) {
    if (_ad_fm_tensor) return 0; /* installed already */
    PyObject *mod = PyImport_ImportModule("pyautodiff.tensor"), *rows = NULL, *ctype = NULL;
    PyObject *fmtype = NULL, *wrappers = NULL, *classes = NULL, *base = NULL, *raise = NULL;
    PyObject *numpy = NULL, *ndarray = NULL;
    Py_ssize_t offset;
    if (!mod || !(rows = PyObject_GetAttrString(mod, "_FAST_METHODS")) || !PyTuple_Check(rows) ||
        !(raise = PyObject_GetAttrString(mod, "raise_status")) || !PyCallable_Check(raise) ||
        !(classes = PyObject_GetAttrString(mod, "_FAST_FINALIZE")) || !PyTuple_Check(classes) ||
        PyTuple_GET_SIZE(classes) >= (Py_ssize_t)(sizeof _ad_fm_classes / sizeof *_ad_fm_classes) ||
        !(ctype = PyObject_GetAttrString(mod, "_HANDLE_CTYPE")) ||
        !(fmtype = PyType_FromSpec(&_ad_fm_spec)) || !(wrappers = PyList_New(0)) ||
        !(base = PyObject_GetAttrString(mod, "Tensor")) || !PyType_Check(base) ||
        (offset = _ad_handle_offset(base)) < 0 || !(numpy = PyImport_ImportModule("numpy")) ||
        !(ndarray = PyObject_GetAttrString(numpy, "ndarray")) || !PyType_Check(ndarray))
        goto fail;
    /* every wrapper is made before any is set: all or none */
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(rows); i++) {
        PyObject *row = PyTuple_GET_ITEM(rows, i), *cls, *name;
        int kind, op, sop, reflected, negate;
        if (!PyArg_ParseTuple(row, "OUiiipp", &cls, &name, &kind, &op, &sop, &reflected, &negate) ||
            kind < 0 || kind >= AD_FM__COUNT ||
            (kind == AD_FM_CALL || kind == AD_FM_FROM_NUMPY
                 ? !PyModule_Check(cls)
                 : !PyType_Check(cls) || !PyType_IsSubtype(AD_TYPE(cls), AD_TYPE(base))))
            goto fail;
        PyObject *dict = PyModule_Check(cls) ? PyModule_GetDict(cls) : AD_TYPE(cls)->tp_dict;
        PyObject *func = PyDict_GetItemWithError(dict, name), *fget = NULL;
        if (func && kind == AD_FM_SHAPE) { /* a property: its getter */
            if (!PyObject_TypeCheck(func, &PyProperty_Type) ||
                !(fget = PyObject_GetAttrString(func, "fget")))
                goto fail;
            func = fget;
            Py_DECREF(fget); /* the property holds it */
        }
        if (!func || !PyFunction_Check(func)) goto fail;
        _ad_fastmethod *m = PyObject_New(_ad_fastmethod, (PyTypeObject *)fmtype);
        if (!m) goto fail;
        Py_INCREF(fmtype); /* a heap type's instances hold it */
        m->vectorcall = _ad_fm_call;
        Py_INCREF(func);
        m->func = func;
        m->kind = kind, m->op = op, m->sop = sop, m->reflected = reflected, m->negate = negate;
        PyObject *set = (PyObject *)m;
        if (kind == AD_FM_SHAPE) { /* property(wrapper): its __doc__ is the getter's */
            set = PyObject_CallOneArg((PyObject *)&PyProperty_Type, (PyObject *)m);
            Py_DECREF(m);
            if (!set) goto fail;
        }
        PyObject *entry = Py_BuildValue("(OON)", cls, name, set);
        if (!entry || PyList_Append(wrappers, entry) < 0) {
            Py_XDECREF(entry);
            goto fail;
        }
        Py_DECREF(entry);
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(classes); i++) { /* Tensor and its layout */
        PyObject *c = PyTuple_GET_ITEM(classes, i);
        if (!_ad_same_layout(c, base) || AD_TYPE(c)->tp_getattro != PyObject_GenericGetAttr)
            goto fail;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(classes); i++) /* the tuple keeps them */
        _ad_fm_classes[i] = AD_TYPE(PyTuple_GET_ITEM(classes, i));
    _ad_fm_offset = offset;
    _ad_fm_ctype = (struct _cffi_ctypedescr *)ctype; /* reference kept */
    _ad_fm_raise_status = raise;                     /* reference kept */
    _ad_fm_tensor = AD_TYPE(base); /* reference kept */
    _ad_fm_ndarray = AD_TYPE(ndarray); /* reference kept */
    Py_DECREF(numpy);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(wrappers); i++) {
        PyObject *e = PyList_GET_ITEM(wrappers, i);
        if (PyObject_SetAttr(PyTuple_GET_ITEM(e, 0), PyTuple_GET_ITEM(e, 1), PyTuple_GET_ITEM(e, 2)) < 0)
            PyErr_Clear(); /* that one keeps its Python method */
    }
    Py_DECREF(wrappers);
    Py_DECREF(fmtype);
    Py_DECREF(rows);
    Py_DECREF(mod); /* classes: reference kept */
    return 0;
fail:
    PyErr_Clear();
    Py_XDECREF(ndarray);
    Py_XDECREF(numpy);
    Py_XDECREF(raise);
    Py_XDECREF(base);
    Py_XDECREF(classes);
    Py_XDECREF(wrappers);
    Py_XDECREF(fmtype);
    Py_XDECREF(ctype);
    Py_XDECREF(rows);
    Py_XDECREF(mod);
    return -1;
}

/* The buffer protocol for Tensor, Var and their subclasses: np.asarray(t),
   t.numpy() and memoryview(t) read the tensor's memory in place, read-only,
   strided as the tensor is.  numpy takes an exporter's buffer before
   __array__, so np.asarray(t) builds no __array_interface__ dict for numpy
   to parse: (4, 4) float32, 2.3 -> 0.4 us (torch's .numpy() 0.9).  Installed
   after the fast methods, whose handle reader it uses (_ad_fm_handle:
   Tensor's and Var's own instances); a subclass's handle is read as t._h
   reads it, so a released tensor (whose class's lookups raise) refuses with
   that error.
   A view holds its own reference to the native tensor (and the Python
   object, as the protocol asks): an explicit t.__del__() or a second
   t.__init__ under a live memoryview leaves the memory it reads alive.  The
   reference, the shape and the byte strides live in view->internal until
   the consumer releases the view.  A request for a writable buffer is
   refused, and so is one without strides, or for a contiguity, that the
   layout does not meet (a tensor without elements meets every one). */
typedef struct {
    ad_tensor *t;
    Py_ssize_t dims[]; /* the shape, then the byte strides (and one spare for 0-d) */
} _ad_buf_block;

static int _ad_buf_contiguous(int nd, const Py_ssize_t *shape, const Py_ssize_t *strides,
                              Py_ssize_t es, int fortran) {
    Py_ssize_t want = es;
    for (int d = 0; d < nd; d++)
        if (shape[d] == 0) return 1;
    for (int k = 0; k < nd; k++) {
        int d = fortran ? k : nd - 1 - k;
        if (shape[d] != 1 && strides[d] != want) return 0;
        want *= shape[d];
    }
    return 1;
}

static int _ad_buf_get(PyObject *self, Py_buffer *view, int flags) {
    static const char *const formats[] = {"f", "d", sizeof(long) == 8 ? "l" : "q", "i", "B", "?"};
    static char empty; /* the address of a tensor without elements */
    view->obj = NULL;
    if (flags & PyBUF_WRITABLE) {
        PyErr_SetString(PyExc_BufferError, "a tensor's memory is read-only (Var.set writes a Var)");
        return -1;
    }
    ad_tensor *t = _ad_fm_handle(self);
    if (!t) {
        PyObject *h = PyObject_GetAttrString(self, "_h");
        if (!h) return -1;
        t = (ad_tensor *)_cffi_to_c_pointer(h, _ad_fm_ctype);
        Py_DECREF(h); /* self keeps its handle */
        if (!t) return -1;
    }
    int nd = ad_tensor_ndim(t), dt = ad_tensor_dtype(t);
    if (dt < 0 || dt >= (int)(sizeof formats / sizeof *formats)) {
        PyErr_Format(PyExc_BufferError, "tensor dtype code %d has no buffer format", dt);
        return -1;
    }
    Py_ssize_t es = (Py_ssize_t)ad_dtype_size(dt), len = es;
    _ad_buf_block *blk = PyMem_Malloc(sizeof *blk + sizeof(Py_ssize_t) * (size_t)(2 * nd + 1));
    if (!blk) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t *dims = blk->dims, *strides = dims + nd;
    _Static_assert(sizeof(Py_ssize_t) == sizeof(int64_t), "shape and strides are written in place");
    ad_tensor_shape(t, (int64_t *)dims);
    ad_tensor_strides(t, (int64_t *)strides);
    for (int d = 0; d < nd; d++) {
        strides[d] *= es;
        len *= dims[d];
    }
    int c = _ad_buf_contiguous(nd, dims, strides, es, 0);
    int f = _ad_buf_contiguous(nd, dims, strides, es, 1);
    const char *refuse = NULL;
    if ((flags & PyBUF_C_CONTIGUOUS) == PyBUF_C_CONTIGUOUS && !c)
        refuse = "C-contiguous";
    else if ((flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS && !f)
        refuse = "Fortran-contiguous";
    else if ((flags & PyBUF_ANY_CONTIGUOUS) == PyBUF_ANY_CONTIGUOUS && !c && !f)
        refuse = "contiguous";
    else if ((flags & PyBUF_STRIDES) != PyBUF_STRIDES && !c)
        refuse = "C-contiguous (the request has no strides)";
    if (refuse) {
        PyMem_Free(blk);
        PyErr_Format(PyExc_BufferError, "the tensor is a strided view, not %s: "
                     "t.contiguous() first", refuse);
        return -1;
    }
    void *data = ad_tensor_data(t);
    ad_tensor_retain(t);
    blk->t = t;
    view->buf = data ? data : &empty;
    Py_INCREF(self);
    view->obj = self;
    view->len = len;
    view->itemsize = es;
    view->readonly = 1;
    view->format = flags & PyBUF_FORMAT ? (char *)formats[dt] : NULL;
    view->ndim = flags & PyBUF_ND ? nd : 1;
    view->shape = flags & PyBUF_ND ? dims : NULL;
    view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? strides : NULL;
    view->suboffsets = NULL;
    view->internal = blk;
    return 0;
}

static void _ad_buf_release(PyObject *self, Py_buffer *view) {
    (void)self;
    _ad_buf_block *blk = view->internal;
    _ad_fm_drop(blk->t);
    PyMem_Free(blk);
}

/* A heap type whose buffer slots are its own and empty; _ad_buf_put fills them. */
static int _ad_buf_open(PyObject *c) {
    PyTypeObject *t = AD_TYPE(c);
    return PyType_Check(c) && (t->tp_flags & Py_TPFLAGS_HEAPTYPE) &&
           t->tp_as_buffer == &((PyHeapTypeObject *)c)->as_buffer &&
           !t->tp_as_buffer->bf_getbuffer && !t->tp_as_buffer->bf_releasebuffer;
}

static void _ad_buf_put(PyTypeObject *t) {
    t->tp_as_buffer->bf_getbuffer = _ad_buf_get;
    t->tp_as_buffer->bf_releasebuffer = _ad_buf_release;
    PyType_Modified(t);
}

/* The slots on every subclass of cls that has none: Python 3.12 resets a
   new class's buffer slots unless a __buffer__ method is found along its
   bases (these slots have none), where 3.11 copies them from the base, so
   Tensor.__init_subclass__ calls this for each class made after the
   install; the install runs it for the classes made before it (Var, the
   released forms: a view of a tensor released under it is still released
   through _ad_buf_release).  A class with slots of its own keeps them. */
static int _ad_buf_installed;
static int _ad_buf_sync(PyObject *cls) {
    PyObject *subs = PyObject_CallMethod(cls, "__subclasses__", NULL);
    if (!subs || !PyList_Check(subs)) {
        Py_XDECREF(subs);
        return -1;
    }
    int rc = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(subs) && rc == 0; i++) {
        PyObject *c = PyList_GET_ITEM(subs, i);
        if (_ad_buf_open(c)) _ad_buf_put(AD_TYPE(c));
        rc = _ad_buf_sync(c);
    }
    Py_DECREF(subs);
    return rc;
}

static int _ad_buffer_subclasses(void) {
    if (!_ad_buf_installed) return 0;
    if (_ad_buf_sync((PyObject *)_ad_fm_tensor) == 0) return 0;
    PyErr_Clear(); /* those left without a buffer take __array__ */
    return -1;
}

/* Sets Tensor's slots and those of its subclasses made so far.  Needs the
   fast methods installed (their Tensor class and handle reader). */
static int _ad_install_buffer(void) {
    if (_ad_buf_installed) return 0;
    if (!_ad_fm_tensor || !_ad_buf_open((PyObject *)_ad_fm_tensor)) return -1;
    _ad_buf_installed = 1;
    _ad_buf_put(_ad_fm_tensor);
    _ad_buffer_subclasses();
    return 0;
}

/* Drops the reference a shared tensor holds on a Python object.  It may run
   on any thread, with or without the GIL; after interpreter shutdown the
   object is left alone (the process is ending). */
static void _ad_pyobject_release(void *obj) {
    if (!Py_IsInitialized()) return;
    PyGILState_STATE g = PyGILState_Ensure();
    Py_DecRef((PyObject *)obj);
    PyGILState_Release(g);
}
"""


# Per-op forms of the quick calls, one C function each in this module (not
# in the library's ABI): _ad_uq_<name>(x) for each no-argument UNARY row of
# native/src/ops.def, _ad_bq_<name>(a, b) for each BINARY and COMPARE row.
# A wrapper of one argument is a METH_O builtin, called without the argument
# tuple that cffi builds and unpacks for two or more (PyArg_UnpackTuple), and
# neither converts the op number: about 300 of the 9100 instructions of a
# 1000-element exp, 75 of an add (callgrind).  They keep the GIL as the calls
# they forward to (KEEP_GIL below).
OPS_DEF = os.path.join(ROOT, "native", "src", "ops.def")


def quick_op_rows(path=OPS_DEF):
    """(kind, NAME, name) of the rows that get a per-op quick call: kind "u"
    for a UNARY row without float arguments, "b" for BINARY and COMPARE."""
    rows = []
    for m in re.finditer(r'^(UNARY|BINARY|COMPARE)\((\w+), \d+, "(\w+)",\s*(\d+)?',
                         open(path).read(), flags=re.M):
        family, ident, name, n_fargs = m.groups()
        if family != "UNARY":
            rows.append(("b", ident, name))
        elif n_fargs == "0":
            rows.append(("u", ident, name))
    return rows


def quick_op_cdef(rows):
    return "".join(f"ad_tensor *_ad_uq_{n}(const ad_tensor *x);\n" if k == "u" else
                   f"ad_tensor *_ad_bq_{n}(const ad_tensor *a, const ad_tensor *b);\n"
                   for k, _, n in rows)


def quick_op_source(rows):
    return "".join(
        f"static ad_tensor *_ad_uq_{n}(const ad_tensor *x) "
        f"{{ return ad_unary_quick(AD_OP_{i}, x); }}\n" if k == "u" else
        f"static ad_tensor *_ad_bq_{n}(const ad_tensor *a, const ad_tensor *b) "
        f"{{ return ad_binary_quick(AD_OP_{i}, a, b); }}\n"
        for k, i, n in rows)


# The calls whose wrappers keep the GIL.  cffi gives up the GIL around every
# call, and the two switches (a lock handed over and back) cost about as much
# as the native work of an op on a few hundred elements.  These calls bound
# their work and never wait for another thread nor call back into Python
# (pyautodiff.h, "quick calls"), so keeping the lock across them is safe: the
# generated wrapper's Py_BEGIN/END_ALLOW_THREADS become a check of the
# enclosing function's name, made once per wrapper.  A cffi that stopped
# using those macros would release the GIL as before: slower, never wrong.
# These wrappers also skip cffi's errno save and restore around the call
# (ffi.errno): nothing reads errno after them, and the pair with its two
# thread-local lookups was about 120 of the 7000 instructions of a
# 1000-element add (callgrind), the quick call and the release counted.
# The handle accessors below read a field or two (tensor.c) and join them.
KEEP_GIL = ("_ad_install_finalizer", "_ad_install_fast_methods", "_ad_install_buffer",
            "_ad_buffer_subclasses",
            "ad_binary_quick", "ad_unary_quick",
            "ad_scalar_quick", "ad_reduce_quick", "ad_view_quick", "ad_tensor_release_quick",
            "ad_tensor_ndim", "ad_tensor_dtype", "ad_tensor_numel", "ad_tensor_shape",
            "ad_tensor_strides", "ad_tensor_data",
            *(f"_ad_{k}q_{n}" for k, _, n in quick_op_rows()))


def keep_gil_source(names=KEEP_GIL):
    listed = ", ".join(f'"_cffi_f_{n}"' for n in names)
    return r"""
#include <string.h>
static int _ad_keeps_gil(const char *fn) {
    static const char *const names[] = {%s};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(fn, names[i])) return 1;
    return 0;
}
/* per wrapper: -1 not yet known, 0 releases the GIL, 1 keeps it */
#undef Py_BEGIN_ALLOW_THREADS
#undef Py_END_ALLOW_THREADS
#define Py_BEGIN_ALLOW_THREADS                                                    \
    {                                                                             \
        static int _ad_keep = -1;                                                 \
        int _ad_k = __atomic_load_n(&_ad_keep, __ATOMIC_RELAXED);                  \
        if (_ad_k < 0) {                                                          \
            _ad_k = _ad_keeps_gil(__func__);                                      \
            __atomic_store_n(&_ad_keep, _ad_k, __ATOMIC_RELAXED);                 \
        }                                                                         \
        PyThreadState *_save = _ad_k ? NULL : PyEval_SaveThread();
#define Py_END_ALLOW_THREADS                                                      \
        if (_save) PyEval_RestoreThread(_save);                                   \
    }
/* the errno pair, called only inside the block above (where _ad_k is known) */
static void _ad_restore_errno(void) { _cffi_restore_errno(); }
static void _ad_save_errno(void) { _cffi_save_errno(); }
#undef _cffi_restore_errno
#undef _cffi_save_errno
#define _cffi_restore_errno() (_ad_k ? (void)0 : _ad_restore_errno())
#define _cffi_save_errno() (_ad_k ? (void)0 : _ad_save_errno())
""" % listed


def make_ffi(extra_compile_args=(), extra_link_args=()):
    ffi = cffi.FFI()
    ffi.cdef(cdef_from_header())
    # Python side of the anomaly-mode site callback (pyautodiff/anomaly.py)
    ffi.cdef('extern "Python" const char *_ad_site_callback(void);')
    ffi.cdef(PY_HELPERS_CDEF)
    rows = quick_op_rows()
    ffi.cdef(quick_op_cdef(rows))
    # Python side of ad.Function's nodes (pyautodiff/function.py)
    ffi.cdef('extern "Python" ad_status _ad_custom_backward(void *, const ad_tensor *, '
             'const ad_tensor *, ad_tensor **, int);')
    ffi.cdef('extern "Python" void _ad_custom_release(void *);')
    # Python side of ad_backward_hooked (pyautodiff/distributed.py)
    ffi.cdef('extern "Python" ad_status _ad_grad_ready(void *, const ad_tensor *, '
             'const ad_tensor *);')
    ffi.set_source(
        "pyautodiff._cffi",
        '#define AD_TESTING\n#include "pyautodiff.h"\n' + PY_HELPERS_SOURCE + quick_op_source(rows) + keep_gil_source(),
        # the full C API (no Py_LIMITED_API), for the finalizer's type slot;
        # the module is built per Python version anyway
        define_macros=[("_CFFI_NO_LIMITED_API", None)],
        include_dirs=[os.path.dirname(HEADER)],
        library_dirs=[PKG],
        libraries=["pyautodiff"],
        extra_compile_args=list(extra_compile_args),
        extra_link_args=["-Wl,-rpath,$ORIGIN", *extra_link_args],
    )
    return ffi


if __name__ == "__main__":
    make_ffi().compile(tmpdir=os.path.join(ROOT, "build", "cffi"), verbose=True)
