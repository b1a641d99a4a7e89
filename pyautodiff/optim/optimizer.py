"""The Optimizer base class: parameter groups, step(GradStore), state dicts.

As in PyTorch, except that the gradient comes from the GradStore that
backward() returns (nothing hidden holds it), and that optimizers take Vars
only (a non-leaf: TypeError, where PyTorch raises ValueError).  Each
parameter's update is one fused native in-place call that bumps its version.
"""
from __future__ import annotations

import numbers
from typing import Any, Dict, Iterable, Mapping

import numpy as np

from .._lib import raise_status
from ..errors import ArgumentTypeError, InvalidArgumentError, ShapeError
from ..grad import GradStore
from ..tensor import Tensor, Var, _refuse_var_write, tensor, zeros

class _NoGrads:
    """The default of Optimizer.step's argument: a call without one is a
    mistake (PyTorch's step() takes no store), reported by name."""

    def __repr__(self) -> str:
        return "<required: the GradStore from loss.backward()>"


_NO_GRADS: Any = _NoGrads()


def _as_float(name, v):
    """A hyper-parameter as a float: a real number, or a one-element tensor or
    array (PyTorch takes a tensor lr).  float() alone would parse a string
    ("0.1") and drop a numpy complex's imaginary part."""
    if type(v) is float:  # the common case, before the ABC checks (every step)
        return v
    ok = (isinstance(v, (numbers.Real, Tensor)) or
          isinstance(v, np.ndarray) and v.dtype.kind in "biuf")
    try:
        if ok:
            return float(v)
    except (TypeError, ValueError):
        pass
    raise ArgumentTypeError(f"optimizer: {name} must be a number, got {type(v).__name__}")


