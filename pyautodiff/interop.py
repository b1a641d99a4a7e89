"""Zero-copy exchange with other array libraries: DLPack both ways and
`from_numpy` sharing memory.

The lifetimes are native: an exported capsule holds a native reference to the
tensor's storage until its consumer calls the deleter, and a tensor made from
foreign memory holds the producer's DLPack deleter (or a reference to the
numpy array) until the last native reference to it dies.  Python only wraps
the capsule (through ctypes.pythonapi, which keeps the GIL during each call).
"""
import ctypes
from typing import Any, Optional, Tuple

import numpy as np

from . import dtypes as _dt
from ._lib import ffi, lib, raise_status
from .errors import InvalidArgumentError, ShapeError
from .tensor import Tensor, _call, _from_numpy_copy, _out, _result, _wrap

__all__ = ["from_dlpack", "from_numpy", "to_dlpack"]

_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = (ctypes.py_object, ctypes.c_char_p)
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = (ctypes.py_object, ctypes.c_char_p)
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = (ctypes.py_object, ctypes.c_void_p)
_api.Py_IncRef.argtypes = (ctypes.py_object,)
_api.Py_DecRef.argtypes = (ctypes.py_object,)


def _addr(p):
    return int(ffi.cast("uintptr_t", p))


# (name, used name) of legacy and versioned capsules, as static C strings
_NAMES = {v: (_addr(lib._ad_capsule_name(v)), _addr(lib._ad_capsule_name(v + 2)))
          for v in (0, 1)}
_BNAMES = {0: b"dltensor", 1: b"dltensor_versioned"}
_DESTRUCTOR = _addr(ffi.addressof(lib, "_ad_capsule_destructor"))
_PY_RELEASE = ffi.addressof(lib, "_ad_pyobject_release")
_CPU = 1


def _version_at_least_1(max_version):
    if max_version is None:
        return False
    try:
        return int(max_version[0]) >= 1
    except (TypeError, IndexError, KeyError, ValueError):  # KeyError: a dict
        raise InvalidArgumentError(
            f"__dlpack__: max_version must be a (major, minor) tuple, got {max_version!r}"
        ) from None


def to_dlpack(t: "Tensor", stream: Any = None, max_version: Optional[Tuple[int, int]] = None,
              dl_device: Optional[Tuple[int, int]] = None, copy: Optional[bool] = None) -> Any:
    """The DLPack capsule of tensor t (Tensor.__dlpack__)."""
    if stream is not None:
        raise InvalidArgumentError(f"__dlpack__: stream must be None for CPU tensors, "
                                   f"got {stream!r}")
    if dl_device is not None:
        try:
            dev = (int(dl_device[0]), int(dl_device[1]))
        except (TypeError, IndexError, KeyError, ValueError):  # KeyError: a dict
            raise InvalidArgumentError(f"__dlpack__: dl_device must be a (type, id) tuple, "
                                       f"got {dl_device!r}") from None
        if dev != (_CPU, 0):
            raise BufferError(f"__dlpack__: a pyautodiff tensor lives on the CPU (1, 0); "
                              f"device {dev} was requested")
    versioned = 1 if _version_at_least_1(max_version) else 0
    if copy is None and any(st < 0 for st in t.strides):
        # a view with negative strides (flip) goes as a copy when the consumer
        # leaves it to us: torch 2.13's from_dlpack / as_tensor abort the
        # process on one (numpy's own reversed views too); copy=False still
        # gets the view
        copy = True
    if copy:
        # a fresh contiguous copy the consumer may own outright
        t = _call(lib.AD_OP_COPY, (t.detach(),))
    out = ffi.new("void **")
    st = lib.ad_tensor_to_dlpack(t._h, versioned, 1 if copy else 0, out)
    if st:
        raise_status(st)
    managed = _addr(out[0])
    name = _NAMES[versioned][0]
    try:
        return _api.PyCapsule_New(managed, name, _DESTRUCTOR)
    except BaseException:
        lib.ad_dlpack_delete(out[0], versioned)
        raise


