"""Elementwise math, reductions and the softmax family (op kinds 40..79):
forward against numpy, float64 gradient checks on every layout, ties,
`where` with a non-finite unselected branch, error paths."""
import math

import numpy as np
import pytest

import pyautodiff as ad
from faults import sweep_alloc_failures
from gradcheck import check_grad, layouts

_erf = np.vectorize(math.erf, otypes=[np.float64])
_C = math.sqrt(2 / math.pi)


def _softmax(x, d):
    e = np.exp(x - x.max(axis=d, keepdims=True))
    return e / e.sum(axis=d, keepdims=True)


def _lse(x, d, keepdims=False):
    m = x.max(axis=d, keepdims=True)
    r = m + np.log(np.exp(x - m).sum(axis=d, keepdims=True))
    return r if keepdims else np.squeeze(r, axis=d)


# (name, apply, numpy oracle, domain: maps a standard-normal array into the op's domain)
UNARY = [
    ("abs", lambda t: t.abs(), np.abs, None),
    ("recip", lambda t: t.recip(), lambda x: 1 / x, lambda x: np.sign(x) * (np.abs(x) + 0.5)),
    ("sin", lambda t: t.sin(), np.sin, None),
    ("cos", lambda t: t.cos(), np.cos, None),
    ("sigmoid", lambda t: t.sigmoid(), lambda x: 1 / (1 + np.exp(-x)), None),
    ("gelu", lambda t: t.gelu(),
     lambda x: 0.5 * x * (1 + np.tanh(_C * (x + 0.044715 * x ** 3))), None),
    ("gelu_erf", lambda t: t.gelu_erf(), lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))), None),
    ("erf", lambda t: t.erf(), _erf, None),
    ("silu", lambda t: t.silu(), lambda x: x / (1 + np.exp(-x)), None),
    ("softplus", lambda t: t.softplus(), lambda x: np.log1p(np.exp(x)), None),
    ("elu", lambda t: t.elu(), lambda x: np.where(x > 0, x, np.expm1(x)), None),
    ("elu_alpha", lambda t: t.elu(0.7), lambda x: np.where(x > 0, x, 0.7 * np.expm1(x)), None),
    ("log1p", lambda t: t.log1p(), np.log1p, lambda x: np.abs(x) - 0.5),
    ("expm1", lambda t: t.expm1(), np.expm1, None),
    ("floor", lambda t: t.floor(), np.floor, None),
    ("ceil", lambda t: t.ceil(), np.ceil, None),
    ("round", lambda t: t.round(), np.round, None),
    ("sign", lambda t: t.sign(), np.sign, None),
    ("clamp", lambda t: t.clamp(-0.5, 0.7), lambda x: np.clip(x, -0.5, 0.7), None),
    ("clamp_min", lambda t: t.clamp(min=-0.3), lambda x: np.maximum(x, -0.3), None),
    ("clamp_max", lambda t: t.clamp(max=0.2), lambda x: np.minimum(x, 0.2), None),
]
UNARY_IDS = [u[0] for u in UNARY]


def _gradcheck_layouts(f, shape, domain=None, nin=1, **kw):
    for name, base, make in layouts(shape):
        if domain is not None:
            base = domain(base)
        inputs = [base] * nin
        check_grad(f, inputs, make=lambda i, t, make=make: make(t), **kw)


