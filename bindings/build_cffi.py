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
#include <structmember.h> /* T_OBJECT_EX */
#ifndef Py_T_OBJECT_EX
#define Py_T_OBJECT_EX T_OBJECT_EX
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

static int _ad_install_finalizer(void) {
    if (_ad_fin_released) return 0; /* installed already */
    PyObject *mod = PyImport_ImportModule("pyautodiff.tensor"), *classes = NULL;
    PyObject *rel = NULL, *quick = NULL, *release = NULL;
    if (!mod || !(classes = PyObject_GetAttrString(mod, "_FAST_FINALIZE")) ||
        !PyTuple_Check(classes) || PyTuple_GET_SIZE(classes) == 0)
        goto fail;
    PyObject *base = PyTuple_GET_ITEM(classes, 0); /* Tensor */
    if (!PyType_Check(base)) goto fail;
    PyObject *slot = _ad_type_entry(base, "_h"), *pydel = _ad_type_entry(base, "__del__");
    if (!slot || Py_TYPE(slot) != &PyMemberDescr_Type || !pydel ||
        ((PyMemberDescrObject *)slot)->d_member->type != Py_T_OBJECT_EX)
        goto fail;
    rel = PyObject_GetAttrString(mod, "_RELEASED");
    quick = PyObject_GetAttrString(mod, "_release_quick");
    release = PyObject_GetAttrString(mod, "_release");
    if (!rel || !PyDict_Check(rel) || !quick || !release) goto fail;
    /* each class: Tensor or a subclass of its layout that keeps its __del__,
       with a released form */
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(classes); i++) {
        PyObject *c = PyTuple_GET_ITEM(classes, i);
        if (!PyType_Check(c) || !PyType_IsSubtype(AD_TYPE(c), AD_TYPE(base)) ||
            AD_TYPE(c)->tp_basicsize != AD_TYPE(base)->tp_basicsize ||
            _ad_type_entry(c, "__del__") != (c == base ? pydel : NULL) || !PyDict_GetItem(rel, c))
            goto fail;
    }
    _ad_fin_offset = ((PyMemberDescrObject *)slot)->d_member->offset;
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
KEEP_GIL = ("_ad_install_finalizer", "ad_binary_quick", "ad_unary_quick", "ad_scalar_quick", "ad_tensor_release_quick",
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
