"""Learning-rate schedulers with torch.optim.lr_scheduler's arguments,
defaults and numbers: each computes the next rate from the current one with
PyTorch's (often recursive) formula, so the sequences are the same to the
last bit.

    sched = StepLR(opt, step_size=30, gamma=0.1)
    for epoch in range(n):
        train(...)          # opt.step(grads) ...
        sched.step()

Constructing a scheduler sets each group's "initial_lr" (when last_epoch is
-1) and takes the first step (last_epoch becomes 0).  `step()` takes no
epoch (PyTorch deprecated it).
"""
from __future__ import annotations

from typing import (Any as _Any, Dict as _Dict, Iterable as _Iterable, List as _List,
                    Mapping as _Mapping, Optional as _Optional, Sequence as _Sequence,
                    Union as _Union)

import math as _math
import numbers as _numbers
import types as _types
from collections import Counter as _Counter

from ..errors import InvalidArgumentError
from ..nn.modules._common import int_arg as _int
from .optimizer import Optimizer as _Optimizer


# The arguments' types are checked when the scheduler is made: a wrong one
# would otherwise surface at some later step() as a bare TypeError from the
# formula (None % 2, 0.1 * "x") or a ZeroDivisionError (step_size=0).
def _real(cls, name, v, nonzero=False):
    if isinstance(v, bool) or not isinstance(v, _numbers.Real):
        raise InvalidArgumentError(f"{cls}: {name} must be a real number, got {v!r}")
    if nonzero and v == 0:
        raise InvalidArgumentError(f"{cls}: {name} must not be 0")
    return v


__all__ = ["LRScheduler", "StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR",
           "LambdaLR", "LinearLR", "OneCycleLR"]


class LRScheduler:
    """Base class: a subclass computes the next rates in `get_lr()`."""

    _is_initial = False

    def __init__(self, optimizer: _Optimizer, last_epoch: int = -1) -> None:
        if not isinstance(optimizer, _Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        last_epoch = _int(type(self).__name__, "last_epoch", last_epoch, -1)
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(f"param 'initial_lr' is not specified in param_groups[{i}] "
                                   "when resuming a scheduler with last_epoch >= 0")
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def get_lr(self) -> _List[float]:
        """The rates for the epoch last_epoch, one per parameter group (the
        subclass's formula).  Called by step(); not meant to be called directly.
        """
        raise NotImplementedError

    def step(self) -> None:
        """Moves to the next epoch (or iteration) and sets each group's lr."""
        self._step_count += 1
        self.last_epoch += 1
        values = self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, values):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def get_last_lr(self) -> _List[float]:
        """The rates the last step() set, one per parameter group."""
        return list(self._last_lr)

    def _current(self):
        return [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self) -> _Dict[str, _Any]:
        """Every attribute but the optimizer (plain Python values)."""
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict: _Mapping[str, _Any]) -> None:
        """Restores the attributes state_dict() saved (the optimizer is not touched)."""
        self.__dict__.update(state_dict)


class LambdaLR(LRScheduler):
    """lr = initial_lr * lr_lambda(last_epoch) (one function, or one per group)."""

    def __init__(self, optimizer: _Optimizer, lr_lambda: _Any, last_epoch: int = -1) -> None:
        if not isinstance(optimizer, _Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        n = len(optimizer.param_groups)
        if not isinstance(lr_lambda, (list, tuple)):
            self.lr_lambdas = [lr_lambda] * n
        else:
            if len(lr_lambda) != n:
                raise InvalidArgumentError(f"LambdaLR: expected {n} lr_lambdas, but got "
                                           f"{len(lr_lambda)}")
            self.lr_lambdas = list(lr_lambda)
        for f in self.lr_lambdas:
            if not callable(f):
                raise TypeError(f"LambdaLR: lr_lambda must be callable, got "
                                f"{type(f).__name__}")
        super().__init__(optimizer, last_epoch)

    def state_dict(self) -> _Dict[str, _Any]:
        """As LRScheduler.state_dict, with each lr_lambda saved as its attributes
        (a plain function as None)."""
        # functions are not saved; a callable object's attributes are
        sd = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "lr_lambdas")}
        sd["lr_lambdas"] = [None if isinstance(f, _types.FunctionType) else dict(f.__dict__)
                            for f in self.lr_lambdas]
        return sd

    def load_state_dict(self, state_dict: _Mapping[str, _Any]) -> None:
        """As LRScheduler.load_state_dict, restoring each callable lr_lambda's attributes."""
        state_dict = dict(state_dict)
        lambdas = state_dict.pop("lr_lambdas")
        self.__dict__.update(state_dict)
        for f, d in zip(self.lr_lambdas, lambdas):
            if d is not None:
                f.__dict__.update(d)

    def get_lr(self):
        return [base * f(self.last_epoch) for f, base in zip(self.lr_lambdas, self.base_lrs)]


class StepLR(LRScheduler):
    """lr *= gamma every step_size epochs."""

    def __init__(self, optimizer: _Optimizer, step_size: int, gamma: float = 0.1,
                 last_epoch: int = -1) -> None:
        self.step_size = _int("StepLR", "step_size", step_size, 1)
        self.gamma = _real("StepLR", "gamma", gamma)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return self._current()
        return [lr * self.gamma for lr in self._current()]


