"""Activation checkpointing, two ways.

ad.checkpoint(fn, *args): the graph keeps only fn's inputs (and the Vars fn
reads): fn's forward runs once without keeping its intermediates, and again
during backward, with the default generator put back where it was, so dropout
draws the same masks.  The recomputed block is differentiated on its own and
its gradients handed to the outer backward: they are the same numbers as
without checkpointing.

with ad.checkpointing("balanced"): per op rather than per block, natively
(burn's balanced checkpointer): memory-bound ops keep no output, backward
recomputes it from their inputs; compute-bound ops keep theirs (see
checkpointing)."""
from __future__ import annotations

import functools
import importlib as _importlib
import os
import threading as _threading
from typing import TYPE_CHECKING, Callable

from ._lib import ffi as _ffi, lib as _lib, raise_status as _raise_status
from .errors import ArgumentTypeError, GraphError, InvalidArgumentError
from .function import Function as _Function
from .grad import enable_grad as _enable_grad

if TYPE_CHECKING:
    from .tensor import Tensor

__all__ = ["checkpoint", "checkpointing", "get_checkpointing"]

# the native strategy numbers (pyautodiff.h, AD_CHECKPOINT_*)
_STRATEGIES = {"none": 0, "balanced": 1}
_NAMES = {v: k for k, v in _STRATEGIES.items()}

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


# a node takes at most this many tensors (the native AD_MAX_INPUTS)
_MAX_INPUTS = 8


class _Checkpoint(_Function):
    @staticmethod
    def forward(ctx, fn, n_args, *inputs):
        raise AssertionError("unreachable: checkpoint records through _record")

    @staticmethod
    def backward(ctx, grad):
        fn, n_args, seed = ctx.fn, ctx.n_args, ctx.seed
        saved = ctx.saved_tensors
        needs = ctx.needs_input_grad[2:]
        if _lib.ad_is_grad_enabled():  # only a create_graph backward records in here
            raise GraphError(f"backward(create_graph=True): the backward of {ctx._cls.__name__} "
                             f"is not differentiable (ad.checkpoint differentiates its "
                             f"recomputed block on its own); use ad.checkpointing(\"balanced\") "
                             f"for higher-order gradients")
        now = _gen_state()
        try:
            with _enable_grad():
                # fresh leaves carrying the saved values: the recomputed block
                # is differentiated on its own, its Vars read as they are
                xs = []
                for a, need in zip(saved[:n_args], needs[:n_args]):
                    xs.append(_t.Var.from_tensor(a.detach()) if need else a.detach())
                # the strategy fn's ops were under at the call, wherever
                # backward runs (checkpointing inside ad.checkpoint nests)
                with checkpointing(ctx.strategy):
                    out = _run(fn, xs, seed if seed is not None else None)
                if not out.track_op:
                    return (None, None) + (None,) * len(saved)
                gs = out.backward(grad)
        finally:
            if seed is not None:
                _set_gen_state(now)
        res = [None, None]
        for x, need in zip(xs, needs):
            res.append(gs.get(x) if need else None)
        # the Vars fn read: those that are inputs of this node get their
        # gradients here, the others through the bundles (_carry)
        ctx.bundles.tls.grads = {v.id: gs.get(v) for v in ctx.vars}
        for c, need in zip(saved[n_args:], needs[n_args:]):
            res.append(None if not need else ctx.bundles.take(c))
        return tuple(res)


class _Bundles:
    """The Vars of one checkpointed block beyond what its node can take as
    inputs: groups of them are the inputs of bundle nodes (_Bundle), whose
    0-d outputs the block's node takes instead.  The block's backward leaves
    every Var's gradient here (per thread: several threads may run one
    graph's backward at once) and each bundle's backward hands its own out."""

    def __init__(self):
        self.tls = _threading.local()
        self.ids = set()  # the bundle outputs' ids

    def take(self, t):
        """t's gradient: a Var's own, or a zero for a bundle's output."""
        if t.id in self.ids:
            return _t.zeros((), dtype=t.dtype)
        return self.tls.grads.pop(t.id, None)


