"""Parameter initialisation (PyTorch's torch.nn.init): each function fills a
Var in place (through Var.set, so its id stays and its version is bumped)
and returns it.  Fans and gains follow PyTorch's rules exactly; random values
come from the library's default generator (ad.manual_seed seeds it).

    ad.nn.init.kaiming_uniform_(layer.weight, a=_math.sqrt(5))
"""
from __future__ import annotations

import math as _math
import numbers as _numbers
from typing import TYPE_CHECKING as _TYPE_CHECKING, Any as _Any, Optional as _Optional

import numpy as _np

from ..errors import InvalidArgumentError

if _TYPE_CHECKING:
    from ..tensor import Var


def _var(tensor, fn):
    from ..tensor import Var

    if not isinstance(tensor, Var):
        raise TypeError(f"nn.init.{fn}: takes an ad.Var (filled in place with Var.set), got "
                        f"{type(tensor).__name__}")
    return tensor


def _real(v, fn, name):
    """A float argument: a real number (float() alone would parse "0.5" and
    raise bare errors for None or a list)."""
    if isinstance(v, bool) or not isinstance(v, _numbers.Real):
        raise InvalidArgumentError(f"nn.init.{fn}: {name} must be a real number, got {v!r}")
    return float(v)


def _fill(var, values):
    """Writes values (a tensor of any float dtype, or a number) into var."""
    from ..grad import no_grad
    from ..tensor import Tensor, full

    with no_grad():
        if isinstance(values, Tensor):
            if values.dtype is not var.dtype:
                values = values.to_dtype(var.dtype)
        else:
            values = full(var.shape, float(values), dtype=var.dtype)
        var.set(values)
    return var


def _uniform(shape, a, b, dtype):
    from ..tensor import rand

    # drawn in float64 then cast, so that a float32 Var gets correctly rounded values
    u = rand(shape, dtype="float64")
    return (u * (b - a) + a).to_dtype(dtype)


def _normal(shape, mean, std, dtype):
    from ..tensor import randn

    z = randn(shape, dtype="float64")
    return (z * std + mean).to_dtype(dtype)


def calculate_gain(nonlinearity: str, param: _Optional[float] = None) -> float:
    """The recommended gain for a nonlinearity (PyTorch's table)."""
    if not isinstance(nonlinearity, str):
        raise InvalidArgumentError(f"calculate_gain: nonlinearity must be a str, got "
                                   f"{nonlinearity!r}")
    linear_fns = ["linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
                  "conv_transpose2d", "conv_transpose3d"]
    if nonlinearity in linear_fns or nonlinearity == "sigmoid":
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return _math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif isinstance(param, _numbers.Real) and not isinstance(param, bool):
            slope = param
        else:
            raise InvalidArgumentError(f"calculate_gain: negative_slope {param!r} is not a "
                                       f"valid number")
        return _math.sqrt(2.0 / (1 + slope * slope))  # ** would raise OverflowError at 1e308
    if nonlinearity == "selu":
        return 3.0 / 4
    raise InvalidArgumentError(f"calculate_gain: unsupported nonlinearity {nonlinearity!r}")


def _calculate_fan_in_and_fan_out(tensor):
    shape = tensor.shape
    if len(shape) < 2:
        raise InvalidArgumentError(f"nn.init: fan in and fan out can not be computed for a "
                                   f"tensor with fewer than 2 dimensions (shape {shape})")
    receptive = 1
    for s in shape[2:]:
        receptive *= s
    return shape[1] * receptive, shape[0] * receptive


def _calculate_correct_fan(tensor, mode):
    mode = mode.lower() if isinstance(mode, str) else mode
    if not isinstance(mode, str) or mode not in ("fan_in", "fan_out"):
        raise InvalidArgumentError(f"nn.init: mode {mode!r} not supported, please use one of "
                                   f"'fan_in', 'fan_out'")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def uniform_(tensor: Var, a: float = 0.0, b: float = 1.0) -> Var:
    """Values drawn from U(a, b)."""
    v = _var(tensor, "uniform_")
    return _fill(v, _uniform(v.shape, _real(a, "uniform_", "a"), _real(b, "uniform_", "b"),
                             v.dtype))


def normal_(tensor: Var, mean: float = 0.0, std: float = 1.0) -> Var:
    """Values drawn from N(mean, std^2)."""
    v = _var(tensor, "normal_")
    return _fill(v, _normal(v.shape, _real(mean, "normal_", "mean"), _real(std, "normal_", "std"),
                            v.dtype))


def constant_(tensor: Var, val: float) -> Var:
    """Fills the Var `tensor` with `val` in place and returns it.
    Raises TypeError for a non-Var."""
    from ..tensor import Tensor

    v = _var(tensor, "constant_")
    return _fill(v, val if isinstance(val, Tensor) else _real(val, "constant_", "val"))


def zeros_(tensor: Var) -> Var:
    """Fills the Var `tensor` with 0 in place and returns it."""
    return _fill(_var(tensor, "zeros_"), 0.0)


