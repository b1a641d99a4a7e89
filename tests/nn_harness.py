"""Helpers for the ad.nn layer tests: float64 finite-difference checks of a
Module's forward with respect to its inputs and its parameters, and the
PyTorch interchange check (state dict through numpy, then outputs and
gradients compared)."""
import numpy as np

import pyautodiff as ad


def _flat(out):
    """The float tensors of a (possibly nested) forward result, in order."""
    if isinstance(out, (tuple, list)):
        res = []
        for o in out:
            res += _flat(o)
        return res
    if out is None:
        return []
    return [out]


def _loss(outs, ws):
    total = None
    for o, w in zip(outs, ws):
        term = (o * w).sum()
        total = term if total is None else total + term
    return total


def module_gradcheck(module, inputs, forward=None, eps=1e-6, atol=1e-6, rtol=1e-5, n_elems=12,
                     seed=0, params=True):
    """Central differences of sum(forward(module, *inputs) * w) against the
    analytic gradient, for each float input and each parameter (up to
    n_elems elements of each, chosen at random).  inputs: numpy arrays
    (float ones become float64 Vars, integer ones plain tensors)."""
    rng = np.random.default_rng(seed)
    forward = forward or (lambda m, *xs: m(*xs))
    module.to_dtype(ad.float64)
    xs = [ad.Var(a, dtype=ad.float64) if np.asarray(a).dtype.kind == "f" else ad.tensor(a)
          for a in inputs]
    outs = _flat(forward(module, *xs))
    ws = [ad.tensor(rng.uniform(0.5, 1.5, size=o.shape), dtype=ad.float64) for o in outs]
    grads = _loss(outs, ws).backward()
    targets = [(f"input {i}", x) for i, x in enumerate(xs) if x.is_variable]
    if params:
        targets += list(module.named_parameters())
    assert targets
    for name, v in targets:
        base = np.array(v.numpy(), dtype=np.float64)
        g = grads.get(v)
        analytic = np.zeros_like(base) if g is None else np.asarray(g)
        flat_idx = rng.choice(base.size, size=min(n_elems, base.size), replace=False)
        for k in flat_idx:
            vals = []
            for sgn in (1, -1):
                pert = base.copy()
                pert.reshape(-1)[k] += sgn * eps
                v.set(pert)
                with ad.no_grad():
                    vals.append(_loss(_flat(forward(module, *xs)), ws).item())
            v.set(base)
            num = (vals[0] - vals[1]) / (2 * eps)
            np.testing.assert_allclose(analytic.reshape(-1)[k], num, atol=atol, rtol=rtol,
                                       err_msg=f"gradient of {name}, element {k}")
