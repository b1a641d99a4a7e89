"""Neural-network functions (PyTorch's torch.nn.functional names and
argument orders), each one native op with its own backward, or a reshape of
one:

    ad.nn.conv2d(x, w, b, stride=1, padding=1)
    ad.nn.cross_entropy(logits, target)

Pooling: max_pool2d is native; avg_pool2d is a depthwise conv2d with a
constant kernel (so its gradient is conv2d's).  ceil_mode is not supported.
"""
import numbers
import operator
import os

import numpy as np

from .._lib import lib
from ..errors import InvalidArgumentError, ShapeError
from ..indexing import _as_index, index_select

_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


def _call(op, inputs, iargs=(), fargs=()):
    from ..tensor import _call as call

    return call(op, inputs, iargs, fargs)


def _pair(v, name):
    if isinstance(v, numbers.Integral):
        v = operator.index(v)
        return (v, v)
    v = tuple(operator.index(x) for x in v)
    if len(v) != 2:
        raise InvalidArgumentError(f"{name} must be an int or a pair of ints, got {v}")
    return v


def _reduction(r, op):
    try:
        return _REDUCTIONS[r]
    except (KeyError, TypeError):
        raise InvalidArgumentError(f"{op}: reduction must be 'none', 'mean' or 'sum', got "
                                   f"{r!r}") from None


def _tensor(x, like=None):
    from ..tensor import Tensor, tensor

    if isinstance(x, Tensor):
        return x
    return tensor(x, dtype=like.dtype if like is not None else None)


# ---- shape --------------------------------------------------------------------------
def pad(input, pad, mode="constant", value=0.0):
    """Constant padding: pad = (left, right) for the last dim, then (top,
    bottom) for the one before, ...; negative amounts crop."""
    if mode != "constant":
        raise NotImplementedError(f"pad: only mode='constant' is supported, got {mode!r}")
    pad = tuple(operator.index(p) for p in pad)
    return _call(lib.AD_OP_PAD, (input,), pad, (float(value),))


# ---- losses ---------------------------------------------------------------------------
def mse_loss(input, target, reduction="mean"):
    """(input - target)^2, averaged, summed or per element."""
    return _call(lib.AD_OP_MSE_LOSS, (input, _tensor(target, input)),
                 (_reduction(reduction, "mse_loss"),))


def _class_loss(op, name, input, target, reduction):
    r = _reduction(reduction, name)
    target = _as_index(target, name)
    if input.ndim == 1:
        if target.ndim != 0:
            raise ShapeError(f"{name}: input of shape {input.shape} takes a 0-d target, got "
                             f"{target.shape}")
        y = _call(op, (input.reshape(1, -1), target.reshape(1)), (r,))
        return y.reshape(()) if r == 0 else y
    if input.ndim > 2:  # (N, C, d1, ...): classes last, positions as rows
        n, c = input.shape[:2]
        rest = input.shape[2:]
        if target.shape != (n,) + rest:
            raise ShapeError(f"{name}: target of shape {target.shape} does not match input "
                             f"{input.shape}")
        perm = (0,) + tuple(range(2, input.ndim)) + (1,)
        y = _call(op, (input.permute(perm).reshape(-1, c), target.reshape(-1)), (r,))
        return y.reshape((n,) + rest) if r == 0 else y
    return _call(op, (input, target), (r,))


def cross_entropy(input, target, reduction="mean"):
    """-log softmax(input)[target] from logits (N, C) (or (C,), or (N, C, d...))
    and integer class targets; fused and numerically stable."""
    return _class_loss(lib.AD_OP_CROSS_ENTROPY, "cross_entropy", input, target, reduction)


def nll_loss(input, target, reduction="mean"):
    """-input[target] for log-probabilities (N, C) and integer class targets."""
    return _class_loss(lib.AD_OP_NLL_LOSS, "nll_loss", input, target, reduction)


