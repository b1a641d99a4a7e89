"""The float64 central-difference gradient check every differentiable op uses.

    check_grad(lambda a, b: (a * b).sum(), [x, y])

f takes tensors and returns a tensor; inputs are numpy arrays or ad tensors
(any layout: pass views to check transposed/sliced/broadcast inputs, see
`layouts`).  Each input becomes a float64 Var; the analytic gradient of
sum(f(...) * w) (w fixed random weights, so every output element matters) is
compared with central differences of the same scalar.
"""
import numpy as np

import pyautodiff as ad


def _scalarize(y, w):
    if w is None:
        return y.sum()
    return (y * w).sum()


def numeric_grad(f, arrays, i, w, eps=1e-6):
    """Central differences of sum(f(arrays) * w) with respect to arrays[i]."""
    base = [a.copy() for a in arrays]
    g = np.zeros_like(base[i])
    flat = base[i].reshape(-1)
    gflat = g.reshape(-1)
    for k in range(flat.size):
        old = flat[k]
        flat[k] = old + eps
        with ad.no_grad():
            up = _scalarize(f(*[ad.tensor(a, dtype=ad.float64) for a in base]), w).item()
        flat[k] = old - eps
        with ad.no_grad():
            down = _scalarize(f(*[ad.tensor(a, dtype=ad.float64) for a in base]), w).item()
        flat[k] = old
        gflat[k] = (up - down) / (2 * eps)
    return g


def check_grad(f, inputs, atol=1e-6, rtol=1e-5, eps=1e-6, seed=0, wrt=None, make=None):
    """Asserts analytic == numeric gradients of f at inputs (float64).

    make(i, var) may turn the Var for input i into the layout under test
    (e.g. lambda i, v: v.t()); the numeric side applies the same function to
    a plain tensor, so the function f sees identical values either way.
    Returns the analytic gradients."""
    arrays = [np.array(np.asarray(x), dtype=np.float64) for x in inputs]
    wrt = range(len(arrays)) if wrt is None else wrt
    make = make or (lambda i, t: t)
    vars_ = [ad.Var(a, dtype=ad.float64) for a in arrays]

    def fmade(*ts):
        return f(*[make(i, t) for i, t in enumerate(ts)])

    y = fmade(*vars_)
    rng = np.random.default_rng(seed)
    w = ad.tensor(rng.uniform(0.5, 1.5, size=y.shape), dtype=ad.float64) if y.ndim else None
    grads = _scalarize(y, w).backward()
    out = []
    for i in wrt:
        g = grads.get(vars_[i])
        analytic = np.zeros_like(arrays[i]) if g is None else np.asarray(g)
        numeric = numeric_grad(fmade, arrays, i, w, eps)
        np.testing.assert_allclose(analytic, numeric, atol=atol, rtol=rtol,
                                   err_msg=f"gradient of input {i}")
        out.append(analytic)
    return out


def layouts(shape, rng=None):
    """(name, base array, make) triples presenting an input of `shape` as
    contiguous, transposed, sliced and broadcast views of a Var; each `make`
    maps the base Var to a tensor of exactly `shape`."""
    rng = rng or np.random.default_rng(1)
    shape = tuple(shape)
    out = [("contiguous", rng.standard_normal(shape), lambda t: t)]
    if len(shape) >= 2:
        tshape = shape[:-2] + (shape[-1], shape[-2])
        out.append(("transposed", rng.standard_normal(tshape), lambda t: t.t()))
    sshape = shape[:-1] + (2 * shape[-1],) if shape else shape
    if shape:
        out.append(("sliced", rng.standard_normal(sshape),
                    lambda t: t[..., ::2]))
        bshape = (1,) + shape[1:]
        out.append(("broadcast", rng.standard_normal(bshape),
                    lambda t, s=shape: t.broadcast_to(s)))
    return out
