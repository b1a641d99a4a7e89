"""Argument and input checks shared by the layers: every message names the
layer (with its defining arguments), the argument, and the shapes/dtypes."""
import numbers
import operator

from ...errors import DTypeError, InvalidArgumentError, ShapeError


def desc(x):
    return f"{x.dtype.name} {x.shape}"


def int_arg(layer, name, v, minimum=1):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise InvalidArgumentError(f"{layer}: {name} must be an int, got {v!r}")
    v = operator.index(v)
    if v < minimum:
        raise InvalidArgumentError(f"{layer}: {name} must be at least {minimum}, got {v}")
    return v


def tuple_arg(layer, name, v, n, minimum=1):
    """An int or an n-tuple of ints (PyTorch's _pair/_single), each >= minimum."""
    if isinstance(v, numbers.Integral) and not isinstance(v, bool):
        v = (v,) * n
    try:
        v = tuple(v)
    except TypeError:
        raise InvalidArgumentError(f"{layer}: {name} must be an int or a tuple of {n} ints, "
                                   f"got {v!r}") from None
    if len(v) != n:
        raise InvalidArgumentError(f"{layer}: {name} must be an int or a tuple of {n} ints, "
                                   f"got {v!r}")
    return tuple(int_arg(layer, name, x, minimum) for x in v)


def float_arg(layer, name, v, lo=None, hi=None):
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise InvalidArgumentError(f"{layer}: {name} must be a number, got {v!r}")
    v = float(v)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise InvalidArgumentError(f"{layer}: {name} must be in [{lo}, {hi}], got {v}")
    return v


def factory(layer, device, dtype):
    """The parameter dtype from PyTorch's factory keywords (CPU only)."""
    from ... import dtypes as _dt

    if device is not None and str(device) != "cpu":
        raise InvalidArgumentError(f"{layer}: device must be None or 'cpu', got {device!r}")
    if dtype is None:
        return _dt.float32
    try:
        dt = _dt.as_dtype(dtype)
    except DTypeError as e:
        raise DTypeError(f"{layer}: {e}") from None
    if not dt.is_floating_point:
        raise DTypeError(f"{layer}: dtype must be a floating-point dtype, got {dt.name}")
    return dt


def tensor_arg(layer, x, name="input"):
    from ...tensor import Tensor

    if not isinstance(x, Tensor):
        raise DTypeError(f"{layer}: {name} must be an ad.Tensor, got {type(x).__name__}")
    return x


def float_input(layer, x, dtype, ndims, name="input", what=None):
    """x must be a Tensor of `dtype` (the layer's parameters') with a rank in ndims."""
    tensor_arg(layer, x, name)
    if x.ndim not in ndims:
        want = " or ".join(f"{n}-d" for n in ndims)
        raise ShapeError(f"{layer}: {name} {desc(x)} must be {want}"
                         + (f" ({what})" if what else ""))
    if not x.dtype.is_floating_point:
        raise DTypeError(f"{layer}: {name} {desc(x)} must be a floating-point tensor")
    if dtype is not None and x.dtype is not dtype:
        raise DTypeError(f"{layer}: {name} {desc(x)} does not match the layer's {dtype.name} "
                         f"parameters (convert the input with .to_dtype(ad.{dtype.name}) or the "
                         f"model with .to_dtype(ad.{x.dtype.name}))")
    return x


def param_dtype(module):
    for p in module._parameters.values():
        if p is not None:
            return p.dtype
    return None
