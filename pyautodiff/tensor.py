"""Tensor and Var: thin Python handles over native tensors.

A Tensor holds one native reference (`_h`) and nothing else; every property
is read from C, every op is one native call ending in one epilogue
(`_result`).  The simple elementwise methods are generated from the native
op registry (native/src/ops.def, read through _ops.py), so an op's Python
method, its C forward and its C backward all carry the same name.

This is the bottom of the package's Python layers: it imports only _lib,
_ops, dtypes and errors, and every other module imports it.  The few methods
whose work lives in a module above (t[key] in indexing.py, backward's
GradStore in grad.py, ...) reach that module through a reference handed over
once at package import (_link_upper), not through an import.
"""
from __future__ import annotations

import builtins
import collections.abc
import numbers
import operator
import os
import sys
import threading
from typing import (TYPE_CHECKING, Any, Callable, Iterable, Iterator, List, Optional, Sequence,
                    Tuple, Union)

import numpy as np

from . import dtypes as _dt
from ._lib import ffi, lib, raise_status
from ._ops import tensor_methods as _tensor_methods
from ._ops import unary_method_kinds as _ops_unary_kinds
from .errors import (ArgumentTypeError, DTypeError, GraphError, InvalidArgumentError,
                     OutOfBoundsError, OutOfMemoryError, OutOfRangeError, ShapeError)

# Argument types of the public signatures (for type checkers; nothing checks them
# at run time).
DTypeLike = Union[_dt.DType, str, type, np.dtype]
DimArg = Union[int, Sequence[int], None]
ShapeArg = Union[int, Sequence[int]]
# An operand of arithmetic: a tensor, a Python/numpy number, or anything
# ad.tensor() accepts (a numpy array, nested lists)
Operand = Any

if TYPE_CHECKING:
    from .grad import GradStore

__all__ = [
    "Tensor", "Var", "tensor", "from_numpy", "full", "zeros",
    "ones", "zeros_like", "ones_like", "full_like", "arange", "eye",
    "manual_seed", "randn", "rand", "maximum", "minimum", "where",
    "matmul",
]


_new = object.__new__
_release = lib.ad_tensor_release
_release_quick = lib.ad_tensor_release_quick
_NULL = ffi.NULL
# The quick calls (pyautodiff.h): small contiguous same-shape operands, with
# the GIL kept (bindings/build_cffi.py) and the handle returned, so no
# out-slot.  NULL declines: the ordinary call then does the work or raises.
_bq, _uq, _sq = lib.ad_binary_quick, lib.ad_unary_quick, lib.ad_scalar_quick
_rq = lib.ad_reduce_quick


def _wrap(h, cls=None):
    t = _new(cls or Tensor)
    t._h = h
    return t


_tls = threading.local()

# The modules above this one whose functions a few methods call: t[key] and
# the joins (indexing), backward and in-place updates (grad: GradStore,
# no_grad), __dlpack__ (interop), pickling (io), to_dot (memory).  They all
# import this module, so it imports none of them: pyautodiff/__init__.py
# hands them over once, after importing them (_link_upper), and the methods
# reach them as _ix.getitem, _grad.GradStore, ... -- no import at call time.
_ix: Any = None
_grad: Any = None
_interop: Any = None
_io: Any = None
_memory: Any = None


def _link_upper(indexing, grad, interop, io, memory):
    global _ix, _grad, _interop, _io, _memory
    _ix, _grad, _interop, _io, _memory = indexing, grad, interop, io, memory


class _ReleasedError(GraphError, AttributeError):
    """Use of a tensor after an explicit __del__() (an AttributeError too, so
    getattr(t, "_h", None) and hasattr still work)."""


# A released tensor's class (Tensor.__del__): a subclass of its own class
# (isinstance still holds, the layout is the same) whose lookups raise
# _ReleasedError naming what was used.  Tensor itself has no __getattr__ for
# this: the interpreter specialises attribute reads and method calls only for
# types with the generic lookup, and a __getattr__ made every t._h and t.exp()
# of every tensor take the slow path (450 of 8300 instructions of a
# 1000-element add, callgrind).
_RELEASED: dict = {}
_BUFFER = False  # the buffer slots installed (set below, after the classes)
_RELEASED_KEEP = frozenset(("__del__", "__class__"))


def _released_getattribute(self, name):
    if name in _RELEASED_KEEP:
        return object.__getattribute__(self, name)
    raise _ReleasedError(f"this tensor was released (its __del__ was called): "
                         f"{name} cannot be used any more")


def _released_del(self):
    pass


def _released_class(cls):
    r = _RELEASED.get(cls)
    if r is None:
        r = _RELEASED[cls] = type(cls.__name__, (cls,), {
            "__slots__": (), "__module__": cls.__module__, "__qualname__": cls.__qualname__,
            "__getattribute__": _released_getattribute, "__del__": _released_del})
    return r


def _out():
    """This thread's out-pointer slot: a native call writes its result handle
    there (one slot per thread, because cffi releases the GIL during calls)."""
    try:
        return _tls.out
    except AttributeError:
        p = _tls.out = ffi.new("ad_tensor **")
        return p


def _result(st, out):
    """The epilogue of every native call that makes a tensor: the mapped
    ad.Error for a failed status, else a Tensor owning the handle the call
    wrote to `out` (built without __init__: a slot store on a bare object)."""
    if st:
        raise_status(st)
    t = _new(Tensor)
    t._h = out[0]
    return t


def _tls_one():
    """This thread's one-handle input array for ad_op_call (read by C only
    during the call that is given it)."""
    p = _tls.one = ffi.new("ad_tensor *[1]")
    return p


_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


def _int64s(dims):
    """dims as a tuple when it is a tuple or list of Python ints in the int64
    range (the common shape, checked without the ABC tests below), else None."""
    if type(dims) not in (tuple, list):
        return None
    for s in dims:
        if type(s) is not int or not _I64_MIN <= s <= _I64_MAX:
            return None
    return tuple(dims)


def _shape_arg(shape, name="shape", fn=None):
    """A shape given as a tuple/list of ints or as one int (PyTorch's convention).
    Each entry must fit the native int64 (checked here: cffi would raise a bare
    OverflowError)."""
    out = _int64s(shape)
    if out is not None:
        return out
    where = f"{fn}: " if fn else ""
    if isinstance(shape, numbers.Integral):
        shape = (shape,)
    elif isinstance(shape, (str, bytes, bytearray, collections.abc.Set,
                            collections.abc.Mapping)):
        # a sequence, but not of sizes: "" was the shape (), b"\x02\x03" (2, 3);
        # or no order: a set's or a dict's
        raise ArgumentTypeError(f"{where}{name} must be an int or a sequence of ints, "
                                f"got {shape!r}")
    try:
        out = tuple(operator.index(s) for s in shape)
    except TypeError:
        raise ArgumentTypeError(f"{where}{name} must be an int or a sequence of ints, "
                                f"got {shape!r}") from None
    for s in out:
        if not _I64_MIN <= s <= _I64_MAX:
            raise OutOfBoundsError(f"{where}{name} entry {_short(s)} is out of the int64 range")
    return out


def _shape_varargs(shape, fn):
    """The shape of zeros(2, 3) / zeros((2, 3)) / zeros([2, 3]) / zeros()."""
    out = _int64s(shape[0] if len(shape) == 1 and type(shape[0]) in (tuple, list) else shape)
    if out is not None:
        return out
    if len(shape) == 1 and not isinstance(shape[0], numbers.Integral):
        shape = shape[0]
    elif not all(isinstance(s, numbers.Integral) for s in shape):
        raise ArgumentTypeError(f"{fn}: the shape is given as ints or as one tuple, and seed, "
                                f"dtype and std are keyword-only; got positional arguments "
                                f"{shape!r}")
    return _shape_arg(shape, "shape", fn)


def _dims_arg(dim, fn="dim"):
    if dim is None:
        return ()
    if type(dim) is int:  # the common case, before the slower ABC check
        return (dim,)
    try:
        if isinstance(dim, numbers.Integral):
            return (operator.index(dim),)
        if isinstance(dim, (str, bytes, bytearray)):
            raise TypeError
        return tuple(operator.index(d) for d in dim)
    except TypeError:
        raise ArgumentTypeError(f"{fn}: dim must be an int or a tuple of ints, got "
                                f"{repr(dim)[:60]}") from None


def _call(op, inputs, iargs=(), fargs=()):
    """The generic native entry: one op over tensors with int/float arguments
    (cffi passes a tuple or list as a temporary C array).  `inputs` is a tuple
    or a list, held by this frame until the call returns: the handles taken
    from it are borrowed, so the tensors must outlive the native call."""
    try:
        out = _tls.out
    except AttributeError:
        out = _out()
    try:
        st = _ad_op_call(op, [t._h for t in inputs], len(inputs), iargs or _NULL, len(iargs),
                         fargs or _NULL, len(fargs), out)
    except _ReleasedError:  # (an AttributeError) a released input says so itself
        raise
    # cffi could not convert an argument; AttributeError: an input without a
    # handle (ad.flip(np_array, 0), F.dropout([1.0])), named by _arg_error
    except (OverflowError, TypeError, AttributeError) as e:
        raise _arg_error(op, inputs, iargs, fargs, e) from None
    return _result(st, out)


def _op_name(op):
    return ffi.string(lib.ad_op_name(op)).decode()


def _arg_error(op, inputs, iargs, fargs, e):
    """The ad.Error for an argument cffi refused, naming the op and the argument."""
    name = _op_name(op)
    for i, t in enumerate(inputs):
        if not isinstance(t, Tensor):
            return ArgumentTypeError(f"{name}: input {i} is a {type(t).__name__}, not a Tensor")
    for i, v in enumerate(iargs):
        if not isinstance(v, numbers.Integral):
            return ArgumentTypeError(f"{name}: integer argument {i} is {v!r} "
                                     f"({type(v).__name__}), not an int (int arguments "
                                     f"{tuple(iargs)})")
        if not _I64_MIN <= v <= _I64_MAX:
            return OutOfBoundsError(f"{name}: integer argument {i} = {_short(v)} is out of the "
                                    f"int64 range")
    for i, v in enumerate(fargs):
        if not isinstance(v, numbers.Real):
            return ArgumentTypeError(f"{name}: float argument {i} is {v!r} "
                                     f"({type(v).__name__}), not a real number")
        try:
            float(v)
        except OverflowError:
            return OutOfBoundsError(f"{name}: float argument {i} = {_short(v)} is out of the float64 "
                                    f"range")
    return ArgumentTypeError(f"{name}: bad argument ({e})")


_ad_unary, _ad_binary, _ad_scalar = lib.ad_unary, lib.ad_binary, lib.ad_scalar_op
_ndim, _shape = lib.ad_tensor_ndim, lib.ad_tensor_shape


def _dims():
    """This thread's buffer for shape and strides (at most 16 dims): another
    thread may run between the native call that fills it and the read."""
    try:
        return _tls.dims
    except AttributeError:
        p = _tls.dims = ffi.new("int64_t[16]")
        return p

_ad_op_call = lib.ad_op_call
_OP_MATMUL = lib.AD_OP_MATMUL
_KEEPDIM = (ffi.new("int64_t[1]", [0]), ffi.new("int64_t[1]", [1]))  # reductions' 1st iarg


def _unary(op, x):
    h = _uq(op, x._h)
    if h:
        t = _new(Tensor)
        t._h = h
        return t
    return _unary_call(op, x)


