"""ad.optim: Vars only, in-place native updates that bump the version."""
import numpy as np
import pytest

import pyautodiff as ad


def test_sgd_takes_vars_only():
    # PyTorch: ValueError "can't optimize a non-leaf Tensor"; candle: compile error
    w = ad.Var.ones(2) * 0.5
    with pytest.raises(TypeError, match="Vars only"):
        ad.optim.SGD([w], lr=0.1)


def test_sgd_step_in_place_and_versions():
    w = ad.Var([1.0, 2.0])
    b = ad.Var.zeros(1)
    opt = ad.optim.SGD([w, b], lr=0.1)
    loss = ((w * ad.tensor([10.0, 20.0])).sum() + b.sum())
    v0 = w.version
    opt.step(loss.backward())
    np.testing.assert_allclose(w.numpy(), [0.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(b.numpy(), [-0.1], atol=1e-7)
    assert w.version == v0 + 1
    with pytest.raises(ad.GraphError):  # the old graph saw the old w
        (w * w).sum()  # fine
        stale = (w * w).sum()
        opt.step(stale.backward())
        stale.backward()


def test_sgd_momentum_matches_reference():
    w = ad.Var([1.0, -1.0], dtype=ad.float64)
    opt = ad.optim.SGD([w], lr=0.1, momentum=0.9)
    ref, buf = np.array([1.0, -1.0]), None
    for _ in range(5):
        opt.step((w * w).sum().backward())
        g = 2 * ref
        buf = g if buf is None else 0.9 * buf + g
        ref = ref - 0.1 * buf
    np.testing.assert_allclose(w.numpy(), ref, rtol=1e-12)


def test_axpy_errors():
    from pyautodiff._lib import lib

    w = ad.Var.zeros((2, 3))
    assert lib.ad_var_axpy(w._h, 1.0, ad.ones(3)._h) == 0  # broadcast update
    np.testing.assert_allclose(w.numpy(), np.ones((2, 3)))
    assert lib.ad_var_axpy(w._h, 1.0, ad.ones(4)._h) == lib.AD_ERR_SHAPE
    assert lib.ad_var_axpy(w._h, 1.0, ad.ones(3, dtype=ad.float64)._h) == lib.AD_ERR_DTYPE
    assert lib.ad_var_axpy(ad.ones(3)._h, 1.0, ad.ones(3)._h) == lib.AD_ERR_GRAPH