@pytest.mark.parametrize("name,fn,ref,domain", UNARY, ids=UNARY_IDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unary_forward(name, fn, ref, domain, dtype):
    rng = np.random.default_rng(len(name))
    for shape in [(7,), (3, 5), (2, 3, 4), (), (0, 3)]:
        x = rng.standard_normal(shape) * 2
        if domain is not None:
            x = domain(x)
        x = np.asarray(x, dtype=dtype)
        y = fn(ad.tensor(x))
        assert y.dtype == ad.tensor(x).dtype and y.shape == x.shape
        tol = 1e-6 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(y.numpy(), ref(x.astype(np.float64)), rtol=tol * 10,
                                   atol=tol, err_msg=name)


@pytest.mark.parametrize("name,fn,ref,domain", UNARY, ids=UNARY_IDS)
def test_unary_grad(name, fn, ref, domain):
    _gradcheck_layouts(fn, (3, 4), domain)
    for shape in [(1, 3), (0, 3), (1,)]:
        base = np.random.default_rng(3).standard_normal(shape)
        check_grad(fn, [domain(base) if domain else base])


def test_zero_gradient_ops_record_zero():
    """floor/ceil/round/sign are piecewise constant: gradient 0 everywhere."""
    x = ad.Var([[0.3, -1.7], [2.5, 0.0]], dtype=ad.float64)
    for f in (ad.Tensor.floor, ad.Tensor.ceil, ad.Tensor.round, ad.Tensor.sign):
        g = f(x).sum().backward()[x]
        assert np.array_equal(g.numpy(), np.zeros((2, 2)))


def test_round_half_to_even_and_sign_edge_values():
    x = ad.tensor([0.5, 1.5, 2.5, -0.5, -2.5], dtype=ad.float64)
    assert x.round().tolist() == [0.0, 2.0, 2.0, -0.0, -2.0]
    assert ad.tensor([-3, 0, 5]).sign().tolist() == [-1, 0, 1]
    assert ad.tensor([-3, 0, 5]).abs().tolist() == [3, 0, 5]


def test_abs_gradient_zero_at_zero():
    x = ad.Var([-2.0, 0.0, 3.0], dtype=ad.float64)
    assert x.abs().sum().backward()[x].tolist() == [-1.0, 0.0, 1.0]


def test_clamp_gradient_inclusive_bounds_and_int_dtype():
    x = ad.Var([-2.0, -1.0, 0.0, 1.0, 2.0], dtype=ad.float64)
    g = x.clamp(-1.0, 1.0).sum().backward()[x]
    assert g.tolist() == [0.0, 1.0, 1.0, 1.0, 0.0]  # PyTorch: min <= x <= max passes
    assert x.clamp().tolist() == x.tolist()
    i = ad.tensor([-5, 0, 7, 300])
    assert i.clamp(-1, 5).tolist() == [-1, 0, 5, 5]
    assert ad.tensor([0, 9, 255], dtype=ad.uint8).clamp(3, 1000).tolist() == [3, 9, 255]
    with pytest.raises(ad.DTypeError, match="clamp"):
        i.clamp(0.5, 2)
    # min > max: everything becomes max (PyTorch)
    assert ad.tensor([0.0, 5.0]).clamp(3.0, 1.0).tolist() == [1.0, 1.0]


def test_softplus_and_sigmoid_are_stable():
    x = ad.tensor([-1000.0, -50.0, 0.0, 50.0, 1000.0], dtype=ad.float64)
    np.testing.assert_allclose(x.softplus().numpy(), [0.0, np.exp(-50.0), np.log(2), 50.0,
                                                      1000.0], rtol=1e-12)
    assert np.all(np.isfinite(x.sigmoid().numpy()))


# ---- binary ------------------------------------------------------------------------
BINARY = [
    ("maximum", lambda a, b: ad.maximum(a, b), np.maximum, None),
    ("minimum", lambda a, b: a.minimum(b), np.minimum, None),
    ("pow", lambda a, b: a.pow(b), np.power, lambda x: np.abs(x) + 0.3),
    ("pow_op", lambda a, b: a ** b, np.power, lambda x: np.abs(x) + 0.3),
]


@pytest.mark.parametrize("name,fn,ref,domain", BINARY, ids=[b[0] for b in BINARY])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_binary_forward(name, fn, ref, domain, dtype):
    rng = np.random.default_rng(7)
    for sa, sb in [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 5)), ((0, 2), (2,))]:
        a, b = rng.standard_normal(sa), rng.standard_normal(sb)
        if domain:
            a = domain(a)
        a, b = a.astype(dtype), b.astype(dtype)
        y = fn(ad.tensor(a), ad.tensor(b))
        tol = 1e-6 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(y.numpy(), ref(a.astype(np.float64), b.astype(np.float64)),
                                   rtol=tol * 10, atol=tol)


@pytest.mark.parametrize("name,fn,ref,domain", BINARY, ids=[b[0] for b in BINARY])
def test_binary_grad(name, fn, ref, domain):
    rng = np.random.default_rng(11)
    for (la_name, a, ma), (lb_name, b, mb) in zip(layouts((3, 4)), layouts((3, 4), rng)):
        if domain:
            a = domain(a)
        mk = (ma, mb)
        check_grad(fn, [a, b], make=lambda i, t: mk[i](t))
    for sa, sb in [((3, 4), (4,)), ((3, 1), (1, 4)), ((0, 2), (1,)), ((1, 1), (1,))]:
        a, b = rng.standard_normal(sa), rng.standard_normal(sb)
        check_grad(fn, [domain(a) if domain else a, b])


