"""Differentiation: the GradStore that backward() returns, ad.grad() for
gradients of chosen inputs (create_graph=True for higher orders), and the
grad-mode switches no_grad / enable_grad / is_grad_enabled.

    grads = loss.backward()          # GradStore: grads[w] is d loss / d w
    (gw,) = ad.grad(loss, [w], create_graph=True)
    with ad.no_grad():               # nothing recorded inside (this thread)
        ...
"""
from __future__ import annotations

import functools as _functools
import numbers
from typing import Any, Callable, List, Optional, Sequence, Tuple, TypeVar, Union, overload
from typing import Literal

from ._lib import ffi, lib, raise_status
from .errors import ArgumentTypeError, GraphError
from .tensor import Tensor, _wrap, tensor

__all__ = ["GradStore", "grad", "no_grad", "enable_grad", "is_grad_enabled"]

_F = TypeVar("_F", bound=Callable[..., Any])
_Switch = TypeVar("_Switch", bound="_ModeSwitch")


class GradStore:
    """Gradients from one backward(), keyed by tensor (by its id: the store
    never keeps a tensor alive).  store[t] raises KeyError, store.get(t) gives None."""

    __slots__ = ("_h",)

    def __init__(self) -> None:
        out = ffi.new("ad_gradstore **")
        st = lib.ad_gradstore_new(out)
        if st:
            raise_status(st)
        self._h = out[0]

    @classmethod
    def _from_handle(cls, h):
        g = object.__new__(cls)
        g._h = h
        return g

    def __del__(self):
        h = getattr(self, "_h", None)
        if h is not None and lib is not None:
            self._h = None
            lib.ad_gradstore_release(h)

    def get(self, t: Tensor, default: Optional[Tensor] = None) -> Optional[Tensor]:
        """The gradient of tensor t, or `default` (None) when the store has
        none.  Raises TypeError when t is not a Tensor."""
        if not isinstance(t, Tensor):
            raise TypeError(f"GradStore keys are tensors, got {type(t).__name__}")
        out = ffi.new("ad_tensor **")
        st = lib.ad_gradstore_get(self._h, t._h, out)
        if st:
            raise_status(st)
        return default if out[0] == ffi.NULL else _wrap(out[0])

    def __getitem__(self, t: Tensor) -> Tensor:
        """store[t]: the gradient of t, of t's shape and dtype.  Raises
        KeyError when t has none (not a Var the root depends on, nor retained
        with backward(retain=[...])); store.get(t) returns None instead."""
        g = self.get(t)
        if g is None:
            raise KeyError(f"no gradient for tensor id {t.id} (shape {t.shape}): it is not a "
                           f"Var the root depends on, nor retained with backward(retain=[...])")
        return g

    def __contains__(self, t: Tensor) -> bool:
        """`t in store`: whether the store holds a gradient for tensor t."""
        return self.get(t) is not None

    def __len__(self) -> int:
        """The number of tensors with a gradient in the store."""
        return lib.ad_gradstore_len(self._h)

    def insert(self, t: Tensor, grad: Any) -> None:
        """Sets t's gradient to `grad` (replacing any): a Tensor of t's shape,
        or anything ad.tensor() accepts, converted to t's dtype.  Also spelled
        store[t] = grad.  Raises ShapeError / DTypeError when grad does not
        match t's shape / dtype."""
        if not isinstance(t, Tensor):
            raise TypeError(f"GradStore keys are tensors, got {type(t).__name__}")
        if not isinstance(grad, Tensor):
            grad = tensor(grad, dtype=t.dtype)
        st = lib.ad_gradstore_insert(self._h, t._h, grad._h)
        if st:
            raise_status(st)

    def __setitem__(self, t: Tensor, grad: Any) -> None:
        """store[t] = grad: the same as store.insert(t, grad)."""
        self.insert(t, grad)

    def remove(self, t: Tensor) -> Optional[Tensor]:
        """Removes and returns t's gradient (None when absent)."""
        if not isinstance(t, Tensor):
            raise TypeError(f"GradStore keys are tensors, got {type(t).__name__}")
        out = ffi.new("ad_tensor **")
        st = lib.ad_gradstore_remove(self._h, t._h, out)
        if st:
            raise_status(st)
        return None if out[0] == ffi.NULL else _wrap(out[0])

    def extend(self, other: GradStore) -> GradStore:
        """Adds other's gradients into this store (summing where both have
        one) and returns this store.  Raises TypeError when other is not a
        GradStore, ShapeError / DTypeError when two gradients of one tensor
        disagree."""
        if not isinstance(other, GradStore):
            raise TypeError("GradStore.extend takes a GradStore")
        st = lib.ad_gradstore_extend(self._h, other._h)
        if st:
            raise_status(st)
        return self

    def ids(self) -> List[int]:
        """The ids of the tensors that have a gradient here (one native call:
        a consistent snapshot even while other threads change the store)."""
        return [i for i, _ in self._snapshot(False)]

    def items(self) -> List[Tuple[int, Tensor]]:
        """(id, gradient) pairs, from one consistent snapshot."""
        return self._snapshot(True)  # type: ignore[return-value]

    def _snapshot(self, with_grads: bool) -> List[Tuple[int, Optional[Tensor]]]:
        ids = ffi.new("uint64_t **")
        grads = ffi.new("ad_tensor ***") if with_grads else ffi.NULL
        n = ffi.new("int64_t *")
        st = lib.ad_gradstore_items(self._h, ids, grads, n)
        if st:
            raise_status(st)
        try:
            idv = ffi.unpack(ids[0], n[0])
            if not with_grads:
                return [(i, None) for i in idv]
            # wrap every reference first: each wrapper then owns (and releases) one
            gs = [_wrap(grads[0][k]) for k in range(n[0])]
            return list(zip(idv, gs))
        finally:
            lib.ad_free(ids[0])
            if with_grads:
                lib.ad_free(grads[0])

    def _item(self, i: int) -> Tuple[int, Tensor]:
        idp = ffi.new("uint64_t *")
        out = ffi.new("ad_tensor **")
        st = lib.ad_gradstore_item(self._h, i, idp, out)
        if st:
            raise_status(st)
        return idp[0], _wrap(out[0])

    def __copy__(self) -> GradStore:
        # a new store holding the same (immutable) gradients
        return GradStore().extend(self)

    def __repr__(self) -> str:
        return f"GradStore({len(self)} gradients)"