class _Bundle(_Function):
    @staticmethod
    def forward(ctx, bundles, *inputs):
        # the output's value is never read: a 0-d zero of a float dtype the
        # inputs have (their gradients keep their own dtypes)
        ctx.bundles = bundles
        ctx.save_for_backward(*inputs)
        return _t.zeros((), dtype=inputs[0].dtype)

    @staticmethod
    def backward(ctx, grad):
        return (None,) + tuple(ctx.bundles.take(t) for t in ctx.saved_tensors)


# the bundles' op name in sorted_nodes and to_dot
_BundleNode = type("checkpoint_vars", (_Bundle,), {})


def _carry(ts, room, bundles, windows):
    """At most room (>= 1) tensors standing for ts: ts themselves when they
    fit, else groups of at most _MAX_INPUTS of them behind bundle nodes, as
    many levels as needed.  windows: each tensor's (seq, version) pair as
    fn read it, by id; a bundle's output (never written) adds its own."""
    while len(ts) > room:
        nxt = []
        for k in range(0, len(ts), _MAX_INPUTS):
            g = ts[k:k + _MAX_INPUTS]
            if len(g) == 1:
                nxt.append(g[0])
                continue
            b = _BundleNode._apply((bundles, *g), [windows[t.id] for t in g])
            bundles.ids.add(b.id)
            windows[b.id] = _window([b._h])[0]
            nxt.append(b)
        ts = nxt
    return ts


def checkpoint(fn: Callable[..., Tensor], *args: Tensor) -> Tensor:
    """fn(*args) whose intermediates are not kept for backward but recomputed
    there (dropout masks reproduced; gradients bit-identical, but for a Var
    fn reads that is also read outside fn, such as a weight shared across
    blocks: the block's part of its gradient is summed on its own first, so
    the same sum is grouped differently and can differ in the last bit).

    args are Tensors (close over other values); fn returns one Tensor, of
    whatever shape, and must not write any Var.  The graph keeps only args
    and the Vars fn reads, so memory for fn's activations is traded for a
    second forward pass during backward.  Under no_grad it is just fn(*args).
    Raises ArgumentTypeError when fn is not callable, an argument is not a
    Tensor or fn does not return one; GraphError when fn writes a Var (Var.set,
    an optimizer step), and in a backward(create_graph=True) through it (the
    recomputed block is differentiated on its own: first order only;
    checkpointing("balanced") records higher orders)."""
    if not callable(fn):
        raise ArgumentTypeError(f"checkpoint: fn is a {type(fn).__name__}, not callable")
    for i, a in enumerate(args):
        if not isinstance(a, _t.Tensor):
            raise ArgumentTypeError(f"checkpoint: argument {i} of {_name(fn)} is a "
                                    f"{type(a).__name__}; every argument must be a Tensor "
                                    f"(close over other values)")
    if not _t.lib.ad_is_grad_enabled():
        return _run(fn, args, None)
    strategy = get_checkpointing()
    seed = _gen_state()
    if seed is None:
        # an unseeded generator: seed it for this block so that its draws can
        # be replayed, then leave it unseeded as it was
        seed = int.from_bytes(os.urandom(8), "little")
        _set_gen_state(seed)
        unseeded = True
    else:
        unseeded = False
    # the in-place write state of the arguments before fn reads them, and of
    # the Vars fn reads as its ops read them (below): the node is checked
    # against these, not against the state after fn (_record's apply), so
    # that a Var another thread writes meanwhile makes backward raise instead
    # of recomputing fn on a value the forward never saw
    args_window = _window([a._h for a in args])
    try:
        # fn runs on detached inputs with grad on, once: the Vars it reads are
        # found in its graph, which is then dropped (only the output is kept)
        # this graph only names the Vars fn reads, then is dropped: nothing
        # in it is checkpointed (sorted_nodes would recompute it)
        with checkpointing("none"):
            out = _run(fn, [a.detach() for a in args], None)
    finally:
        if unseeded:
            _set_gen_state(None)
    ids = {a.id for a in args}
    vars_ = [n for n in out.sorted_nodes() if n.is_variable and n.id not in ids]
    if not vars_ and not any(a.track_op for a in args):
        return out  # nothing to differentiate: no node
    windows = dict(zip([a.id for a in args], args_window))
    for k in range(0, len(vars_), _MAX_INPUTS):
        group = vars_[k:k + _MAX_INPUTS]
        w = _ffi.new("uint64_t[]", 2 * len(group))
        st = _lib.ad_graph_read_window(out._h, [v._h for v in group], len(group), w)
        if st:
            _raise_status(st)
        windows.update((v.id, (w[2 * j], w[2 * j + 1])) for j, v in enumerate(group))
    value = out.detach()
    del out
    return _record(fn, args, vars_, value, seed, strategy, windows)