class Optimizer:
    """Base class.  A subclass sets `_state_tensors` (the names of its
    per-parameter state tensors), validates a group in `_check_group` and
    updates one parameter in `_update(p, grad, group, state)`."""

    _state_tensors = ()

    def __init__(self, params: Iterable[Any], defaults: Dict[str, Any]) -> None:
        self.defaults = dict(defaults)
        self.param_groups = []
        self._state = {}  # Var -> {"step": int, name: Tensor}; the tensors are private
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of "
                            f"Vars or dicts, but got {type(params).__name__}")
        if isinstance(params, (set, frozenset)):
            raise TypeError("optimizer parameters need to be organized in ordered collections, "
                            "but the ordering of tensors in sets will change between runs. "
                            "Please use a list instead.")
        try:
            groups = list(params)
        except TypeError:
            raise ArgumentTypeError("params argument given to the optimizer should be an "
                                    "iterable of Vars or dicts, but got "
                                    f"{type(params).__name__}") from None
        if not groups:
            raise InvalidArgumentError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for g in groups:
            self.add_param_group(g)

    # ---- groups ---------------------------------------------------------------------
    def add_param_group(self, param_group: Dict[str, Any]) -> None:
        """Adds a group: a dict with "params" (Vars) and any hyper-parameter
        that differs from the optimizer's defaults."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param group must be a dict, but got {type(param_group).__name__}")
        group = dict(param_group)
        if "params" not in group:
            raise InvalidArgumentError("param group has no 'params' entry")
        params = group["params"]
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, (set, frozenset)):
            raise TypeError("optimizer parameters need to be organized in ordered collections, "
                            "but the ordering of tensors in sets will change between runs. "
                            "Please use a list instead.")
        else:
            try:
                params = list(params)
            except TypeError:
                raise ArgumentTypeError(f"param group 'params' must be a Var or an iterable of "
                                        f"Vars, got {type(params).__name__}") from None
        for i, p in enumerate(params):
            if not isinstance(p, Var):
                raise TypeError(f"optimizers take Vars only: parameter {i} of group "
                                f"{len(self.param_groups)} is a {type(p).__name__} "
                                "(wrap a leaf with ad.Var)")
        if len(set(map(id, params))) != len(params):
            raise InvalidArgumentError(f"param group {len(self.param_groups)} contains a "
                                       "parameter twice")
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in params):
            raise InvalidArgumentError("some parameters appear in more than one parameter group")
        for k, v in self.defaults.items():
            group.setdefault(k, v)
        self._check_group(group)
        group["params"] = params
        self.param_groups.append(group)

    def _check_group(self, group):
        raise NotImplementedError

    # ---- stepping --------------------------------------------------------------------
    def step(self, grads: GradStore = _NO_GRADS) -> None:
        """One update of every parameter that has a gradient in `grads` (the
        GradStore that loss.backward() returns).  A parameter without one is
        skipped and its state (its step count included) is not advanced.  A
        group with maximize=True reads each gradient as its negation first."""
        if not isinstance(grads, GradStore):
            got = "nothing" if grads is _NO_GRADS else f"a {type(grads).__name__}"
            raise TypeError(f"{type(self).__name__}.step takes the GradStore that "
                            f"loss.backward() returns, got {got} (opt.backward_step(loss) "
                            "runs backward and steps in one call)")
        for group in self.param_groups:
            for p in group["params"]:
                g = grads.get(p)
                if g is None:
                    continue
                _refuse_var_write(p)
                if group.get("maximize"):  # absent from state dicts of older versions
                    g = -g
                state = self._state.get(p)
                if state is None:
                    state = self._state[p] = {}
                self._update(p, g, group, state)

    def backward_step(self, loss: Tensor) -> GradStore:
        """opt.step(loss.backward()); returns the GradStore."""
        if not isinstance(loss, Tensor):
            raise TypeError(f"{type(self).__name__}.backward_step takes the loss tensor, got "
                            f"a {type(loss).__name__}")
        grads = loss.backward()
        self.step(grads)
        return grads

    @staticmethod
    def _call(status):
        if status:
            raise_status(status)

    @staticmethod
    def _buffer(state, fresh, name, p):
        """state[name]; when absent, new zeros of p's shape and dtype, put in
        `fresh` (which joins the state only once the update succeeded)."""
        b = state.get(name)
        if b is None:
            b = fresh[name] = zeros(p.shape, dtype=p.dtype)
        return b

    # ---- state dicts -----------------------------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        """{"state": {index: {"step": 0-d float32 tensor, name: Tensor}},
        "param_groups": [{hyper-parameters, "params": [index, ...]}]}, with the
        parameters numbered in group order, as PyTorch's.  The tensors are
        copies: later steps do not change a state dict already taken."""
        index, groups = {}, []
        for g in self.param_groups:
            packed = {k: v for k, v in g.items() if k != "params"}
            packed["params"] = [index.setdefault(id(p), len(index)) for p in g["params"]]
            groups.append(packed)
        state = {}
        for g in self.param_groups:
            for p in g["params"]:
                s = self._state.get(p)
                if not s:
                    continue
                out = {}
                for k, v in s.items():
                    if k == "step":
                        out[k] = tensor(float(v), dtype="float32")
                    else:
                        out[k] = tensor(v)  # a copy: ours is updated in place
                state[index[id(p)]] = out
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Loads a state_dict() of an optimizer of the same kind over
        parameters of the same shapes (PyTorch's, converted to numpy, loads
        too).  Atomic: on any error nothing changes."""
        if not isinstance(state_dict, dict) or "state" not in state_dict \
                or "param_groups" not in state_dict:
            raise InvalidArgumentError("load_state_dict takes a dict with 'state' and "
                                       "'param_groups', as state_dict() returns")
        saved_groups = list(state_dict["param_groups"])
        if len(saved_groups) != len(self.param_groups):
            raise InvalidArgumentError(
                f"loaded state dict has {len(saved_groups)} parameter groups, the optimizer "
                f"has {len(self.param_groups)}")
        id_map, new_groups = {}, []
        for i, (ours, saved) in enumerate(zip(self.param_groups, saved_groups)):
            if len(saved["params"]) != len(ours["params"]):
                raise InvalidArgumentError(
                    f"loaded state dict's parameter group {i} has {len(saved['params'])} "
                    f"parameters, the optimizer's has {len(ours['params'])}")
            id_map.update(zip(saved["params"], ours["params"]))
            group = {k: v for k, v in saved.items() if k != "params"}
            group["params"] = ours["params"]
            self._check_group(group)
            new_groups.append(group)
        group_of = {id(p): g for g in new_groups for p in g["params"]}
        new_state = {}
        for k, s in state_dict["state"].items():
            if k not in id_map:
                raise InvalidArgumentError(f"loaded state dict has state for parameter {k}, "
                                           "which no parameter group lists")
            p = id_map[k]
            new_state[p] = self._load_param_state(k, p, dict(s), group_of[id(p)])
        self.param_groups[:] = new_groups
        self._state = new_state

    def _load_param_state(self, k, p, s, group):
        out = {}
        for name, v in s.items():
            if name == "step":
                step = float(v)
                if step != int(step) or step < 0:
                    raise InvalidArgumentError(f"load_state_dict: parameter {k}: step {step} is "
                                               "not a count")
                out[name] = int(step)
            elif name in self._state_tensors:
                t = tensor(v, dtype=p.dtype)  # always a private copy
                if t.shape != p.shape:
                    raise ShapeError(f"load_state_dict: parameter {k}: {name} has shape "
                                     f"{t.shape}, the parameter {p.shape}")
                out[name] = t
            else:
                raise InvalidArgumentError(f"load_state_dict: parameter {k}: unknown state "
                                           f"'{name}' for {type(self).__name__}")
        return out

    def __repr__(self):
        lines = [type(self).__name__ + " ("]
        for i, g in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for k in sorted(g):
                if k != "params":
                    lines.append(f"    {k}: {g[k]}")
        lines.append(")")
        return "\n".join(lines)


def _check(ok, msg):
    if not ok:
        raise InvalidArgumentError(msg)
