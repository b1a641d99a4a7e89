"""ad.checkpoint(fn, *args): activation checkpointing.

The graph keeps only fn's inputs (and the Vars fn reads): fn's forward runs
once without keeping its intermediates, and again during backward, with the
default generator put back where it was, so dropout draws the same masks.
The recomputed block is differentiated on its own and its gradients handed to
the outer backward: they are the same numbers as without checkpointing."""
from __future__ import annotations

import importlib as _importlib
import os
from typing import TYPE_CHECKING, Callable

from .errors import ArgumentTypeError
from .function import Function as _Function
from .grad import enable_grad as _enable_grad

if TYPE_CHECKING:
    from .tensor import Tensor

__all__ = ["checkpoint"]

# the module (the package's `tensor` attribute is the ad.tensor function)
_t = _importlib.import_module(".tensor", __package__)


class _NoVarWrites:
    """Var.set raises GraphError on this thread while fn runs."""

    def __init__(self, what):
        self.what = what

    def __enter__(self):
        self.prev = getattr(_t._tls, "no_var_writes", None)
        _t._tls.no_var_writes = self.what

    def __exit__(self, *exc):
        _t._tls.no_var_writes = self.prev


def _gen_state():
    with _t._gen_lock:
        return _t._gen_state


def _set_gen_state(s):
    with _t._gen_lock:
        _t._gen_state = s


def _name(fn):
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def _run(fn, args, seed_state):
    """fn(*args) with the default generator at seed_state (None: as it is)
    and Var writes refused; the generator is left where fn left it."""
    if seed_state is not None:
        _set_gen_state(seed_state)
    with _NoVarWrites(f"the checkpointed function {_name(fn)}"):
        out = fn(*args)
    if not isinstance(out, _t.Tensor):
        raise ArgumentTypeError(f"checkpoint: {_name(fn)} returned a {type(out).__name__}; it "
                                f"must return one Tensor")
    return out


class _Checkpoint(_Function):
    @staticmethod
    def forward(ctx, fn, n_args, *inputs):
        raise AssertionError("unreachable: checkpoint records through _record")

    @staticmethod
    def backward(ctx, grad):
        fn, args, n_args, seed = ctx.fn, ctx.saved_tensors, ctx.n_args, ctx.seed
        now = _gen_state()
        try:
            with _enable_grad():
                # fresh leaves carrying the saved values: the recomputed block
                # is differentiated on its own, its Vars read as they are
                xs = []
                for a, need in zip(args[:n_args], ctx.needs_input_grad[2:2 + n_args]):
                    xs.append(_t.Var.from_tensor(a.detach()) if need else a.detach())
                out = _run(fn, xs, seed if seed is not None else None)
                if not out.track_op:
                    return (None, None) + (None,) * (len(args))
                gs = out.backward(grad)
        finally:
            if seed is not None:
                _set_gen_state(now)
        res = [None, None]
        for i, x in enumerate(xs):
            res.append(gs.get(x) if ctx.needs_input_grad[2 + i] else None)
        for v, need in zip(args[n_args:], ctx.needs_input_grad[2 + n_args:]):
            res.append(gs.get(v) if need else None)
        return tuple(res)


def checkpoint(fn: Callable[..., Tensor], *args: Tensor) -> Tensor:
    """fn(*args) whose intermediates are not kept for backward but recomputed
    there (dropout masks reproduced; gradients bit-identical).

    args are Tensors (close over other values); fn returns one Tensor, of
    whatever shape, and must not write any Var.  The graph keeps only args
    and the Vars fn reads, so memory for fn's activations is traded for a
    second forward pass during backward.  Under no_grad it is just fn(*args).
    Raises ArgumentTypeError when fn is not callable, an argument is not a
    Tensor or fn does not return one; GraphError when fn writes a Var."""
    if not callable(fn):
        raise ArgumentTypeError(f"checkpoint: fn is a {type(fn).__name__}, not callable")
    for i, a in enumerate(args):
        if not isinstance(a, _t.Tensor):
            raise ArgumentTypeError(f"checkpoint: argument {i} of {_name(fn)} is a "
                                    f"{type(a).__name__}; every argument must be a Tensor "
                                    f"(close over other values)")
    if not _t.lib.ad_is_grad_enabled():
        return _run(fn, args, None)
    seed = _gen_state()
    if seed is None:
        # an unseeded generator: seed it for this block so that its draws can
        # be replayed, then leave it unseeded as it was
        seed = int.from_bytes(os.urandom(8), "little")
        _set_gen_state(seed)
        unseeded = True
    else:
        unseeded = False
    try:
        # fn runs on detached inputs with grad on, once: the Vars it reads are
        # found in its graph, which is then dropped (only the output is kept)
        out = _run(fn, [a.detach() for a in args], None)
    finally:
        if unseeded:
            _set_gen_state(None)
    ids = {a.id for a in args}
    vars_ = [n for n in out.sorted_nodes() if n.is_variable and n.id not in ids]
    if not vars_ and not any(a.track_op for a in args):
        return out  # nothing to differentiate: no node
    value = out.detach()
    del out
    return _record(fn, args, vars_, value, seed)


def _record(fn, args, vars_, value, seed):
    """One _Checkpoint node over (args' tensors, the Vars fn read)."""
    n_args = len(args)

    def forward(ctx, _fn, _n, *inputs):
        ctx.fn = fn
        ctx.n_args = n_args
        ctx.seed = seed
        ctx.save_for_backward(*inputs)
        return value

    # apply through a subclass whose forward returns the value computed above
    cls = type(f"checkpoint({_name(fn)})", (_Checkpoint,), {"forward": staticmethod(forward)})
    return cls.apply(fn, n_args, *args, *vars_)
