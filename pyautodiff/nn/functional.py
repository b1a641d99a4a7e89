"""Neural-network functions with PyTorch's torch.nn.functional names, argument
orders, defaults and numerics (import as ``F``):

    import pyautodiff.nn.functional as F
    F.conv2d(x, w, b, stride=1, padding=1)
    F.cross_entropy(logits, target, label_smoothing=0.1)

Each function is one native op with its own backward, or is composed of
native ops (so every one is differentiable).  Tensors are immutable, so the
`inplace=` flags PyTorch takes are accepted and the result is always a new
tensor; the one function that writes in place is `batch_norm`, which updates
its running statistics (they must be Vars for that).

Bad arguments raise an ad.Error subclass whose message names the function,
the argument, and the shapes and dtypes involved.
"""
from __future__ import annotations

import math as _math
import numbers as _numbers
import operator as _operator
import warnings as _warnings
from typing import Any as _Any, Optional as _Optional, Sequence as _Sequence

import numpy as _np

from .._lib import lib as _lib
from ..errors import (DTypeError, Error, InvalidArgumentError, OutOfMemoryError, OutOfRangeError,
                      ShapeError)
from ..indexing import _as_index, index_select as _index_select
from ..tensor import Tensor as _Tensor, _call, _seed

__all__ = [
    "relu", "gelu", "silu", "tanh", "sigmoid", "softmax",
    "log_softmax", "one_hot", "pad", "mse_loss", "cross_entropy", "nll_loss",
    "binary_cross_entropy_with_logits", "smooth_l1_loss", "layer_norm", "batch_norm", "dropout",
    "scaled_dot_product_attention",
    "embedding", "linear", "conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d",
    "max_pool1d", "max_pool2d", "avg_pool1d", "avg_pool2d", "adaptive_avg_pool2d",
]


_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}
_I64 = 1 << 63
# Sizes derived from user arguments (padded lengths, dilated kernels, outputs)
# must stay far from int64 overflow in the native shape formulas.
_SIZE_LIMIT = 1 << 62
_INT32_MAX = (1 << 31) - 1


def _desc(t):
    return f"{t.dtype.name} {t.shape}"


# ---- argument checking ------------------------------------------------------------------
def _need_tensor(x, fn, name="input"):
    if not isinstance(x, _Tensor):
        raise InvalidArgumentError(f"{fn}: {name} must be a Tensor, got {type(x).__name__}")
    return x


def _need_float(x, fn, name="input"):
    _need_tensor(x, fn, name)
    if not x.dtype.is_floating_point:
        raise DTypeError(f"{fn}: {name} must be float32 or float64, got {_desc(x)}")
    return x


def _same_dtype(x, other, fn, name):
    if other.dtype != x.dtype:
        raise DTypeError(f"{fn}: {name} {_desc(other)} must have the input's dtype "
                         f"({_desc(x)})")


def _int(v, fn, name):
    """An int argument as a Python int; anything else (a float, a string, a
    value beyond 64 bits) raises InvalidArgumentError naming fn and name."""
    if isinstance(v, (bool, _np.bool_)):
        raise InvalidArgumentError(f"{fn}: {name} must be an int, got {v!r}")
    try:
        i = _operator.index(v)
    except TypeError:
        raise InvalidArgumentError(f"{fn}: {name} must be an int, got {type(v).__name__} "
                                   f"{v!r}") from None
    if not -_I64 <= i < _I64:
        raise InvalidArgumentError(f"{fn}: {name} {i} does not fit in 64 bits")
    return i


def _float(v, fn, name):
    """A real-number argument as a Python float (a string, None or a tensor of
    several elements raises InvalidArgumentError naming fn and name)."""
    if isinstance(v, (_numbers.Real, _np.floating, _np.integer)) and not isinstance(v, str):
        try:
            return float(v)
        except OverflowError:  # an int beyond the float range
            raise InvalidArgumentError(f"{fn}: {name} {v} is too large") from None
    raise InvalidArgumentError(f"{fn}: {name} must be a number, got {type(v).__name__} {v!r}")


def _ntuple(v, n, fn, name):
    """An int or a sequence of exactly n ints, as a tuple of n ints (PyTorch
    raises rather than dropping the rest of a longer tuple, and so do we)."""
    if type(v) is int and -_I64 <= v < _I64:  # the common call, kept short
        return (v,) * n
    if isinstance(v, (_numbers.Integral, _np.integer)) and not isinstance(v, (bool, _np.bool_)):
        return (_int(v, fn, name),) * n
    try:
        items = tuple(v)
    except TypeError:
        raise InvalidArgumentError(f"{fn}: {name} must be an int or a tuple of {n} ints, got "
                                   f"{type(v).__name__} {v!r}") from None
    if len(items) != n:
        raise InvalidArgumentError(f"{fn}: {name} must be an int or a tuple of {n} ints, got "
                                   f"{v!r}")
    return tuple(_int(x, fn, name) for x in items)


def _in_range(vals, lo, fn, name):
    """Every value in [lo, 2**31 - 1] (the native kernels' limit)."""
    for v in vals:
        if not lo <= v <= _INT32_MAX:
            shown = vals if len(vals) > 1 else vals[0]
            if v < lo:
                raise InvalidArgumentError(f"{fn}: {name} must be "
                                           f"{'positive' if lo == 1 else '>= 0'}, got {shown}")
            raise InvalidArgumentError(f"{fn}: {name} {shown} is too large (at most 2**31 - 1)")


def _reduction(r, op):
    try:
        return _REDUCTIONS[r]
    except (KeyError, TypeError):
        raise InvalidArgumentError(f"{op}: reduction must be 'none', 'mean' or 'sum', got "
                                   f"{r!r}") from None


def _legacy_reduction(size_average, reduce, reduction, fn):
    """PyTorch's deprecated size_average/reduce pair, mapped to reduction as
    PyTorch maps it (with its warning)."""
    if size_average is None and reduce is None:
        return reduction
    sa = True if size_average is None else bool(size_average)
    rd = True if reduce is None else bool(reduce)
    r = "none" if not rd else "mean" if sa else "sum"
    _warnings.warn(f"{fn}: size_average and reduce are deprecated, use reduction='{r}'",
                  UserWarning, stacklevel=3)
    return r


def _reduce(loss, r):
    return loss if r == 0 else loss.mean() if r == 1 else loss.sum()


def _tensor(x, like=None):
    if isinstance(x, _Tensor):
        return x
    from ..tensor import tensor

    return tensor(x, dtype=like.dtype if like is not None else None)


def _channel_vec(v, c, x, fn, name):
    """An optional per-channel (C,) argument as a tensor of x's dtype."""
    if v is None:
        return None
    v = _tensor(v, x)
    if v.shape != (c,):
        raise ShapeError(f"{fn}: {name} must have shape ({c},) for input {_desc(x)}, got "
                         f"{_desc(v)}")
    _same_dtype(x, v, fn, name)
    return v


# ---- activations -------------------------------------------------------------------------
def relu(input: _Tensor, inplace: bool = False) -> _Tensor:
    """max(x, 0), NaN kept (as torch and numpy); its gradient is 0 at 0."""
    return _need_tensor(input, "relu").relu()


def gelu(input: _Tensor, approximate: str = 'none') -> _Tensor:
    """x * Phi(x) (approximate='none', through erf) or PyTorch's tanh form
    (approximate='tanh')."""
    x = _need_tensor(input, "gelu")
    if isinstance(approximate, str) and approximate == "none":
        return x.gelu_erf()
    if isinstance(approximate, str) and approximate == "tanh":
        return x.gelu()
    raise InvalidArgumentError(f"gelu: approximate must be 'none' or 'tanh', got "
                               f"{approximate!r}")


def silu(input: _Tensor, inplace: bool = False) -> _Tensor:
    """x * sigmoid(x)."""
    return _need_tensor(input, "silu").silu()


def tanh(input: _Tensor) -> _Tensor:
    """tanh(input) elementwise (same shape).  Raises InvalidArgumentError for a non-tensor."""
    return _need_tensor(input, "tanh").tanh()