def test_maximum_minimum_ties_split_gradient():
    a = ad.Var([1.0, 2.0, 3.0], dtype=ad.float64)
    b = ad.Var([1.0, 5.0, 0.0], dtype=ad.float64)
    gs = ad.maximum(a, b).sum().backward()
    assert gs[a].tolist() == [0.5, 0.0, 1.0] and gs[b].tolist() == [0.5, 1.0, 0.0]
    gs = ad.minimum(a, b).sum().backward()
    assert gs[a].tolist() == [0.5, 1.0, 0.0] and gs[b].tolist() == [0.5, 0.0, 1.0]
    # against a broadcast scalar: the 0-d side sums its shares
    s = ad.Var(2.0, dtype=ad.float64)
    gs = ad.maximum(a, s).sum().backward()
    assert gs[a].tolist() == [0.0, 0.5, 1.0] and gs[s].item() == 1.5
    assert ad.maximum(ad.tensor([1, 7]), 3).tolist() == [3, 7]  # integers too


def test_pow_tensor_exponent_edge_cases():
    a = ad.Var([0.0, 2.0, 3.0], dtype=ad.float64)
    b = ad.Var([2.0, 0.0, 1.5], dtype=ad.float64)
    gs = (a ** b).sum().backward()
    np.testing.assert_allclose(gs[a].numpy(), [0.0, 0.0, 1.5 * 3 ** 0.5])
    np.testing.assert_allclose(gs[b].numpy(), [0.0, np.log(2.0), 3 ** 1.5 * np.log(3.0)])
    # 0 ** negative: inf, and PyTorch's d/db = inf * log(0) = -inf is kept
    a = ad.Var([0.0], dtype=ad.float64)
    b = ad.Var([-1.0], dtype=ad.float64)
    assert (a ** b).sum().backward()[b].tolist() == [-np.inf]
    # reflected: numpy array base
    y = np.array([2.0, 3.0]) ** ad.tensor([3.0, 2.0], dtype=ad.float64)
    assert y.tolist() == [8.0, 9.0]


# ---- where ------------------------------------------------------------------------------
def test_where_forward_broadcast_and_dtypes():
    rng = np.random.default_rng(5)
    c = rng.standard_normal((3, 1)) > 0
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4,))
    for dt in (np.float32, np.float64, np.int64, np.int32, np.uint8):
        y = ad.where(ad.tensor(c), ad.tensor(a.astype(dt)), ad.tensor(b.astype(dt)))
        np.testing.assert_array_equal(y.numpy(), np.where(c, a.astype(dt), b.astype(dt)))
    y = ad.where(ad.tensor(c), 1.0, ad.tensor(b, dtype=ad.float32))  # a scalar takes b's dtype
    np.testing.assert_allclose(y.numpy(), np.where(c, 1.0, b).astype(np.float32))
    assert y.dtype == ad.float32


def test_where_select_paths_bit_for_bit():
    # the vectorised loops (both value operands contiguous, one of them a
    # repeated value) and the strided one select bits: payload NaNs, -0 and
    # infinities of the selected operand come through unchanged, the other
    # operand's never
    rng = np.random.default_rng(6)
    n = 1006
    c = rng.random(n) < 0.5
    for dt in (np.float32, np.float64, np.int64, np.int32, np.uint8):
        a = (rng.standard_normal(n) * 100).astype(dt)
        b = (rng.standard_normal(n) * 100).astype(dt)
        if np.dtype(dt).kind == "f":
            bits = a.view(np.uint32 if dt == np.float32 else np.uint64)
            bits[::7] |= np.array(0x7fc00123 if dt == np.float32 else 0x7ff8000000000123,
                                  bits.dtype)  # payload NaNs
            a[3::11] = -0.0
            b[5::13] = np.inf
        s = dt(3) if np.dtype(dt).kind != "f" else dt(-0.0)
        tc, ta, tb, ts = (ad.from_numpy(np.asarray(v)) for v in (c, a, b, np.array(s, dt)))
        cases = [(ad.where(tc, ta, tb), np.where(c, a, b)),
                 (ad.where(tc, ta, ts), np.where(c, a, s)),
                 (ad.where(tc, ts, tb), np.where(c, s, b)),
                 (ad.where(tc, ts, tb[7]), np.where(c, s, b[7])),
                 (ad.where(tc[::2], ta[::2], tb[1::2]), np.where(c[::2], a[::2], b[1::2]))]
        for got, want in cases:
            assert got.numpy().tobytes() == want.tobytes(), dt


