"""Gradients of every differentiable core op: float64 central differences
(tests/gradcheck.py) on contiguous, transposed, sliced and broadcast inputs,
including 0-sized and 1-sized dims; and the exact gradients of the seed
walkthrough (seeds/004: mul, mul broadcast [1,1,3], matmul, batch-broadcast
matmul [2,2,3] @ [1,3,2])."""
import numpy as np
import pytest

import pyautodiff as ad
from gradcheck import check_grad, layouts

SHAPES = [(2, 3), (1, 3), (3, 1), (2, 1, 3), (0, 3), (2, 0), (4,), (1,)]


def _ids(shape):
    return "x".join(map(str, shape)) or "scalar"


def check_layouts(f, shape, others=(), **kw):
    """check_grad of f(x, *others) with x presented in each layout of `shape`;
    `others` are extra contiguous numpy inputs."""
    for name, base, mk in layouts(shape):
        try:
            check_grad(f, [base, *others], make=lambda i, t, mk=mk: mk(t) if i == 0 else t, **kw)
        except AssertionError as e:
            raise AssertionError(f"layout {name} of shape {shape}: {e}") from None


# ---- unary ---------------------------------------------------------------------------
UNARY = {
    "neg": lambda a: -a,
    "neg_method": lambda a: a.neg(),
    "exp": lambda a: a.exp(),
    "log": lambda a: (a.sqr() + 0.5).log(),
    "sqr": lambda a: a.sqr(),
    "sqrt": lambda a: (a.sqr() + 0.25).sqrt(),
    "relu": lambda a: a.relu(),
    "tanh": lambda a: a.tanh(),
    "add_scalar": lambda a: a + 1.5,
    "radd_scalar": lambda a: 1.5 + a,
    "sub_scalar": lambda a: a - 0.7,
    "rsub_scalar": lambda a: 1 - a,
    "mul_scalar": lambda a: a * 0.5,
    "rmul_scalar": lambda a: -3 * a,
    "div_scalar": lambda a: a / 4,
    "rdiv_scalar": lambda a: 2 / (a.sqr() + 1),
    "pow_2": lambda a: a ** 2,
    "pow_3": lambda a: a ** 3,
    "pow_frac": lambda a: (a.sqr() + 0.5) ** 1.5,
    "pow_neg": lambda a: (a.sqr() + 0.5) ** -0.5,
    "pow_method": lambda a: (a.sqr() + 0.5).pow(0.3),
    "rpow": lambda a: 2 ** a,
    "rpow_frac": lambda a: 0.5 ** a,
    "contiguous": lambda a: a.contiguous(),
    "to_dtype_f64": lambda a: a.to_dtype(ad.float64),
}


@pytest.mark.parametrize("shape", SHAPES, ids=_ids)
@pytest.mark.parametrize("op", list(UNARY))
def test_unary_grad(op, shape):
    check_layouts(UNARY[op], shape)


def test_unary_grad_0d():
    for op, f in UNARY.items():
        check_grad(f, [np.array(0.7)])


def test_to_dtype_float32_roundtrip_grad():
    # float64 -> float32 -> float64 is differentiable (identity up to rounding)
    check_grad(lambda a: a.to_dtype(ad.float32).to_dtype(ad.float64) * 2, [np.array([0.5, -1.25])],
               atol=1e-4, rtol=1e-4, eps=1e-2)  # linear: a large eps beats float32 rounding
    g = check_grad(lambda a: a.to_dtype("float32").sum().to_dtype("float64"),
                   [np.array([[1.0, 2.0]])], atol=1e-4, eps=1e-2)
    np.testing.assert_allclose(g[0], [[1.0, 1.0]])


def test_pow_and_relu_at_zero():
    # PyTorch's conventions: d(x**0)/dx = 0 (not 0 * x**-1 = nan) and relu'(0) = 0
    w = ad.Var([0.0, 2.0], dtype=ad.float64)
    for f, expected in [(lambda t: t ** 0, [0.0, 0.0]), (lambda t: t ** 1, [1.0, 1.0]),
                        (lambda t: t ** 2, [0.0, 4.0]), (lambda t: t ** 3, [0.0, 12.0]),
                        (lambda t: t.relu(), [0.0, 1.0]), (lambda t: t.sqr(), [0.0, 4.0])]:
        np.testing.assert_array_equal(f(w).sum().backward()[w].numpy(), expected)


