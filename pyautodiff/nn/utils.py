"""Training utilities (PyTorch's torch.nn.utils) working on a GradStore."""
from __future__ import annotations

import math as _math
import numbers as _numbers
from typing import TYPE_CHECKING as _TYPE_CHECKING, Iterable as _Iterable, Optional as _Optional

from ..errors import InvalidArgumentError

if _TYPE_CHECKING:
    from ..grad import GradStore
    from ..tensor import Tensor, Var


def _real(v, fn, name):
    """A float argument (float() alone would parse "1.0" and name nothing)."""
    if isinstance(v, bool) or not isinstance(v, _numbers.Real):
        raise InvalidArgumentError(f"{fn}: {name} must be a real number, got {v!r}")
    return float(v)


def _entries(grads, parameters, fn):
    """(tensor id, gradient) for the entries to clip: those of `parameters`
    when given, else every entry of the store (the tensors themselves need
    not be alive: the store keys by id)."""
    from ..grad import GradStore
    from ..tensor import Tensor

    if not isinstance(grads, GradStore):
        raise TypeError(f"{fn}: takes the GradStore returned by backward(), got "
                        f"{type(grads).__name__}")
    if parameters is not None:
        if isinstance(parameters, Tensor):
            parameters = [parameters]
        out, seen = [], set()
        for p in parameters:
            if not isinstance(p, Tensor):
                raise TypeError(f"{fn}: parameters must be tensors, got {type(p).__name__}")
            g = grads.get(p)
            if g is not None and p.id not in seen:
                seen.add(p.id)
                out.append((p.id, g))
        return out
    return [grads._item(i) for i in range(len(grads))]


def _replace(grads, scaled):
    """Writes each (tensor id, new gradient) of `scaled` into the store."""
    from .._lib import lib, raise_status

    for tid, g in scaled:
        st = lib.ad_gradstore_replace_id(grads._h, tid, g._h)
        if st:
            raise_status(st)


def _total_norm(gs, norm_type, fn):
    from .. import dtypes as _dt
    from ..indexing import stack
    from ..tensor import tensor

    if norm_type == _math.inf:
        norms = [g.abs().max() for g in gs]
    elif norm_type == 2.0:
        norms = [g.sqr().sum().sqrt() for g in gs]
    elif norm_type > 0:
        norms = [(g.abs() ** norm_type).sum() ** (1.0 / norm_type) for g in gs]
    else:
        raise InvalidArgumentError(f"{fn}: norm_type must be positive or inf, got {norm_type}")
    norms = [n for n, g in zip(norms, gs) if g.numel()] or [tensor(0.0)]
    dt = norms[0].dtype
    for n in norms:
        if n.dtype is _dt.float64:
            dt = _dt.float64
    vec = stack([n.to_dtype(dt) for n in norms])
    if norm_type == _math.inf:
        return vec.max()
    if norm_type == 2.0:
        return vec.sqr().sum().sqrt()
    return (vec ** norm_type).sum() ** (1.0 / norm_type)


def clip_grad_norm_(grads: GradStore, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False, *,
                    parameters: _Optional[_Iterable[Var]] = None) -> Tensor:
    """Scales every gradient in the GradStore (or those of `parameters`) in
    place, whether or not the tensors belong to a Module, so that their joint norm is at most max_norm; returns the
    norm before clipping as a 0-d tensor.  As PyTorch: the scale is
    max_norm / (norm + 1e-6), capped at 1; norm_type may be float('inf')."""
    from ..grad import no_grad

    fn = "clip_grad_norm_"
    norm_type = _real(norm_type, fn, "norm_type")
    max_norm = _real(max_norm, fn, "max_norm")
    entries = _entries(grads, parameters, fn)
    with no_grad():
        if not entries:
            from ..tensor import tensor

            return tensor(0.0)
        total = _total_norm([g for _, g in entries], norm_type, fn)
        t = float(total)
        if error_if_nonfinite and not _math.isfinite(t):
            raise InvalidArgumentError(f"{fn}: the total norm of order {norm_type} of the "
                                       f"gradients is non-finite ({t}), so they cannot be "
                                       f"clipped; pass error_if_nonfinite=False to scale anyway")
        coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
        _replace(grads, [(tid, g * coef.to_dtype(g.dtype)) for tid, g in entries])
    return total


def clip_grad_value_(grads: GradStore, clip_value: float, *,
                     parameters: _Optional[_Iterable[Var]] = None) -> None:
    """Clamps every gradient in the GradStore to [-clip_value, clip_value] in place."""
    from ..grad import no_grad

    clip_value = _real(clip_value, "clip_grad_value_", "clip_value")
    entries = _entries(grads, parameters, "clip_grad_value_")
    with no_grad():
        _replace(grads, [(tid, g.clamp(-clip_value, clip_value)) for tid, g in entries])


__all__ = ["clip_grad_norm_", "clip_grad_value_"]