def sigmoid(input: _Tensor) -> _Tensor:
    """1 / (1 + exp(-input)) elementwise (same shape).
    Raises InvalidArgumentError for a non-tensor."""
    return _need_tensor(input, "sigmoid").sigmoid()


def _softmax_input(input, dim, dtype, fn):
    """The checked input of softmax/log_softmax (cast to dtype when given) and its dim."""
    x = _need_tensor(input, fn)
    if dtype is not None:
        x = x.to_dtype(dtype)
    if dim is None:  # PyTorch's deprecated implicit choice
        _warnings.warn(f"{fn}: implicit dimension choice is deprecated, pass dim",
                       UserWarning, stacklevel=3)
        return x, 0 if x.ndim in (0, 1, 3) else 1
    return x, _int(dim, fn, "dim")


def softmax(input: _Tensor, dim: _Optional[int] = None,
            _stacklevel: int = 3, dtype: _Any = None) -> _Tensor:
    """exp(x) / sum(exp(x)) along dim (input cast to dtype first when given)."""
    x, dim = _softmax_input(input, dim, dtype, "softmax")
    return x.softmax(dim)


def log_softmax(input: _Tensor, dim: _Optional[int] = None,
                _stacklevel: int = 3, dtype: _Any = None) -> _Tensor:
    """log(softmax(x)) along dim, computed stably."""
    x, dim = _softmax_input(input, dim, dtype, "log_softmax")
    return x.log_softmax(dim)


def one_hot(tensor: _Tensor, num_classes: int = -1) -> _Tensor:
    """int64 tensor of shape tensor.shape + (num_classes,) with a 1 at each
    class index; num_classes=-1 takes max + 1.  Not differentiable."""
    from .. import dtypes as _dt
    from ..tensor import Tensor, arange

    fn = "one_hot"
    t = tensor if isinstance(tensor, Tensor) else _as_index(tensor, fn)
    if t.dtype.is_floating_point or t.dtype is _dt.bool_:
        raise DTypeError(f"{fn}: tensor must hold integer class indices, got {_desc(t)}")
    num_classes = _int(num_classes, fn, "num_classes")
    if t.numel() == 0:
        if num_classes == -1:
            raise InvalidArgumentError(f"{fn}: cannot infer num_classes from an empty tensor "
                                       f"{t.shape}")
        lo = hi = 0
    else:
        lo, hi = int(t.min().item()), int(t.max().item())
    if num_classes == -1:
        num_classes = hi + 1
    if num_classes < 0:
        raise InvalidArgumentError(f"{fn}: num_classes must be -1 or >= 0, got {num_classes}")
    if t.numel() and lo < 0:
        raise OutOfRangeError(f"{fn}: class values must be non-negative, got {lo} in "
                              f"{_desc(t)}")
    if t.numel() and hi >= num_classes:
        raise OutOfRangeError(f"{fn}: class value {hi} in {_desc(t)} is not smaller than "
                              f"num_classes={num_classes}")
    if t.dtype is not _dt.int64:
        t = t.to_dtype(_dt.int64)
    return (t.unsqueeze(-1) == arange(num_classes)).to_dtype(_dt.int64)


# ---- shape --------------------------------------------------------------------------
_PAD_MODES = ("constant", "reflect", "replicate", "circular")


def _pad_positions(mode, n, lo, hi):
    """The source position of each of the n + lo + hi elements of a dim of n
    padded by (lo, hi) in a non-constant mode; None for a circular padding
    wider than what its cropping leaves."""
    idx = _np.arange(-lo, n + hi, dtype=_np.int64)
    if mode == "reflect":
        idx = _np.abs(idx)
        return _np.where(idx > n - 1, 2 * (n - 1) - idx, idx)
    if mode == "replicate":
        return _np.clip(idx, 0, n - 1)
    # circular: PyTorch crops by the negative amounts first, then wraps what is left
    base = _np.arange(max(-lo, 0), n - max(-hi, 0), dtype=_np.int64)
    m = len(base)
    if m <= 0 or max(lo, 0) > m or max(hi, 0) > m:
        return None
    return base[_np.arange(-max(lo, 0), m + max(hi, 0)) % m]