def test_where_grad_layouts():
    c = np.random.default_rng(2).standard_normal((3, 4)) > 0
    cond = ad.tensor(c)
    rng = np.random.default_rng(3)
    for (_, a, ma), (_, b, mb) in zip(layouts((3, 4)), layouts((3, 4), rng)):
        mk = (ma, mb)
        check_grad(lambda x, y: ad.where(cond, x, y), [a, b], make=lambda i, t: mk[i](t))
    cb = ad.tensor(c[:, :1])
    check_grad(lambda x, y: ad.where(cb, x, y), [rng.standard_normal((4,)),
                                                 rng.standard_normal((3, 1))])


def test_where_nonfinite_unselected_branch_does_not_poison_gradient():
    # the branches themselves hold inf and nan where they are not selected: a
    # blend c*a + (1-c)*b would turn them into nan in the value and gradient
    a = ad.Var([1.0, np.inf, 3.0, np.nan], dtype=ad.float64)
    b = ad.Var([np.nan, 2.0, -np.inf, 4.0], dtype=ad.float64)
    c = ad.tensor([True, False, True, False])
    y = ad.where(c, a, b)
    assert y.tolist() == [1.0, 2.0, 3.0, 4.0]
    gs = (y * y).sum().backward()
    assert gs[a].tolist() == [2.0, 0.0, 6.0, 0.0]
    assert gs[b].tolist() == [0.0, 4.0, 0.0, 8.0]
    # an op whose value is nan where unselected (log of a negative) gets a zero
    # gradient there, not nan
    x = ad.Var([-1.0, -3.0, 0.5, 4.0], dtype=ad.float64)
    g = ad.where(x > 0, x.log(), x).sum().backward()[x]
    np.testing.assert_allclose(g.numpy(), [1.0, 1.0, 2.0, 0.25])


