"""Argument and input checks shared by the layers: every message names the
layer (with its defining arguments), the argument, and the shapes/dtypes."""
import math
import numbers
import operator

from ...errors import DTypeError, InvalidArgumentError, ShapeError
from ...tensor import Tensor
from .. import init


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


def _label(layer):
    """The layer's name for a message: a str, or a module's _tag (built only
    when an error is raised, to keep the forward path cheap)."""
    return layer if isinstance(layer, str) else layer._tag


def renamed(layer, e):
    """The ad.Error `e` of a functional call again, its message prefixed by the
    layer's name (raise renamed(self, e) from None in a forward's except)."""
    tag = _label(layer)
    return e if str(e).startswith(tag) else type(e)(f"{tag}: {e}")


def tensor_arg(layer, x, name="input"):
    if not isinstance(x, Tensor):
        raise DTypeError(f"{_label(layer)}: {name} must be an ad.Tensor, got "
                         f"{type(x).__name__}")
    return x


def float_input(layer, x, dtype, ndims, name="input", what=None):
    """x must be a Tensor of `dtype` (the layer's parameters'; None: any
    float dtype) with a rank in ndims."""
    if isinstance(x, Tensor):
        dt = x.dtype
        if x.ndim in ndims and (dt is dtype or (dtype is None and dt.is_floating_point)):
            return x
    tag = _label(layer)
    tensor_arg(tag, x, name)
    if x.ndim not in ndims:
        want = (f"at least {ndims[0]}-d" if len(ndims) > 3 else
                " or ".join(f"{n}-d" for n in ndims))
        raise ShapeError(f"{tag}: {name} {desc(x)} must be {want}"
                         + (f" ({what})" if what else ""))
    if not x.dtype.is_floating_point:
        raise DTypeError(f"{tag}: {name} {desc(x)} must be a floating-point tensor")
    raise DTypeError(f"{tag}: {name} {desc(x)} does not match the layer's {dtype.name} "
                     f"parameters (convert the input with .to_dtype(ad.{dtype.name}) or the "
                     f"model with .to_dtype(ad.{x.dtype.name}))")


def new_var(layer, name, shape, dt, fill=0.0):
    """A Var of `shape` filled with 0 or 1 for the parameter or buffer `name`; a
    size that cannot be allocated (an argument of 2**40) raises the allocator's
    ad.Error class with a message naming the layer, the parameter and its shape."""
    from ...errors import Error
    from ...tensor import Var

    try:
        return Var.ones(shape, dtype=dt) if fill else Var.zeros(shape, dtype=dt)
    except Error as e:
        raise type(e)(f"{layer}: cannot create {name} of shape {tuple(shape)} "
                      f"({dt.name}): {e}") from None


def weight_and_bias(mod, wshape, n_bias, bias, dt):
    """Registers mod.weight (wshape) and mod.bias (n_bias,), or a None bias when `bias` is
    false, then draws them with mod.reset_parameters()."""
    name = type(mod).__name__
    mod.weight = new_var(name, "weight", wshape, dt)
    if bias:
        mod.bias = new_var(name, "bias", (n_bias,), dt)
    else:
        mod.register_parameter("bias", None)
    mod.reset_parameters()


def reset_weight_and_bias(mod):
    """PyTorch's default draw for Linear and Conv: kaiming_uniform(a=sqrt(5)) for the weight,
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for the bias."""
    init.kaiming_uniform_(mod.weight, a=math.sqrt(5))
    if mod.bias is not None:
        fan_in, _ = init._calculate_fan_in_and_fan_out(mod.weight)
        if fan_in:
            bound = 1 / math.sqrt(fan_in)
            init.uniform_(mod.bias, -bound, bound)