class _ModeSwitch:
    """A thread-local native mode as a context manager and a decorator:
    subclasses name the setter (which returns the previous value) and the
    value to set."""

    enabled = True

    @staticmethod
    def _set(on: int) -> int:
        return int(lib.ad_set_grad_enabled(on))

    def __enter__(self: _Switch) -> _Switch:
        """Switches the mode on entry (this thread only) and remembers the
        previous one."""
        self._prev = self._set(1 if self.enabled else 0)
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        """Puts the previous mode back, also when the block raised (the
        exception propagates)."""
        self._set(self._prev)
        return False

    def __call__(self, fn: _F) -> _F:
        """Used as a decorator: fn runs with the mode switched, on every call."""
        @_functools.wraps(fn)
        def wrapper(*a: Any, **k: Any) -> Any:
            with type(self)():
                return fn(*a, **k)

        return wrapper  # type: ignore[return-value]


class no_grad(_ModeSwitch):
    """Nothing is recorded inside, even from Vars (this thread only): results
    are constants and cost no graph memory.  A context manager
    (`with ad.no_grad(): ...`) and a decorator (`@ad.no_grad()`)."""

    enabled = False


class enable_grad(_ModeSwitch):
    """Recording on inside (e.g. within a no_grad block), this thread only.
    A context manager and a decorator, like no_grad."""

    enabled = True


def is_grad_enabled() -> bool:
    """Whether ops record the graph on this thread (False inside no_grad)."""
    return bool(lib.ad_is_grad_enabled())