def _unary_call(op, x):
    """_unary without the quick call (the generated methods tried it)."""
    try:
        out = _tls.out
    except AttributeError:
        out = _out()
    return _result(_ad_unary(op, x._h, out), out)


def _binary(op, a, b):
    ah, bh = a._h, b._h
    h = _bq(op, ah, bh)
    if h:
        t = _new(Tensor)
        t._h = h
        return t
    try:
        out = _tls.out
    except AttributeError:
        out = _out()
    return _result(_ad_binary(op, ah, bh, out), out)


def _scalar(op, x, s):
    if type(s) is float:
        h = _sq(op, x._h, s)
        if h:
            t = _new(Tensor)
            t._h = h
            return t
    return _scalar_call(op, x, s)


def _scalar_call(op, x, s):
    """_scalar without the quick call."""
    try:
        out = _tls.out
    except AttributeError:
        out = _out()
    try:
        st = _ad_scalar(op, x._h, s, out)
    except (OverflowError, TypeError) as e:  # cffi could not convert s (t.elu(None))
        raise _arg_error(op, (x,), (), (s,), e) from None
    return _result(st, out)


_INT_RANGE = {d.code: (int(np.iinfo(d.numpy).min), int(np.iinfo(d.numpy).max))
              for d in (_dt.int64, _dt.int32, _dt.uint8)}
_CMP_RANGE = dict(_INT_RANGE)
_CMP_RANGE[_dt.bool_.code] = (0, 1)
_CODE_I64 = _dt.int64.code
_EXACT = 1 << 53  # every int up to this magnitude is a double


def _short(v):
    """A number for a message (a 300-digit int would drown it)."""
    r = repr(v)
    return r if len(r) <= 24 else f"{r[:10]}...({len(r)} digits)"


def _check_scalar(o, code, fn, ranges=_INT_RANGE):
    """A scalar operand against the integer dtype `code` (numpy 2's rule: a
    Python number out of the dtype's range raises).  Returns the value to
    pass: the scalar itself, or an exact 0-d int64 tensor when the double the
    scalar ops take cannot carry it."""
    r = ranges.get(code)
    if r is None:  # a float dtype: the double is what the op computes in
        return o
    return _check_int_scalar(o, r, code, fn)


def _check_int_scalar(o, r, code, fn):
    if o != o:  # NaN: the op's own dtype check names it
        return o
    if not r[0] <= o <= r[1]:
        raise OutOfBoundsError(f"{fn}: Python scalar {_short(o)} is out of bounds for "
                               f"{_dt.BY_CODE[code].name} (range {r[0]}..{r[1]})")
    if code == _CODE_I64 and not -_EXACT <= o <= _EXACT and isinstance(o, numbers.Integral):
        return from_numpy(np.array(int(o), dtype=np.int64))
    return o


_ad_dtype = lib.ad_tensor_dtype


_OPERATOR_SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
_OPERATOR_DUNDER = {"add": "add", "sub": "sub", "mul": "mul", "div": "truediv"}


def _operator(op: int, scalar_op: int, reflected: bool = False,
              negate_scalar: bool = False) -> Callable[[Tensor, Operand], Tensor]:
    """An arithmetic operator method: tensor operands go to the binary op,
    Python scalars to the tensor-scalar op (which never changes the dtype),
    except an int beyond 2**53 with an int64 tensor, which goes exactly as a
    0-d int64 tensor to the binary op.  Its name and docstring come from the
    binary op's registry name."""
    fn = _op_name(scalar_op)
    name = _op_name(op)
    bq = getattr(lib, "_ad_bq_" + name)  # the op's own quick call (bindings/build_cffi.py)

    def method(self: Tensor, o: Operand) -> Tensor:
        # the quick calls first (a Tensor, or a Python float or int with a
        # float tensor); the rest below also raises their errors
        if isinstance(o, Tensor):
            h = bq(o._h, self._h) if reflected else bq(self._h, o._h)
            if h:
                t = _new(Tensor)
                t._h = h
                return t
        elif type(o) is float or (type(o) is int and -_EXACT <= o <= _EXACT):
            h = _sq(scalar_op, self._h, -o if negate_scalar else o)
            if h:
                t = _new(Tensor)
                t._h = h
                return t
        try:
            out = _tls.out
        except AttributeError:
            out = _out()
        if not isinstance(o, Tensor):
            if not _is_scalar(o):
                o = _as_tensor_like(o, self, name)
            else:
                code = _ad_dtype(self._h)
                r = _INT_RANGE.get(code)
                if r is not None:  # an integer tensor: the scalar must fit its dtype
                    o = _check_int_scalar(o, r, code, fn)
                if not isinstance(o, Tensor):
                    if negate_scalar:  # negate as a Python number: -np.uint8(3) wraps
                        o = -(o.item() if isinstance(o, np.generic) else o)
                    try:
                        st = _ad_scalar(scalar_op, self._h, o, out)
                    except OverflowError:  # an int beyond the double range
                        raise OutOfBoundsError(f"{fn}: Python scalar {_short(o)} is out of the "
                                               f"float64 range") from None
                    return _result(st, out)
        if reflected:
            return _result(_ad_binary(op, o._h, self._h, out), out)
        return _result(_ad_binary(op, self._h, o._h, out), out)

    sym = _OPERATOR_SYMBOL[name]
    expr = f"o {sym} self" if reflected else f"self {sym} o"
    method.__name__ = f"__{'r' if reflected else ''}{_OPERATOR_DUNDER[name]}__"
    method.__qualname__ = "Tensor." + method.__name__
    method.__doc__ = (
        f"{expr}, elementwise ({name}), broadcasting the shapes as numpy does.  o is a "
        f"Tensor, a Python or numpy number (kept in self's dtype; an int out of an integer "
        f"dtype's range raises OutOfBoundsError) or anything ad.tensor() accepts.  Raises "
        f"ShapeError when the shapes do not broadcast, DTypeError on mixed tensor dtypes.")
    return method


# The arithmetic operators: name -> (op, scalar op, reflected, negate_scalar).
_OPERATORS = {
    "__add__": (lib.AD_OP_ADD, lib.AD_OP_ADD_SCALAR, False, False),
    "__radd__": (lib.AD_OP_ADD, lib.AD_OP_ADD_SCALAR, True, False),
    "__sub__": (lib.AD_OP_SUB, lib.AD_OP_ADD_SCALAR, False, True),
    "__rsub__": (lib.AD_OP_SUB, lib.AD_OP_RSUB_SCALAR, True, False),
    "__mul__": (lib.AD_OP_MUL, lib.AD_OP_MUL_SCALAR, False, False),
    "__rmul__": (lib.AD_OP_MUL, lib.AD_OP_MUL_SCALAR, True, False),
    "__truediv__": (lib.AD_OP_DIV, lib.AD_OP_DIV_SCALAR, False, False),
    "__rtruediv__": (lib.AD_OP_DIV, lib.AD_OP_RDIV_SCALAR, True, False),
}


_COMPARISON_SYMBOL = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def _comparison(op: int) -> Callable[[Tensor, Operand], Tensor]:
    """A comparison operator method (a COMPARE row of the registry), named
    and documented from the op's registry name."""
    name = _op_name(op)

    def method(self: Tensor, o: Operand) -> Tensor:
        # a scalar beyond an integer tensor's range raises, as in arithmetic
        # (numpy 2 would answer False/True; PyTorch raises, and one rule for
        # every scalar operand is easier to remember).  An operand no op takes
        # (None, a string) is Python's to answer: t == None is False, and
        # `x in [t, ...]` works
        if not isinstance(o, _OPERAND_TYPES) and not _is_scalar(o):
            return NotImplemented
        return _binary(op, *_pair(self, o, name))

    method.__name__ = f"__{name}__"
    method.__qualname__ = "Tensor." + method.__name__
    method.__doc__ = (
        f"self {_COMPARISON_SYMBOL[name]} o, elementwise, as a bool tensor of the broadcast "
        f"shape (not differentiable).  o is a tensor or a Python number.  Raises ShapeError "
        f"when the shapes do not broadcast.")
    return method


def _is_scalar(x):
    t = type(x)
    if t is float or t is int:
        return True
    # np.timedelta64 subclasses np.signedinteger, so numbers.Integral: a
    # duration is no number; _as_tensor_like refuses it with the other
    # non-numeric numpy data
    return isinstance(x, numbers.Real) and not isinstance(x, (np.ndarray, Tensor, np.timedelta64))


def _as_tensor_like(x, like, fn="operand"):
    """Turns an operand that is not a Tensor (a numpy array, a list) into one.
    Python scalars never reach here: they go to the scalar ops.  fn names
    the op in messages."""
    if isinstance(x, Tensor):
        return x
    if isinstance(x, np.ndarray):
        return from_numpy(x)
    if isinstance(x, (list, tuple, np.generic)):
        # takes like's dtype, under the scalars' rule: a value that dtype cannot
        # hold exactly (a fraction for an integer or bool tensor, a number out of
        # its range) raises rather than being truncated or wrapped
        try:
            a = np.asarray(x)
        except ValueError as e:  # ragged nested lists
            raise ShapeError(f"{fn}: cannot convert a {type(x).__name__} operand: {e}") from None
        dt = like.dtype
        if a.dtype.kind not in "biufc":  # ints past int64 and the like: tensor() says
            return tensor(x, dtype=dt)
        if not dt.is_floating_point and a.size and a.dtype.kind in "fc":
            frac = a[~(np.isfinite(a) & (a == np.trunc(a)))] if a.dtype.kind == "f" else a
            if frac.size:
                raise DTypeError(f"{fn}: value {_short(frac.flat[0].item())} of a "
                                 f"{type(x).__name__} operand is not an integer and the tensor "
                                 f"is {dt.name} (an operand never changes a tensor's dtype; "
                                 f"convert with to_dtype)")
        r = _CMP_RANGE.get(like._dtype_code())
        if r is not None and a.size:
            mn, mx = a.min().item(), a.max().item()
            if mn < r[0] or mx > r[1]:
                raise OutOfBoundsError(f"{fn}: value {_short(mn if mn < r[0] else mx)} of a "
                                       f"{type(x).__name__} operand is out of bounds for "
                                       f"{dt.name} (range {r[0]}..{r[1]})")
        return tensor(a, dtype=dt)
    raise TypeError(f"unsupported operand type {type(x).__name__} for a Tensor op")


def _full_like_scalar(s, like, fn="compare"):
    """A 0-d tensor of like's dtype holding s exactly (comparisons, maximum,
    where with a scalar); s out of the dtype's range raises."""
    s = _check_scalar(s, like._dtype_code(), fn, _CMP_RANGE)
    if isinstance(s, Tensor):
        return s
    try:
        v = float(s)
    except OverflowError:
        raise OutOfBoundsError(f"{fn}: Python scalar {_short(s)} is out of the float64 "
                               f"range") from None
    out = _out()
    return _result(lib.ad_tensor_full(v, like._dtype_code(), _NULL, 0, out), out)


