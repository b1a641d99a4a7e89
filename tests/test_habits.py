"""DESIGN §7.1: the PyTorch habits that must not bite.  Shapes as separate
ints or one tuple with keyword-only dtype/seed/std, ad.manual_seed, in-place
operators and item assignment on a Var (as Var.set), immutable Tensors,
dim(), float/int/format, and torch.as_tensor / torch.tensor."""
import numpy as np
import pytest

import pyautodiff as ad
from pyautodiff.nn import functional as F

CREATORS = [ad.zeros, ad.ones, ad.rand, ad.randn]
VAR_CREATORS = [ad.Var.zeros, ad.Var.ones, ad.Var.rand, ad.Var.randn]


# ---- shapes as ints or one tuple; dtype, seed, std keyword-only ----------------------------
@pytest.mark.parametrize("make", CREATORS + VAR_CREATORS,
                         ids=lambda f: getattr(f, "__qualname__", str(f)))
def test_shape_as_ints_or_one_tuple(make):
    assert make(2, 3).shape == (2, 3)
    assert make((2, 3)).shape == (2, 3)
    assert make([2, 3]).shape == (2, 3)
    assert make(4).shape == (4,)
    assert make(2, 0, 3).shape == (2, 0, 3)
    assert make(np.int64(2), 3).shape == (2, 3)
    t = make(2, 3, dtype=ad.float64)
    assert t.dtype == ad.float64
    assert t.is_variable == make.__qualname__.startswith("Var.")
    with pytest.raises(TypeError):  # dtype only by keyword
        make((2, 3), ad.float64)
    with pytest.raises(ad.ArgumentTypeError, match="keyword-only"):
        make(2, 3, ad.float64)


def test_randn_two_ints_is_a_matrix_not_a_seed():
    assert ad.randn(2, 3).shape == (2, 3)
    assert ad.Var.randn(2, 3).shape == (2, 3)
    assert ad.zeros(2, 3).tolist() == [[0.0] * 3] * 2
    assert ad.zeros().shape == () and ad.ones().tolist() == 1.0
    with pytest.raises(ad.ArgumentTypeError, match=r"randn: .*seed, dtype and std are "
                                                   r"keyword-only"):
        ad.randn((2, 3), 0)
    with pytest.raises(TypeError):
        ad.Var.randn((3, 2), 1, ad.float64)


def test_seed_and_std_keywords():
    a = ad.randn(3, 4, seed=7)
    np.testing.assert_array_equal(a.numpy(), ad.randn((3, 4), seed=7).numpy())
    assert not np.array_equal(a.numpy(), ad.randn(3, 4, seed=8).numpy())
    v = ad.Var.randn(3, 4, seed=7, std=0.5)
    np.testing.assert_allclose(v.numpy(), 0.5 * a.numpy())
    u = ad.Var.rand(1000, seed=3, dtype=ad.float64)
    assert u.dtype == ad.float64 and 0.0 <= u.numpy().min() and u.numpy().max() < 1.0
    np.testing.assert_array_equal(u.numpy(), ad.rand(1000, seed=3, dtype=ad.float64).numpy())


# ---- manual_seed ---------------------------------------------------------------------
def _draws():
    x = ad.ones(50, 8)
    return [ad.randn(3, 4).numpy().copy(), ad.rand(5).numpy().copy(),
            ad.Var.randn(2, 2).numpy().copy(), ad.Var.rand(3).numpy().copy(),
            F.dropout(x, 0.5).numpy().copy()]


def test_manual_seed_makes_default_draws_repeat():
    ad.manual_seed(1234)
    first = _draws()
    ad.manual_seed(1234)
    again = _draws()
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    ad.manual_seed(1235)
    other = _draws()
    for a, b in zip(first, other):
        assert not np.array_equal(a, b)
    # consecutive draws differ from one another (a stream, not one seed reused)
    ad.manual_seed(0)
    assert not np.array_equal(ad.randn(8).numpy(), ad.randn(8).numpy())
    d = F.dropout(ad.ones(1000), 0.5).numpy()
    assert 300 < (d == 0).sum() < 700  # about half dropped, the rest scaled by 2
    assert set(np.unique(d)) <= {0.0, 2.0}


def test_explicit_seed_ignores_and_keeps_the_default_stream():
    ad.manual_seed(5)
    want = ad.randn(4).numpy().copy()
    ad.manual_seed(5)
    fixed = ad.randn(4, seed=99).numpy().copy()
    np.testing.assert_array_equal(fixed, ad.randn(4, seed=99).numpy())
    np.testing.assert_array_equal(ad.randn(4).numpy(), want)  # seed= drew nothing from it
    ad.manual_seed(-1)  # any int, as PyTorch
    ad.manual_seed(2 ** 70)


# ---- in-place operators on a Var ---------------------------------------------------
@pytest.mark.parametrize("op, f", [("-=", lambda a, b: a - b), ("+=", lambda a, b: a + b),
                                   ("*=", lambda a, b: a * b), ("/=", lambda a, b: a / b)])