_Tensors = Union["Tensor", Sequence["Tensor"]]


def _tensor_seq(ts: Any, name: str) -> List[Tensor]:
    """grad's outputs / inputs: one Tensor or a sequence of them."""
    if isinstance(ts, Tensor):
        return [ts]
    try:
        out = list(ts)
    except TypeError:
        raise ArgumentTypeError(f"grad: {name} must be a Tensor or a sequence of Tensors, got "
                                f"a {type(ts).__name__}") from None
    for i, t in enumerate(out):
        if not isinstance(t, Tensor):
            raise ArgumentTypeError(f"grad: {name}[{i}] is a {type(t).__name__}, not a Tensor")
    return out


@overload
def grad(outputs: _Tensors, inputs: _Tensors, grad_outputs: Any = ...,
         create_graph: bool = ..., allow_unused: Literal[False] = ...) -> List[Tensor]: ...


@overload
def grad(outputs: _Tensors, inputs: _Tensors, grad_outputs: Any = ...,
         create_graph: bool = ..., allow_unused: bool = ...) -> List[Optional[Tensor]]: ...


def grad(outputs: Union[Tensor, Sequence[Tensor]], inputs: Union[Tensor, Sequence[Tensor]],
         grad_outputs: Any = None, create_graph: bool = False,
         allow_unused: bool = False) -> Any:
    """Gradients of outputs with respect to inputs: a list with one gradient
    per input, in order, each of that input's shape and dtype (a list also
    for a single input).

    outputs: a Tensor or a sequence of them; their gradients add up.
    inputs: a Tensor or a sequence; Vars or intermediate tensors of the graph.
    grad_outputs: the seed of each output (a Tensor of the output's shape, a
    number, or None); one per output, needed for outputs with more than one
    element.  create_graph=True records the backward pass, so the gradients
    are tracked and can be differentiated again (Hessian-vector products,
    gradient penalties); otherwise they are constants.  An input the outputs
    do not depend on raises ad.GraphError unless allow_unused=True (then its
    entry is None).  Raises ValueError when grad_outputs and outputs differ in
    number, ShapeError when a seed is missing for an output of more than one
    element, ShapeError / DTypeError for a seed that does not match its
    output, GraphError for an output that depends on no Var."""
    outputs = _tensor_seq(outputs, "outputs")
    inputs = _tensor_seq(inputs, "inputs")
    if grad_outputs is None:
        grad_outputs = [None] * len(outputs)
    elif isinstance(grad_outputs, (Tensor, numbers.Number)):
        grad_outputs = [grad_outputs]  # one seed
    try:
        grad_outputs = list(grad_outputs)
    except TypeError:
        raise ArgumentTypeError(f"grad: grad_outputs must be a Tensor, a number or a sequence "
                                f"of them, got {type(grad_outputs).__name__}") from None
    if len(grad_outputs) != len(outputs):
        raise ValueError(f"grad: {len(outputs)} outputs but {len(grad_outputs)} grad_outputs")
    sums: List[Any] = [None] * len(inputs)
    for out, g in zip(outputs, grad_outputs):
        if g is not None and not isinstance(g, Tensor):
            g = tensor(g, dtype=out.dtype)
        s = out.backward(grad=g, retain=inputs, create_graph=create_graph)
        for i, t in enumerate(inputs):
            gi = s.get(t)
            if gi is None:
                continue
            if sums[i] is None:
                sums[i] = gi
            else:
                # recorded under create_graph whatever the caller's mode, as
                # the sums inside one backward are
                with (enable_grad() if create_graph else no_grad()):
                    sums[i] = sums[i] + gi
    for i, (t, g) in enumerate(zip(inputs, sums)):
        if g is None and not allow_unused:
            raise GraphError(f"grad: input {i} (tensor id {t.id}, shape {t.shape}) is not used "
                             f"by the outputs' graph; pass allow_unused=True to get None")
    return sums