def _window(handles):
    """ad_read_window_take's (seq, version) pair for each handle, in order."""
    pairs = []
    for k in range(0, len(handles), _MAX_INPUTS):
        group = handles[k:k + _MAX_INPUTS]
        w = _ffi.new("uint64_t[]", 2 * max(len(group), 1))
        st = _lib.ad_read_window_take(group, len(group), w)
        if st:
            _raise_status(st)
        pairs += [(w[2 * j], w[2 * j + 1]) for j in range(len(group))]
    return pairs


def _record(fn, args, vars_, value, seed, strategy, windows):
    """One _Checkpoint node over (args' tensors, the Vars fn read, or the
    bundles that carry those beyond the node's inputs)."""
    n_args = len(args)
    if n_args > _MAX_INPUTS - (1 if vars_ else 0):
        raise InvalidArgumentError(f"checkpoint: {_name(fn)} takes {n_args} tensor arguments; "
                                   f"at most {_MAX_INPUTS - (1 if vars_ else 0)} (close over "
                                   f"the others)")
    bundles = _Bundles()
    carriers = _carry(vars_, _MAX_INPUTS - n_args, bundles, windows)

    def forward(ctx, _fn, _n, *inputs):
        ctx.fn = fn
        ctx.n_args = n_args
        ctx.seed = seed
        ctx.strategy = strategy
        ctx.vars = vars_
        ctx.bundles = bundles
        ctx.save_for_backward(*inputs)
        return value

    # apply through a subclass whose forward returns the value computed above
    cls = type(f"checkpoint({_name(fn)})", (_Checkpoint,), {"forward": staticmethod(forward)})
    ins = (*args, *carriers)
    return cls._apply((fn, n_args) + ins, [windows[t.id] for t in ins])


class checkpointing:
    """`with ad.checkpointing("balanced"):` records memory-bound ops (the
    registry's elementwise ops, views, copies and reductions, and the SIMD
    activations such as GELU on float32) without keeping their outputs for
    backward: the graph keeps their inputs instead, and backward recomputes
    an output when a formula reads it, from the op's inputs (recursively,
    once per backward pass).  Compute-bound ops (matmul, convolution, the
    softmax family, libm-heavy elementwise ops) keep theirs, as in burn's
    balanced checkpointer.  Gradients are bit-identical to "none".

    Strategies: "none" (the default: keep what backward reads) and
    "balanced".  The strategy belongs to the thread that enters the block
    and applies to the ops recorded while it is on, wherever backward runs;
    blocks nest (the innermost wins).  A Var written in place after the
    forward raises GraphError in backward as without checkpointing, also when
    the value it would have fed is one being recomputed.  Also a decorator.
    Raises InvalidArgumentError for an unknown strategy."""

    def __init__(self, strategy: str = "balanced") -> None:
        if not isinstance(strategy, str) or strategy not in _STRATEGIES:
            raise InvalidArgumentError(
                f"checkpointing: unknown strategy {strategy!r}; known: "
                f"{', '.join(repr(k) for k in _STRATEGIES)}")
        self.strategy = strategy

    def __enter__(self) -> "checkpointing":
        """Switches this thread to the strategy and remembers the previous one."""
        prev = _ffi.new("int *")
        st = _lib.ad_set_checkpoint_strategy(_STRATEGIES[self.strategy], prev)
        if st:
            _raise_status(st)
        self._prev = prev[0]
        return self

    def __exit__(self, *exc: object) -> bool:
        """Puts the previous strategy back, also when the block raised."""
        _lib.ad_set_checkpoint_strategy(self._prev, _ffi.NULL)
        return False

    def __call__(self, fn: Callable) -> Callable:
        """Used as a decorator: fn runs under the strategy, on every call."""
        strategy = self.strategy

        @functools.wraps(fn)
        def wrapper(*a, **k):
            with checkpointing(strategy):
                return fn(*a, **k)

        return wrapper


def get_checkpointing() -> str:
    """The checkpointing strategy of this thread ("none" or "balanced")."""
    return _NAMES[int(_lib.ad_get_checkpoint_strategy())]