class Tensor:
    """An immutable n-d array living in native memory, a node of the graph
    when it depends on a Var.

    Tensor(data, dtype=None) copies `data` (nested lists, scalars, a numpy
    array or a tensor), as ad.tensor does.  Python floats give float32 and
    ints int64 unless `dtype` says otherwise.

    - Properties: shape, ndim, dtype, strides, is_contiguous, version, id.
    - Conversion: numpy() (a read-only zero-copy view), item(), tolist(),
      np.asarray(t), DLPack (__dlpack__, ad.from_dlpack).
    - Ops: the operators (+ - * / ** @, comparisons) broadcast with numpy's
      rules; elementwise math (exp, log, relu, ...), reductions (sum, mean,
      max, ...), layout views (reshape, permute, transpose, t[...]) and
      joining/selecting (split, gather, index_select, ...).
    - Differentiation: loss.backward() returns a GradStore holding d loss / d v
      for every Var v the loss depends on; detach() cuts the graph.

    Every failure is an ad.Error subclass naming the op, the shapes and the dtypes.
    """

    __slots__ = ("_h", "__weakref__")
    __array_priority__ = 1000
    __array_ufunc__ = None  # numpy defers to our reflected operators

    def __init__(self, data, dtype=None):
        src = tensor(data, dtype)
        h = src._h
        del src._h  # the handle moves: src's __del__ must not release it
        self._take(h)

    def __init_subclass__(cls, **kwargs):
        # Python 3.12 leaves a new class's buffer slots empty when no base has a
        # __buffer__ method (Tensor's slots are set in C, bindings/build_cffi.py):
        # they are set again on each class made after the install
        super().__init_subclass__(**kwargs)
        if _BUFFER:
            lib._ad_buffer_subclasses()

    def _take(self, h):
        """Holds h, releasing a handle held before (__init__ called twice)."""
        try:
            old = self._h
        except AttributeError:
            old = None
        self._h = h
        if old is not None:
            _release(old)

    def __del__(self, _release=_release, _quick=_release_quick, _released=_RELEASED):
        # idempotent: the tensor takes its class's released form
        # (_released_class), whose __del__ does nothing and whose every
        # attribute lookup raises _ReleasedError (self._h included), so
        # neither the collector's own call after an explicit t.__del__() nor
        # any later use reaches the released handle
        try:
            h = self._h
        except AttributeError:  # released already, or __init__ failed before taking one
            return
        try:
            try:
                self.__class__ = _released[type(self)]
            except KeyError:
                self.__class__ = _released_class(type(self))
        except Exception:  # no released form (a subclass's __init_subclass__ refused it):
            del self._h    # the handle slot is emptied instead, so no call reaches h again
        if not _quick(h):  # the last reference of a node or of shared memory
            _release(h)

    # ---- properties -----------------------------------------------------------
    @property
    def shape(self) -> Tuple[int, ...]:
        """The sizes of the dims, as a tuple of ints (() for a 0-d tensor)."""
        h, buf = self._h, _dims()
        n = _ndim(h)
        _shape(h, buf)
        return tuple(buf[0:n])

    def size(self, dim: Optional[int] = None) -> Any:
        """The shape, or the size of dim `dim` (negative dims count from the end).

        Raises IndexError for a dim out of range.
        """
        s = self.shape
        if dim is None:
            return s
        if not s:  # _norm_dim lets a 0-d tensor take dims 0 and -1; it has no size
            raise OutOfRangeError(f"size: dim {dim!r} out of range for a 0-d tensor")
        return s[_norm_dim(dim, len(s), "size")]

    @property
    def strides(self) -> Tuple[int, ...]:
        """Strides in elements (may be 0 or negative for views)."""
        h, buf = self._h, _dims()
        n = _ndim(h)
        lib.ad_tensor_strides(h, buf)
        return tuple(buf[0:n])

    @property
    def ndim(self) -> int:
        """The number of dims (0 for a scalar tensor)."""
        return _ndim(self._h)

    def dim(self) -> int:
        """The number of dims (PyTorch's method; `ndim` is the property)."""
        return lib.ad_tensor_ndim(self._h)

    def numel(self) -> int:
        """The number of elements (the product of the shape; 1 for a 0-d tensor)."""
        return lib.ad_tensor_numel(self._h)

    def _dtype_code(self):
        return lib.ad_tensor_dtype(self._h)

    @property
    def dtype(self) -> _dt.DType:
        """The element type: one of ad.float32, float64, int64, int32, uint8, bool."""
        return _dt.BY_CODE[lib.ad_tensor_dtype(self._h)]

    @property
    def id(self) -> int:
        """The native tensor's unique id (the key a GradStore uses)."""
        return lib.ad_tensor_id(self._h)

    @property
    def is_variable(self) -> bool:
        """True for a Var (a leaf that backward differentiates with respect to)."""
        return bool(lib.ad_tensor_is_variable(self._h))

    @property
    def track_op(self) -> bool:
        """True when the tensor records the op that made it (it is on a graph)."""
        return bool(lib.ad_tensor_track_op(self._h))

    @property
    def op(self) -> Optional[str]:
        """The name of the op that produced this tensor (an ad.Function's
        class name for a custom op), or None for a leaf."""
        name = lib.ad_tensor_op_name(self._h)
        return ffi.string(name).decode() if name != _NULL else None

    def to_dot(self) -> str:
        """The recorded graph behind this tensor as Graphviz DOT text: one node
        per tracked tensor labelled with its op, shape and dtype; Vars and the
        values saved for backward marked; edges from inputs."""
        return _memory.to_dot(self)

    @property
    def is_contiguous(self) -> bool:
        """True when the elements are laid out row-major without gaps."""
        return bool(lib.ad_tensor_is_contiguous(self._h))

    @property
    def version(self) -> int:
        """The storage's version counter (bumped by Var.set)."""
        return lib.ad_tensor_version(self._h)

    # ---- conversion ---------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """A read-only numpy view of the tensor's memory (zero-copy; it keeps
        the storage alive).  A Var's view sees later Var.set writes."""
        return np.asarray(self if _BUFFER else _ArrayView(self))

    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> np.ndarray:
        """numpy 2's protocol: copy=True always copies, copy=False never does
        (ValueError when a dtype change needs one), None copies only when needed.
        Without a copy the array is the read-only zero-copy view of numpy().
        numpy calls this only when the buffer export failed (a released or
        never-initialised tensor), so it reads the memory through _ArrayView,
        not the buffer again: numpy() would call back here without end."""
        a = np.asarray(_ArrayView(self))
        if dtype is not None and np.dtype(dtype) != a.dtype:
            if copy is False:
                raise InvalidArgumentError(
                    f"__array__: a {self.dtype.name} tensor cannot become a {np.dtype(dtype)} "
                    f"array without a copy (copy=False was asked)")
            return a.astype(dtype)
        return a.copy() if copy else a

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule sharing this tensor's memory (zero-copy; the
        capsule keeps the storage alive until its consumer is done).  A
        versioned capsule, flagged read-only, when max_version >= (1, 0),
        else a legacy one.  copy=True exports a copy, and so does copy=None for
        a view with negative strides (torch aborts on those; copy=False still
        shares it); stream must be None and dl_device None or (1, 0) (CPU)."""
        return _interop.to_dlpack(self, stream, max_version, dl_device, copy)

    def __dlpack_device__(self):
        """(1, 0): DLPack's CPU device."""
        return (1, 0)

    def __reduce_ex__(self, protocol):
        """Pickles dtype, shape and the raw bytes (out of band with protocol 5);
        a Var unpickles as a new Var (new id), anything else as an untracked
        tensor with the same value."""
        return _io.reduce_tensor(self, protocol)

    def tolist(self) -> Any:
        """The elements as (nested) Python lists of Python scalars; a 0-d tensor gives a scalar."""
        return self.numpy().tolist()

    def item(self, _fn: str = "item") -> Any:
        """The value of a one-element tensor as a Python int, float or bool.

        Raises InvalidArgumentError when the tensor has more than one element.
        """
        if self.numel() != 1:
            raise InvalidArgumentError(
                f"{_fn}: only a tensor with one element converts to a Python scalar, "
                f"got shape {self.shape}")
        return self.numpy().reshape(()).item()

    def __float__(self):
        return float(self.item("float()"))

    def __int__(self):
        return int(self.item("int()"))

    def __format__(self, spec):
        if not spec:
            return str(self)
        return format(self.item(f"format(tensor, {spec!r})"), spec)

    def __index__(self):
        if self.dtype.is_floating_point or self.dtype is _dt.bool_:
            raise TypeError("only integer tensors with one element can be used as an index")
        return int(self.item())

    def __bool__(self):
        if self.numel() != 1:
            raise InvalidArgumentError(
                f"the truth value of a tensor with shape {self.shape} is ambiguous")
        return bool(self.item())

    def __len__(self) -> int:
        """The size of dim 0.  Raises TypeError for a 0-d tensor."""
        s = self.shape
        if not s:
            raise TypeError("len() of a 0-d tensor")
        return s[0]

    def __iter__(self) -> Iterator[Tensor]:
        """Iterate over dim 0, yielding the views t[0], t[1], ...
        Raises TypeError for a 0-d tensor."""
        for i in range(len(self)):
            yield self[i]

    def __repr__(self):
        name = "Var" if self.is_variable else "tensor"
        body = np.array2string(self.numpy(), separator=", ", prefix=name + "(")
        extra = "" if self.dtype is _dt.float32 else f", dtype={self.dtype.name}"
        op = self.op
        if op:
            extra += f", op={op}"
        return f"{name}({body}{extra})"

    __hash__ = object.__hash__

    def __copy__(self):
        # tensors are immutable: a copy shares the native tensor, with its own reference
        lib.ad_tensor_retain(self._h)
        return _wrap(self._h, type(self))

    def __deepcopy__(self, memo):
        if self.is_variable:
            return Var(self.detach())
        return self.__copy__()

    # ---- graph --------------------------------------------------------------------
    def detach(self) -> Tensor:
        """A tensor sharing this one's memory but cut from the graph: backward does
        not flow through it.  A Var detaches to a plain Tensor.
        """
        out = _out()
        st = lib.ad_tensor_detach(self._h, out)
        if st:
            raise_status(st)
        if out[0] == self._h and type(self) is Tensor:
            _release(out[0])
            return self
        return _wrap(out[0])

    def sorted_nodes(self):
        """Tracked nodes that reach a Var: root first, each node before its inputs."""
        arr = ffi.new("ad_tensor ***")
        n = ffi.new("int64_t *")
        st = lib.ad_sorted_nodes(self._h, arr, n)
        if st:
            raise_status(st)
        items = arr[0]
        try:
            return [_wrap(items[i], Var if lib.ad_tensor_is_variable(items[i]) else Tensor)
                    for i in range(n[0])]
        finally:
            lib.ad_free(items)

    def backward(self, grad: Optional[Operand] = None, retain: Iterable[Tensor] = (),
                 create_graph: bool = False) -> GradStore:
        """Backpropagates from this tensor and returns an ad.GradStore with the
        gradient of every Var it depends on (and of the tensors in `retain`),
        each of that tensor's shape and dtype.

        grad seeds the backward pass: a Tensor of this tensor's shape (or
        anything ad.tensor() accepts, converted to its dtype); None means 1 and
        needs a one-element tensor.  create_graph=True records the backward
        pass itself (whatever the grad mode), so the gradients track and can
        be differentiated again.  Raises GraphError when this tensor depends
        on no Var, ShapeError when grad is None for more than one element,
        ShapeError / DTypeError when grad does not match this tensor's shape /
        dtype, ArgumentTypeError when retain holds a non-Tensor."""
        if grad is not None and not isinstance(grad, Tensor):
            grad = tensor(grad, dtype=self.dtype)
        # the tensors themselves are held (not only their handles) until the
        # native call returns: retain may be a generator of temporaries
        try:
            retain = tuple(retain)
        except TypeError:
            raise ArgumentTypeError(f"backward: retain must be an iterable of Tensors, got a "
                                    f"{type(retain).__name__}") from None
        for i, t in enumerate(retain):
            if not isinstance(t, Tensor):
                raise ArgumentTypeError(f"backward: retain[{i}] is a {type(t).__name__}, "
                                        f"not a Tensor")
        keep = [t._h for t in retain]
        out = ffi.new("ad_gradstore **")
        gh = grad._h if grad is not None else _NULL
        if create_graph:
            st = lib.ad_backward_ex(self._h, gh, keep or _NULL, len(keep),
                                    lib.AD_BACKWARD_CREATE_GRAPH, out)
        else:
            st = lib.ad_backward(self._h, gh, keep or _NULL, len(keep), out)
        del retain
        if st:
            raise_status(st)
        return _grad.GradStore._from_handle(out[0])

    # ---- operators ----------------------------------------------------------------
    # named one by one, so that type checkers see them (rows: _OPERATORS)
    __add__ = _operator(*_OPERATORS["__add__"])
    __radd__ = _operator(*_OPERATORS["__radd__"])
    __sub__ = _operator(*_OPERATORS["__sub__"])
    __rsub__ = _operator(*_OPERATORS["__rsub__"])
    __mul__ = _operator(*_OPERATORS["__mul__"])
    __rmul__ = _operator(*_OPERATORS["__rmul__"])
    __truediv__ = _operator(*_OPERATORS["__truediv__"])
    __rtruediv__ = _operator(*_OPERATORS["__rtruediv__"])

    def __pow__(self, o: Operand) -> Tensor:
        """self ** o, elementwise: o is a Python number (pow by a scalar) or a tensor
        (broadcast against self).  Raises ShapeError when the shapes do not broadcast.
        """
        if _is_scalar(o):
            return _scalar(lib.AD_OP_POW_SCALAR, self, o)
        return self.pow(_as_tensor_like(o, self, "pow"))

    def __rpow__(self, o: Operand) -> Tensor:
        """o ** self, elementwise (o a number or a tensor broadcast against self)."""
        if _is_scalar(o):
            return _scalar(lib.AD_OP_POW_RSCALAR, self, o)
        return _as_tensor_like(o, self, "pow").pow(self)

    def __matmul__(self, o: Operand) -> Tensor:
        """self @ o: matrix product with numpy's matmul rules (1-d operands are
        promoted and the added dim removed; batch dims broadcast).  (..., n, k) @ (..., k, m)
        -> (..., n, m).  Raises ShapeError on mismatched inner dims, DTypeError on mixed dtypes.
        """
        if isinstance(o, Tensor):  # fast path: both operands >= 2-d
            try:
                out = _tls.out
            except AttributeError:
                out = _out()
            st = _ad_binary(_OP_MATMUL, self._h, o._h, out)
            if st != lib.AD_ERR_SHAPE:  # only a shape error can be 1-d promotion
                return _result(st, out)
        return matmul(self, _as_tensor_like(o, self, "matmul"))

    def __rmatmul__(self, o: Operand) -> Tensor:
        """o @ self, with numpy's matmul rules (see __matmul__)."""
        return matmul(_as_tensor_like(o, self, "matmul"), self)

    def __neg__(self) -> Tensor:
        """-self, elementwise."""
        return _unary(lib.AD_OP_NEG, self)

    def __pos__(self) -> Tensor:
        """+self: self itself."""
        return self

    def __abs__(self) -> Tensor:
        """abs(self), elementwise (as self.abs())."""
        return self.abs()

    __eq__ = _comparison(lib.AD_OP_EQ)  # type: ignore[assignment]
    __ne__ = _comparison(lib.AD_OP_NE)  # type: ignore[assignment]
    __lt__ = _comparison(lib.AD_OP_LT)
    __le__ = _comparison(lib.AD_OP_LE)
    __gt__ = _comparison(lib.AD_OP_GT)
    __ge__ = _comparison(lib.AD_OP_GE)

    eq, ne, lt, le, gt, ge = __eq__, __ne__, __lt__, __le__, __gt__, __ge__

    # ---- elementwise methods ---------------------------------------------------------
    def add(self, o: Operand) -> Tensor:
        """self + o, elementwise with broadcasting (see __add__)."""
        return self + o

    def sub(self, o: Operand) -> Tensor:
        """self - o, elementwise with broadcasting (see __sub__)."""
        return self - o

    def mul(self, o: Operand) -> Tensor:
        """self * o, elementwise with broadcasting (see __mul__)."""
        return self * o

    def div(self, o: Operand) -> Tensor:
        """self / o, elementwise with broadcasting (see __truediv__)."""
        return self / o

    # One method per UNARY row of native/src/ops.def (t.exp(), t.gelu(), ...)
    # and per SCALAR row whose float arguments all have defaults (t.elu(alpha=1.0)),
    # with the row's docstring (pyautodiff/_ops.py).  The class namespace is a
    # plain dict, so they become methods exactly as if written here.
    locals().update(_tensor_methods(globals()))

    def pow(self, exponent: Operand) -> Tensor:
        """self ** exponent, elementwise: exponent is a Python number or a
        tensor broadcast against self.  Raises ShapeError when the shapes do
        not broadcast, DTypeError on mixed tensor dtypes."""
        if _is_scalar(exponent):
            return _scalar(lib.AD_OP_POW_SCALAR, self, exponent)
        return _binary(lib.AD_OP_POW, self, _as_tensor_like(exponent, self, "pow"))

    def clamp(self, min=None, max=None):
        """Limits values to [min, max] (either may be None); the gradient passes
        where min <= x <= max (inclusive, as PyTorch).  For an integer tensor a
        bound past its dtype's range on its own side limits nothing, one past
        the other side raises OutOfBoundsError (no element could take it), and
        int64 bounds beyond 2**53 are exact."""
        for b, which in ((min, "min"), (max, "max")):
            if b is not None and not isinstance(b, (numbers.Real, Tensor)):
                raise ArgumentTypeError(f"clamp: {which} must be a real number or None, got "
                                        f"{repr(b)[:60]}")
        code = self._dtype_code()
        r = _INT_RANGE.get(code)
        if r is not None:
            name = self.dtype.name
            if min is not None and min > r[1] or max is not None and max < r[0]:
                b = min if min is not None and min > r[1] else max
                raise OutOfBoundsError(f"clamp: bound {_short(b)} is out of bounds for {name} "
                                       f"(range {r[0]}..{r[1]}), so no element could take it")
            min = None if min is not None and min <= r[0] else min
            max = None if max is not None and max >= r[1] else max
            exact = [b if b is None or -_EXACT <= b <= _EXACT or
                     not isinstance(b, numbers.Integral) else from_numpy(np.array(int(b)))
                     for b in (min, max)]
            if any(isinstance(b, Tensor) for b in exact):  # beyond a double: exact
                out = self if exact[0] is None else maximum(self, exact[0])
                return out if exact[1] is None else minimum(out, exact[1])
        return _call(lib.AD_OP_CLAMP, (self,), (), (-np.inf if min is None else float(min),
                                                    np.inf if max is None else float(max)))

    def maximum(self, other):
        """Elementwise max; where the operands tie each gets half the gradient."""
        return maximum(self, other)

    def minimum(self, other):
        """Elementwise min; where the operands tie each gets half the gradient."""
        return minimum(self, other)

    # ---- reductions --------------------------------------------------------------------
    def _reduce(self, op, dim, keepdim):
        if dim is None:  # over everything: the common loss.sum() / mean(), kept short
            if not keepdim:
                h = _rq(op, self._h)
                if h:
                    t = _new(Tensor)
                    t._h = h
                    return t
            try:
                out, one = _tls.out, _tls.one
            except AttributeError:
                out, one = _out(), _tls_one()
            one[0] = self._h
            st = _ad_op_call(op, one, 1, _KEEPDIM[bool(keepdim)], 1, _NULL, 0, out)
            one[0] = _NULL
            return _result(st, out)
        return _call(op, (self,), (1 if keepdim else 0,) + _dims_arg(dim, _op_name(op)))

    def sum(self, dim: DimArg = None, keepdim: bool = False) -> Tensor:
        """Sum over `dim` (an int or a tuple of ints; None: all dims).

        Args:
            dim: the dims to reduce; negative dims count from the end.
            keepdim: keep the reduced dims with size 1.

        Shape: (d0, ..., dn) -> the shape without the reduced dims (or with 1s there).
        Raises OutOfRangeError for a dim out of range.
        """
        return self._reduce(lib.AD_OP_SUM, dim, keepdim)

    def sum_all(self) -> Tensor:
        """The sum of every element, as a 0-d tensor (sum() with no dim)."""
        return self._reduce(lib.AD_OP_SUM, None, False)

    def mean(self, dim: DimArg = None, keepdim: bool = False) -> Tensor:
        """Mean over `dim` (an int or a tuple of ints; None: all dims).

        Args:
            dim: the dims to reduce; negative dims count from the end.
            keepdim: keep the reduced dims with size 1.

        Shape: (d0, ..., dn) -> the shape without the reduced dims (or with 1s there).
        Integer tensors raise DTypeError.  Raises OutOfRangeError for a dim out of range.
        """
        return self._reduce(lib.AD_OP_MEAN, dim, keepdim)

    def max(self, dim: DimArg = None, keepdim: bool = False) -> Tensor:
        """Maximum over `dim` (an int or a tuple of ints; None: all dims).

        Args:
            dim: the dims to reduce; negative dims count from the end.
            keepdim: keep the reduced dims with size 1.

        Shape: (d0, ..., dn) -> the shape without the reduced dims (or with 1s there).
        The gradient is shared equally by the elements that tie for the maximum (torch's amax).
        Raises OutOfRangeError for a dim out of range.
        """
        return self._reduce(lib.AD_OP_MAX, dim, keepdim)

    def min(self, dim: DimArg = None, keepdim: bool = False) -> Tensor:
        """Minimum over `dim` (an int or a tuple of ints; None: all dims).

        Args:
            dim: the dims to reduce; negative dims count from the end.
            keepdim: keep the reduced dims with size 1.

        Shape: (d0, ..., dn) -> the shape without the reduced dims (or with 1s there).
        The gradient is shared equally by the elements that tie for the minimum (torch's amin).
        Raises OutOfRangeError for a dim out of range.
        """
        return self._reduce(lib.AD_OP_MIN, dim, keepdim)

    def argmax(self, dim: DimArg = None, keepdim: bool = False) -> Tensor:
        """Index (int64) of the first maximum along `dim` (None: of the flattened tensor).

        Args:
            dim: the dims to reduce; negative dims count from the end.
            keepdim: keep the reduced dims with size 1.

        Shape: (d0, ..., dn) -> the shape without the reduced dims (or with 1s there).
        Not differentiable.  Raises OutOfRangeError for a dim out of range.
        """
        return _call(lib.AD_OP_ARGMAX, (self,), (1 if keepdim else 0,) + _dims_arg(dim, "argmax"))

    def argmin(self, dim: DimArg = None, keepdim: bool = False) -> Tensor:
        """Index (int64) of the first minimum along `dim` (None: of the flattened tensor).

        Args:
            dim: the dims to reduce; negative dims count from the end.
            keepdim: keep the reduced dims with size 1.

        Shape: (d0, ..., dn) -> the shape without the reduced dims (or with 1s there).
        Not differentiable.  Raises OutOfRangeError for a dim out of range.
        """
        return _call(lib.AD_OP_ARGMIN, (self,), (1 if keepdim else 0,) + _dims_arg(dim, "argmin"))

    def prod(self, dim: DimArg = None, keepdim: bool = False) -> Tensor:
        """Product over dims; its gradient is exact where inputs are zero."""
        return self._reduce(lib.AD_OP_PROD, dim, keepdim)

    def logsumexp(self, dim: DimArg, keepdim: bool = False) -> Tensor:
        """log(sum(exp(x), dim)), stable; dim is an int or a tuple of ints (None
        or () reduce every dim).  Raises InvalidArgumentError for a dim given twice."""
        dims = _dims_arg(dim, "logsumexp")
        if len(dims) == 1:
            return _call(lib.AD_OP_LOGSUMEXP, (self,), (dims[0], 1 if keepdim else 0))
        n = self.ndim
        if not dims:  # None and () reduce every dim, as sum does
            if n == 0:
                return _call(lib.AD_OP_LOGSUMEXP, (self,), (0, 1 if keepdim else 0))
            dims = tuple(range(n))
        # several dims: move them last, merge them into one, reduce that one
        norm = [_norm_dim(d, n, "logsumexp") for d in dims]
        for i, d in enumerate(norm):
            if d in norm[:i]:
                raise InvalidArgumentError(f"logsumexp: dim {dims[i]} given twice")
        red = sorted(norm)
        keep = [d for d in range(n) if d not in red]
        x = self.permute(keep + red)
        m = 1
        for d in red:
            m *= self.shape[d]
        x = x.reshape(tuple(self.shape[d] for d in keep) + (m,))
        y = _call(lib.AD_OP_LOGSUMEXP, (x,), (-1, 0))
        if keepdim:
            y = y.reshape(tuple(1 if d in red else s for d, s in enumerate(self.shape)))
        return y

    def softmax(self, dim: int) -> Tensor:
        """Softmax along `dim`: exp(x - max) normalised to sum to 1 (same shape).
        Raises OutOfRangeError for a dim out of range, DTypeError for an integer tensor.
        """
        return _call(lib.AD_OP_SOFTMAX, (self,), (_int_arg(dim, "softmax", "dim"),))

    def log_softmax(self, dim: int) -> Tensor:
        """log(softmax(x)) along `dim`, computed stably (same shape).
        Raises OutOfRangeError for a dim out of range, DTypeError for an integer tensor.
        """
        return _call(lib.AD_OP_LOG_SOFTMAX, (self,), (_int_arg(dim, "log_softmax", "dim"),))

    def var(self, dim: DimArg = None, correction: int = 1, keepdim: bool = False) -> Tensor:
        """sum((x - mean)^2) / (N - correction) over dims (composed of
        differentiable ops; N - correction <= 0 gives inf or nan, as PyTorch)."""
        return self._var(dim, correction, keepdim, "var")

    def _var(self, dim, correction, keepdim, op):
        if isinstance(correction, bool) or not isinstance(correction, numbers.Real):
            raise ArgumentTypeError(f"{op}: correction must be a number, got {correction!r}")
        # the dims checked here, so that a bad one is op's error, not mean's
        dims = _dims_arg(dim, op)  # None and () reduce every dim, as mean does
        norm = [_norm_dim(i, self.ndim, op) for i in dims]
        for i, d in enumerate(norm):
            if self.ndim and d in norm[:i]:
                raise InvalidArgumentError(f"{op}: dim {dims[i]} given twice")
        n = 1
        for i in set(norm) if dims and self.ndim else range(self.ndim):
            n *= self.shape[i]
        d = self - self.mean(dims, keepdim=True)
        return (d * d).sum(dims, keepdim) / builtins.max(n - correction, 0)

    def std(self, dim: DimArg = None, correction: int = 1, keepdim: bool = False) -> Tensor:
        """Standard deviation over `dim`: sqrt(var(dim, correction, keepdim)).
        correction=1 is Bessel's (unbiased) estimate, 0 the population one.
        """
        return self._var(dim, correction, keepdim, "std").sqrt()

    def cumsum(self, dim: int) -> Tensor:
        """Cumulative sum along `dim` (same shape; int32, uint8 and bool sum
        in int64, as `sum` does).  Raises OutOfRangeError for a bad dim."""
        return _call(lib.AD_OP_CUMSUM, (self,), (_int_arg(dim, "cumsum", "dim"), 0))

    # ---- layout ---------------------------------------------------------------------------
    def reshape(self, *shape: ShapeArg) -> Tensor:
        """The same elements in a new shape: reshape(2, 3) or reshape((2, 3)); one
        size may be -1 (inferred).  A view when the layout allows, else a copy.  `view`
        is an alias.  Raises ShapeError when the element counts differ.
        """
        if len(shape) == 1 and not isinstance(shape[0], numbers.Integral):
            shape = shape[0]
        return _call(lib.AD_OP_RESHAPE, (self,), _shape_arg(shape, "shape", "reshape"))

    view = reshape

    def permute(self, *dims: ShapeArg) -> Tensor:
        """A view with the dims reordered: permute(1, 0, 2) or permute((1, 0, 2)).
        Raises InvalidArgumentError unless `dims` is a permutation of range(ndim).
        """
        if len(dims) == 1 and not isinstance(dims[0], numbers.Integral):
            dims = dims[0]
        return _call(lib.AD_OP_PERMUTE, (self,), _shape_arg(dims, "dims", "permute"))

    def transpose(self, dim0: int, dim1: int) -> Tensor:
        """A view with dims `dim0` and `dim1` swapped.  Raises OutOfRangeError for a bad dim."""
        n = self.ndim
        d0, d1 = _norm_dim(dim0, n, "transpose"), _norm_dim(dim1, n, "transpose")
        if n == 0:  # dims 0 / -1 of a 0-d tensor: nothing to swap
            return self
        perm = list(range(n))
        perm[d0], perm[d1] = perm[d1], perm[d0]
        return _call(lib.AD_OP_PERMUTE, (self,), perm)

    def t(self) -> Tensor:
        """Swaps the last two dims (any tensor of rank >= 2)."""
        if self.ndim < 2:
            raise ShapeError(f"t: needs at least 2 dims, got shape {self.shape}")
        return self.transpose(-2, -1)

    @property
    def T(self) -> Tensor:
        """A view with every dim reversed (the transpose of a matrix)."""
        return self.permute(_REVERSED[self.ndim])

    def narrow(self, dim: int, start: int, length: int) -> Tensor:
        """A view of elements start .. start+length-1 of dim `dim` (start may be negative).
        Raises OutOfRangeError when the range falls outside the dim.
        """
        n = self.ndim
        d = _norm_dim(dim, n, "narrow")
        if n == 0:
            raise ShapeError("narrow: needs a tensor of at least 1 dim, got a 0-d tensor")
        size = self.shape[d]
        start = _int_arg(start, "narrow", "start")
        length = _int_arg(length, "narrow", "length")
        # torch's range: start in [-size, size], so an empty view may start at
        # the end but not past it
        first = start + size if start < 0 else start
        if not -size <= start <= size or length < 0 or first + length > size:
            raise OutOfRangeError(f"narrow: start {start}, length {length} out of range for dim "
                                  f"{d} (size {size}) of {self.dtype.name} {self.shape}")
        return _call(lib.AD_OP_SLICE, (self,), (d, first, 1, length))

    def broadcast_to(self, *shape: ShapeArg) -> Tensor:
        """A view broadcast to `shape` with numpy's rules (size-1 dims repeat at no
        cost).  Its gradient sums back.  Raises ShapeError when the shapes do not broadcast.
        """
        if len(shape) == 1 and not isinstance(shape[0], numbers.Integral):
            shape = shape[0]
        return _call(lib.AD_OP_BROADCAST, (self,), _shape_arg(shape, "shape", "broadcast_to"))

    def expand(self, *sizes: ShapeArg) -> Tensor:
        """PyTorch's expand: broadcast_to where a size of -1 keeps that dim.
        Raises ShapeError when a non-1 dim would change.
        """
        return _ix.expand(self, *sizes)

    def squeeze(self, dim: DimArg = None) -> Tensor:
        """Remove size-1 dims: all of them (dim=None) or those listed in `dim` (an
        int or tuple; a listed dim whose size is not 1 is kept, as in PyTorch).
        """
        shape = self.shape
        if dim is None:
            new = tuple(s for s in shape if s != 1)
        else:
            dims = {_norm_dim(d, len(shape), "squeeze") for d in _dims_arg(dim, "squeeze")}
            new = tuple(s for i, s in enumerate(shape) if not (i in dims and s == 1))
        return self.reshape(new)

    def unsqueeze(self, dim: int) -> Tensor:
        """Insert a size-1 dim at position `dim` (in range(-ndim-1, ndim+1))."""
        shape = list(self.shape)
        d = _norm_dim(dim, len(shape) + 1, "unsqueeze")
        shape.insert(d, 1)
        return self.reshape(shape)

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        """Merge dims start_dim .. end_dim into one (a 0-d tensor becomes shape (1,)).
        Raises OutOfRangeError for a bad dim.
        """
        shape = self.shape
        if not shape:
            return self.reshape(1)
        s = _norm_dim(start_dim, len(shape), "flatten")
        e = _norm_dim(end_dim, len(shape), "flatten")
        if s > e:
            raise InvalidArgumentError(f"flatten: start_dim {start_dim} after end_dim {end_dim}")
        n = 1
        for x in shape[s:e + 1]:
            n *= x
        return self.reshape(shape[:s] + (n,) + shape[e + 1:])

    def contiguous(self) -> Tensor:
        """A row-major copy when the tensor is a strided view, else the same values."""
        return _unary(lib.AD_OP_CONTIGUOUS, self)

    def clone(self) -> Tensor:
        """A row-major copy in new memory (PyTorch's clone), on the graph: the
        gradient passes through unchanged.  A Var clones to a plain Tensor."""
        return _call(lib.AD_OP_COPY, (self,))

    def to_dtype(self, dtype: DTypeLike) -> Tensor:
        """The values converted to `dtype` (an ad dtype, numpy dtype or name);
        `astype` is an alias.  Float -> float casts are differentiable.
        """
        return _call(lib.AD_OP_TO_DTYPE, (self,), (_dt.as_dtype(dtype).code,))

    astype = to_dtype

    def float(self) -> Tensor:
        """to_dtype(ad.float32)."""
        return self.to_dtype(_dt.float32)

    def double(self) -> Tensor:
        """to_dtype(ad.float64)."""
        return self.to_dtype(_dt.float64)

    def matmul(self, other: Tensor) -> Tensor:
        """self @ other (see __matmul__ for shapes and errors)."""
        return matmul(self, other)

    # ---- joining and selecting (indexing.py) ------------------------------------------------
    def flip(self, dims: DimArg) -> Tensor:
        """ad.flip(self, dims): reverse the order of elements along `dims`."""
        return _ix.flip(self, dims)

    def repeat(self, *sizes: ShapeArg) -> Tensor:
        """Tile the tensor (PyTorch's repeat): repeat(2, 3) repeats dim -2 twice and
        dim -1 three times."""
        return _ix.repeat(self, *sizes)

    def split(self, split_size_or_sections: Union[int, Sequence[int]],
              dim: int = 0) -> List[Tensor]:
        """ad.split(self, split_size_or_sections, dim): a list of views along `dim`."""
        return _ix.split(self, split_size_or_sections, dim)

    def chunk(self, chunks: int, dim: int = 0) -> List[Tensor]:
        """ad.chunk(self, chunks, dim): `chunks` nearly equal views along `dim`."""
        return _ix.chunk(self, chunks, dim)

    def index_select(self, dim: int, index: Any) -> Tensor:
        """ad.index_select(self, dim, index): the entries `index` (1-d int64) of dim `dim`."""
        return _ix.index_select(self, dim, index)

    def index_add(self, dim: int, index: Any, source: Tensor) -> Tensor:
        """ad.index_add(self, dim, index, source): self with source's slices added at `index`."""
        return _ix.index_add(self, dim, index, source)

    def gather(self, dim: int, index: Any) -> Tensor:
        """ad.gather(self, dim, index): out[i][j] = self[index[i][j]][j] for dim 0, and so on."""
        return _ix.gather(self, dim, index)

    def scatter_add(self, dim: int, index: Any, src: Tensor) -> Tensor:
        """ad.scatter_add(self, dim, index, src): self with src added where `index` says."""
        return _ix.scatter_add(self, dim, index, src)

    def __getitem__(self, key: Any) -> Tensor:
        """t[key]: numpy-style indexing.  Ints, slices (any step), None, Ellipsis
        give differentiable views; an int or bool tensor/array/list index gathers
        (advanced indexing, a copy).  Raises OutOfRangeError for an index out of range,
        InvalidArgumentError for an unsupported key.
        """
        return _ix.getitem(self, key)

    def __setitem__(self, key: Any, value: Any) -> None:
        """Always raises TypeError: a Tensor is immutable.  Hold the value in an ad.Var
        and write var[key] = value (or Var.set), or build a new tensor.
        """
        raise TypeError("tensors are immutable: t[idx] = value is not allowed on a Tensor; "
                        "build a new tensor (ad.where, index_add, cat), or hold the value in "
                        "an ad.Var and write it with var[idx] = value or Var.set")