class MultiStepLR(LRScheduler):
    """lr *= gamma at each milestone (a milestone listed twice counts twice)."""

    def __init__(self, optimizer: _Optimizer, milestones: _Iterable[int],
                 gamma: float = 0.1, last_epoch: int = -1) -> None:
        try:
            ms = list(milestones)
        except TypeError:
            raise InvalidArgumentError(f"MultiStepLR: milestones must be an iterable of ints, "
                                       f"got {milestones!r}") from None
        self.milestones = _Counter(_int("MultiStepLR", "milestone", m, 0) for m in ms)
        self.gamma = _real("MultiStepLR", "gamma", gamma)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch not in self.milestones:
            return self._current()
        return [lr * self.gamma ** self.milestones[self.last_epoch] for lr in self._current()]


class ExponentialLR(LRScheduler):
    """lr *= gamma every epoch."""

    def __init__(self, optimizer: _Optimizer, gamma: float, last_epoch: int = -1) -> None:
        self.gamma = _real("ExponentialLR", "gamma", gamma)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self._is_initial:
            return self._current()
        return [lr * self.gamma for lr in self._current()]


class CosineAnnealingLR(LRScheduler):
    """Cosine from initial_lr down to eta_min over T_max epochs (and back up
    after, as PyTorch's), computed with PyTorch's recursive formula."""

    def __init__(self, optimizer: _Optimizer, T_max: int, eta_min: float = 0.0,
                 last_epoch: int = -1) -> None:
        self.T_max = _int("CosineAnnealingLR", "T_max", T_max, 1)  # the formula divides by it
        self.eta_min = _real("CosineAnnealingLR", "eta_min", eta_min)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        e, T, lo = self.last_epoch, self.T_max, self.eta_min
        if self._is_initial:
            return self._current()
        if self._step_count == 1 and e > 0:
            return [lo + (b - lo) * (1 + _math.cos(e * _math.pi / T)) / 2 for b in self.base_lrs]
        if (e - 1 - T) % (2 * T) == 0:
            return [lr + (b - lo) * (1 - _math.cos(_math.pi / T)) / 2
                    for b, lr in zip(self.base_lrs, self._current())]
        return [(1 + _math.cos(_math.pi * e / T)) / (1 + _math.cos(_math.pi * (e - 1) / T))
                * (lr - lo) + lo for lr in self._current()]


class LinearLR(LRScheduler):
    """The factor goes linearly from start_factor to end_factor over
    total_iters epochs (PyTorch's recursive formula)."""

    def __init__(self, optimizer: _Optimizer, start_factor: float = 1.0 / 3,
                 end_factor: float = 1.0, total_iters: int = 5, last_epoch: int = -1) -> None:
        _real("LinearLR", "start_factor", start_factor)
        _real("LinearLR", "end_factor", end_factor)
        total_iters = _int("LinearLR", "total_iters", total_iters, 0)
        if start_factor > 1.0 or start_factor <= 0:
            raise InvalidArgumentError("LinearLR: Starting multiplicative factor expected to be "
                                       f"greater than 0 and less or equal to 1, got "
                                       f"{start_factor}")
        if end_factor > 1.0 or end_factor < 0:
            raise InvalidArgumentError("LinearLR: Ending multiplicative factor expected to be "
                                       f"between 0 and 1, got {end_factor}")
        self.start_factor = start_factor
        self.end_factor = end_factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        s, f, n, e = self.start_factor, self.end_factor, self.total_iters, self.last_epoch
        if e == 0:
            return [lr * s for lr in self._current()]
        if self._is_initial or e > n:
            return self._current()
        return [lr * (1.0 + (f - s) / (n * s + (e - 1) * (f - s))) for lr in self._current()]


def _per_group(name, optimizer, value):
    n = len(optimizer.param_groups)
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise InvalidArgumentError(f"OneCycleLR: {name} must have the same length as "
                                       f"optimizer.param_groups. {name} has {len(value)} "
                                       f"values, param_groups has {n}.")
        return list(value)
    return [value] * n