def test_max_min_ties_split_evenly():
    # ties share the gradient equally (PyTorch's amax/amin; torch.max(dim) would
    # give it all to one index): the total is always 1 per reduced slice
    v = ad.Var([1.0, 1.0, 0.5])
    np.testing.assert_array_equal(v.max(0).backward()[v].numpy(), [0.5, 0.5, 0.0])
    np.testing.assert_array_equal(v.max().backward()[v].numpy(), [0.5, 0.5, 0.0])
    np.testing.assert_array_equal(v.min().backward()[v].numpy(), [0.0, 0.0, 1.0])
    m = ad.Var([[1.0, 1.0, 1.0], [2.0, 3.0, 3.0]])
    np.testing.assert_allclose(m.max(1).sum().backward()[m].numpy(),
                               [[1 / 3, 1 / 3, 1 / 3], [0.0, 0.5, 0.5]])


# ---- binary ------------------------------------------------------------------------------
BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "rsub": lambda a, b: b - a,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / (b.sqr() + 0.5),
    "rdiv": lambda a, b: b / (a.sqr() + 0.5),
}


@pytest.mark.parametrize("shape", SHAPES, ids=_ids)
@pytest.mark.parametrize("op", list(BINARY))
def test_binary_grad(op, shape):
    rng = np.random.default_rng(5)
    check_layouts(BINARY[op], shape, [rng.standard_normal(shape)])


@pytest.mark.parametrize("shapes", [((2, 3), (3,)), ((2, 3), (1, 3)), ((2, 1, 3), (4, 1)),
                                    ((2, 3), ()), ((3, 1), (1, 4)), ((0, 3), (3,)),
                                    ((1, 1, 3), (2, 2, 1))], ids=str)
@pytest.mark.parametrize("op", list(BINARY))
def test_binary_broadcast_grad(op, shapes):
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])
    check_grad(BINARY[op], [a, b])
    check_grad(BINARY[op], [b, a])


def test_same_var_both_sides():
    check_grad(lambda a: a * a + a / (a.sqr() + 1) - a, [np.array([[0.3, -1.2], [2.0, 0.1]])])


def test_grad_only_for_tracked_side():
    # only input 0 is a Var: the other gets no gradient and the first is right
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((2, 3)), rng.standard_normal((2, 3))
    w = ad.Var(a, dtype=ad.float64)
    k = ad.tensor(b, dtype=ad.float64)
    g = (w * k).sum().backward()
    np.testing.assert_allclose(g[w].numpy(), b)
    assert g.get(k) is None


# ---- reductions --------------------------------------------------------------------------------
RED_SHAPES = [(2, 3), (3, 1), (1, 4), (2, 3, 2), (0, 3)]


@pytest.mark.parametrize("shape", RED_SHAPES, ids=_ids)
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("op", ["sum", "mean"])
def test_sum_mean_grad(op, keepdim, shape):
    n = len(shape)
    dims = [None, 0, -1] + ([(0, n - 1)] if n > 1 else []) + ([tuple(range(n))])
    for dim in dims:
        if op == "mean" and 0 in shape:
            continue  # mean over an empty dim is nan
        check_layouts(lambda a, d=dim: getattr(a, op)(d, keepdim=keepdim), shape)
    check_layouts(lambda a: a.sum_all() * 1.0, shape)


@pytest.mark.parametrize("shape", [(2, 3), (3, 1), (1, 4), (2, 3, 2)], ids=_ids)
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("op", ["max", "min"])
def test_max_min_grad(op, keepdim, shape):
    # distinct values: no ties inside one reduced slice
    rng = np.random.default_rng(8)
    base = rng.permutation(int(np.prod(shape))).reshape(shape) / 3.0
    for dim in range(-1, len(shape)):
        check_grad(lambda a: getattr(a, op)(dim, keepdim=keepdim), [base])
        check_grad(lambda a: getattr(a, op)(dim, keepdim=keepdim),
                   [np.ascontiguousarray(np.swapaxes(base, -1, -2))],
                   make=lambda i, t: t.t()) if len(shape) > 1 else None


def test_max_over_broadcast_dim_grad():
    # a broadcast input presents the same element several times in one reduced
    # slice; the numeric gradient w.r.t. the base element is 1 (the max moves by
    # eps), so the analytic one must also total 1 over the copies
    base = np.array([[0.5, -1.0, 2.0]])
    check_grad(lambda a: a.broadcast_to((3, 3)).max(0), [base])
    check_grad(lambda a: a.broadcast_to((3, 3)).min(0), [base])