def _norm_dim(d, n, op):
    """d in [0, n); a 0-d tensor takes 0 and -1, as a 1-d one would (torch's
    rule), and gets 0: its callers treat that dim as one of size 1."""
    try:
        d = operator.index(d)
    except TypeError:
        raise ArgumentTypeError(f"{op}: dim must be an int, got {repr(d)[:60]} "
                                f"({type(d).__name__})") from None
    if not -max(n, 1) <= d < max(n, 1):
        raise OutOfRangeError(f"{op}: dim {d} out of range for {n} dims")
    return 0 if n == 0 else d + n if d < 0 else d


class _ArrayView:
    """Carries __array_interface__ for numpy and keeps the tensor alive as the
    array's base."""

    __slots__ = ("__array_interface__", "tensor")

    def __init__(self, t):
        h = t._h
        typestr, size = _ARRAY_TYPES[lib.ad_tensor_dtype(h)]
        self.tensor = t
        self.__array_interface__ = {
            "shape": t.shape,
            "typestr": typestr,
            "data": (int(ffi.cast(_UINTPTR, lib.ad_tensor_data(h))), True),
            "strides": tuple([s * size for s in t.strides]),
            "version": 3,
        }


_UINTPTR = ffi.typeof("uintptr_t")
# by dtype code: numpy's typestr (np.dtype.str builds a new string per read) and item size
_ARRAY_TYPES = {code: (dt.numpy.str, dt.itemsize) for code, dt in _dt.BY_CODE.items()}