def _consume(capsule):
    """A tensor owning the capsule's DLManagedTensor; the capsule is renamed
    "used_..." so that its destructor leaves the tensor to us."""
    for versioned in (1, 0):
        if _api.PyCapsule_IsValid(capsule, _BNAMES[versioned]):
            break
    else:
        raise InvalidArgumentError(
            "from_dlpack: expected an unconsumed DLPack capsule (named 'dltensor' or "
            "'dltensor_versioned'); a capsule can be consumed only once")
    ptr = _api.PyCapsule_GetPointer(capsule, _BNAMES[versioned])
    out = ffi.new("ad_tensor **")
    st = lib.ad_tensor_from_dlpack(ffi.cast("void *", ptr), versioned, out)
    if st:
        raise_status(st)  # the capsule keeps the tensor: its destructor frees it
    _api.PyCapsule_SetName(capsule, _NAMES[versioned][1])
    return _wrap(out[0])


def from_dlpack(x: Any, *, copy: Optional[bool] = None) -> "Tensor":
    """A tensor sharing the memory of `x`, any DLPack producer on the CPU
    (a numpy array, a torch tensor, a pyautodiff tensor) or a DLPack capsule.

    Zero-copy: the producer's memory stays alive until the last pyautodiff
    reference to it dies.  copy=True asks the producer for a copy (and makes
    one when the producer cannot).  Raises BufferError for memory that is not
    on the CPU and ad.DTypeError for an unsupported dtype."""
    if not hasattr(x, "__dlpack__"):
        if type(x).__name__ == "PyCapsule":
            return _consume(x)
        raise TypeError(f"from_dlpack: {type(x).__name__} does not implement __dlpack__")
    dev = x.__dlpack_device__() if hasattr(x, "__dlpack_device__") else (_CPU, 0)
    if int(dev[0]) != _CPU:
        raise BufferError(f"from_dlpack: only CPU memory is supported, the producer's "
                          f"device is {tuple(dev)}")
    kw = {} if copy is None else {"copy": copy}
    try:
        capsule = x.__dlpack__(max_version=(1, 0), **kw)
    except TypeError:  # a producer older than DLPack 1.0 in the array API
        capsule = x.__dlpack__()
        if copy:
            return _call(lib.AD_OP_COPY, (_consume(capsule),))
    return _consume(capsule)


def from_numpy(a: Any, dtype: Any = None, copy: Optional[bool] = None) -> "Tensor":
    """A tensor from numpy array `a` (see ad.from_numpy)."""
    if type(a) is np.ndarray and dtype is None and copy is None:
        # the common case first: a writable C-contiguous array of one of the
        # dtypes, copied as _from_numpy_copy copies it
        dt, flags = _dt._BY_NUMPY.get(a.dtype), a.flags
        if dt is not None and flags.writeable and flags.c_contiguous and a.size:
            out = _out()
            shape = a.shape
            return _result(lib.ad_tensor_from_data(ffi.from_buffer(a), a.nbytes, dt.code,
                                                   shape or ffi.NULL, len(shape), out), out)
    try:
        a = np.asarray(a)
    except ValueError as e:  # ragged nested lists
        raise ShapeError(f"from_numpy: cannot convert a {type(a).__name__}: {e}") from None
    dt = _dt.as_dtype(a.dtype) if dtype is None else _dt.as_dtype(dtype)
    if copy is True:
        return _from_numpy_copy(a, dt)
    reason = None
    if a.dtype != dt.numpy:
        reason = f"its dtype {a.dtype} differs from {dt.name}"
    elif not a.flags.aligned:
        reason = "it is not aligned"
    elif any(s % a.itemsize for s in a.strides):
        reason = f"its strides {a.strides} are not multiples of its item size"
    elif copy is None and a.flags.writeable:
        return _from_numpy_copy(a, dt)
    if reason is not None:
        if copy is False:
            raise InvalidArgumentError(f"from_numpy: copy=False, but the array cannot be "
                                       f"shared because {reason}")
        return _from_numpy_copy(a, dt)
    out = ffi.new("ad_tensor **")
    itemsize = a.itemsize
    strides = [s // itemsize for s in a.strides]
    owner = ctypes.py_object(a)
    _api.Py_IncRef(owner)  # dropped by _ad_pyobject_release when the storage dies
    st = lib.ad_tensor_from_external(
        ffi.cast("void *", a.__array_interface__["data"][0]), dt.code, list(a.shape) or ffi.NULL,
        strides or ffi.NULL, a.ndim, 0 if a.flags.writeable else 1, _PY_RELEASE,
        ffi.cast("void *", id(a)), out)
    if st:
        _api.Py_DecRef(owner)
        raise_status(st)
    return _wrap(out[0])