def test_var_inplace_operators_update_in_place(op, f):
    w = ad.Var([[1.0, 2.0], [3.0, 4.0]])
    alias = w
    i0, v0 = w.id, w.version
    view = w.numpy()  # a live view sees the write, as with Var.set
    g = ad.tensor([0.5, 2.0])
    for rhs in (g, 2.0, np.array([[2.0], [4.0]], dtype=np.float32)):
        before = w.numpy().copy()
        exec(f"w {op} rhs", {}, {"w": w, "rhs": rhs})
        np.testing.assert_allclose(alias.numpy(), f(before, np.asarray(rhs)))
    assert alias.id == i0 and type(alias) is ad.Var and alias.version == v0 + 3
    np.testing.assert_allclose(view, alias.numpy())


def test_var_pow_and_matmul_inplace_stay_the_var():
    # without __ipow__/__imatmul__ Python rebinds w to a plain Tensor: silent, as the
    # `w -= lr * g` bug of issue 12
    w = ad.Var([[1.0, 2.0], [3.0, 4.0]])
    alias, i0, v0 = w, w.id, w.version
    w **= 2
    assert w is alias and type(w) is ad.Var and w.id == i0 and w.version == v0 + 1
    assert w.tolist() == [[1.0, 4.0], [9.0, 16.0]] and w.op is None
    w @= ad.tensor([[0.0, 1.0], [1.0, 0.0]])
    assert w is alias and w.version == v0 + 2 and w.tolist() == [[4.0, 1.0], [16.0, 9.0]]
    with pytest.raises(ad.ShapeError, match=r"Var @=.*\(2, 3\).*\(2, 2\)"):
        w @= ad.ones(2, 3)
    assert w is alias and w.version == v0 + 2


def test_var_inplace_is_the_pytorch_sgd_step():
    w = ad.Var([1.0, -2.0, 3.0])
    x = ad.tensor([0.5, 1.0, -1.0])
    lr = 0.1
    for _ in range(3):
        loss = (w * x).sum() + (w * w).sum()
        g = loss.backward()[w]
        w_before = w.numpy().copy()
        w -= lr * g
        np.testing.assert_allclose(w.numpy(), w_before - lr * (x.numpy() + 2 * w_before),
                                   rtol=1e-6)
    assert w.is_variable and w.op is None
    # nothing was recorded: the update is not a node, w stays the leaf
    y = w * 2.0
    nodes = y.sorted_nodes()
    assert [n.id for n in nodes] == [y.id, w.id]
    # the value changed after it was saved: as after Var.set, backward refuses
    z = (w * w).sum()
    w += 1.0
    with pytest.raises(ad.GraphError):
        z.backward()


def test_var_inplace_with_a_tracked_rhs_records_nothing():
    w = ad.Var([1.0, 2.0])
    u = ad.Var([3.0, 4.0])
    w -= u * w  # the right side depends on two Vars; the update itself is no node
    assert w.tolist() == [-2.0, -6.0] and w.op is None
    g = (w * u).sum().backward()
    assert g[w].tolist() == [3.0, 4.0] and g[u].tolist() == [-2.0, -6.0]
    w *= w  # the right side is the Var itself: no shared-storage refusal
    assert w.tolist() == [4.0, 36.0]
    w += 0.0
    w *= 1
    assert w.tolist() == [4.0, 36.0]


def test_var_inplace_dtype_and_shape_rules():
    w = ad.Var([1.0, 2.0])  # float32
    w += ad.tensor([0.25, 0.25])
    assert w.dtype == ad.float32 and w.tolist() == [1.25, 2.25]
    i0, v0 = w.id, w.version
    with pytest.raises(ad.DTypeError):  # mixed widths: as out of place, an error
        w += ad.tensor([0.25, 0.25], dtype=ad.float64)
    with pytest.raises(ad.ShapeError, match=r"Var \+=.*\(2, 2\).*\(2,\)"):
        w += ad.ones(2, 2)
    with pytest.raises(ad.ShapeError):
        w -= ad.ones(3)
    assert w.tolist() == [1.25, 2.25] and w.id == i0 and w.version == v0


def test_plain_tensor_inplace_operators_rebind():
    t = ad.tensor([1.0, 2.0])
    keep = t
    t -= 1.0
    assert t is not keep and t.id != keep.id
    assert keep.tolist() == [1.0, 2.0] and t.tolist() == [0.0, 1.0]
    t *= 3
    assert t.tolist() == [0.0, 3.0] and not t.is_variable


# ---- item assignment ------------------------------------------------------------------
def test_var_setitem_writes_in_place_with_numpy_rules():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 5))
    w = ad.Var(a, dtype=ad.float64)
    i0, v0 = w.id, w.version
    cases = [
        (1, 7.0), ((2, 3), -1.0), (slice(1, 3), np.arange(5.0)), ((Ellipsis, 0), [1, 2, 3, 4]),
        ((slice(None), slice(None, None, 2)), np.ones((4, 1))), (-1, ad.tensor([9.0] * 5)),
        (([0, 2], [1, 4]), [5.0, 6.0]), (a > 0.5, 0.0), ((ad.tensor([3, 0]),), 2.5),
        ((ad.tensor(1), ad.tensor([0, 1])), ad.tensor([4.0, 4.0], dtype=ad.float64)),
    ]
    for n, (key, value) in enumerate(cases):
        a[key if not isinstance(key, tuple) else tuple(
            k.numpy() if isinstance(k, ad.Tensor) else k for k in key)] = np.asarray(value)
        w[key] = value
        np.testing.assert_array_equal(w.numpy(), a)
        assert w.id == i0 and w.version == v0 + n + 1