def _refuse_var_write(var: "Var") -> None:
    """Raises GraphError while ad.checkpoint's function runs on this thread:
    every in-place write of a Var (Var.set and what goes through it, an
    optimizer's fused update) calls this first."""
    what = getattr(_tls, "no_var_writes", None)
    if what:
        raise GraphError(f"checkpoint: {what} modified a Var in place (id {var.id}, shape "
                         f"{var.shape}, {var.dtype}); a checkpointed function must not write "
                         f"Vars (its forward runs again in backward)")


class Var(Tensor):
    """A mutable leaf (float dtypes only): its value changes only by `set`,
    which bumps its version.

    Var(data, dtype=None) copies `data` as Tensor does; Var.randn, Var.zeros,
    Var.ones and Var.rand create one directly.  backward() differentiates
    with respect to Vars; optimizers update them in place (var -= lr * g under
    no_grad does the same by hand).
    """

    __slots__ = ()

    def __init__(self, data, dtype=None):
        src = data if isinstance(data, Tensor) and dtype is None else tensor(data, dtype)
        out = _out()
        st = lib.ad_var_from_tensor(src._h, out)
        if st:
            raise_status(st)
        self._take(out[0])  # (the same native Var when data was one: shared, as from_tensor)

    @classmethod
    def from_tensor(cls, t: Tensor) -> Var:
        """A Var holding a copy of t; a Var is returned as it is."""
        if isinstance(t, Var):
            return t
        if not isinstance(t, Tensor):
            t = tensor(t)
        out = _out()
        st = lib.ad_var_from_tensor(t._h, out)
        if st:
            raise_status(st)
        return _wrap(out[0], Var)

    @classmethod
    def zeros(cls, *shape: ShapeArg, dtype: Optional[DTypeLike] = None) -> Var:
        """A new Var of zeros: Var.zeros(2, 3) or Var.zeros((2, 3)); default dtype float32."""
        return cls.from_tensor(zeros(_shape_varargs(shape, "Var.zeros"), dtype=dtype))

    @classmethod
    def ones(cls, *shape: ShapeArg, dtype: Optional[DTypeLike] = None) -> Var:
        """A new Var of ones: Var.ones(2, 3) or Var.ones((2, 3)); default dtype float32."""
        return cls.from_tensor(ones(_shape_varargs(shape, "Var.ones"), dtype=dtype))

    @classmethod
    def randn(cls, *shape: ShapeArg, seed: Optional[int] = None, dtype: Optional[DTypeLike] = None,
              std: float = 1.0) -> Var:
        """A new Var of standard-normal samples times `std`.  `seed` makes it
        reproducible (else the ad.manual_seed generator is used).
        """
        t = randn(_shape_varargs(shape, "Var.randn"), seed=seed, dtype=dtype)
        return cls.from_tensor(t * std if std != 1.0 else t)

    @classmethod
    def rand(cls, *shape: ShapeArg, seed: Optional[int] = None,
             dtype: Optional[DTypeLike] = None) -> Var:
        """A new Var of uniform samples in [0, 1); `seed` as in randn."""
        return cls.from_tensor(rand(_shape_varargs(shape, "Var.rand"), seed=seed, dtype=dtype))

    def set(self, src: Any) -> None:
        """Writes src into this Var in place (bumps its version).  src must have
        the Var's shape and dtype and must not share its storage."""
        _refuse_var_write(self)
        if not isinstance(src, Tensor):
            src = tensor(src, dtype=self.dtype)
        st = lib.ad_var_set(self._h, src._h)
        if st:
            raise_status(st)

    # ---- in place, as Var.set (PyTorch's `with no_grad(): w -= lr * g`) ---------------
    def _inplace(self, o, fn, name):
        """self = fn(self, o) written into this Var: same id, version bumped,
        nothing recorded.  The operands follow the operator's own rules (mixed
        float widths are a DTypeError, as out of place)."""
        with _grad.no_grad():
            new = fn(self, o)
            if new.shape != self.shape:
                raise ShapeError(f"Var {name}=: the result has shape {new.shape}, the Var "
                                 f"{self.shape} (an in-place update cannot change the shape)")
            if new.id == self.id or lib.ad_tensor_data(new._h) == lib.ad_tensor_data(self._h):
                new = _call(lib.AD_OP_COPY, (new.detach(),))  # set refuses shared storage
            self.set(new)
        return self

    def __iadd__(self, o: Any) -> Var:
        """var += o in place (through Var.set: same id, version bumped), as PyTorch's
        `with no_grad(): w += lr * g`.  o must broadcast to var's shape and keep its dtype.
        """
        return self._inplace(o, operator.add, "+")

    def __isub__(self, o: Any) -> Var:
        """var -= o in place (through Var.set: same id, version bumped), as PyTorch's
        `with no_grad(): w -= lr * g`.  o must broadcast to var's shape and keep its dtype.
        """
        return self._inplace(o, operator.sub, "-")

    def __imul__(self, o: Any) -> Var:
        """var *= o in place (through Var.set: same id, version bumped), as PyTorch's
        `with no_grad(): w *= lr * g`.  o must broadcast to var's shape and keep its dtype.
        """
        return self._inplace(o, operator.mul, "*")

    def __itruediv__(self, o: Any) -> Var:
        """var /= o in place (through Var.set: same id, version bumped), as PyTorch's
        `with no_grad(): w /= lr * g`.  o must broadcast to var's shape and keep its dtype.
        """
        return self._inplace(o, operator.truediv, "/")

    def __ipow__(self, o: Any) -> Var:
        """var **= o in place (through Var.set: same id, version bumped); without it
        Python would rebind var to a plain Tensor and training would silently stop."""
        return self._inplace(o, operator.pow, "**")

    def __imatmul__(self, o: Any) -> Var:
        """var @= o in place (through Var.set); the product must keep var's shape
        (a square o), else ShapeError and the Var is unchanged."""
        return self._inplace(o, operator.matmul, "@")

    def __setitem__(self, key, value):
        """var[key] = value writes in place, as Var.set (version bumped): any
        numpy index, value broadcast as numpy does."""
        key = _ix.numpy_key(key)
        try:
            v = np.asarray(value)
        except ValueError as e:  # ragged nested lists
            raise ShapeError(f"Var[...] = value: {e} (Var shape {self.shape})") from None
        if v.dtype.kind not in "biuf":
            # numpy's assignment would parse a string and drop an imaginary
            # part: such values go through tensor(), which refuses them
            v = tensor(value if v.dtype.kind == "O" else v, dtype=self.dtype).numpy()
        a = np.array(self.numpy())  # a writable copy; set() writes it back in one step
        try:
            a[key] = v
        except (IndexError, OverflowError) as e:  # OverflowError: an index past int64
            raise OutOfRangeError(f"Var[...] = value: {e} (shape {self.shape})") from None
        except (ValueError, TypeError) as e:  # TypeError: a 2-d value for a bool mask
            raise ShapeError(f"Var[...] = value: {e} (Var shape {self.shape}, value shape "
                             f"{np.shape(value)})") from None
        self.set(from_numpy(a))

    def as_tensor(self) -> Tensor:
        """The Var seen as a Tensor (same id, still tracked)."""
        lib.ad_tensor_retain(self._h)
        return _wrap(self._h)

    def as_detached_tensor(self) -> Tensor:
        """An untracked tensor sharing this Var's storage (new id)."""
        out = _out()
        return _result(lib.ad_tensor_detach(self._h, out), out)


