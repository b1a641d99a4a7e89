"""Adam and AdamW (torch.optim.Adam / AdamW), amsgrad included."""
from __future__ import annotations

from typing import Any, Iterable, Tuple

from .._lib import ffi, lib
from ..errors import InvalidArgumentError
from .optimizer import Optimizer, _as_float, _check


class Adam(Optimizer):
    """torch.optim.Adam's update, fused into one native call per parameter
    (t counts this parameter's steps, from 1):

        g = grad + weight_decay * w   (AdamW instead: w = w * (1 - lr * weight_decay))
        m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g * g
        vmax = max(vmax, v)           (amsgrad; then vmax replaces v below)
        w = w - lr / (1 - beta1**t) * m / (sqrt(v) / sqrt(1 - beta2**t) + eps)

    Args:
        params: an iterable of Vars (model.parameters()), or of dicts
            {"params": [...], "lr": ...} that override the defaults per group.
        lr, betas (beta1, beta2), eps, weight_decay, amsgrad: as in the formulas.
        decoupled_weight_decay: True gives AdamW's decay.
        maximize: True climbs the gradient (grad read as -grad, as torch's).

    Raises TypeError for a non-Var parameter, InvalidArgumentError for a
    negative lr, eps or weight_decay, or a beta outside [0, 1).
    """

    _state_tensors = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")

    def __init__(self, params: Iterable[Any], lr: float = 0.001,
                 betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-08,
                 weight_decay: float = 0, amsgrad: bool = False, *, maximize: bool = False,
                 decoupled_weight_decay: bool = False) -> None:
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      amsgrad=amsgrad, maximize=maximize,
                                      decoupled_weight_decay=decoupled_weight_decay))

    def _check_group(self, g):
        name = type(self).__name__
        lr, eps = _as_float("lr", g["lr"]), _as_float("eps", g["eps"])
        wd = _as_float("weight_decay", g["weight_decay"])
        try:
            b1, b2 = (_as_float("betas", b) for b in g["betas"])
        except (TypeError, ValueError):  # not two of them (betas=None, betas=0.9)
            raise InvalidArgumentError(f"{name}: betas must be two numbers, got "
                                       f"{g['betas']!r}") from None
        _check(0.0 <= lr, f"{name}: Invalid learning rate: {g['lr']}")
        _check(0.0 <= eps, f"{name}: Invalid epsilon value: {g['eps']}")
        _check(0.0 <= b1 < 1.0, f"{name}: Invalid beta parameter at index 0: {b1}")
        _check(0.0 <= b2 < 1.0, f"{name}: Invalid beta parameter at index 1: {b2}")
        _check(0.0 <= wd, f"{name}: Invalid weight_decay value: {g['weight_decay']}")

    def _update(self, p, grad, g, state):
        amsgrad = bool(g["amsgrad"])
        fresh = {}
        m = self._buffer(state, fresh, "exp_avg", p)
        v = self._buffer(state, fresh, "exp_avg_sq", p)
        vmax = None
        if amsgrad:
            vmax = self._buffer(state, fresh, "max_exp_avg_sq", p)
        step = state.get("step", 0) + 1
        # _as_float: param_groups may have changed since _check_group
        b1, b2 = (_as_float("betas", b) for b in g["betas"])
        lr, eps, wd = (_as_float(k, g[k]) for k in ("lr", "eps", "weight_decay"))
        self._call(lib.ad_optim_adam(p._h, grad._h, m._h, v._h,
                                     vmax._h if vmax is not None else ffi.NULL, step,
                                     lr, b1, b2, eps, wd,
                                     1 if g["decoupled_weight_decay"] else 0))
        state.update(fresh)
        state["step"] = step

    def _load_param_state(self, k, p, s, group):
        out = super()._load_param_state(k, p, s, group)
        need = ["step", "exp_avg", "exp_avg_sq"] + (["max_exp_avg_sq"] if group["amsgrad"]
                                                     else [])
        missing = [n for n in need if n not in out]
        if out and missing:
            raise InvalidArgumentError(f"load_state_dict: parameter {k}: {type(self).__name__} "
                                       f"state lacks {', '.join(missing)}")
        return out


class AdamW(Adam):
    """Adam with decoupled weight decay (w *= 1 - lr * weight_decay before
    the Adam step), weight_decay 1e-2 by default, as torch.optim.AdamW."""

    def __init__(self, params: Iterable[Any], lr: float = 0.001,
                 betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-08,
                 weight_decay: float = 0.01, amsgrad: bool = False, *,
                 maximize: bool = False) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize,
                         decoupled_weight_decay=True)
