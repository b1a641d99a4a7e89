"""Basic indexing as differentiable views: t[1:, ::2], t[-1], t[..., 0], t[None].

Each slice becomes one native `slice` view (start, step, length from Python's
own slice.indices), and one final reshape drops the dims indexed by an int
and inserts the None dims; both are views, so no data moves."""
import numbers
import operator

from .errors import OutOfRangeError


def _expand_ellipsis(key, ndim):
    n_ell = sum(1 for k in key if k is Ellipsis)
    if n_ell > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(1 for k in key if k is not None and k is not Ellipsis)
    if used > ndim:
        raise OutOfRangeError(f"too many indices: {used} for a tensor of {ndim} dims")
    if n_ell == 0:
        return key + (slice(None),) * (ndim - used)
    i = key.index(Ellipsis)
    return key[:i] + (slice(None),) * (ndim - used) + key[i + 1:]


def getitem(t, key):
    from .tensor import Tensor, _call
    from ._lib import lib

    if not isinstance(key, tuple):
        key = (key,)
    for k in key:
        if isinstance(k, (Tensor, list)) or (hasattr(k, "dtype") and hasattr(k, "shape")):
            raise NotImplementedError("indexing with tensors or lists is not available yet")
    shape = t.shape
    key = _expand_ellipsis(key, len(shape))
    out = t
    final = []
    dim = 0
    for k in key:
        if k is None:
            final.append(1)
            continue
        size = shape[dim]
        if isinstance(k, slice):
            start, stop, step = k.indices(size)
            length = len(range(start, stop, step))
            if (start, step, length) != (0, 1, size):
                out = _call(lib.AD_OP_SLICE, (out,), (dim, start if length else 0, step, length))
            final.append(length)
        elif isinstance(k, numbers.Integral) or hasattr(k, "__index__"):
            i = operator.index(k)
            if not -size <= i < size:
                raise OutOfRangeError(f"index {i} is out of range for dim {dim} of size {size} "
                                      f"(shape {shape})")
            out = _call(lib.AD_OP_SLICE, (out,), (dim, i % size, 1, 1))
        else:
            raise TypeError(f"unsupported index type {type(k).__name__}")
        dim += 1
    final = tuple(final)
    if final != out.shape:
        out = _call(lib.AD_OP_RESHAPE, (out,), final)
    return out