# ---- creation from numpy (above the C forms below: it has one) -------------------------
def from_numpy(a: np.ndarray, dtype: Optional[DTypeLike] = None, *,
               copy: Optional[bool] = None) -> Tensor:
    """A tensor from the numpy array `a` (its dtype kept unless `dtype` is given).

    copy=None (default): a read-only array is shared (zero-copy, its strides
    kept; the tensor keeps the array alive), a writable one is copied.
    copy=False: shared even when writable (the caller promises not to write
    it); raises ad.InvalidArgumentError when sharing is impossible (another
    dtype, misaligned data).  copy=True: always copied."""
    return _interop.from_numpy(a, dtype, copy)


# Tensor.__del__ also runs as a C finalizer for these classes when they die
# (bindings/build_cffi.py, _ad_tensor_finalize: the same steps without the
# Python frame); explicit t.__del__() calls and user subclasses run the
# method above.  Their released forms exist first, as the C form needs them.
# PYAUTODIFF_PYTHON_FINALIZER=1 keeps the Python finalizer (the tests run
# both).
_FAST_FINALIZE = (Tensor, Var)
for _cls in _FAST_FINALIZE:
    _released_class(_cls)
del _cls
if os.environ.get("PYAUTODIFF_PYTHON_FINALIZER", "") in ("", "0"):
    lib._ad_install_finalizer()