# ---- reductions -----------------------------------------------------------------------
DIMS = [None, 0, 1, -1, (0, 1), (0, 2)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_prod_forward(dtype):
    rng = np.random.default_rng(0)
    x = rng.uniform(0.5, 1.5, (2, 3, 4)).astype(dtype)
    for d in DIMS:
        for k in (False, True):
            np.testing.assert_allclose(ad.tensor(x).prod(d, keepdim=k).numpy(),
                                       np.prod(x, axis=d, keepdims=k), rtol=1e-6)
    assert ad.tensor([2, 3, 4]).prod().item() == 24
    assert ad.tensor([[2, 3]], dtype=ad.int32).prod(1).dtype == ad.int64
    assert ad.zeros((0, 3)).prod(0).tolist() == [1.0, 1.0, 1.0]


def test_prod_grad_layouts_and_dims():
    _gradcheck_layouts(lambda t: t.prod(1), (3, 4))
    _gradcheck_layouts(lambda t: t.prod(), (2, 3))
    x = np.random.default_rng(1).uniform(0.5, 1.5, (2, 3, 4))
    for d in DIMS:
        check_grad(lambda t, d=d: t.prod(d, keepdim=True), [x])
    check_grad(lambda t: t.prod(0), [np.ones((0, 3))])
    check_grad(lambda t: t.prod(0), [np.ones((1, 3))])


def test_prod_grad_with_zeros():
    x = np.array([[2.0, 0.0, 3.0], [0.0, 0.0, 5.0], [1.5, 2.0, 4.0]])
    g = check_grad(lambda t: t.prod(1), [x])[0]
    # spelled out (w: check_grad's output weights): the only zero of row 0 gets
    # the product of the others, a row with two zeros gets nothing
    w = np.random.default_rng(0).uniform(0.5, 1.5, 3)
    np.testing.assert_allclose(g[0], [0.0, 6.0 * w[0], 0.0])
    np.testing.assert_allclose(g[1], [0.0, 0.0, 0.0])
    check_grad(lambda t: t.prod((0, 1)), [x])
    check_grad(lambda t: t.prod(0), [x.T.copy()])


def test_max_min_over_several_dims_ties_split():
    x = ad.Var([[[1.0, 3.0], [3.0, 0.0]], [[2.0, 2.0], [-1.0, 2.0]]], dtype=ad.float64)
    g = x.max((1, 2)).sum().backward()[x]
    np.testing.assert_allclose(g.numpy(), [[[0, 0.5], [0.5, 0]], [[1 / 3, 1 / 3], [0, 1 / 3]]])
    g = x.min((0, 2), keepdim=True).sum().backward()[x]
    np.testing.assert_allclose(g.numpy(), [[[1.0, 0], [0, 0]], [[0, 0], [1.0, 0]]])
    g = x.max().backward()[x]
    np.testing.assert_allclose(g.numpy(), [[[0, 0.5], [0.5, 0]], [[0, 0], [0, 0]]])
    # without ties the multi-dim reductions pass the central-difference check
    base = np.random.default_rng(4).permutation(24).reshape(2, 3, 4).astype(np.float64)
    for d in [(0, 1), (1, 2), (0, 2), None]:
        check_grad(lambda t, d=d: t.max(d), [base])
        check_grad(lambda t, d=d: t.min(d, keepdim=True), [base])
    _gradcheck_layouts(lambda t: t.max((0, 1)), (3, 4))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_family_forward(dtype):
    rng = np.random.default_rng(9)
    for shape in [(5,), (3, 4), (2, 3, 5)]:
        x = (rng.standard_normal(shape) * 3).astype(dtype)
        for d in range(-len(shape), len(shape)):
            xd = x.astype(np.float64)
            tol = 1e-6 if dtype == np.float32 else 1e-12
            np.testing.assert_allclose(ad.tensor(x).softmax(d).numpy(), _softmax(xd, d),
                                       rtol=tol * 10, atol=tol)
            np.testing.assert_allclose(ad.tensor(x).log_softmax(d).numpy(),
                                       np.log(_softmax(xd, d)), rtol=tol * 10, atol=tol)
            for k in (False, True):
                np.testing.assert_allclose(ad.tensor(x).logsumexp(d, keepdim=k).numpy(),
                                           _lse(xd, d, k), rtol=tol * 10, atol=tol)
            np.testing.assert_allclose(ad.tensor(x).cumsum(d).numpy(), np.cumsum(xd, axis=d),
                                       rtol=tol * 10, atol=tol * 10)
    x = rng.standard_normal((2, 3, 4))
    np.testing.assert_allclose(ad.tensor(x, dtype=ad.float64).logsumexp((0, 2)).numpy(),
                               np.log(np.exp(x).sum(axis=(0, 2))), rtol=1e-12)
    np.testing.assert_allclose(
        ad.tensor(x, dtype=ad.float64).logsumexp((2, 0), keepdim=True).numpy(),
        np.log(np.exp(x).sum(axis=(0, 2), keepdims=True)), rtol=1e-12)


def test_softmax_family_is_numerically_stable():
    x = ad.tensor([[1000.0, 1000.0, -1000.0], [-np.inf, 0.0, -np.inf]], dtype=ad.float64)
    np.testing.assert_allclose(x.softmax(1).numpy(), [[0.5, 0.5, 0.0], [0.0, 1.0, 0.0]])
    np.testing.assert_allclose(x.log_softmax(1).numpy()[0, :2], [-np.log(2)] * 2)
    np.testing.assert_allclose(x.logsumexp(1).numpy(), [1000.0 + np.log(2), 0.0])
    assert ad.full((2, 3), -np.inf).logsumexp(1).tolist() == [-np.inf, -np.inf]
    assert ad.zeros((2, 0)).logsumexp(1).tolist() == [-np.inf, -np.inf]
    assert ad.tensor(3.0).softmax(0).item() == 1.0


def test_softmax_family_grad():
    for d in (0, 1, -1):
        _gradcheck_layouts(lambda t, d=d: t.softmax(d), (3, 4))
        _gradcheck_layouts(lambda t, d=d: t.log_softmax(d), (3, 4))
        _gradcheck_layouts(lambda t, d=d: t.logsumexp(d), (3, 4))
        _gradcheck_layouts(lambda t, d=d: t.cumsum(d), (3, 4))
    x = np.random.default_rng(6).standard_normal((2, 3, 4))
    check_grad(lambda t: t.logsumexp((0, 2), keepdim=True), [x])
    check_grad(lambda t: t.logsumexp(1, keepdim=True), [x])
    for shape in [(1, 3), (0, 3), (3, 1)]:
        b = np.random.default_rng(1).standard_normal(shape)
        for f in (lambda t: t.softmax(1), lambda t: t.log_softmax(1), lambda t: t.logsumexp(1),
                  lambda t: t.cumsum(1), lambda t: t.cumsum(0)):
            check_grad(f, [b])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_family_grad_one_pass(dtype):
    """The one-pass gradient (backward without create_graph) along every dim,
    with more than one block of positions after it (256), and a gradient in
    another layout, against float64 and the recorded formula (create_graph)."""
    rng = np.random.default_rng(9)
    tol = 2e-6 if dtype == np.float32 else 1e-13
    for shape, dim in [((5, 37), 1), ((5, 37), 0), ((3, 4, 300), 1), ((2, 600, 3), 1),
                       ((3, 4, 300), -1), ((7,), 0), ((), 0), ((4, 0), 1), ((0, 4), 1)]:
        x = rng.standard_normal(shape).astype(dtype)
        gt = rng.standard_normal(shape[::-1]).astype(dtype)
        for log in (False, True):
            v = ad.Var(x)
            G = ad.from_numpy(gt).permute(tuple(range(len(shape)))[::-1])  # strided
            f = (lambda: (v.log_softmax(dim) if log else v.softmax(dim)) * G)
            (d,) = ad.grad(f().sum(), [v])
            (dc,) = ad.grad(f().sum(), [v], create_graph=True)
            xd, gd = x.astype(np.float64), gt.T.astype(np.float64)
            if x.ndim == 0:
                ref = np.zeros(())
            else:
                e = np.exp(xd - xd.max(axis=dim, keepdims=True)) if xd.size else xd
                sm = e / e.sum(axis=dim, keepdims=True) if xd.size else xd
                ref = (gd - sm * gd.sum(axis=dim, keepdims=True) if log
                       else sm * (gd - (gd * sm).sum(axis=dim, keepdims=True)))
            assert d.shape == shape and d.dtype == dtype
            np.testing.assert_allclose(d.numpy(), ref, rtol=0, atol=tol)
            np.testing.assert_allclose(d.numpy(), dc.numpy(), rtol=0, atol=tol)


def test_cumsum_int_and_errors():
    assert ad.tensor([[1, 2], [3, 4]]).cumsum(0).tolist() == [[1, 2], [4, 6]]
    # int32, uint8 and bool sum in int64, as sum does and torch and numpy do:
    # past the small dtype's range, on strided and 0-d inputs, along either dim
    rng = np.random.default_rng(5)
    for dt, a in ((ad.int32, rng.integers(2**30, 2**31 - 1, (5, 4), dtype=np.int32)),
                  (ad.uint8, rng.integers(0, 256, (5, 4), dtype=np.uint8)),
                  (ad.bool, rng.random((5, 4)) < 0.5)):
        t = ad.from_numpy(a)
        assert t.dtype is dt
        for x, xn in ((t, a), (t.t(), a.T), (t[::-2], a[::-2]), (t[1, 1], a[1, 1])):
            for d in range(max(xn.ndim, 1)):
                got = x.cumsum(d)
                assert got.dtype is ad.int64 and got.shape == xn.shape
                np.testing.assert_array_equal(got.numpy(), np.cumsum(xn, axis=d, dtype=np.int64)
                                              if xn.ndim else xn.astype(np.int64))
    with pytest.raises(ad.OutOfRangeError, match=r"cumsum: dim 2 .*int32"):
        ad.tensor([1, 2], dtype=ad.int32).cumsum(2)
    with pytest.raises(ad.DTypeError, match="softmax"):
        ad.tensor([1, 2], dtype=ad.int32).softmax(0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_var_std_forward(dtype):
    x = np.random.default_rng(8).standard_normal((3, 4, 5)).astype(dtype)
    t = ad.tensor(x)
    # float64: a few ulps over <= 60 terms (the summation orders differ)
    rtol = 1e-5 if dtype == np.float32 else 1e-13
    for d in [None, 0, -1, (0, 2)]:
        for c in (0, 1, 2):
            for k in (False, True):
                np.testing.assert_allclose(t.var(d, correction=c, keepdim=k).numpy(),
                                           np.var(x, axis=d, ddof=c, keepdims=k), rtol=rtol)
                np.testing.assert_allclose(t.std(d, correction=c, keepdim=k).numpy(),
                                           np.std(x, axis=d, ddof=c, keepdims=k), rtol=rtol)


def test_var_std_grad():
    _gradcheck_layouts(lambda t: t.var(1), (3, 4))
    _gradcheck_layouts(lambda t: t.std(1, correction=0), (3, 4))
    _gradcheck_layouts(lambda t: t.var(), (3, 4))
    check_grad(lambda t: t.std((0, 2), keepdim=True),
               [np.random.default_rng(2).standard_normal((2, 3, 4))])


# ---- graph shape: one tensor used twice ------------------------------------------------
def test_same_tensor_used_twice():
    x = np.random.default_rng(12).standard_normal((3, 4))
    check_grad(lambda a: a.sin() * a.cos() + ad.maximum(a, a) + a.softmax(1) * a.sigmoid(), [x])
    check_grad(lambda a: ad.where(ad.tensor(x > 0), a.gelu(), a.elu()) + a.abs().pow(a), [x])
    check_grad(lambda a: a.prod(0) * a.logsumexp(0) + a.cumsum(1).sum(0), [x])


# ---- errors --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["sin", "cos", "sigmoid", "gelu", "erf", "recip", "log1p",
                                  "floor", "softplus"])