def pad(input: _Tensor, pad: _Sequence[int], mode: str = 'constant',
        value: _Any = None) -> _Tensor:
    """Pads the last dims: pad = (left, right) for the last dim, then (top,
    bottom) for the one before, ...  mode 'constant' fills with value
    (default 0; negative amounts crop); 'reflect', 'replicate' and 'circular'
    pad the last 1, 2 or 3 dims of a (batched or unbatched) input, as PyTorch."""
    fn = "pad"
    x = _need_tensor(input, fn)
    try:
        if isinstance(pad, (str, bytes, bytearray)):  # iterable, but not of ints
            raise TypeError
        pads = tuple(pad)
    except TypeError:
        raise InvalidArgumentError(f"{fn}: pad must be a sequence of ints, got "
                                   f"{type(pad).__name__}") from None
    pads = tuple(_int(p, fn, "pad") for p in pads)
    if not isinstance(mode, str) or mode not in _PAD_MODES:
        raise InvalidArgumentError(f"{fn}: mode must be one of {_PAD_MODES}, got {mode!r}")
    if len(pads) % 2:
        raise InvalidArgumentError(f"{fn}: pad must have an even length, got {pads}")
    if mode == "constant":
        xs = x.shape
        for i in range(min(len(pads) // 2, len(xs))):
            lo, hi = pads[2 * i], pads[2 * i + 1]
            if xs[-1 - i] + min(lo, 0) + min(hi, 0) < 0:  # PyTorch crops first
                raise ShapeError(
                    f"{fn}: padding ({lo}, {hi}) crops more than dim {len(xs) - 1 - i} of "
                    f"input {_desc(x)} holds")
        fill = 0.0 if value is None else _float(value, fn, "value")
        return _call(_lib.AD_OP_PAD, (x,), pads, (fill,))
    if value is not None and value != 0:
        raise InvalidArgumentError(f"{fn}: mode {mode!r} takes no value, got {value!r}")
    k = len(pads) // 2
    if k not in (1, 2, 3) or x.ndim not in (k + 1, k + 2):
        raise InvalidArgumentError(
            f"{fn}: mode {mode!r} pads the last 1, 2 or 3 dims of a (k+1)- or (k+2)-d input; "
            f"got {len(pads)} pad values for input {_desc(x)}")
    out = x
    for i in range(k):
        d = x.ndim - 1 - i
        lo, hi = pads[2 * i], pads[2 * i + 1]
        if lo == 0 and hi == 0:
            continue
        n = x.shape[d]
        if mode == "reflect" and not (lo < n and hi < n):
            raise InvalidArgumentError(
                f"{fn}: reflect padding ({lo}, {hi}) must be smaller than dim {d} of input "
                f"{_desc(x)}")
        if n == 0 or n + lo + hi <= 0:
            raise InvalidArgumentError(
                f"{fn}: padding ({lo}, {hi}) of dim {d} of input {_desc(x)} leaves no elements")
        # one gather of source positions per padded dim: its backward sums the
        # gradients of every copy into the element it was copied from
        try:
            idx = _pad_positions(mode, n, lo, hi)
        except MemoryError:
            raise OutOfMemoryError(f"{fn}: out of memory for the {n + lo + hi} source positions "
                                   f"of dim {d} of input {_desc(x)} padded by ({lo}, {hi})"
                                   ) from None
        if idx is None:
            m = n - max(-lo, 0) - max(-hi, 0)
            raise InvalidArgumentError(
                f"{fn}: circular padding ({lo}, {hi}) must be at most the size of dim {d} "
                f"after cropping ({m}) of input {_desc(x)}")
        out = _index_select(out, d, idx)
    return out


# ---- losses ---------------------------------------------------------------------------
def mse_loss(input: _Tensor, target: _Tensor, size_average: _Any = None,
             reduce: _Any = None, reduction: str = 'mean') -> _Tensor:
    """(input - target)^2, averaged, summed or per element."""
    reduction = _legacy_reduction(size_average, reduce, reduction, "mse_loss")
    x = _need_tensor(input, "mse_loss")
    return _call(_lib.AD_OP_MSE_LOSS, (x, _tensor(target, x)),
                 (_reduction(reduction, "mse_loss"),))


def _target_tensor(target, x, fn):
    """The target as a tensor: float data becomes x's dtype (class
    probabilities), integer data int64 (class indices)."""
    from ..tensor import Tensor, tensor

    if isinstance(target, Tensor):
        return target
    try:
        a = _np.asarray(target)
    except ValueError as e:  # ragged nested lists
        raise ShapeError(f"{fn}: cannot convert the target: {e}") from None
    if a.dtype.kind == "f":
        return tensor(a, dtype=x.dtype)
    return _as_index(a, fn)


def _class_loss(fn, input, target, weight, ignore_index, reduction, label_smoothing, logits):
    r = _reduction(reduction, fn)
    op = _lib.AD_OP_CROSS_ENTROPY if logits else _lib.AD_OP_NLL_LOSS
    if (weight is None and not label_smoothing and type(ignore_index) is int and ignore_index < 0
            and isinstance(input, _Tensor) and isinstance(target, _Tensor) and input.ndim == 2):
        # the common call, straight to the fused native loss; it refuses any target
        # outside [0, C) (so also one equal to ignore_index) and any other misuse, and
        # then the general path below sorts out what it was
        try:
            return _call(op, (input, target), (r,))
        except OutOfMemoryError:
            raise
        except Error:
            pass
    x = _need_float(input, fn)
    ignore_index = _int(ignore_index, fn, "ignore_index")
    eps = _float(label_smoothing, fn, "label_smoothing")
    if not 0.0 <= eps <= 1.0:
        raise InvalidArgumentError(f"{fn}: label_smoothing must be in [0, 1], got {eps}")
    if x.ndim == 0:
        raise ShapeError(f"{fn}: input must have a class dim, got {_desc(x)}")
    cdim = 0 if x.ndim == 1 else 1
    c = x.shape[cdim]
    w = _channel_vec(weight, c, x, fn, "weight")
    t = _target_tensor(target, x, fn)
    if t.dtype.is_floating_point:
        if logits and t.shape == x.shape:
            _same_dtype(x, t, fn, "target")
            if ignore_index >= 0:
                raise InvalidArgumentError(f"{fn}: ignore_index={ignore_index} is not supported "
                                           f"with class-probability targets")
            return _prob_cross_entropy(x, t, w, r, eps, cdim, c)
        raise DTypeError(f"{fn}: target {_desc(t)} must hold integer class indices (or, for "
                         f"cross_entropy, class probabilities of the input's shape {x.shape})")
    # rows: (M, C) with one class index each
    if x.ndim == 1:
        if t.ndim != 0:
            raise ShapeError(f"{fn}: input {_desc(x)} takes a 0-d target, got {_desc(t)}")
        rows, tr, out_shape = x.reshape(1, -1), t.reshape(1), ()
    elif x.ndim == 2:
        if t.shape != (x.shape[0],):
            raise ShapeError(f"{fn}: target {_desc(t)} does not match input {_desc(x)} (expected "
                             f"shape {(x.shape[0],)})")
        rows, tr, out_shape = x, t, t.shape
    else:  # (N, C, d1, ...): classes last, positions as rows
        n, rest = x.shape[0], x.shape[2:]
        if t.shape != (n,) + rest:
            raise ShapeError(f"{fn}: target {_desc(t)} does not match input {_desc(x)} (expected "
                             f"shape {(n,) + rest})")
        perm = (0,) + tuple(range(2, x.ndim)) + (1,)
        rows, tr, out_shape = x.permute(perm).reshape(-1, c), t.reshape(-1), t.shape
    tn = _np.asarray(tr)
    ignored = tn == ignore_index
    any_ignored = bool(ignored.any())
    if w is None and eps == 0.0 and not any_ignored:  # the fused native loss
        y = _call(op, (rows, tr), (r,))
        return y.reshape(out_shape) if r == 0 else y
    from ..tensor import tensor

    valid = ~ignored
    bad = valid & ((tn < 0) | (tn >= c))
    if bad.any():
        raise OutOfRangeError(f"{fn}: target {int(tn[bad][0])} is out of range for {c} classes "
                              f"(input {_desc(x)})")
    safe = tensor(_np.where(valid, tn, 0).astype(_np.int64), dtype="int64")
    per = _call(op, (rows, safe), (0,))  # unweighted per-row loss
    keep = tensor(valid.astype(x.dtype.numpy), dtype=x.dtype) if any_ignored else None
    wi = keep
    if w is not None:
        wi = _index_select(w, 0, safe)
        if keep is not None:
            wi = wi * keep
    nll = per if wi is None else per * wi
    smooth = None
    if eps > 0.0:
        logp = rows.log_softmax(1) if logits else rows
        smooth = -((logp if w is None else logp * w.reshape(1, c)).sum(1))
        if keep is not None:
            smooth = smooth * keep
    if r == 0:
        loss = nll if smooth is None else nll * (1.0 - eps) + smooth * (eps / c)
        return loss.reshape(out_shape)
    total = nll.sum()
    if smooth is not None:
        total = total * (1.0 - eps) + smooth.sum() * (eps / c)
    if r == 2:
        return total
    # PyTorch's weighted mean: divided by the summed weights of the kept targets
    if any_ignored and not valid.any():  # none kept: NaN, with torch's zero gradients
        return total * 0.0 + float("nan")  # (not 0 / 0's NaN ones, which spoil a whole step)
    return total / (wi.sum() if wi is not None else float(tn.size))


def _prob_cross_entropy(x, t, w, r, eps, cdim, c):
    logp = x.log_softmax(cdim)
    if eps > 0.0:
        t = t * (1.0 - eps) + eps / c
    prod = logp * t
    if w is not None:
        prod = prod * (w if x.ndim == 1 else w.reshape((1, c) + (1,) * (x.ndim - 2)))
    if r == 0:
        return -prod.sum(cdim)
    total = -prod.sum()
    if r == 2:
        return total
    if x.numel() == 0:
        return total * float("nan")
    return total / float(x.numel() // c)


def cross_entropy(input: _Tensor, target: _Tensor,
                  weight: _Optional[_Tensor] = None,
                  size_average: _Any = None, ignore_index: int = -100,
                  reduce: _Any = None, reduction: str = 'mean',
                  label_smoothing: float = 0.0) -> _Tensor:
    """-log softmax(input)[target] from logits (N, C) (or (C,), or (N, C, d...))
    with integer class targets, or -sum(target * log softmax(input)) with
    class-probability targets of the input's shape.  weight rescales each
    class, targets equal to ignore_index count for nothing, and the mean is
    PyTorch's weighted mean (divided by the summed weights of the kept
    targets); label_smoothing mixes in the uniform distribution."""
    reduction = _legacy_reduction(size_average, reduce, reduction, "cross_entropy")
    return _class_loss("cross_entropy", input, target, weight, ignore_index, reduction,
                       label_smoothing, True)


def nll_loss(input: _Tensor, target: _Tensor,
             weight: _Optional[_Tensor] = None,
             size_average: _Any = None, ignore_index: int = -100,
             reduce: _Any = None, reduction: str = 'mean') -> _Tensor:
    """-weight[target] * input[target] for log-probabilities (N, C) (or (C,), or
    (N, C, d...)) and integer class targets, with cross_entropy's weight,
    ignore_index and weighted-mean rules."""
    reduction = _legacy_reduction(size_average, reduce, reduction, "nll_loss")
    return _class_loss("nll_loss", input, target, weight, ignore_index, reduction, 0.0, False)


def _same_shape_loss_args(input, target, size_average, reduce, reduction, fn):
    """The checked reduction, the float input and a target of its shape and dtype."""
    r = _reduction(_legacy_reduction(size_average, reduce, reduction, fn), fn)
    x = _need_float(input, fn)
    t = _tensor(target, x)
    if t.shape != x.shape:
        raise ShapeError(f"{fn}: target {_desc(t)} must have the input's shape ({_desc(x)})")
    _same_dtype(x, t, fn, "target")
    return r, x, t


def binary_cross_entropy_with_logits(input: _Tensor, target: _Tensor,
                                     weight: _Optional[_Tensor] = None,
                                     size_average: _Any = None,
                                     reduce: _Any = None,
                                     reduction: str = 'mean',
                                     pos_weight: _Optional[_Tensor] = None) -> _Tensor:
    """-[pos_weight * t * log sigmoid(x) + (1 - t) * log(1 - sigmoid(x))] from
    logits, in the stable form (1 - t) * x + (1 + (pos_weight - 1) * t) *
    softplus(-x); weight rescales each element, pos_weight the positive term
    (broadcast along the last dim)."""
    fn = "binary_cross_entropy_with_logits"
    r, x, t = _same_shape_loss_args(input, target, size_average, reduce, reduction, fn)
    sp = (-x).softplus()  # -log sigmoid(x)
    if pos_weight is not None:
        pw = _tensor(pos_weight, x)
        _same_dtype(x, pw, fn, "pos_weight")
        loss = (1.0 - t) * x + ((pw - 1.0) * t + 1.0) * sp
    else:
        loss = (1.0 - t) * x + sp
    if weight is not None:
        wt = _tensor(weight, x)
        _same_dtype(x, wt, fn, "weight")
        loss = loss * wt
    if loss.shape != x.shape:
        raise ShapeError(f"{fn}: weight/pos_weight must broadcast to the input's shape "
                         f"{x.shape}, the loss came out {loss.shape}")
    return _reduce(loss, r)


def smooth_l1_loss(input: _Tensor, target: _Tensor,
                   size_average: _Any = None,
                   reduce: _Any = None, reduction: str = 'mean',
                   beta: float = 1.0) -> _Tensor:
    """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (d = input - target);
    beta=0 is the L1 loss."""
    fn = "smooth_l1_loss"
    r, x, t = _same_shape_loss_args(input, target, size_average, reduce, reduction, fn)
    beta = _float(beta, fn, "beta")
    if not beta >= 0.0:
        raise InvalidArgumentError(f"{fn}: beta must be >= 0, got {beta}")
    d = x - t
    a = d.abs()
    if beta == 0.0:
        return _reduce(a, r)
    from ..tensor import where

    near = a < beta
    q = where(near, d, 0.0)  # the square branch's d, 0 elsewhere: its unselected
    # gradient is then 0 * 0, never 0 * inf (an infinite d gave NaN, torch +-1)
    return _reduce(where(near, q * q * (0.5 / beta), a - 0.5 * beta), r)


# ---- normalization and dropout -----------------------------------------------------------
def layer_norm(input: _Tensor, normalized_shape: _Any,
               weight: _Optional[_Tensor] = None,
               bias: _Optional[_Tensor] = None, eps: float = 1e-05) -> _Tensor:
    """Normalizes over the trailing dims `normalized_shape` (biased variance),
    then scales by weight and shifts by bias when given."""
    from ..tensor import ones

    fn = "layer_norm"
    x = _need_float(input, fn)
    if isinstance(normalized_shape, (_numbers.Integral, _np.integer)):
        normalized_shape = (normalized_shape,)
    try:
        if isinstance(normalized_shape, (str, bytes, bytearray)):  # iterable, not of ints
            raise TypeError
        ns = tuple(_int(n, fn, "normalized_shape") for n in normalized_shape)
    except TypeError:
        raise InvalidArgumentError(f"{fn}: normalized_shape must be an int or a sequence of "
                                   f"ints, got {normalized_shape!r}") from None
    if not ns or len(ns) > x.ndim or x.shape[x.ndim - len(ns):] != ns:
        raise ShapeError(f"{fn}: normalized_shape {ns} does not match the trailing dims of "
                         f"input {_desc(x)}")
    eps = _float(eps, fn, "eps")
    ins = [x]
    if weight is None and bias is not None:
        weight = ones(ns, dtype=x.dtype)
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None:
            t = _tensor(t, x)
            if t.shape != ns:
                raise ShapeError(f"{fn}: {name} {_desc(t)} must have the normalized shape {ns}")
            _same_dtype(x, t, fn, name)
            ins.append(t)
    return _call(_lib.AD_OP_LAYER_NORM, ins, (len(ns),), (eps,))


def batch_norm(input: _Tensor, running_mean: _Optional[_Tensor],
               running_var: _Optional[_Tensor],
               weight: _Optional[_Tensor] = None,
               bias: _Optional[_Tensor] = None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-05) -> _Tensor:
    """Normalizes each channel (dim 1) of input (N, C, ...).

    training=True: with the batch's mean and biased variance; running_mean
    and running_var (when not None) are then updated in place, as PyTorch:
    r = (1 - momentum) * r + momentum * batch statistic, with the unbiased
    variance.  In-place means they must be Vars (a module's buffers); a plain
    Tensor cannot change, so it is refused.  The update records nothing.
    training=False: with running_mean and running_var (required)."""
    from ..grad import no_grad
    from ..tensor import Var

    fn = "batch_norm"
    x = _need_float(input, fn)
    if x.ndim < 2:
        raise ShapeError(f"{fn}: input must be (N, C, ...), got {_desc(x)}")
    c = x.shape[1]
    rm = _channel_vec(running_mean, c, x, fn, "running_mean")
    rv = _channel_vec(running_var, c, x, fn, "running_var")
    w = _channel_vec(weight, c, x, fn, "weight")
    b = _channel_vec(bias, c, x, fn, "bias")
    eps = _float(eps, fn, "eps")
    cshape = (1, c) + (1,) * (x.ndim - 2)
    if not training:
        if rm is None or rv is None:
            raise InvalidArgumentError(f"{fn}: running_mean and running_var are required when "
                                       f"training=False")
        # the statistics are constants here (buffers, never trained)
        scale = (rv.detach() + eps).sqrt().recip()
        if w is not None:
            scale = scale * w
        shift = -(rm.detach() * scale)
        if b is not None:
            shift = shift + b
        return x * scale.reshape(cshape) + shift.reshape(cshape)
    for name, s in (("running_mean", running_mean), ("running_var", running_var)):
        if s is not None and not isinstance(s, Var):
            raise InvalidArgumentError(
                f"{fn}: training=True updates {name} in place, so it must be a Var (a module "
                f"buffer); got a plain Tensor, which is immutable (pass None to skip the update)")
    momentum = _float(momentum, fn, "momentum")
    per_channel = x.numel() // c if c else 0
    if per_channel <= 1:
        raise InvalidArgumentError(f"{fn}: training needs more than 1 value per channel, got "
                                   f"input {_desc(x)}")
    # composed of reductions and broadcast elementwise ops: on a (N, C, H, W) batch
    # this runs about twice as fast, forward and backward, as the fused layer_norm
    # over the channels-first permutation (which must copy), and it yields the
    # batch statistics for the running update
    dims = (0,) + tuple(range(2, x.ndim))
    mean = x.mean(dims, keepdim=True)
    d = x - mean
    var = d.sqr().mean(dims, keepdim=True)  # biased, for the normalisation
    scale = (var + eps).sqrt().recip()
    if w is not None:
        scale = scale * w.reshape(cshape)
    y = d * scale
    if b is not None:
        y = y + b.reshape(cshape)
    if rm is not None or rv is not None:
        with no_grad():  # both new values first, so a failure changes neither
            new_m = new_v = None
            if rm is not None:
                new_m = rm * (1.0 - momentum) + mean.detach().reshape(c) * momentum
            if rv is not None:  # PyTorch's rule: the unbiased variance
                unbiased = var.detach().reshape(c) * (per_channel / (per_channel - 1.0))
                new_v = rv * (1.0 - momentum) + unbiased * momentum
            if rm is not None:
                rm.set(new_m)
            if rv is not None:
                rv.set(new_v)
    return y


def dropout(input: _Tensor, p: float = 0.5, training: bool = True,
            inplace: bool = False, *, seed: _Optional[int] = None) -> _Tensor:
    """Zeroes each element with probability p and scales the rest by 1/(1-p).
    The mask is a function of the seed and the element's position (row-major),
    so the same seed drops the same elements; seed None draws one.  inplace
    is accepted for PyTorch's signature; the result is always a new tensor."""
    if not isinstance(inplace, (bool, _np.bool_)):
        raise InvalidArgumentError(f"dropout: inplace must be a bool, got {inplace!r} (pass "
                                   f"the seed as seed=)")
    p = _float(p, "dropout", "p")
    if not 0.0 <= p <= 1.0:
        raise InvalidArgumentError(f"dropout: p must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return input
    if seed is not None and (isinstance(seed, (bool, _np.bool_)) or not isinstance(
            seed, (_numbers.Integral, _np.integer))):
        raise InvalidArgumentError(f"dropout: seed must be an int or None, got {seed!r}")
    seed = _seed(seed)  # the library's seed rule (None: the default generator)
    if seed >= 1 << 63:
        seed -= 1 << 64
    return _call(_lib.AD_OP_DROPOUT, (input,), (seed,), (p,))


# ---- attention ---------------------------------------------------------------------------
def scaled_dot_product_attention(query: _Tensor, key: _Tensor, value: _Tensor,
                                 attn_mask: _Optional[_Tensor] = None,
                                 dropout_p: float = 0.0, is_causal: bool = False,
                                 scale: _Optional[float] = None,
                                 enable_gqa: bool = False) -> _Tensor:
    """softmax(query @ key^T * scale + mask) @ value over (..., L, E), (..., S, E),
    (..., S, Ev), as PyTorch: scale defaults to 1/sqrt(E); a bool attn_mask
    keeps the positions where it is True, a float one is added; is_causal
    keeps j <= i (and excludes attn_mask); a query row that every position
    is masked for gives zeros; enable_gqa repeats the key/value heads (dim -3)
    to match the query's."""
    from .. import dtypes as _dt
    from ..tensor import Tensor, tensor, where

    fn = "scaled_dot_product_attention"
    q = _need_float(query, fn, "query")
    k = _need_float(key, fn, "key")
    v = _need_float(value, fn, "value")
    for name, t in (("key", k), ("value", v)):
        _same_dtype(q, t, fn, name)
    if min(q.ndim, k.ndim, v.ndim) < 2:
        raise ShapeError(f"{fn}: query, key and value must be at least 2-d, got {_desc(q)}, "
                         f"{_desc(k)}, {_desc(v)}")
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ShapeError(f"{fn}: query (..., L, E) {q.shape}, key (..., S, E) {k.shape} and "
                         f"value (..., S, Ev) {v.shape} do not match")
    if enable_gqa and q.ndim >= 3 and k.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        hq, hk = q.shape[-3], k.shape[-3]
        if hk == 0 or hq % hk or v.ndim < 3 or v.shape[-3] != hk:
            raise ShapeError(f"{fn}: enable_gqa needs the query heads ({hq}) to be a multiple of "
                             f"the key/value heads (key {k.shape}, value {v.shape})")
        rep = _np.arange(hq, dtype=_np.int64) // (hq // hk)
        k, v = _index_select(k, k.ndim - 3, rep), _index_select(v, v.ndim - 3, rep)
    L, E, S = q.shape[-2], q.shape[-1], k.shape[-2]
    # E = 0: the scores are empty sums (zeros) whatever the scale; torch's
    # 1 / sqrt(0) is inf there, where Python's division raised ZeroDivisionError
    sc = (1.0 / _math.sqrt(E) if E else _math.inf) if scale is None else _float(scale, fn,
                                                                              "scale")
    dropout_p = _float(dropout_p, fn, "dropout_p")
    if not 0.0 <= dropout_p <= 1.0:
        raise InvalidArgumentError(f"{fn}: dropout_p must be in [0, 1], got {dropout_p}")
    scores = (q * sc) @ k.transpose(-2, -1)
    bias = None  # additive mask (0 / -inf for the boolean forms)
    if is_causal:
        if attn_mask is not None:
            raise InvalidArgumentError(f"{fn}: pass either attn_mask or is_causal=True, not "
                                       f"both")
        bias_np = _np.where(_np.tri(L, S, dtype=bool), 0.0, -_np.inf)
        bias = tensor(bias_np, dtype=q.dtype)
    elif attn_mask is not None:
        if isinstance(attn_mask, Tensor):
            m = attn_mask
        else:
            try:
                a = _np.asarray(attn_mask)
            except ValueError as e:  # ragged nested lists
                raise ShapeError(f"{fn}: cannot convert attn_mask: {e}") from None
            m = tensor(a, dtype=_dt.bool_ if a.dtype == bool else q.dtype)
        if m.dtype is _dt.bool_:
            bias_np = _np.where(_np.asarray(m), 0.0, -_np.inf)
            bias = tensor(bias_np, dtype=q.dtype)
        elif m.dtype.is_floating_point:
            _same_dtype(q, m, fn, "attn_mask")
            bias = m
            bias_np = _np.asarray(m.detach())
        else:
            raise DTypeError(f"{fn}: attn_mask must be bool or the query's float dtype, got "
                             f"{_desc(m)}")
        if m.ndim > scores.ndim or any(
                a not in (1, b) for a, b in zip(reversed(m.shape), reversed(scores.shape))):
            raise ShapeError(f"{fn}: attn_mask {_desc(m)} does not broadcast to the attention "
                             f"scores {scores.shape}")
    keep_rows = None
    if bias is not None:
        dead = _np.all(_np.isneginf(bias_np), axis=-1, keepdims=True) if S else None
        if dead is not None and dead.any():
            # rows masked everywhere: softmax over plain scores (finite), then zeroed,
            # so neither the output nor the gradient sees a NaN (PyTorch gives zeros)
            bias = where(tensor(dead), 0.0, bias)
            keep_rows = tensor((~dead).astype(q.dtype.numpy), dtype=q.dtype)
        scores = scores + bias
    # the native softmax (one SIMD pass per row; it beat the exp-map composite by
    # about a quarter, forward plus backward, on attention rows).  Every row has a
    # finite entry: fully masked rows were unmasked above.
    attn = scores.softmax(-1)
    if keep_rows is not None:
        attn = attn * keep_rows
    if dropout_p > 0.0:
        attn = dropout(attn, dropout_p)
    return attn @ v


# ---- embedding and linear ---------------------------------------------------------------
def embedding(input: _Tensor, weight: _Tensor,
              padding_idx: _Optional[int] = None,
              max_norm: _Optional[float] = None, norm_type: float = 2.0,
              scale_grad_by_freq: bool = False, sparse: bool = False) -> _Tensor:
    """Rows of weight (num, dim) picked by the integer tensor input: shape
    input.shape + (dim,); repeated ids accumulate their gradients.  Rows
    picked at padding_idx get no gradient.  Raises OutOfRangeError for an
    index outside [0, num) (as torch, negative ones too).  max_norm renormalises, in place
    as PyTorch, each picked row whose norm_type-norm exceeds it (weight must
    then be a Var).  scale_grad_by_freq and sparse gradients are not
    supported."""
    from .. import dtypes as _dt
    from ..grad import no_grad
    from ..tensor import Var, where

    fn = "embedding"
    idx = _as_index(input, fn)
    _need_tensor(weight, fn, "weight")
    if idx.dtype.is_floating_point or idx.dtype is _dt.bool_:
        raise DTypeError(f"{fn}: input must hold integer indices, got {_desc(idx)}")
    if weight.ndim != 2:
        raise ShapeError(f"{fn}: weight must be 2-d (num_embeddings, embedding_dim), got "
                         f"{_desc(weight)}")
    if scale_grad_by_freq or sparse:
        raise InvalidArgumentError(f"{fn}: scale_grad_by_freq=True and sparse=True are not "
                                   f"supported")
    num = weight.shape[0]
    if padding_idx is not None:
        padding_idx = _int(padding_idx, fn, "padding_idx")
        if not -num <= padding_idx < num:
            raise InvalidArgumentError(f"{fn}: padding_idx {padding_idx} is out of range for "
                                       f"weight {_desc(weight)}")
        padding_idx %= num
    flat = idx.reshape(-1)
    fi = _np.asarray(flat)
    if fi.size and (fi.min() < 0 or fi.max() >= num):  # as torch: no negative ids either
        bad = fi.min() if fi.min() < 0 else fi.max()
        raise OutOfRangeError(f"{fn}: input {_desc(idx)} holds index {bad}, out of range for "
                              f"weight {_desc(weight)} ([0, {num}))")
    if max_norm is not None and fi.size:
        if not isinstance(weight, Var):
            raise InvalidArgumentError(f"{fn}: max_norm renormalises rows of weight in place, "
                                       f"so weight must be a Var, got a plain Tensor")
        w = _np.array(weight.numpy())
        rows = _np.unique(fi)
        mn = _float(max_norm, fn, "max_norm")
        norms = _np.linalg.norm(w[rows], ord=_float(norm_type, fn, "norm_type"), axis=1)
        big = norms > mn
        if big.any():  # PyTorch's rule, including its 1e-7
            w[rows[big]] *= (mn / (norms[big] + 1e-7))[:, None].astype(w.dtype)
            with no_grad():
                weight.set(w)
    out = _index_select(weight, 0, flat)
    if padding_idx is not None:
        pad_rows = fi == padding_idx
        if pad_rows.any():  # the padding row's value, selected away from the gradient
            from ..tensor import tensor

            out = where(tensor(pad_rows[:, None]), out.detach(), out)
    return out.reshape(idx.shape + (weight.shape[1],))


_LINEAR_ACTS = {None: 0, "relu": 1, "tanh": 2, "sigmoid": 3}


def linear(input: _Tensor, weight: _Tensor, bias: _Optional[_Tensor] = None, *,
           activation: _Optional[str] = None) -> _Tensor:
    """input @ weight.T + bias (weight (out, in), input (..., in)), as one op:
    the bias is added in the product's epilogue, while each block of the
    output is still in cache, and the backward gives the bias its gradient in
    the same pass that forms the product's.

    activation (a pyautodiff extension): None, "relu", "tanh" or "sigmoid",
    applied in the same epilogue; F.linear(x, w, b, activation="relu") equals
    F.relu(F.linear(x, w, b)) bit for bit, with one op instead of three."""
    fn = "linear"
    if not isinstance(input, _Tensor) or not isinstance(weight, _Tensor):
        _need_tensor(input, fn)
        _need_tensor(weight, fn, "weight")
    act = _LINEAR_ACTS.get(activation, -1) if activation is None or isinstance(
        activation, str) else -1
    if act < 0:
        raise InvalidArgumentError(f"{fn}: activation must be None, 'relu', 'tanh' or "
                                   f"'sigmoid', got {activation!r}")
    if weight.ndim != 2:  # a batched weight would broadcast silently in the matmul
        raise ShapeError(f"{fn}: weight {_desc(weight)} must be 2-d (out_features, "
                         f"in_features)")
    b = None if bias is None else _tensor(bias, input)
    ins = (input, weight) if b is None else (input, weight, b)
    try:  # the checks only run on failure, so that the common call stays one op
        if act:
            return _call(_lib.AD_OP_LINEAR_ACT, ins, (act,))
        return _call(_lib.AD_OP_LINEAR, ins)
    except (ShapeError, DTypeError) as e:
        if input.ndim < 1 or input.shape[-1] != weight.shape[1]:
            raise ShapeError(f"{fn}: input {_desc(input)} (..., in_features) does not match "
                             f"weight {_desc(weight)} (out_features, in_features)") from None
        if b is not None and b.shape not in ((weight.shape[0],), (), (1,)):
            raise ShapeError(f"{fn}: bias {_desc(b)} must have shape ({weight.shape[0]},)") \
                from None
        raise type(e)(f"{fn}: input {_desc(input)}, weight {_desc(weight)}"
                      f"{'' if b is None else ', bias ' + _desc(b)}: {e}") from None


# ---- convolution -------------------------------------------------------------------------
def _batched(x, nd, name):
    """(x with a batch dim, whether one was added) for an op on nd spatial dims."""
    _need_tensor(x, name)
    if x.ndim == nd + 1:
        return x.unsqueeze(0), True
    if x.ndim != nd + 2:
        raise ShapeError(f"{name}: input must be {nd + 1}-d or {nd + 2}-d, got {_desc(x)}")
    return x, False


def _conv_args(fn, x, weight, stride, padding, dilation, groups, nd, transposed=False):
    """Checked (stride, padding, dilation, groups) for a conv over nd spatial
    dims; padding may come back as the string 'same'."""
    _need_tensor(weight, fn, "weight")
    ws, xs = weight.shape, x.shape
    if len(ws) != nd + 2:
        kind = "(in_channels, out_channels/groups, *kernel)" if transposed else \
            "(out_channels, in_channels/groups, *kernel)"
        raise ShapeError(f"{fn}: weight must be {nd + 2}-d {kind}, got {_desc(weight)}")
    s = _ntuple(stride, nd, fn, "stride")
    d = _ntuple(dilation, nd, fn, "dilation")
    g = groups if type(groups) is int else _int(groups, fn, "groups")
    _in_range(s, 1, fn, "stride")
    _in_range(d, 1, fn, "dilation")
    _in_range((g,), 1, fn, "groups")
    if isinstance(padding, str):
        if transposed or padding not in ("valid", "same"):
            raise InvalidArgumentError(f"{fn}: padding must be an int, a tuple of {nd} ints"
                                       f"{'' if transposed else ', valid or same'}, got "
                                       f"{padding!r}")
        if padding == "same" and s != (1,) * nd:
            raise InvalidArgumentError(f"{fn}: padding='same' needs stride 1, got {s}")
        p = (0,) * nd if padding == "valid" else "same"
    else:
        p = _ntuple(padding, nd, fn, "padding")
        _in_range(p, 0, fn, "padding")
    c = xs[1]
    if not transposed:
        if c != ws[1] * g or ws[0] % g:
            raise ShapeError(f"{fn}: input {_desc(x)} has {c} channels; weight {_desc(weight)} "
                             f"with groups={g} takes {ws[1] * g} channels and needs "
                             f"out_channels divisible by groups")
    elif c != ws[0] or c % g:
        raise ShapeError(f"{fn}: input {_desc(x)} has {c} channels; weight {_desc(weight)} "
                         f"(in_channels first) with groups={g} takes {ws[0]}, "
                         f"divisible by groups")
    for i in range(nd):
        k, size = ws[2 + i], xs[2 + i]
        span = d[i] * (k - 1) + 1
        if span > _SIZE_LIMIT:
            raise InvalidArgumentError(f"{fn}: dilation {d[i]} makes the kernel span {span}, "
                                       f"too large")
        if transposed:
            if size == 0:  # as PyTorch (the native kernel would give an empty output)
                raise ShapeError(f"{fn}: input {_desc(x)} has an empty spatial dim (only the "
                                 f"batch or the channels may be empty)")
            if (size - 1) * s[i] > _SIZE_LIMIT:
                raise InvalidArgumentError(f"{fn}: stride {s[i]} makes the output of input "
                                           f"{_desc(x)} too large")
        elif p != "same" and span > size + 2 * p[i]:
            raise ShapeError(f"{fn}: kernel size {k} with dilation {d[i]} spans {span}, more "
                             f"than the padded input ({size} + 2*{p[i]}) of input {_desc(x)}")
    return s, p, d, g


def _native_conv(fn, op, x, w, iargs):
    """The native conv call; its errors name the 2-d op, so a 1-d function's
    message is prefixed with its own name."""
    try:
        return _call(op, (x, w), iargs)
    except OutOfMemoryError:
        raise
    except Error as e:
        if fn.endswith("2d"):
            raise
        raise type(e)(f"{fn}: {e}") from None


def _bias(y, bias, fn, nd):
    if bias is None:
        return y
    b = _tensor(bias, y)
    out = y.shape[1]
    if b.shape != (out,):
        raise ShapeError(f"{fn}: bias must have shape ({out},), got {_desc(b)}")
    try:
        return y + b.reshape((1, -1) + (1,) * nd)
    except DTypeError:
        _same_dtype(y, b, fn, "bias")
        raise


def _same_pads(weight, d):
    """pad() amounts (last dim first) for padding='same': the extra element
    of an odd total goes after, as PyTorch."""
    pads = []
    for k, di in zip(reversed(weight.shape[2:]), reversed(d)):
        total = di * (k - 1)
        pads += [total // 2, total - total // 2]
    return pads


def _conv_run(fn, opcode, x, added, w, bias, s, p, d, g, op, nd):
    """The native 2-d kernel `opcode` on checked arguments (op: the output
    padding, () for a forward convolution), then the bias and the batch dim
    _batched added."""
    if nd == 1:  # the 2-d kernel over a height of 1
        x, w = x.unsqueeze(2), w.unsqueeze(2)
        s, p, d, op = (1,) + s, (0,) + p, (1,) + d, (0,) + op if op else op
    y = _native_conv(fn, opcode, x, w, s + p + d + (g,) + op)
    if nd == 1:
        y = y.squeeze(2)
    y = _bias(y, bias, fn, nd)
    return y.squeeze(0) if added else y


def _conv(fn, input, weight, bias, stride, padding, dilation, groups, nd):
    x, added = _batched(input, nd, fn)
    s, p, d, g = _conv_args(fn, x, weight, stride, padding, dilation, groups, nd)
    if p == "same":
        x, p = pad(x, _same_pads(weight, d)), (0,) * nd
    return _conv_run(fn, _lib.AD_OP_CONV2D, x, added, weight, bias, s, p, d, g, (), nd)


def conv2d(input: _Tensor, weight: _Tensor,
           bias: _Optional[_Tensor] = None, stride: _Any = 1,
           padding: _Any = 0, dilation: _Any = 1, groups: int = 1) -> _Tensor:
    """2-d convolution (cross-correlation, as PyTorch) of input (N, C, H, W) or
    (C, H, W) with weight (O, C/groups, kh, kw); padding may be 'valid' or
    'same' (stride 1)."""
    return _conv("conv2d", input, weight, bias, stride, padding, dilation, groups, 2)


def conv1d(input: _Tensor, weight: _Tensor,
           bias: _Optional[_Tensor] = None, stride: _Any = 1,
           padding: _Any = 0, dilation: _Any = 1, groups: int = 1) -> _Tensor:
    """1-d convolution of input (N, C, L) or (C, L) with weight (O, C/groups, k),
    as conv2d over a height of 1."""
    return _conv("conv1d", input, weight, bias, stride, padding, dilation, groups, 1)


def _conv_transpose(fn, input, weight, bias, stride, padding, output_padding, groups, dilation,
                    nd):
    x, added = _batched(input, nd, fn)
    s, p, d, g = _conv_args(fn, x, weight, stride, padding, dilation, groups, nd, True)
    op = _ntuple(output_padding, nd, fn, "output_padding")
    _in_range(op, 0, fn, "output_padding")
    for i in range(nd):
        if op[i] >= s[i] and op[i] >= d[i]:
            raise InvalidArgumentError(f"{fn}: output padding {op[i]} must be smaller than the "
                                       f"stride {s[i]} or the dilation {d[i]}")
    return _conv_run(fn, _lib.AD_OP_CONV_TRANSPOSE2D, x, added, weight, bias, s, p, d, g, op, nd)


def conv_transpose2d(input: _Tensor, weight: _Tensor,
                     bias: _Optional[_Tensor] = None, stride: _Any = 1,
                     padding: _Any = 0, output_padding: _Any = 0, groups: int = 1,
                     dilation: _Any = 1) -> _Tensor:
    """Transposed 2-d convolution (conv2d's input gradient) of input
    (N, Cin, H, W) with weight (Cin, Cout/groups, kh, kw); output_padding must
    be smaller than the stride or the dilation."""
    return _conv_transpose("conv_transpose2d", input, weight, bias, stride, padding,
                           output_padding, groups, dilation, 2)


def conv_transpose1d(input: _Tensor, weight: _Tensor,
                     bias: _Optional[_Tensor] = None, stride: _Any = 1,
                     padding: _Any = 0, output_padding: _Any = 0, groups: int = 1,
                     dilation: _Any = 1) -> _Tensor:
    """Transposed 1-d convolution, as conv_transpose2d over a height of 1."""
    return _conv_transpose("conv_transpose1d", input, weight, bias, stride, padding,
                           output_padding, groups, dilation, 1)


# ---- pooling -------------------------------------------------------------------------------
def _pool_geometry(fn, x, k, s, p, d, ceil_mode):
    """Checked pooling arguments over the last len(k) dims of x: the output
    sizes and the extra right padding ceil_mode needs.  PyTorch's rule: with
    ceil_mode the output rounds up, but the last window must start inside
    the input or its left padding."""
    _in_range(k, 1, fn, "kernel_size")
    _in_range(s, 1, fn, "stride")
    _in_range(d, 1, fn, "dilation")
    _in_range(p, 0, fn, "padding")
    nd = len(k)
    for i in range(nd):
        if 2 * p[i] > k[i]:
            raise InvalidArgumentError(f"{fn}: padding {p} must be at most half the kernel "
                                       f"size {k}")
    xs = x.shape
    if 0 in xs[1:]:
        raise ShapeError(f"{fn}: input {_desc(x)} has an empty channel or spatial dim (only the "
                         f"batch may be empty)")
    outs, extra = [], []
    for i in range(nd):
        size = xs[len(xs) - nd + i]
        span = d[i] * (k[i] - 1) + 1
        room = size + 2 * p[i] - span
        # PyTorch's formula (floor division rounds toward -inf, as its div_rtn)
        o = (room + (s[i] - 1 if ceil_mode else 0)) // s[i] + 1
        if ceil_mode and (o - 1) * s[i] >= size + p[i]:
            o -= 1
        if o < 1:
            raise ShapeError(f"{fn}: kernel size {k[i]} with dilation {d[i]} spans {span}, more "
                             f"than the padded input ({size} + 2*{p[i]}) of input {_desc(x)}")
        outs.append(o)
        extra.append(max(0, (o - 1) * s[i] + span - (size + 2 * p[i])))
    return outs, extra


def _extra_pad(x, extra, value):
    """Pads the last dims on the right by extra (last dim last in extra)."""
    if not any(extra):
        return x
    pads = []
    for e in reversed(extra):
        pads += [0, e]
    return pad(x, pads, value=value)


def _max_pool(fn, x4, k, s, p, d, extra):
    x4 = _extra_pad(x4, extra, -_math.inf)  # as the native padding: never the max
    try:
        return _call(_lib.AD_OP_MAX_POOL2D, (x4,), k + s + p + d)
    except DTypeError:
        _need_float(x4, fn)
        raise


def _pool_stride(stride, k, n, fn):
    if stride is None or (isinstance(stride, (tuple, list)) and len(stride) == 0):
        return k
    return _ntuple(stride, n, fn, "stride")


def _max_pool_args(fn, input, kernel_size, stride, padding, dilation, ceil_mode, nd):
    """The batched input, whether a batch dim was added, the checked window
    arguments and ceil_mode's extra right padding."""
    x, added = _batched(input, nd, fn)
    k = _ntuple(kernel_size, nd, fn, "kernel_size")
    s = _pool_stride(stride, k, nd, fn)
    p = _ntuple(padding, nd, fn, "padding")
    d = _ntuple(dilation, nd, fn, "dilation")
    _, extra = _pool_geometry(fn, x, k, s, p, d, bool(ceil_mode))
    return x, added, k, s, p, d, extra


def max_pool2d(input: _Tensor, kernel_size: _Any, stride: _Any = None,
               padding: _Any = 0, dilation: _Any = 1, ceil_mode: bool = False) -> _Tensor:
    """Max over windows of input (N, C, H, W) or (C, H, W); padding counts as
    -inf; any kernel, stride (default: the kernel), dilation and overlap;
    ceil_mode rounds the output size up (PyTorch's rule).  The gradient goes
    to the first maximum of each window."""
    fn = "max_pool2d"
    x, added, k, s, p, d, extra = _max_pool_args(fn, input, kernel_size, stride, padding,
                                                  dilation, ceil_mode, 2)
    y = _max_pool(fn, x, k, s, p, d, extra)
    return y.squeeze(0) if added else y


def max_pool1d(input: _Tensor, kernel_size: _Any, stride: _Any = None,
               padding: _Any = 0, dilation: _Any = 1, ceil_mode: bool = False) -> _Tensor:
    """Max over windows of input (N, C, L) or (C, L), as max_pool2d over a
    height of 1."""
    fn = "max_pool1d"
    x, added, k, s, p, d, extra = _max_pool_args(fn, input, kernel_size, stride, padding,
                                                  dilation, ceil_mode, 1)
    y = _max_pool(fn, x.unsqueeze(2), (1,) + k, (1,) + s, (0,) + p, (1,) + d,
                  [0] + extra).squeeze(2)
    return y.squeeze(0) if added else y


def _avg_pool(fn, x4, k, s, p, outs, extra, count_include_pad, divisor_override):
    """Mean over windows of x4 (N, C, H, W): a depthwise conv2d with a constant
    kernel (its gradient is conv2d's), divided as PyTorch divides: by
    divisor_override; else by the window clipped to the padded input
    (count_include_pad) or to the input itself."""
    from ..tensor import full, tensor

    _need_float(x4, fn)
    div = None
    if divisor_override is not None:
        dv = _int(divisor_override, fn, "divisor_override")
        if dv == 0:
            raise InvalidArgumentError(f"{fn}: divisor_override must not be zero")
        uniform = float(dv)
    elif not any(extra) and (count_include_pad or not any(p)):
        uniform = float(k[0] * k[1])  # every window is whole
    else:
        xs = x4.shape
        sizes = []
        for i in range(2):
            n = xs[2 + i]
            start = _np.arange(outs[i], dtype=_np.int64) * s[i] - p[i]
            end = _np.minimum(start + k[i], n + p[i])
            if not count_include_pad:
                start, end = _np.maximum(start, 0), _np.minimum(end, n)
            sizes.append(end - start)
        if all((z == z[0]).all() for z in sizes):
            uniform = float(sizes[0][0] * sizes[1][0])
        else:
            uniform = 1.0
            div = _np.outer(sizes[0], sizes[1]).astype(_np.float64)
    x4 = _extra_pad(x4, extra, 0.0)
    c = x4.shape[1]  # > 0: _pool_geometry refuses empty channels
    w = full((c, 1) + k, 1.0 / uniform, dtype=x4.dtype)
    y = _call(_lib.AD_OP_CONV2D, (x4, w), s + p + (1, 1, c))
    if div is not None:
        y = y / tensor(div, dtype=x4.dtype)
    return y


def avg_pool2d(input: _Tensor, kernel_size: _Any, stride: _Any = None,
               padding: _Any = 0, ceil_mode: bool = False,
               count_include_pad: bool = True,
               divisor_override: _Optional[int] = None) -> _Tensor:
    """Mean over windows of input (N, C, H, W) or (C, H, W); padding counts as
    zeros (count_include_pad=False divides by the number of real elements
    instead); ceil_mode rounds the output size up; divisor_override replaces
    the divisor."""
    fn = "avg_pool2d"
    x, added = _batched(input, 2, fn)
    k = _ntuple(kernel_size, 2, fn, "kernel_size")
    s = _pool_stride(stride, k, 2, fn)
    p = _ntuple(padding, 2, fn, "padding")
    outs, extra = _pool_geometry(fn, x, k, s, p, (1, 1), bool(ceil_mode))
    y = _avg_pool(fn, x, k, s, p, outs, extra, bool(count_include_pad), divisor_override)
    return y.squeeze(0) if added else y


def avg_pool1d(input: _Tensor, kernel_size: _Any, stride: _Any = None,
               padding: _Any = 0, ceil_mode: bool = False,
               count_include_pad: bool = True) -> _Tensor:
    """Mean over windows of input (N, C, L) or (C, L), as avg_pool2d over a
    height of 1."""
    fn = "avg_pool1d"
    x, added = _batched(input, 1, fn)
    k = _ntuple(kernel_size, 1, fn, "kernel_size")
    s = _pool_stride(stride, k, 1, fn)
    p = _ntuple(padding, 1, fn, "padding")
    outs, extra = _pool_geometry(fn, x, k, s, p, (1,), bool(ceil_mode))
    y = _avg_pool(fn, x.unsqueeze(2), (1,) + k, (1,) + s, (0,) + p, [1] + outs, [0] + extra,
                  bool(count_include_pad), None).squeeze(2)
    return y.squeeze(0) if added else y


def _adaptive_matrix(fn, x, n, m):
    """(m, n) matrix averaging the bins PyTorch's adaptive pooling uses:
    [floor(i n / m), ceil((i + 1) n / m))."""
    if m * n > 1 << 31:
        raise OutOfMemoryError(f"{fn}: output size {m} for input {_desc(x)} needs an ({m}, {n}) "
                               f"averaging matrix, too large to allocate")
    i = _np.arange(m)
    lo, hi = (i * n) // m, -((-(i + 1) * n) // m)
    j = _np.arange(n)
    inside = (j >= lo[:, None]) & (j < hi[:, None])
    return _np.where(inside, 1.0 / (hi - lo)[:, None], 0.0).astype(x.dtype.numpy)


def adaptive_avg_pool2d(input: _Tensor, output_size: _Any) -> _Tensor:
    """Average pooling of input (N, C, H, W) or (C, H, W) to output_size (an int,
    or a pair whose None entries keep the input size), with PyTorch's bins
    [floor(i H / oh), ceil((i + 1) H / oh)); composed of mean, avg_pool2d or
    two matrix products, so it has a gradient.  Shape: (N, C, oh, ow)."""
    from ..tensor import from_numpy

    fn = "adaptive_avg_pool2d"
    x = _need_float(input, fn)
    if x.ndim not in (3, 4):
        raise ShapeError(f"{fn}: input must be (C, H, W) or (N, C, H, W), got {_desc(x)}")
    if isinstance(output_size, (tuple, list)):
        if len(output_size) != 2:
            raise InvalidArgumentError(f"{fn}: output_size must be an int or a pair, got "
                                       f"{output_size!r}")
        sizes = tuple(None if o is None else _int(o, fn, "output_size") for o in output_size)
    else:
        sizes = (_int(output_size, fn, "output_size"),) * 2
    _in_range([o for o in sizes if o is not None], 1, fn, "output_size")
    h, w = x.shape[-2:]
    if h == 0 or w == 0:
        raise ShapeError(f"{fn}: input {_desc(x)} has an empty spatial dim")
    oh = h if sizes[0] is None else sizes[0]
    ow = w if sizes[1] is None else sizes[1]
    if oh == 1 and ow == 1:
        return x.mean((-2, -1), keepdim=True)
    if h % oh == 0 and w % ow == 0:
        return avg_pool2d(x, (h // oh, w // ow))
    y = x if ow == w else x @ from_numpy(_adaptive_matrix(fn, x, w, ow).T.copy())
    return y if oh == h else from_numpy(_adaptive_matrix(fn, x, h, oh)) @ y