# The hottest methods also have C forms (bindings/build_cffi.py,
# _ad_install_fast_methods): each makes the quick call its Python method
# makes first (the layout methods, kinds 3-6: ad_view_quick, the view their
# ordinary call makes), and calls that method (its __wrapped__) whenever the
# quick call is not taken; they read the handles of _FAST_FINALIZE's classes'
# own instances only (not of subclasses, nor of released tensors).  Rows:
# (class, name, kind 0 unary / 1 binary / 2 reduction over every dim (no
# arguments) / 3 t / 4 transpose / 5 reshape, permute / 6 __getitem__ / 7 the shape
# and strides getters / 8 item / 9 _call / 10 from_numpy, op, scalar op or -1 (or
# _SCALAR_AS_TENSOR), reflected, negate_scalar).  PYAUTODIFF_PYTHON_METHODS=1 keeps the
# Python methods (the tests run both).
_HANDLE_CTYPE = ffi.typeof("ad_tensor *")
_SCALAR_AS_TENSOR = -2  # bindings/build_cffi.py's AD_FM_SCALAR_AS_TENSOR
_REVERSED = tuple(tuple(range(n - 1, -1, -1)) for n in range(17))  # T: 0-16 dims
_FAST_METHODS = (
    *((Tensor, name, 0, kind, -1, False, False)
      for name, kind in {**_ops_unary_kinds(), "__neg__": lib.AD_OP_NEG}.items()),
    *((Tensor, name, 1, *row) for name, row in _OPERATORS.items()),
    # the comparisons: a float tensor's number operand as the 0-d tensor
    # _full_like_scalar makes (the scalar op _SCALAR_AS_TENSOR)
    *((Tensor, f"__{name}__", 1, getattr(lib, f"AD_OP_{name.upper()}"), _SCALAR_AS_TENSOR, False,
       False) for name in _COMPARISON_SYMBOL),
    (Tensor, "__matmul__", 1, lib.AD_OP_MATMUL, -1, False, False),  # ad_binary, as below
    *((Tensor, name, 2, op, -1, False, False)
      for name, op in (("sum", lib.AD_OP_SUM), ("mean", lib.AD_OP_MEAN), ("prod", lib.AD_OP_PROD),
                       ("max", lib.AD_OP_MAX), ("min", lib.AD_OP_MIN))),
    # the layout methods' views (ad_view_quick): t(), transpose(d0, d1), reshape / view
    # / permute / broadcast_to / expand with ints (view: reshape's alias, below;
    # expand's -1 goes to the Python method), t[key] for ints, slices and None; the
    # shape and strides properties' getters and item() of a one-element tensor
    *((Tensor, name, kind, op, -1, False, False)
      for name, kind, op in (("t", 3, 0), ("transpose", 4, 0), ("reshape", 5, lib.AD_OP_RESHAPE),
                             ("permute", 5, lib.AD_OP_PERMUTE),
                             ("broadcast_to", 5, lib.AD_OP_BROADCAST),
                             ("expand", 5, lib.AD_OP_BROADCAST),
                             ("__getitem__", 6, 0), ("shape", 7, 0), ("strides", 7, 1),
                             ("item", 8, 0))),
    # _call itself, the generic entry (its arguments converted in C); from_numpy(a)'s copy
    # of a writable C-contiguous ndarray
    (sys.modules[__name__], "_call", 9, 0, -1, False, False),
    (sys.modules[__name__], "from_numpy", 10, 0, -1, False, False),
)
_C_METHODS = os.environ.get("PYAUTODIFF_PYTHON_METHODS", "") in ("", "0")
if _C_METHODS:
    lib._ad_install_fast_methods()
# Tensor and Var export their memory through the buffer protocol
# (bindings/build_cffi.py, _ad_install_buffer, which reads handles as the fast
# methods do and needs them installed): numpy reads it before __array__,
# without the __array_interface__ dict of _ArrayView, which numpy() uses when
# the slots are not installed (PYAUTODIFF_PYTHON_METHODS=1).
_BUFFER = _C_METHODS and lib._ad_install_buffer() == 0
Tensor.view = vars(Tensor)["reshape"]  # the alias follows reshape's form


# ---- creation ---------------------------------------------------------------------------
def _check_np_dtype(arr, dtype):
    if dtype is not None:
        return _dt.as_dtype(dtype)
    return _dt.as_dtype(arr.dtype)


def tensor(data: Any, dtype: Optional[DTypeLike] = None) -> Tensor:
    """A new tensor from nested lists, scalars, numpy arrays or a Tensor (copied).
    Python floats give float32, Python ints int64, unless dtype says otherwise;
    numpy arrays, and numpy scalars of a dtype pyautodiff has (np.float64(x),
    np.int32(x), ...), keep their dtype, as in torch."""
    if isinstance(data, Tensor):
        t = data.to_dtype(dtype) if dtype is not None else data
        return _call(lib.AD_OP_COPY, (t.detach(),))
    if isinstance(data, np.ndarray) or (isinstance(data, np.generic) and dtype is None
                                        and data.dtype.type in _dt.NUMPY_TYPES):
        return _from_numpy_copy(np.asarray(data), dtype)
    try:
        arr = np.asarray(data)
    except (ValueError, TypeError, OverflowError) as e:
        raise InvalidArgumentError(f"tensor: cannot convert {type(data).__name__}: {e}") from None
    if arr.dtype == object:
        arr = _object_array(arr, dtype)
    if dtype is None:
        if arr.dtype.kind == "f":
            dtype = _dt.float32
        elif arr.dtype.kind in "iu":
            dtype = _dt.int64
    return _from_numpy_copy(arr, dtype)


def _object_array(arr, dtype):
    """numpy gives an object array for ints beyond int64/uint64 (2**64, or 2**63
    mixed with negatives): such an int is out of bounds for every integer dtype;
    for a float dtype the values are converted as Python floats."""
    flat = arr.ravel()
    if not flat.size or not all(isinstance(v, numbers.Real) for v in flat):
        raise InvalidArgumentError("tensor: cannot convert ragged or non-numeric data")
    floats = any(not isinstance(v, numbers.Integral) for v in flat)
    dt = _dt.as_dtype(dtype) if dtype is not None else _dt.float32 if floats else _dt.int64
    if dt.is_floating_point or dt is _dt.bool_:
        try:
            return np.array([float(v) for v in flat], dtype=np.float64).reshape(arr.shape)
        except OverflowError:
            big = next(v for v in flat if isinstance(v, numbers.Integral) and abs(v) > 2 ** 1023)
            raise OutOfBoundsError(f"tensor: Python integer {_short(big)} is out of the float64 "
                                   f"range") from None
    lo, hi = _INT_RANGE[dt.code]
    big = next((v for v in flat if not lo <= v <= hi), None)
    if big is not None:
        raise OutOfBoundsError(f"tensor: Python integer {_short(big)} is out of bounds for "
                               f"{dt.name} (range {lo}..{hi})")
    return np.array([int(v) for v in flat], dtype=dt.numpy).reshape(arr.shape)


def _check_int_range(a, dt, fn):
    """Values of a that the cast to the integer dtype dt would wrap raise (numpy
    2 raises for out-of-bounds Python ints; an explicit numpy cast would wrap)."""
    lo, hi = _INT_RANGE[dt.code]
    if a.dtype.kind in "iu":
        info = np.iinfo(a.dtype)
        if lo <= info.min and info.max <= hi:
            return
        mn, mx = int(a.min()), int(a.max())
        bad = mn if mn < lo else mx if mx > hi else None
    else:  # float: the cast truncates toward zero
        mn, mx = float(a.min()), float(a.max())
        bad = mn if mn <= lo - 1 else mx if mx >= hi + 1 else None
    if bad is not None:
        raise OutOfBoundsError(f"{fn}: value {bad} is out of bounds for {dt.name} "
                               f"(range {lo}..{hi})")


def _from_numpy_copy(a, dtype=None):
    """A new tensor holding a copy of the numpy array a (its dtype kept)."""
    a = np.asarray(a)
    dt = _check_np_dtype(a, dtype)
    if a.dtype.kind not in "biuf":
        # only numbers convert: numpy's own cast to the dtype asked for would
        # parse strings ("1.5"), drop imaginary parts, count datetimes in days
        if a.dtype.kind != "O":
            raise DTypeError(f"tensor: cannot convert numpy {a.dtype} data to {dt.name} (only "
                             f"bool, integer and float arrays convert)")
        a = _object_array(a, dt)  # Python numbers in an object array: tensor()'s rules
    if a.dtype != dt.numpy:
        if a.dtype.kind == "f" and not dt.is_floating_point and dt is not _dt.bool_:
            if not np.all(np.isfinite(a)):
                raise InvalidArgumentError(f"tensor: non-finite values cannot become {dt.name}")
        if dt.code in _INT_RANGE and a.size and a.dtype.kind in "iuf":
            _check_int_range(a, dt, "tensor")
        a = a.astype(dt.numpy)
    shape = a.shape
    a = np.ascontiguousarray(a).reshape(shape)  # ascontiguousarray turns 0-d into 1-d
    out = _out()
    return _result(lib.ad_tensor_from_data(ffi.from_buffer(a) if a.size else _NULL, a.nbytes,
                                           dt.code, list(shape) or _NULL, len(shape), out), out)


def _default_dtype(dtype):
    return _dt.float32 if dtype is None else _dt.as_dtype(dtype)


def full(shape: ShapeArg, value: Union[float, bool], dtype: Optional[DTypeLike] = None) -> Tensor:
    """A new tensor of `shape` (an int or a tuple) filled with `value`.

    dtype defaults to float32 for a float value, int64 for an int, bool for a
    bool.  Raises InvalidArgumentError for a negative size, OutOfBoundsError when
    the value does not fit the dtype.
    """
    shape = _shape_arg(shape, "shape", "full")
    if isinstance(value, (str, bytes, bytearray, np.timedelta64)) or (
            isinstance(value, numbers.Complex) and not isinstance(value, numbers.Real)):
        # float() below would parse "1.5" and drop a numpy complex's imaginary part
        raise ArgumentTypeError(f"full: value must be a real number, got "
                                f"{type(value).__name__}")
    if dtype is None:
        dtype = (_dt.bool_ if isinstance(value, (bool, np.bool_)) else
                 _dt.int64 if isinstance(value, numbers.Integral) else _dt.float32)
    dt = _dt.as_dtype(dtype)
    r = _INT_RANGE.get(dt.code)
    if r is not None and isinstance(value, numbers.Real) and value == value and not (
            r[0] <= value <= r[1] if isinstance(value, numbers.Integral)
            else r[0] - 1 < value < r[1] + 1):  # a float is truncated toward zero
        raise OutOfBoundsError(f"full: value {value!r} cannot be represented in {dt.name} "
                               f"(range {r[0]}..{r[1]})")
    if isinstance(value, numbers.Integral) and abs(int(value)) > _EXACT and dt is _dt.int64:
        # beyond 2**53 a double cannot carry the value to C exactly
        return from_numpy(np.full(shape, int(value), dtype=np.int64))
    try:
        v = float(value)
    except OverflowError:
        raise OutOfBoundsError(f"full: value {_short(value)} is out of the float64 "
                               f"range") from None
    except TypeError:
        raise ArgumentTypeError(f"full: value must be a real number, got "
                                f"{type(value).__name__}") from None
    out = _out()
    return _result(lib.ad_tensor_full(v, dt.code, list(shape) or _NULL, len(shape), out), out)


