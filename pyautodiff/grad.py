"""GradStore, grad modes."""
import functools

from ._lib import ffi, lib, raise_status


class GradStore:
    """Gradients from one backward(), keyed by tensor (by its id: the store
    never keeps a tensor alive).  store[t] raises KeyError, store.get(t) gives None."""

    __slots__ = ("_h",)

    def __init__(self):
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

    def get(self, t, default=None):
        from .tensor import Tensor, _wrap

        if not isinstance(t, Tensor):
            raise TypeError(f"GradStore keys are tensors, got {type(t).__name__}")
        out = ffi.new("ad_tensor **")
        st = lib.ad_gradstore_get(self._h, t._h, out)
        if st:
            raise_status(st)
        return default if out[0] == ffi.NULL else _wrap(out[0])

    def __getitem__(self, t):
        g = self.get(t)
        if g is None:
            raise KeyError(f"no gradient for tensor id {t.id} (shape {t.shape}): it is not a "
                           f"Var the root depends on, nor retained with backward(retain=[...])")
        return g

    def __contains__(self, t):
        return self.get(t) is not None

    def __len__(self):
        return lib.ad_gradstore_len(self._h)

    def insert(self, t, grad):
        from .tensor import Tensor, tensor

        if not isinstance(grad, Tensor):
            grad = tensor(grad, dtype=t.dtype)
        st = lib.ad_gradstore_insert(self._h, t._h, grad._h)
        if st:
            raise_status(st)

    __setitem__ = insert

    def remove(self, t):
        """Removes and returns t's gradient (None when absent)."""
        from .tensor import _wrap

        out = ffi.new("ad_tensor **")
        st = lib.ad_gradstore_remove(self._h, t._h, out)
        if st:
            raise_status(st)
        return None if out[0] == ffi.NULL else _wrap(out[0])

    def extend(self, other):
        """Adds other's gradients into this store (summing where both have one)."""
        if not isinstance(other, GradStore):
            raise TypeError("GradStore.extend takes a GradStore")
        st = lib.ad_gradstore_extend(self._h, other._h)
        if st:
            raise_status(st)
        return self

    def ids(self):
        """The ids of the tensors that have a gradient here (one native call:
        a consistent snapshot even while other threads change the store)."""
        return [i for i, _ in self._snapshot(False)]

    def items(self):
        """(id, gradient) pairs, from one consistent snapshot."""
        return self._snapshot(True)

    def _snapshot(self, with_grads):
        from .tensor import _wrap

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

    def _item(self, i):
        from .tensor import _wrap

        idp = ffi.new("uint64_t *")
        out = ffi.new("ad_tensor **")
        st = lib.ad_gradstore_item(self._h, i, idp, out)
        if st:
            raise_status(st)
        return idp[0], _wrap(out[0])

    def __copy__(self):
        # a new store holding the same (immutable) gradients
        return GradStore().extend(self)

    def __repr__(self):
        return f"GradStore({len(self)} gradients)"


class _ModeSwitch:
    """A thread-local native mode as a context manager and a decorator:
    subclasses name the setter (which returns the previous value) and the
    value to set."""

    enabled = True

    @staticmethod
    def _set(on):
        return lib.ad_set_grad_enabled(on)

    def __enter__(self):
        self._prev = self._set(1 if self.enabled else 0)
        return self

    def __exit__(self, *exc):
        self._set(self._prev)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            with type(self)():
                return fn(*a, **k)

        return wrapper


class no_grad(_ModeSwitch):
    """Nothing is recorded inside, even from Vars (this thread only)."""

    enabled = False


class enable_grad(_ModeSwitch):
    """Recording on inside (e.g. within a no_grad block)."""

    enabled = True


def is_grad_enabled():
    return bool(lib.ad_is_grad_enabled())


def grad(outputs, inputs, grad_outputs=None, create_graph=False, allow_unused=False):
    """Gradients of outputs with respect to inputs, one per input, in order.

    inputs may be Vars or intermediate tensors of the graph.  An input the
    outputs do not depend on raises ad.GraphError unless allow_unused=True
    (then its entry is None).  grad_outputs seeds each output (needed for
    outputs with more than one element).  create_graph=True records the
    backward pass, so the gradients are tracked and can be differentiated
    again (Hessian-vector products, gradient penalties)."""
    from .errors import GraphError
    from .tensor import Tensor, tensor

    single_out = isinstance(outputs, Tensor)
    outputs = [outputs] if single_out else list(outputs)
    single_in = isinstance(inputs, Tensor)
    inputs = [inputs] if single_in else list(inputs)
    if grad_outputs is None:
        grad_outputs = [None] * len(outputs)
    elif isinstance(grad_outputs, Tensor):
        grad_outputs = [grad_outputs]
    grad_outputs = list(grad_outputs)
    if len(grad_outputs) != len(outputs):
        raise ValueError(f"grad: {len(outputs)} outputs but {len(grad_outputs)} grad_outputs")
    sums = [None] * len(inputs)
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
