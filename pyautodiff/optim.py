"""Optimizers.  They take Vars only (a non-leaf cannot be optimized: TypeError,
where PyTorch raises ValueError and candle fails to compile) and update them in
place natively, bumping each Var's version."""
from ._lib import lib, raise_status


def _check_vars(params):
    from .tensor import Var

    params = list(params)
    for i, p in enumerate(params):
        if not isinstance(p, Var):
            raise TypeError(f"optimizers take Vars only: parameter {i} is a "
                            f"{type(p).__name__} (wrap a leaf with ad.Var)")
    return params


class SGD:
    """Plain SGD with optional momentum: w -= lr * (g + momentum buffer)."""

    def __init__(self, params, lr, momentum=0.0, weight_decay=0.0):
        self.params = _check_vars(params)
        if lr <= 0:
            raise ValueError(f"SGD: lr must be positive, got {lr}")
        self.lr, self.momentum, self.weight_decay = float(lr), float(momentum), float(weight_decay)
        self._buf = {}

    def step(self, grads):
        """Applies one update from a GradStore; Vars without a gradient are skipped."""
        from .grad import no_grad

        with no_grad():
            for p in self.params:
                g = grads.get(p)
                if g is None:
                    continue
                if self.weight_decay:
                    g = g + p.detach() * self.weight_decay
                if self.momentum:
                    b = self._buf.get(id(p))
                    b = g if b is None else b * self.momentum + g
                    self._buf[id(p)] = b
                    g = b
                st = lib.ad_var_axpy(p._h, -self.lr, g._h)
                if st:
                    raise_status(st)
