"""In-place writes whose input shares the written bytes through another
storage header.

A Var re-imported through DLPack (or numpy with copy=False) is an external
storage over the Var's own buffer: the alias checks of Var.set, ad_var_axpy
and the fused optimizers compared storage headers only, so such an input was
read while it was being written and the result was silently wrong (found by
review of optim.c; [5, 5, 8, 9] instead of [5, 5, 5, 5] below)."""
import numpy as np
import pytest

import pyautodiff as ad
from pyautodiff._lib import ffi, lib


def _alias_of(v):
    """A tensor over v's bytes with its own storage header."""
    a = ad.from_dlpack(v)
    assert not lib.ad_tensor_same_storage(a._h, v._h)
    np.testing.assert_array_equal(a.numpy(), v.numpy())
    return a


def test_axpy_reads_a_dlpack_alias_before_writing():
    v = ad.Var(ad.tensor([1.0, 2.0, 3.0, 4.0], dtype=ad.float64))
    x = _alias_of(v).flip(0)
    assert lib.ad_var_axpy(v._h, 1.0, x._h) == 0
    np.testing.assert_array_equal(v.numpy(), [5.0, 5.0, 5.0, 5.0])


def test_set_reads_a_dlpack_alias_before_writing():
    v = ad.Var(ad.tensor([1.0, 2.0, 3.0, 4.0], dtype=ad.float32))
    v.set(_alias_of(v).flip(0))
    np.testing.assert_array_equal(v.numpy(), [4.0, 3.0, 2.0, 1.0])


def test_set_reads_a_numpy_alias_before_writing():
    v = ad.Var(ad.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=ad.float64))
    a = ad.from_dlpack(np.from_dlpack(v))  # numpy in between: still the Var's bytes
    v.set(a.T)
    np.testing.assert_array_equal(v.numpy(), [[1.0, 3.0], [2.0, 4.0]])


def test_sgd_copies_a_gradient_that_aliases_the_parameter():
    w = np.array([1.0, 2.0, 3.0, 4.0])
    v = ad.Var(ad.tensor(w, dtype=ad.float64))
    g = _alias_of(v).flip(0)
    assert lib.ad_optim_sgd(v._h, g._h, ad.zeros(4, dtype=ad.float64)._h, 0.5, 0.0, 0.0, 0.0,
                            0, 1) == 0
    np.testing.assert_array_equal(v.numpy(), w - 0.5 * w[::-1])


def test_optimizer_refuses_a_state_buffer_over_the_parameter():
    v = ad.Var(ad.tensor([1.0, 2.0, 3.0, 4.0], dtype=ad.float64))
    buf = _alias_of(v)
    g = ad.ones(4, dtype=ad.float64)
    st = lib.ad_optim_sgd(v._h, g._h, buf._h, 0.1, 0.9, 0.0, 0.0, 0, 1)
    assert st == lib.AD_ERR_VALUE
    assert b"momentum_buf shares its storage" in ffi.string(lib.ad_last_error())
    np.testing.assert_array_equal(v.numpy(), [1.0, 2.0, 3.0, 4.0])


def test_optimizer_refuses_two_buffers_over_one_range():
    v = ad.Var(ad.zeros(4, dtype=ad.float64))
    a = np.zeros(4)
    m, m2 = ad.from_numpy(a, copy=False), ad.from_numpy(a, copy=False)  # writable, shared
    assert not lib.ad_tensor_same_storage(m._h, m2._h)
    g = ad.ones(4, dtype=ad.float64)
    st = lib.ad_optim_adam(v._h, g._h, m._h, m2._h, ffi.NULL, 1, 0.1, 0.9, 0.999, 1e-8,
                           0.0, 0)
    assert st == lib.AD_ERR_VALUE
    assert b"share one storage" in ffi.string(lib.ad_last_error())


@pytest.mark.parametrize("n", [1, 3])
def test_disjoint_external_storages_are_not_aliases(n):
    # neighbouring but disjoint ranges of one numpy buffer: no copy, no refusal
    base = np.arange(2 * n, dtype=np.float64)
    v = ad.Var(ad.zeros(n, dtype=ad.float64))
    buf = ad.from_numpy(base[:n], copy=False)
    g = ad.from_numpy(base[n:], copy=False)
    assert lib.ad_optim_sgd(v._h, g._h, buf._h, 1.0, 0.5, 0.0, 0.0, 0, 0) == 0
    want = np.arange(n) * 0.5 + np.arange(n, 2 * n)
    np.testing.assert_array_equal(base[:n], want)  # the buffer, written in place
    np.testing.assert_array_equal(v.numpy(), -want)
