"""ad.Function: custom ops written in Python.

    class Exp(ad.Function):
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, gy):
            (y,) = ctx.saved_tensors
            return gy * y

    z = Exp.apply(x)

apply() runs forward under no_grad and records ONE native node (op
AD_OP_CUSTOM, named after the class) whose backward calls back into Python
through a cffi `extern "Python"` callback; the node holds the ctx through a
cffi handle and releases it (and the saved tensors) when the graph is freed.
An exception raised in backward leaves loss.backward() as itself, its message
prefixed with "<Class>.backward: "."""
from __future__ import annotations

import atexit as _atexit
import threading as _threading
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Set, Tuple

from ._lib import ffi, lib, pending, raise_status
from .errors import ArgumentTypeError, DTypeError, GraphError, InvalidArgumentError, ShapeError
from .grad import no_grad as _no_grad
from .tensor import Tensor, _NULL, _wrap

__all__ = ["Function", "FunctionCtx"]

# ctx handles owned by live nodes, keyed by the handle's address: cffi's
# handle must stay alive while the node may call back with it
_live: Dict[int, Any] = {}
_live_lock = _threading.Lock()

# the tracked output of each node whose backward runs on this thread, keyed by
# id(ctx): per thread, since several threads may run one node's backward at once
_running = _threading.local()


def _tracked_outs() -> Dict[int, Tensor]:
    outs = getattr(_running, "outs", None)
    if outs is None:
        outs = _running.outs = {}
    return outs


class FunctionCtx:
    """What forward hands to backward: save_for_backward(*tensors),
    saved_tensors, needs_input_grad (one bool per argument of apply).
    forward and backward may also set and read attributes of their own on it
    (ctx.scale = 2.0).  Function.apply creates it; users do not."""

    needs_input_grad: Tuple[bool, ...]
    # set by apply when it records a node, read by the backward callback
    _args: List[Tuple[int, Tuple[int, ...], Any]]
    _out_index: Set[int]
    _n_args: int

    def __init__(self, cls: type, needs_input_grad: Tuple[bool, ...]) -> None:
        self._cls = cls
        self._saved: Tuple[Optional[Tensor], ...] = ()
        self._released = False
        self.needs_input_grad = needs_input_grad

    if TYPE_CHECKING:
        # forward's own attributes (ctx.scale) are Any to a type checker, as
        # in PyTorch; at run time a missing one raises AttributeError as usual
        def __getattr__(self, name: str) -> Any: ...

    def save_for_backward(self, *tensors: Optional[Tensor]) -> None:
        """Keeps tensors (or None) for backward, which reads them back from
        ctx.saved_tensors in the same order.  Call it from forward; saving
        forward's result is allowed.  Raises ArgumentTypeError for anything
        else than a Tensor or None."""
        for i, t in enumerate(tensors):
            if t is not None and not isinstance(t, Tensor):
                raise ArgumentTypeError(f"{self._cls.__name__}: save_for_backward argument {i} "
                                        f"is a {type(t).__name__}, not a Tensor or None")
        self._saved = tensors

    @property
    def saved_tensors(self) -> Tuple[Any, ...]:
        """The tuple given to save_for_backward (Tensors, or None where None
        was saved).  Raises GraphError once the graph has been freed."""
        if self._released:
            raise GraphError(f"{self._cls.__name__}: saved_tensors used after the graph was "
                             f"freed")
        out = _tracked_outs().get(id(self))
        if out is None:
            return self._saved
        # during backward the forward's result reads as the node's own tracked
        # output (same values), so that a recorded backward (create_graph)
        # differentiates through it as through the inputs
        return tuple(out if k in self._out_index else t for k, t in enumerate(self._saved))


