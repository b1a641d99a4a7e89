"""SGD with momentum, dampening, Nesterov and L2 weight decay (torch.optim.SGD)."""
from __future__ import annotations

from typing import Any, Iterable

from .._lib import ffi, lib
from .optimizer import Optimizer, _as_float, _check


class SGD(Optimizer):
    """torch.optim.SGD's update, fused into one native call per parameter:

        g = grad + weight_decay * w
        buf = g                                   (first step)
        buf = momentum * buf + (1 - dampening) * g (later steps)
        g = g + momentum * buf if nesterov else buf   (when momentum != 0)
        w = w - lr * g

    Args:
        params: an iterable of Vars (model.parameters()), or of dicts
            {"params": [...], "lr": ...} that override the defaults per group.
        lr, momentum, dampening, weight_decay, nesterov: as in the formulas.
        maximize: True climbs the gradient (grad read as -grad, as torch's).

    Raises TypeError for a non-Var parameter, InvalidArgumentError for a
    negative hyper-parameter, or nesterov without momentum > 0 and dampening 0.
    """

    _state_tensors = ("momentum_buffer",)

    def __init__(self, params: Iterable[Any], lr: float = 0.001, momentum: float = 0,
                 dampening: float = 0, weight_decay: float = 0, nesterov: bool = False, *,
                 maximize: bool = False) -> None:
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov,
                                      maximize=maximize))

    def _check_group(self, g):
        lr, mom = _as_float("lr", g["lr"]), _as_float("momentum", g["momentum"])
        damp, wd = _as_float("dampening", g["dampening"]), _as_float("weight_decay",
                                                                      g["weight_decay"])
        _check(0.0 <= lr, f"SGD: Invalid learning rate: {g['lr']}")
        _check(0.0 <= mom, f"SGD: Invalid momentum value: {g['momentum']}")
        _check(0.0 <= wd, f"SGD: Invalid weight_decay value: {g['weight_decay']}")
        _check(not g["nesterov"] or (mom > 0 and damp == 0),
               "SGD: Nesterov momentum requires a momentum and zero dampening")

    def _update(self, p, grad, g, state):
        mom = _as_float("momentum", g["momentum"])
        buf, first, fresh = ffi.NULL, False, {}
        if mom != 0:
            first = "momentum_buffer" not in state
            buf = self._buffer(state, fresh, "momentum_buffer", p)._h
        lr, damp, wd = (_as_float(k, g[k]) for k in ("lr", "dampening", "weight_decay"))
        self._call(lib.ad_optim_sgd(p._h, grad._h, buf, lr, mom, damp, wd,
                                    1 if g["nesterov"] else 0, 1 if first else 0))
        state.update(fresh)