def _filled(shape, value, dtype, fn):
    """zeros / ones: full's native fill without full's checks of the value
    (0 and 1 fit every dtype)."""
    dims = _shape_varargs(shape, fn)
    out = _out()
    return _result(lib.ad_tensor_full(value, _default_dtype(dtype).code, dims or _NULL,
                                      len(dims), out), out)


def zeros(*shape: ShapeArg, dtype: Optional[DTypeLike] = None) -> Tensor:
    """Zeros of the shape given as ints or as one tuple: zeros(2, 3) or zeros((2, 3))."""
    return _filled(shape, 0.0, dtype, "zeros")


def ones(*shape: ShapeArg, dtype: Optional[DTypeLike] = None) -> Tensor:
    """Ones of the shape given as ints or as one tuple: ones(2, 3) or ones((2, 3))."""
    return _filled(shape, 1.0, dtype, "ones")


def zeros_like(t: Tensor, dtype: Optional[DTypeLike] = None) -> Tensor:
    """Zeros of t's shape, with t's dtype unless `dtype` is given."""
    _need_tensor(t, "zeros_like")
    return _filled((t.shape,), 0.0, dtype or t.dtype, "zeros_like")


def ones_like(t: Tensor, dtype: Optional[DTypeLike] = None) -> Tensor:
    """Ones of t's shape, with t's dtype unless `dtype` is given."""
    _need_tensor(t, "ones_like")
    return _filled((t.shape,), 1.0, dtype or t.dtype, "ones_like")


def full_like(t: Tensor, value: Union[float, bool], dtype: Optional[DTypeLike] = None) -> Tensor:
    """`value` in t's shape, with t's dtype unless `dtype` is given."""
    _need_tensor(t, "full_like")
    return full(t.shape, value, dtype or t.dtype)


def _need_tensor(t, fn):
    """The *_like functions' model: a Tensor (a numpy array works too: they
    read only its shape and dtype)."""
    if not isinstance(t, (Tensor, np.ndarray)):
        raise ArgumentTypeError(f"{fn}: t must be a Tensor, got {type(t).__name__}")


def _int_arg(v, fn, name):
    try:
        return operator.index(v)
    except TypeError:
        raise ArgumentTypeError(f"{fn}: {name} must be an int, got {v!r} "
                                f"({type(v).__name__})") from None


def arange(start: float, stop: Optional[float] = None, step: float = 1,
           dtype: Optional[DTypeLike] = None) -> Tensor:
    """Values start, start+step, ... below stop (arange(n) is 0 .. n-1), as a 1-d tensor.

    dtype defaults to int64 when every argument is an int, else float32.
    Raises InvalidArgumentError for step == 0.
    """
    if stop is None:
        start, stop = 0, start
    if (dtype is None and type(start) is int and type(stop) is int and type(step) is int
            and step and -_EXACT <= start <= _EXACT and -_EXACT <= stop <= _EXACT
            and -_EXACT <= step <= _EXACT):
        # the common int64 call: its values are doubles exactly (the checks below pass)
        out = _out()
        n = max(0, -(-(stop - start) // step))
        return _result(lib.ad_tensor_arange(float(start), float(step), n, _CODE_I64, out), out)
    for name, v in (("start", start), ("end", stop), ("step", step)):
        if not isinstance(v, numbers.Real):
            raise ArgumentTypeError(f"arange: {name} must be a real number, got "
                                    f"{type(v).__name__}")
    if step == 0:
        raise InvalidArgumentError("arange: step must not be zero")
    ints = all(isinstance(v, numbers.Integral) for v in (start, stop, step))
    try:
        n = max(0, -(-(stop - start) // step)) if ints else max(
            0, int(np.ceil((stop - start) / step)))
    except (OverflowError, ValueError):  # inf or nan bounds
        raise InvalidArgumentError(f"arange: cannot count the values from {start} to {stop} "
                                   f"by {step}") from None
    if dtype is None:
        dtype = _dt.int64 if ints else _dt.float32
    dt = _dt.as_dtype(dtype)
    r = _INT_RANGE.get(dt.code)
    if r is not None and n > 0:
        for name, v in (("start", start), ("last value", start + (n - 1) * step)):
            if not r[0] <= v <= r[1]:
                raise OutOfBoundsError(f"arange: {name} {v} is out of bounds for {dt.name} "
                                       f"(start={start}, end={stop}, step={step})")
    if n > _I64_MAX // 8:
        raise OutOfMemoryError(f"arange: {n} values of {dt.name} cannot be allocated "
                               f"(start={start}, end={stop}, step={step})")
    if dt is _dt.int64 and any(isinstance(v, numbers.Integral) and abs(int(v)) > _EXACT
                               for v in (start, stop, step)):
        # beyond 2**53 a double cannot carry the values to C exactly
        try:
            return from_numpy(np.arange(int(start), int(stop), int(step), dtype=np.int64))
        except (MemoryError, ValueError) as e:
            raise OutOfMemoryError(f"arange: {n} values of int64 cannot be allocated ({e})") \
                from None
    out = _out()
    return _result(lib.ad_tensor_arange(float(start), float(step), n, dt.code, out), out)


def eye(n: int, m: Optional[int] = None, dtype: Optional[DTypeLike] = None) -> Tensor:
    """The n x m identity (m defaults to n)."""
    n = _int_arg(n, "eye", "n")
    m = n if m is None else _int_arg(m, "eye", "m")
    for name, v in (("n", n), ("m", m)):
        if v < 0:
            raise InvalidArgumentError(f"eye: {name} must be >= 0, got {v}")
    dt = _default_dtype(dtype)
    if n * m * dt.itemsize > _I64_MAX:
        raise OutOfMemoryError(f"eye: n={n}, m={m}: {n * m} elements of {dt.name} cannot be "
                               f"allocated")
    try:
        a = np.eye(n, m, dtype=dt.numpy)
    except (MemoryError, ValueError) as e:
        raise OutOfMemoryError(f"eye: n={n}, m={m}: {n * m} elements of {dt.name} cannot be "
                               f"allocated ({e})") from None
    return from_numpy(a)


# ---- the default generator (ad.manual_seed) ------------------------------------------------
_MASK64 = (1 << 64) - 1
_gen_lock = threading.Lock()
# The splitmix64 state: None until manual_seed or the first draw, which seeds
# it from os.urandom (one system call, not one per draw); such a state is
# dropped in a forked child, which then seeds its own, so that children do
# not repeat each other's numbers.
_gen_state = None
_gen_from_os = False


def manual_seed(seed: int) -> None:
    """Seeds the default generator that rand, randn, dropout and nn.init use
    when no seed= is given: after manual_seed(n) the same calls give the same
    numbers."""
    global _gen_state, _gen_from_os
    seed = _int_arg(seed, "manual_seed", "seed")
    with _gen_lock:
        _gen_state, _gen_from_os = seed & _MASK64, False


def _next_seed():
    """The next seed of the default generator (a splitmix64 stream, so
    consecutive calls get decorrelated native seeds)."""
    global _gen_state, _gen_from_os
    with _gen_lock:
        if _gen_state is None:
            _gen_state, _gen_from_os = int.from_bytes(os.urandom(8), "little"), True
        _gen_state = (_gen_state + 0x9E3779B97F4A7C15) & _MASK64
        z = _gen_state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def _gen_after_fork():
    global _gen_lock, _gen_state
    _gen_lock = threading.Lock()  # another thread may have held it at the fork
    if _gen_from_os:
        _gen_state = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_gen_after_fork)


def _seed(seed):
    if seed is None:
        return _next_seed()
    return _int_arg(seed, "random", "seed") & _MASK64


def _random(kind, shape, seed, dtype, fn):
    shape = _shape_varargs(shape, fn)
    dt = _default_dtype(dtype)
    out = _out()
    return _result(lib.ad_tensor_random(kind, _seed(seed), dt.code, list(shape) or _NULL,
                                        len(shape), out), out)


def randn(*shape: ShapeArg, seed: Optional[int] = None,
          dtype: Optional[DTypeLike] = None) -> Tensor:
    """Standard normal values of the shape given as ints or as one tuple; the
    same seed gives the same values (no seed: the default generator, see
    manual_seed)."""
    return _random(0, shape, seed, dtype, "randn")


def rand(*shape: ShapeArg, seed: Optional[int] = None,
         dtype: Optional[DTypeLike] = None) -> Tensor:
    """Uniform values in [0, 1) of the shape given as ints or as one tuple; the
    same seed gives the same values (no seed: the default generator)."""
    return _random(1, shape, seed, dtype, "rand")


# the operands a comparison takes besides Python scalars (_as_tensor_like's)
_OPERAND_TYPES = (Tensor, np.ndarray, list, tuple, np.generic)


def _pair(a, b, fn="operand"):
    """Two operands as tensors; a Python scalar takes the other's dtype (and
    must fit it: a scalar never changes a tensor's dtype).  fn names the op in
    messages."""
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        a = tensor(a)

    def conv(s, like):
        if not _is_scalar(s):
            return _as_tensor_like(s, like, fn)
        if not like.dtype.is_floating_point and not isinstance(s, numbers.Integral) \
                and not float(s).is_integer():
            raise DTypeError(f"{fn}: scalar {s} is not an integer and the tensor is "
                             f"{like.dtype.name} (a scalar never changes a tensor's dtype; "
                             f"convert with to_dtype)")
        return _full_like_scalar(s, like, fn)

    return (a, conv(b, a)) if isinstance(a, Tensor) else (conv(a, b), b)


def maximum(a: Any, b: Any) -> Tensor:
    """Elementwise max with broadcasting (NaN propagates); where a and b tie
    each gets half the gradient."""
    return _binary(lib.AD_OP_MAXIMUM, *_pair(a, b, "maximum"))


def minimum(a: Any, b: Any) -> Tensor:
    """Elementwise min with broadcasting (NaN propagates); where a and b tie
    each gets half the gradient."""
    return _binary(lib.AD_OP_MINIMUM, *_pair(a, b, "minimum"))


def where(cond: Any, a: Any, b: Any) -> Tensor:
    """a where cond (a bool tensor) is true, else b; all three broadcast.  The
    gradient is selected, not masked: a non-finite value in the unselected
    branch never reaches it."""
    if not isinstance(cond, Tensor):
        cond = tensor(cond, dtype=_dt.bool_)
    a, b = _pair(a, b, "where")
    return _call(lib.AD_OP_WHERE, (cond, a, b))


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """a @ b with numpy's rules: 1-d operands are promoted and the added dim
    removed; batch dims broadcast."""
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise TypeError("matmul: operands must be Tensors")
    an, bn = a.ndim, b.ndim
    if an == 0 or bn == 0:
        raise ShapeError(f"matmul: 0-d operands are not allowed (shapes {a.shape} and {b.shape})")
    a2 = a.unsqueeze(0) if an == 1 else a
    b2 = b.unsqueeze(1) if bn == 1 else b
    y = _binary(lib.AD_OP_MATMUL, a2, b2)
    if an == 1 and bn == 1:
        return y.reshape(())
    if an == 1:
        return y.squeeze(-2)
    if bn == 1:
        return y.squeeze(-1)
    return y