def test_var_setitem_pytorch_idioms():
    w = ad.Var([[1.0, -2.0], [3.0, -4.0]])
    w[w > 0] = 0  # a bool-tensor mask
    assert w.tolist() == [[0.0, -2.0], [0.0, -4.0]]
    w[:, 0] += 5  # read a view, add, write back
    w[0] *= 2
    assert w.tolist() == [[10.0, -4.0], [5.0, -4.0]] and w.version == 3
    assert w.op is None and w.is_variable


def test_var_setitem_errors_leave_the_var_unchanged():
    w = ad.Var([[1.0, 2.0], [3.0, 4.0]])
    v0 = w.version
    with pytest.raises(IndexError):
        w[5] = 1.0
    with pytest.raises(ad.OutOfRangeError, match=r"Var\[\.\.\.\] = value"):
        w[0, 2] = 1.0
    with pytest.raises(ad.ShapeError, match="value shape"):
        w[0] = [1.0, 2.0, 3.0]
    with pytest.raises(IndexError):
        w[ad.tensor([0.5])] = 1.0
    assert w.tolist() == [[1.0, 2.0], [3.0, 4.0]] and w.version == v0
    # the write is seen by backward's version check, as Var.set
    y = (w * w).sum()
    w[0, 0] = 5.0
    with pytest.raises(ad.GraphError):
        y.backward()


def test_tensor_setitem_is_a_type_error_naming_var_set():
    t = ad.tensor([1.0, 2.0])
    with pytest.raises(TypeError, match=r"immutable.*Var\.set"):
        t[0] = 5.0
    with pytest.raises(TypeError, match="immutable"):
        t[:] = ad.tensor([3.0, 4.0])
    assert t.tolist() == [1.0, 2.0]


# ---- dim(), float, int, format ----------------------------------------------------------
def test_dim_is_a_method_and_ndim_a_property():
    t = ad.zeros(2, 3, 4)
    assert t.dim() == 3 and t.ndim == 3
    assert ad.tensor(1.0).dim() == 0
    assert ad.Var.zeros(5).dim() == 1


def test_float_int_format_on_one_element_tensors():
    for t in (ad.tensor(2.75), ad.tensor([2.75]), ad.tensor([[2.75]], dtype=ad.float64)):
        assert float(t) == 2.75 and int(t) == 2
        assert format(t, ".3f") == "2.750" and f"{t:8.2f}" == "    2.75"
        assert f"{t:.1e}" == "2.8e+00"
    assert format(ad.tensor(7), "04d") == "0007" and int(ad.tensor([-3])) == -3
    assert format(ad.tensor([1.0, 2.0])) == str(ad.tensor([1.0, 2.0]))  # no spec: the repr
    assert "loss 0.500" == f"loss {ad.tensor(0.5):.3f}"
    for bad in (lambda t: float(t), lambda t: int(t), lambda t: format(t, ".2f")):
        with pytest.raises(ad.InvalidArgumentError, match=r"one element.*\(2,\)"):
            bad(ad.tensor([1.0, 2.0]))
    with pytest.raises(ad.InvalidArgumentError, match=r"float\(\)"):
        float(ad.zeros(0))
    with pytest.raises(ValueError):  # the spec applies to the Python value, as for a float
        format(ad.tensor(1.5), "d")


# ---- torch ---------------------------------------------------------------------------------
def test_torch_as_tensor_and_tensor():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 4))
    cases = [ad.tensor(2.5), ad.tensor([1.0, 2.0]), ad.tensor(a, dtype=ad.float64),
             ad.tensor(a).t(), ad.tensor(a)[:, ::2], ad.tensor([[1, 2], [3, 4]]),
             ad.tensor([True, False]), ad.tensor([1, 255], dtype=ad.uint8),
             ad.Var(a), ad.zeros(0, 3)]
    for t in cases:
        want = t.numpy()
        for conv in (torch.as_tensor, torch.tensor):
            x = conv(t)
            assert tuple(x.shape) == t.shape
            assert x.dtype == torch.from_numpy(np.zeros(1, want.dtype)).dtype
            np.testing.assert_array_equal(x.numpy(), want)
    # torch.tensor copies: writing into it leaves the (immutable) tensor alone
    t = ad.tensor([1.0, 2.0])
    x = torch.tensor(t)
    x += 1
    assert t.tolist() == [1.0, 2.0]
    y = torch.as_tensor(ad.tensor([[1.0, 2.0]]), dtype=torch.float64)
    assert y.dtype == torch.float64 and y.tolist() == [[1.0, 2.0]]