def test_float_only_ops_reject_integers(name):
    with pytest.raises(ad.DTypeError, match=name):
        getattr(ad.tensor([1, 2]), name)()


def test_error_paths_leave_no_tensors_behind():
    before = ad.live_tensors()
    x = ad.tensor([[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(IndexError):
        x.softmax(2)
    with pytest.raises(IndexError):
        x.log_softmax(-3)
    with pytest.raises(IndexError):
        x.logsumexp(5)
    with pytest.raises(IndexError):
        x.cumsum(2)
    with pytest.raises(IndexError):
        x.prod(3)
    with pytest.raises(ad.DTypeError, match="where"):
        ad.where(x, x, x)
    with pytest.raises(ad.DTypeError, match="where"):
        ad.where(x > 1, x, x.double())
    with pytest.raises(ad.DTypeError, match="maximum"):
        ad.maximum(x, x.double())
    with pytest.raises(ad.DTypeError, match="not an integer"):
        ad.maximum(ad.tensor([1, 2]), 1.5)
    with pytest.raises(ad.ShapeError, match="where"):
        ad.where(ad.tensor([True, False, True]), x, x)
    with pytest.raises(ad.DTypeError, match="pow"):
        ad.tensor([1, 2]) ** ad.tensor([1, 2])
    with pytest.raises(ad.InvalidArgumentError, match="clamp"):
        x.clamp(float("nan"))
    del x
    assert ad.live_tensors() == before


def test_backward_releases_everything():
    before = ad.live_tensors()
    x = ad.Var(np.random.default_rng(0).standard_normal((4, 5)), dtype=ad.float64)
    y = (x.gelu() + x.softmax(1) + x.clamp(-0.5, 0.5) + ad.where(x > 0, x, x.exp())).prod(1)
    gs = (y.logsumexp(0) + x.var() + x.cumsum(0).sum()).backward()
    assert gs[x].shape == (4, 5)
    del x, y, gs
    assert ad.live_tensors() == before


def _math_graph():
    x = ad.Var([[0.5, -1.0, 0.0], [2.0, 0.0, -0.3]], dtype=ad.float64)
    y = (x.gelu() + x.gelu_erf() + x.silu() + x.elu() + x.abs() + x.clamp(-0.5, 1.0)
         + ad.maximum(x, x.cos()) + ad.where(x > 0, x.log(), x.sin()) + x.abs().pow(x))
    z = y.prod(1).logsumexp(0) + y.softmax(1).sum() + y.log_softmax(0).sum() + y.cumsum(1).sum()
    gs = (z + x.var() + x.erf().sum() + x.sigmoid().sum()).backward()
    return [gs[x].numpy().copy()]


def test_allocation_failures_in_math_ops_are_clean():
    """Every native allocation of forward and backward made to fail in turn:
    each gives OutOfMemoryError and leaks nothing."""
    sweep_alloc_failures(_math_graph, min_failures=100)