# ---- layout ops -----------------------------------------------------------------------------------
LAYOUT_OPS = {
    "reshape": lambda a: a.reshape(-1),
    "reshape2": lambda a: a.reshape(a.shape[-1], -1) if a.numel() else a.reshape(a.shape[::-1]),
    "flatten": lambda a: a.flatten(),
    "unsqueeze": lambda a: a.unsqueeze(1),
    "squeeze": lambda a: a.unsqueeze(0).unsqueeze(-1).squeeze(),
    "transpose": lambda a: a.transpose(0, -1),
    "t": lambda a: a.t() if a.ndim >= 2 else a,
    "permute": lambda a: a.permute(tuple(reversed(range(a.ndim)))),
    "narrow": lambda a: a.narrow(-1, 1, a.shape[-1] - 1) if a.shape[-1] else a,
    "slice": lambda a: a[..., ::-2],
    "index": lambda a: a[-1] if a.shape[0] else a,
    "getitem_mixed": lambda a: a[None, 1:, ..., ::2] if a.ndim >= 2 else a[None, ::-1],
    "broadcast_to": lambda a: a.broadcast_to((2,) + a.shape),
    "chain": lambda a: a.t().contiguous().reshape(-1).unsqueeze(0) * 2 if a.ndim >= 2 else a,
}


@pytest.mark.parametrize("shape", [(2, 3), (1, 3), (3, 1), (2, 3, 2), (0, 3), (4,), (1,)],
                         ids=_ids)
@pytest.mark.parametrize("op", list(LAYOUT_OPS))
def test_layout_grad(op, shape):
    check_layouts(LAYOUT_OPS[op], shape)


def test_broadcast_to_grad_sums_over_broadcast_dims():
    g = check_grad(lambda a: a.broadcast_to((4, 2, 3)), [np.ones((2, 1))])
    assert g[0].shape == (2, 1)
    w = ad.Var([[1.0], [2.0]])
    grads = w.broadcast_to((4, 2, 3)).sum().backward()
    np.testing.assert_array_equal(grads[w].numpy(), [[12.0], [12.0]])


# ---- matmul ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("shapes", [((2, 3), (3, 4)), ((1, 3), (3, 1)), ((3, 1), (1, 2)),
                                    ((2, 2, 3), (1, 3, 2)), ((2, 2, 3), (3, 2)),
                                    ((3, 4), (2, 4, 2)), ((2, 1, 2, 3), (3, 3, 2)),
                                    ((3,), (3, 2)), ((2, 3), (3,)), ((3,), (3,)),
                                    ((0, 3), (3, 2)), ((2, 0), (0, 3))], ids=str)
def test_matmul_grad(shapes):
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])
    check_grad(lambda x, y: x @ y, [a, b])


@pytest.mark.parametrize("shape", [(2, 3), (1, 3), (3, 1), (0, 3)], ids=_ids)
def test_matmul_grad_layouts(shape):
    rng = np.random.default_rng(10)
    other = rng.standard_normal((shape[-1], 2))
    check_layouts(lambda x, y: x @ y, shape, [other])
    check_layouts(lambda x, y: y.t() @ x.t(), shape, [other])


# ---- the seed walkthrough (seeds/004) ---------------------------------------------------------------
def seq(n, step, start):
    return [start + step * i for i in range(n)]


def f32(values, shape):
    return ad.tensor(np.array(values, dtype=np.float32).reshape(shape))


def close6(t, expected):
    np.testing.assert_allclose(t.numpy().reshape(-1), expected, rtol=0, atol=1e-6)


W6 = [0.3, -1.2, 0.7, 2.0, -0.5, 1.1]


def test_seed_mul():
    x0 = ad.Var(f32(seq(6, 0.5, -1.0), (1, 2, 3)))
    x1 = ad.Var(f32([1, 0.75, 0.5, 0.25, 0, -0.25], (1, 2, 3)))
    w = f32(W6, (1, 2, 3))
    g = (x0 * x1 * w).sum().backward()
    assert g[x0].shape == (1, 2, 3) and g[x1].shape == (1, 2, 3)
    close6(g[x0], [0.3, -0.90000004, 0.35, 0.5, -0.0, -0.275])
    close6(g[x1], [-0.3, 0.6, 0.0, 1.0, -0.5, 1.6500001])


def test_seed_mul_broadcast():
    x0 = ad.Var(f32(seq(6, 0.5, -1.0), (1, 2, 3)))
    x1 = ad.Var(f32([2.0, -1.0, 0.5], (1, 1, 3)))
    w = f32(W6, (1, 2, 3))
    g = (x0 * x1 * w).sum().backward()
    assert g[x0].shape == (1, 2, 3) and g[x1].shape == (1, 1, 3)
    close6(g[x0], [0.6, 1.2, 0.35, 4.0, 0.5, 0.55])
    close6(g[x1], [0.7, 0.100000024, 1.6500001])