class OneCycleLR(LRScheduler):
    """The 1cycle policy (Smith & Topin): lr rises from max_lr / div_factor
    to max_lr over pct_start of total_steps, then anneals to
    initial_lr / final_div_factor; momentum (SGD) or beta1 (Adam) cycles the
    other way.  Stepped once per batch."""

    def __init__(self, optimizer: _Optimizer, max_lr: _Union[float, _Sequence[float]],
                 total_steps: _Optional[int] = None, epochs: _Optional[int] = None,
                 steps_per_epoch: _Optional[int] = None, pct_start: float = 0.3,
                 anneal_strategy: str = 'cos', cycle_momentum: bool = True,
                 base_momentum: float = 0.85, max_momentum: float = 0.95,
                 div_factor: float = 25.0, final_div_factor: float = 10000.0,
                 three_phase: bool = False, last_epoch: int = -1) -> None:
        if not isinstance(optimizer, _Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        if total_steps is not None:
            if not isinstance(total_steps, int) or total_steps <= 0:
                raise InvalidArgumentError("OneCycleLR: Expected positive integer total_steps, "
                                           f"but got {total_steps}")
            self.total_steps = total_steps
        elif epochs is not None and steps_per_epoch is not None:
            if not isinstance(epochs, int) or epochs <= 0:
                raise InvalidArgumentError(f"OneCycleLR: Expected positive integer epochs, but "
                                           f"got {epochs}")
            if not isinstance(steps_per_epoch, int) or steps_per_epoch <= 0:
                raise InvalidArgumentError("OneCycleLR: Expected positive integer "
                                           f"steps_per_epoch, but got {steps_per_epoch}")
            self.total_steps = epochs * steps_per_epoch
        else:
            raise InvalidArgumentError("OneCycleLR: You must define either total_steps OR "
                                       "(epochs AND steps_per_epoch)")
        if not isinstance(pct_start, float) or pct_start < 0 or pct_start > 1:
            raise InvalidArgumentError(f"OneCycleLR: Expected float between 0 and 1 pct_start, "
                                       f"but got {pct_start}")
        if not isinstance(anneal_strategy, str) or anneal_strategy not in ("cos", "linear"):
            raise InvalidArgumentError("OneCycleLR: anneal_strategy must be one of 'cos' or "
                                       f"'linear', instead got {anneal_strategy}")
        T = self.total_steps
        if three_phase:
            self._schedule_phases = [
                {"end_step": float(pct_start * T) - 1, "start_lr": "initial_lr",
                 "end_lr": "max_lr", "start_momentum": "max_momentum",
                 "end_momentum": "base_momentum"},
                {"end_step": float(2 * pct_start * T) - 2, "start_lr": "max_lr",
                 "end_lr": "initial_lr", "start_momentum": "base_momentum",
                 "end_momentum": "max_momentum"},
                {"end_step": T - 1, "start_lr": "initial_lr", "end_lr": "min_lr",
                 "start_momentum": "max_momentum", "end_momentum": "max_momentum"},
            ]
        else:
            self._schedule_phases = [
                {"end_step": float(pct_start * T) - 1, "start_lr": "initial_lr",
                 "end_lr": "max_lr", "start_momentum": "max_momentum",
                 "end_momentum": "base_momentum"},
                {"end_step": T - 1, "start_lr": "max_lr", "end_lr": "min_lr",
                 "start_momentum": "base_momentum", "end_momentum": "max_momentum"},
            ]
        self._anneal_func_type = anneal_strategy
        max_lrs = [_real("OneCycleLR", "max_lr", m)
                   for m in _per_group("max_lr", optimizer, max_lr)]
        _real("OneCycleLR", "div_factor", div_factor, nonzero=True)
        _real("OneCycleLR", "final_div_factor", final_div_factor, nonzero=True)
        if last_epoch == -1:
            for m, group in zip(max_lrs, optimizer.param_groups):
                group["initial_lr"] = m / div_factor
                group["max_lr"] = m
                group["min_lr"] = group["initial_lr"] / final_div_factor
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise InvalidArgumentError("OneCycleLR: optimizer must support momentum or "
                                           "beta1 with `cycle_momentum` option enabled")
            self.use_beta1 = "betas" in optimizer.defaults
            maxm = [_real("OneCycleLR", "max_momentum", m)
                    for m in _per_group("max_momentum", optimizer, max_momentum)]
            basem = [_real("OneCycleLR", "base_momentum", m)
                     for m in _per_group("base_momentum", optimizer, base_momentum)]
            if last_epoch == -1:
                for m, b, group in zip(maxm, basem, optimizer.param_groups):
                    if self.use_beta1:
                        group["betas"] = (m, *group["betas"][1:])
                    else:
                        group["momentum"] = m
                    group["max_momentum"] = m
                    group["base_momentum"] = b
        super().__init__(optimizer, last_epoch)

    def _anneal(self, start, end, pct):
        if self._anneal_func_type == "cos":
            return end + (start - end) / 2.0 * (_math.cos(_math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self):
        step = self.last_epoch
        if step > self.total_steps:
            raise InvalidArgumentError(f"OneCycleLR: Tried to step {step} times. The specified "
                                       f"number of total steps is {self.total_steps}")
        lrs = []
        phases = self._schedule_phases
        for group in self.optimizer.param_groups:
            start = 0.0
            for i, ph in enumerate(phases):
                end = ph["end_step"]
                if step <= end or i == len(phases) - 1:
                    pct = (step - start) / (end - start)
                    lr = self._anneal(group[ph["start_lr"]], group[ph["end_lr"]], pct)
                    if self.cycle_momentum:
                        mom = self._anneal(group[ph["start_momentum"]],
                                           group[ph["end_momentum"]], pct)
                    break
                start = ph["end_step"]
            lrs.append(lr)
            if self.cycle_momentum:
                if self.use_beta1:
                    group["betas"] = (mom, *group["betas"][1:])
                else:
                    group["momentum"] = mom
        return lrs