# ---- normalization and dropout -----------------------------------------------------------
def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalizes over the trailing dims `normalized_shape` (biased variance),
    then scales by weight and shifts by bias when given."""
    from ..tensor import _shape_arg, ones

    ns = _shape_arg(normalized_shape, "normalized_shape")
    if not ns or input.shape[input.ndim - len(ns):] != ns or len(ns) > input.ndim:
        raise ShapeError(f"layer_norm: normalized_shape {ns} does not match the trailing dims "
                         f"of input shape {input.shape}")
    ins = [input]
    if weight is None and bias is not None:
        weight = ones(ns, dtype=input.dtype)
    if weight is not None:
        ins.append(_tensor(weight, input))
    if bias is not None:
        ins.append(_tensor(bias, input))
    return _call(lib.AD_OP_LAYER_NORM, ins, (len(ns),), (float(eps),))


def dropout(input, p=0.5, training=True, seed=None):
    """Zeroes each element with probability p and scales the rest by 1/(1-p).
    The mask is a function of the seed and the element's position (row-major),
    so the same seed drops the same elements; seed None draws one."""
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise InvalidArgumentError(f"dropout: p must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return input
    if seed is None:  # the default generator, which ad.manual_seed seeds
        from ..tensor import _next_seed
        seed = _next_seed()
    seed = operator.index(seed) & 0xFFFFFFFFFFFFFFFF
    if seed >= 1 << 63:
        seed -= 1 << 64
    return _call(lib.AD_OP_DROPOUT, (input,), (seed,), (p,))


# ---- embedding and linear ---------------------------------------------------------------
def embedding(input, weight):
    """Rows of weight (num, dim) picked by the integer tensor input: shape
    input.shape + (dim,); repeated ids accumulate their gradients."""
    idx = _as_index(input, "embedding")
    if weight.ndim != 2:
        raise ShapeError(f"embedding: weight must be 2-d, got shape {weight.shape}")
    rows = index_select(weight, 0, idx.reshape(-1))
    return rows.reshape(idx.shape + (weight.shape[1],))


def linear(input, weight, bias=None):
    """input @ weight.T + bias (weight (out, in))."""
    y = input @ weight.t()
    return y if bias is None else y + bias


# ---- convolution -------------------------------------------------------------------------
def _batched(x, nd, name):
    """(x with a batch dim, whether one was added) for an op on nd spatial dims."""
    if x.ndim == nd + 1:
        return x.unsqueeze(0), True
    if x.ndim != nd + 2:
        raise ShapeError(f"{name}: input must be {nd + 1}-d or {nd + 2}-d, got shape {x.shape}")
    return x, False


def _same_padding(x, weight, stride, dilation, name):
    if stride != (1, 1):
        raise InvalidArgumentError(f"{name}: padding='same' needs stride 1, got {stride}")
    pads = []
    for k, d in zip(reversed(weight.shape[2:]), reversed(dilation)):
        total = d * (k - 1)
        pads += [total // 2, total - total // 2]
    return pad(x, pads), (0, 0)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-d convolution (cross-correlation, as PyTorch) of input (N, C, H, W) or
    (C, H, W) with weight (O, C/groups, kh, kw); padding may be 'valid' or
    'same' (stride 1)."""
    x, added = _batched(input, 2, "conv2d")
    stride, dilation = _pair(stride, "stride"), _pair(dilation, "dilation")
    if padding == "valid":
        padding = 0
    if padding == "same":
        x, padding = _same_padding(x, weight, stride, dilation, "conv2d")
    padding = _pair(padding, "padding")
    y = _call(lib.AD_OP_CONV2D, (x, weight), stride + padding + dilation + (groups,))
    if bias is not None:
        y = y + _tensor(bias, y).reshape(1, -1, 1, 1)
    return y.squeeze(0) if added else y


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-d convolution of input (N, C, L) or (C, L) with weight (O, C/groups, k),
    as conv2d over a height of 1."""
    x, added = _batched(input, 1, "conv1d")
    one = lambda v: (1, v if isinstance(v, numbers.Integral) else tuple(v)[0])  # noqa: E731
    if padding in ("valid", "same"):
        pad2 = padding
    else:
        pad2 = (0, one(padding)[1])
    y = conv2d(x.unsqueeze(2), weight.unsqueeze(2), None, one(stride), pad2, one(dilation),
               groups).squeeze(2)
    if bias is not None:
        y = y + _tensor(bias, y).reshape(1, -1, 1)
    return y.squeeze(0) if added else y


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """Transposed 2-d convolution (conv2d's input gradient) of input
    (N, Cin, H, W) with weight (Cin, Cout/groups, kh, kw); output_padding must
    be smaller than the stride."""
    x, added = _batched(input, 2, "conv_transpose2d")
    args = (_pair(stride, "stride") + _pair(padding, "padding") + _pair(dilation, "dilation") +
            (groups,) + _pair(output_padding, "output_padding"))
    y = _call(lib.AD_OP_CONV_TRANSPOSE2D, (x, weight), args)
    if bias is not None:
        y = y + _tensor(bias, y).reshape(1, -1, 1, 1)
    return y.squeeze(0) if added else y


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """Transposed 1-d convolution, as conv_transpose2d over a height of 1."""
    x, added = _batched(input, 1, "conv_transpose1d")
    one = lambda v: (1 if v is not output_padding else 0,  # noqa: E731
                     v if isinstance(v, numbers.Integral) else tuple(v)[0])
    y = conv_transpose2d(x.unsqueeze(2), weight.unsqueeze(2), None, one(stride),
                         (0, one(padding)[1]), (0, one(output_padding)[1]), groups,
                         (1, one(dilation)[1])).squeeze(2)
    if bias is not None:
        y = y + _tensor(bias, y).reshape(1, -1, 1)
    return y.squeeze(0) if added else y


# ---- pooling -------------------------------------------------------------------------------
def _pool_args(kernel_size, stride, padding, dilation, ceil_mode, name):
    if ceil_mode:
        raise NotImplementedError(f"{name}: ceil_mode=True is not supported")
    k = _pair(kernel_size, "kernel_size")
    s = k if stride is None or stride == () else _pair(stride, "stride")
    if min(k) < 1 or min(s) < 1:
        raise InvalidArgumentError(f"{name}: kernel_size {k} and stride {s} must be positive")
    return k, s, _pair(padding, "padding"), _pair(dilation, "dilation")


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """Max over windows of input (N, C, H, W) or (C, H, W); padding counts as
    -inf; any kernel, stride (default: the kernel) and overlap.  The gradient
    goes to the first maximum of each window."""
    x, added = _batched(input, 2, "max_pool2d")
    k, s, p, d = _pool_args(kernel_size, stride, padding, dilation, ceil_mode, "max_pool2d")
    y = _call(lib.AD_OP_MAX_POOL2D, (x,), k + s + p + d)
    return y.squeeze(0) if added else y


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """Mean over windows of input (N, C, H, W) or (C, H, W): a depthwise conv2d
    with a constant kernel (padding counts as zeros; count_include_pad=False
    divides by the number of real elements instead)."""
    from ..tensor import full, ones

    x, added = _batched(input, 2, "avg_pool2d")
    k, s, p, _ = _pool_args(kernel_size, stride, padding, 1, ceil_mode, "avg_pool2d")
    if p[0] * 2 > k[0] or p[1] * 2 > k[1] or min(p) < 0:
        raise InvalidArgumentError(f"avg_pool2d: padding {p} must be non-negative and at most "
                                   f"half the kernel {k}")
    c = x.shape[1]
    if divisor_override is not None:
        if not divisor_override:
            raise InvalidArgumentError("avg_pool2d: divisor_override must not be zero")
        scale = 1.0 / float(divisor_override)
    elif count_include_pad:
        scale = 1.0 / (k[0] * k[1])
    else:
        scale = 1.0
    w = full((c, 1) + k if c else (0, 0) + k, scale, dtype=x.dtype)
    y = _call(lib.AD_OP_CONV2D, (x, w), s + p + (1, 1, max(c, 1)))
    if divisor_override is None and not count_include_pad:
        ones_in = ones((1, 1) + x.shape[2:], dtype=x.dtype)
        counts = _call(lib.AD_OP_CONV2D, (ones_in, ones((1, 1) + k, dtype=x.dtype)),
                       s + p + (1, 1, 1))
        y = y / counts
    return y.squeeze(0) if added else y


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """max_pool2d over a height of 1 for input (N, C, L) or (C, L)."""
    first = lambda v: v if isinstance(v, numbers.Integral) else tuple(v)[0]  # noqa: E731
    st = None if stride is None else (1, first(stride))
    return max_pool2d(input.unsqueeze(-2), (1, first(kernel_size)), st, (0, first(padding)),
                      (1, first(dilation)), ceil_mode).squeeze(-2)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True):
    """avg_pool2d over a height of 1 for input (N, C, L) or (C, L)."""
    first = lambda v: v if isinstance(v, numbers.Integral) else tuple(v)[0]  # noqa: E731
    st = None if stride is None else (1, first(stride))
    return avg_pool2d(input.unsqueeze(-2), (1, first(kernel_size)), st, (0, first(padding)),
                      ceil_mode, count_include_pad).squeeze(-2)


del np