def test_seed_matmul():
    x0 = ad.Var(f32(seq(6, 0.5, -1.0), (1, 2, 3)))
    x1 = ad.Var(f32([1, 0.75, 0.5, 0.25, 0, -0.25], (1, 3, 2)))
    w = f32([0.3, -1.2, 0.7, 2.0], (1, 2, 2))
    g = ((x0 @ x1) * w).sum().backward()
    assert g[x0].shape == (1, 2, 3) and g[x1].shape == (1, 3, 2)
    close6(g[x0], [-0.6, -0.15, 0.3, 2.2, 0.85, -0.5])
    close6(g[x1], [0.049999982, 2.2, 0.54999995, 2.6, 1.05, 3.0])


def test_seed_matmul_batch_broadcast():
    x0 = ad.Var(f32(seq(12, 0.5, -1.0), (2, 2, 3)))
    x1 = ad.Var(f32([1, 0.75, 0.5, 0.25, 0, -0.25], (1, 3, 2)))
    w = f32([0.3, -1.2, 0.7, 2.0, 1.0, 0.5, -0.5, 1.5], (2, 2, 2))
    g = ((x0 @ x1) * w).sum().backward()
    assert g[x0].shape == (2, 2, 3) and g[x1].shape == (1, 3, 2)
    close6(g[x0], [-0.6, -0.15, 0.3, 2.2, 0.85, -0.5, 1.375, 0.625, -0.125, 0.625, 0.125,
                   -0.375])
    close6(g[x1], [0.29999998, 8.45, 1.05, 9.85, 1.8, 11.25])


@pytest.mark.parametrize("case", ["mul", "mul_broadcast", "matmul", "matmul_batch"])
def test_seed_cases_gradcheck_float64(case):
    """The same four functions through the float64 central-difference check."""
    x0_6 = np.array(seq(6, 0.5, -1.0)).reshape(1, 2, 3)
    if case == "mul":
        w = ad.tensor(np.array(W6).reshape(1, 2, 3), dtype=ad.float64)
        check_grad(lambda a, b: a * b * w,
                   [x0_6, np.array([1, 0.75, 0.5, 0.25, 0, -0.25]).reshape(1, 2, 3)])
    elif case == "mul_broadcast":
        w = ad.tensor(np.array(W6).reshape(1, 2, 3), dtype=ad.float64)
        check_grad(lambda a, b: a * b * w, [x0_6, np.array([2.0, -1.0, 0.5]).reshape(1, 1, 3)])
    elif case == "matmul":
        w = ad.tensor(np.array([0.3, -1.2, 0.7, 2.0]).reshape(1, 2, 2), dtype=ad.float64)
        check_grad(lambda a, b: (a @ b) * w,
                   [x0_6, np.array([1, 0.75, 0.5, 0.25, 0, -0.25]).reshape(1, 3, 2)])
    else:
        w = ad.tensor(np.array([0.3, -1.2, 0.7, 2.0, 1.0, 0.5, -0.5, 1.5]).reshape(2, 2, 2),
                      dtype=ad.float64)
        check_grad(lambda a, b: (a @ b) * w,
                   [np.array(seq(12, 0.5, -1.0)).reshape(2, 2, 3),
                    np.array([1, 0.75, 0.5, 0.25, 0, -0.25]).reshape(1, 3, 2)])


def test_rpow_of_zero_has_zero_gradient_where_the_exponent_is_not_negative():
    # d 0^x = 0^x log 0 is 0 * -inf for x > 0 and -inf at x = 0: 0 where x >= 0,
    # as pow's exponent gradient and torch's; also recorded and checkpointed
    x = np.array([0.0, 1.0, 2.5, -1.0])
    for dt in (ad.float64, ad.float32):
        v = ad.Var(x, dtype=dt)
        g = (0.0 ** v).sum().backward()[v].numpy()
        assert g.tolist() == [0.0, 0.0, 0.0, -np.inf]
        (gc,) = ad.grad((0.0 ** v).sum(), [v], create_graph=True)
        assert gc.numpy().tolist() == g.tolist()
        with ad.checkpointing("balanced"):
            loss = (0.0 ** (v * 1.0)).sum()
        assert loss.backward()[v].numpy().tolist() == g.tolist()
        g2 = (2.0 ** v).sum().backward()[v].numpy()  # other bases unchanged
        np.testing.assert_allclose(g2, 2.0 ** x * np.log(2.0), rtol=1e-6)