class Function:
    """A custom differentiable op written in Python.

    Subclass with static forward(ctx, *args) and backward(ctx, *grads); call
    MyOp.apply(*args).  forward returns one Tensor; backward returns one
    gradient (or None) per argument of apply, each of that argument's shape
    and dtype (a tuple or list when apply takes several arguments).  At most 8 of
    apply's arguments may be tensors; the others are passed through.  Errors
    raised in backward reach loss.backward() as themselves, their message
    prefixed with "<Class>.backward: "."""

    @staticmethod
    def forward(ctx: FunctionCtx, *args: Any) -> Tensor:
        """Computes the op's result from apply's arguments (run under
        no_grad: nothing inside is recorded).  Subclasses must define it."""
        raise NotImplementedError("ad.Function subclasses define a static forward(ctx, *args)")

    @staticmethod
    def backward(ctx: FunctionCtx, *grads: Tensor) -> Any:
        """Gets the gradient of the result (of its shape and dtype) and
        returns the gradient of each argument of apply, or None for one
        without a gradient.  Subclasses must define it."""
        raise NotImplementedError("ad.Function subclasses define a static backward(ctx, *grads)")

    @classmethod
    def apply(cls, *args: Any) -> Tensor:
        """Runs forward(ctx, *args) under no_grad and, when a floating-point
        tensor argument is tracked and grad mode is on, records one graph node
        whose backward calls cls.backward.  Returns forward's Tensor.  Raises
        InvalidArgumentError for more than 8 tensor arguments,
        ArgumentTypeError when forward does not return one Tensor."""
        return cls._apply(args)

    @classmethod
    def _apply(cls, args, window=None):
        """apply(*args); window: the (seq, version) pairs of the tensor
        arguments from before forward read them (ad_read_window_take's, for a
        caller that ran the computation before apply: checkpoint), else taken
        here, before forward runs."""
        name = cls.__name__
        pos = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        if len(pos) > 8:
            raise InvalidArgumentError(f"{name}.apply: at most 8 tensor arguments, got "
                                       f"{len(pos)}")
        grad_on = lib.ad_is_grad_enabled()
        needs = tuple(bool(grad_on and isinstance(a, Tensor) and a.track_op
                           and a.dtype.is_floating_point) for a in args)
        ctx = FunctionCtx(cls, needs)
        # the in-place write state of the inputs before forward reads them: a
        # node whose forward read a Var mid-write (another thread's Var.set)
        # then refuses backward, as a built-in op's does
        win = ffi.new("uint64_t[]", 2 * max(len(pos), 1))
        if window is not None:
            for k, (q, v) in enumerate(window):
                win[2 * k], win[2 * k + 1] = q, v
        elif any(needs):
            st = lib.ad_read_window_take([args[i]._h for i in pos], len(pos), win)
            if st:
                raise_status(st)
        with _no_grad():
            out = cls.forward(ctx, *args)
        if not isinstance(out, Tensor):
            raise ArgumentTypeError(f"{name}.forward returned a {type(out).__name__}; it must "
                                    f"return one Tensor")
        if not any(needs):
            return out
        ctx._args = [(i, args[i].shape, args[i].dtype) for i in pos]
        ctx._out_index = {k for k, s in enumerate(ctx._saved) if s is out}
        ctx._n_args = len(args)
        saved = [t for t in ctx._saved if t is not None]
        handle = ffi.new_handle(ctx)
        res = ffi.new("ad_tensor **")
        st = lib.ad_custom_record_window(name.encode("utf-8", "replace"),
                                         [args[i]._h for i in pos], len(pos), out._h,
                                         [t._h for t in saved] or _NULL, len(saved),
                                         lib._ad_custom_backward, lib._ad_custom_release_guarded,
                                         handle, win, res)
        if st:
            raise_status(st)
        if lib.ad_tensor_op(res[0]) == lib.AD_OP_CUSTOM:
            with _live_lock:
                _live[int(ffi.cast("uintptr_t", handle))] = handle
        return _wrap(res[0])


def _check_grads(ctx, res):
    """The gradients backward returned, one per tensor input (None: none), or
    an error naming the Function and the input."""
    name = ctx._cls.__name__
    if isinstance(res, list):
        res = tuple(res)
    elif not isinstance(res, tuple):
        res = (res,)
    if len(res) != ctx._n_args:
        raise InvalidArgumentError(f"{name}.backward: returned {len(res)} gradient"
                                   f"{'s' if len(res) != 1 else ''}; apply took {ctx._n_args} "
                                   f"argument{'s' if ctx._n_args != 1 else ''} (return None for "
                                   f"one without a gradient)")
    out = []
    for i, shape, dtype in ctx._args:
        g = res[i]
        if g is None or not ctx.needs_input_grad[i]:
            out.append(None)
            continue
        if not isinstance(g, Tensor):
            raise ArgumentTypeError(f"{name}.backward: the gradient for input {i} is a "
                                    f"{type(g).__name__}, not a Tensor")
        if g.shape != shape:
            raise ShapeError(f"{name}.backward: the gradient for input {i} has shape {g.shape}, "
                             f"the input has shape {shape} ({dtype})")
        if g.dtype != dtype:
            raise DTypeError(f"{name}.backward: the gradient for input {i} is {g.dtype}, the "
                             f"input is {dtype} (shape {shape})")
        out.append(g)
    return out


_STATUS = {ShapeError: "AD_ERR_SHAPE", DTypeError: "AD_ERR_DTYPE", GraphError: "AD_ERR_GRAPH"}


@ffi.def_extern()
def _ad_custom_backward(ctxp, grad, out, grads, n):
    ctx = None
    try:
        ctx = ffi.from_handle(ctxp)
        lib.ad_tensor_retain(grad)  # the wrappers own references of their own
        lib.ad_tensor_retain(out)
        outs = _tracked_outs()
        prev = outs.get(id(ctx))  # the same node's backward nested in its own (rare)
        outs[id(ctx)] = _wrap(out)
        try:
            res = ctx._cls.backward(ctx, _wrap(grad))
        finally:
            if prev is None:
                del outs[id(ctx)]
            else:
                outs[id(ctx)] = prev
        gs = _check_grads(ctx, res)
        for i, g in enumerate(gs):
            if g is not None:
                lib.ad_tensor_retain(g._h)
                grads[i] = g._h
        return lib.AD_OK
    except BaseException as e:  # noqa: B036 - handed to the thread that called backward
        name = ctx._cls.__name__ if ctx is not None else "Function"
        prefix = f"{name}.backward: "
        if e.args and isinstance(e.args[0], str):
            if not e.args[0].startswith(prefix):
                e.args = (prefix + e.args[0],) + e.args[1:]
        else:
            e.args = (prefix.rstrip(": "),) + e.args
        pending.exc = e
        return getattr(lib, _STATUS.get(type(e), "AD_ERR_VALUE"))


@ffi.def_extern()
def _ad_custom_release(ctxp):
    try:
        with _live_lock:
            handle = _live.pop(int(ffi.cast("uintptr_t", ctxp)), None)
        if handle is not None:
            ctx = ffi.from_handle(handle)
            ctx._saved = ()
            ctx._released = True
    except Exception:  # pragma: no cover - only at interpreter shutdown
        pass


# Graphs still alive at interpreter exit release their nodes after cffi has
# gone: from here on the native release skips the Python callback.
_atexit.register(lib._ad_custom_shutdown)