def ones_(tensor: Var) -> Var:
    """Fills the Var `tensor` with 1 in place and returns it."""
    return _fill(_var(tensor, "ones_"), 1.0)


def xavier_uniform_(tensor: Var, gain: float = 1.0) -> Var:
    """U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out))."""
    v = _var(tensor, "xavier_uniform_")
    gain = _real(gain, "xavier_uniform_", "gain")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(v)
    a = gain * _math.sqrt(2.0 / float(fan_in + fan_out)) * _math.sqrt(3.0)
    return _fill(v, _uniform(v.shape, -a, a, v.dtype))


def xavier_normal_(tensor: Var, gain: float = 1.0) -> Var:
    """N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out))."""
    v = _var(tensor, "xavier_normal_")
    gain = _real(gain, "xavier_normal_", "gain")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(v)
    std = gain * _math.sqrt(2.0 / float(fan_in + fan_out))
    return _fill(v, _normal(v.shape, 0.0, std, v.dtype))


def _kaiming_std(v, a, mode, nonlinearity):
    """He et al.'s standard deviation gain / sqrt(fan), both kaiming draws' scale."""
    fan = _calculate_correct_fan(v, mode)  # first, so a bad mode is named before a bad gain
    return calculate_gain(nonlinearity, a) / _math.sqrt(fan)


def kaiming_uniform_(tensor: Var, a: float = 0, mode: str = 'fan_in',
                     nonlinearity: str = 'leaky_relu') -> Var:
    """U(-bound, bound) with bound = gain * sqrt(3 / fan) (He et al.)."""
    v = _var(tensor, "kaiming_uniform_")
    if 0 in v.shape:
        return v
    bound = _math.sqrt(3.0) * _kaiming_std(v, a, mode, nonlinearity)
    return _fill(v, _uniform(v.shape, -bound, bound, v.dtype))


def kaiming_normal_(tensor: Var, a: float = 0, mode: str = 'fan_in',
                    nonlinearity: str = 'leaky_relu') -> Var:
    """N(0, std^2) with std = gain / sqrt(fan) (He et al.)."""
    v = _var(tensor, "kaiming_normal_")
    if 0 in v.shape:
        return v
    return _fill(v, _normal(v.shape, 0.0, _kaiming_std(v, a, mode, nonlinearity), v.dtype))


def _erfinv(y):
    """Inverse error function of a float64 array in (-1, 1): Giles' (2010)
    approximation refined by Newton steps on the library's erf."""
    from ..tensor import from_numpy

    w = -_np.log((1.0 - y) * (1.0 + y))
    small = w < 5.0
    ws = _np.where(small, w - 2.5, _np.sqrt(_np.maximum(w, 5.0)) - 3.0)
    ca = [2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
          -0.00125372503, -0.00417768164, 0.246640727, 1.50140941]
    cb = [-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
          -0.0076224613, 0.00943887047, 1.00167406, 2.83297682]
    pa, pb = _np.full_like(y, ca[0]), _np.full_like(y, cb[0])
    for c1, c2 in zip(ca[1:], cb[1:]):
        pa = pa * ws + c1
        pb = pb * ws + c2
    x = _np.where(small, pa, pb) * y
    for _ in range(3):
        err = _np.asarray(from_numpy(x).erf()) - y
        x = x - err / (2.0 / _math.sqrt(_math.pi) * _np.exp(-x * x))
    return x


def trunc_normal_(tensor: Var, mean: float = 0.0, std: float = 1.0,
                  a: float = -2.0, b: float = 2.0) -> Var:
    """N(mean, std^2) restricted to [a, b] (inverse-CDF sampling, as PyTorch)."""
    from ..tensor import from_numpy, rand

    v = _var(tensor, "trunc_normal_")
    mean, std, a, b = (_real(x, "trunc_normal_", n) for x, n in
                       ((mean, "mean"), (std, "std"), (a, "a"), (b, "b")))
    if not a < b:
        raise InvalidArgumentError(f"trunc_normal_: a ({a}) must be smaller than b ({b})")
    if not std > 0:  # the CDF below divides by it
        raise InvalidArgumentError(f"trunc_normal_: std must be positive, got {std}")

    def cdf(x):
        return (1.0 + _math.erf(x / _math.sqrt(2.0))) / 2.0

    lo, hi = cdf((a - mean) / std), cdf((b - mean) / std)
    u = _np.asarray(rand(v.shape, dtype="float64"))
    y = (2 * lo - 1) + u * ((2 * hi - 1) - (2 * lo - 1))
    tiny = _np.finfo(_np.float64).eps
    y = _np.clip(y, -1 + tiny, 1 - tiny)
    x = _np.clip(_erfinv(y) * (std * _math.sqrt(2.0)) + mean, a, b)
    return _fill(v, from_numpy(x))


__all__ = ["calculate_gain", "uniform_", "normal_", "constant_", "zeros_", "ones_",
           "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_",
           "trunc_normal_"]
