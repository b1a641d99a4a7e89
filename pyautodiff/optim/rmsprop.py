"""RMSprop (torch.optim.RMSprop), centered and momentum variants included."""
from __future__ import annotations

from typing import Any, Iterable

from .._lib import ffi, lib
from ..errors import InvalidArgumentError
from .optimizer import Optimizer, _as_float, _check


class RMSprop(Optimizer):
    """torch.optim.RMSprop's update, fused into one native call per parameter:

        g = grad + weight_decay * w
        sq = alpha * sq + (1 - alpha) * g * g
        avg = sqrt(sq) + eps, or centered: ga = lerp(ga, g, 1 - alpha),
              avg = sqrt(sq - ga * ga) + eps
        momentum > 0: buf = momentum * buf + g / avg; w = w - lr * buf
        otherwise:    w = w - lr * g / avg

    Args:
        params: an iterable of Vars (model.parameters()), or of dicts
            {"params": [...], "lr": ...} that override the defaults per group.
        lr, alpha, eps, weight_decay, momentum, centered: as in the formulas.
        maximize: True climbs the gradient (grad read as -grad, as torch's).

    Raises TypeError for a non-Var parameter, InvalidArgumentError for a
    negative or out-of-range hyper-parameter.
    """

    _state_tensors = ("square_avg", "momentum_buffer", "grad_avg")

    def __init__(self, params: Iterable[Any], lr: float = 0.01, alpha: float = 0.99,
                 eps: float = 1e-08, weight_decay: float = 0, momentum: float = 0,
                 centered: bool = False, *, maximize: bool = False) -> None:
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                                      momentum=momentum, centered=centered, maximize=maximize))

    def _check_group(self, g):
        lr, eps = _as_float("lr", g["lr"]), _as_float("eps", g["eps"])
        mom, wd = _as_float("momentum", g["momentum"]), _as_float("weight_decay",
                                                                   g["weight_decay"])
        alpha = _as_float("alpha", g["alpha"])
        _check(0.0 <= lr, f"RMSprop: Invalid learning rate: {g['lr']}")
        _check(0.0 <= eps, f"RMSprop: Invalid epsilon value: {g['eps']}")
        _check(0.0 <= mom, f"RMSprop: Invalid momentum value: {g['momentum']}")
        _check(0.0 <= wd, f"RMSprop: Invalid weight_decay value: {g['weight_decay']}")
        _check(0.0 <= alpha, f"RMSprop: Invalid alpha value: {g['alpha']}")

    def _update(self, p, grad, g, state):
        mom = _as_float("momentum", g["momentum"])
        fresh = {}
        sq = self._buffer(state, fresh, "square_avg", p)
        buf = ga = None
        if mom > 0:
            buf = self._buffer(state, fresh, "momentum_buffer", p)
        if g["centered"]:
            ga = self._buffer(state, fresh, "grad_avg", p)
        step = state.get("step", 0) + 1
        self._call(lib.ad_optim_rmsprop(p._h, grad._h, sq._h,
                                        buf._h if buf is not None else ffi.NULL,
                                        ga._h if ga is not None else ffi.NULL,
                                        *(_as_float(k, g[k]) for k in ("lr", "alpha", "eps",
                                                                        "weight_decay")),
                                        mom))
        state.update(fresh)
        state["step"] = step

    def _load_param_state(self, k, p, s, group):
        out = super()._load_param_state(k, p, s, group)
        need = ["step", "square_avg"] + (["momentum_buffer"] if group["momentum"] > 0 else []) \
            + (["grad_avg"] if group["centered"] else [])
        missing = [n for n in need if n not in out]
        if out and missing:
            raise InvalidArgumentError(f"load_state_dict: parameter {k}: RMSprop state lacks "
                                       f"{', '.join(missing)}")
        return out
