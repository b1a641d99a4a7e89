"""F.linear / nn.Linear as one fused op: act(x @ w^T + b) with the bias and
the activation applied in the GEMM's epilogue, and a backward that forms the
bias gradient in the pass that masks g.  numpy is the forward oracle; the
fused op must agree bit for bit with the unfused ops on 2-d inputs (same
GEMM path) and to float rounding elsewhere."""
import numpy as np
import pytest

import pyautodiff as ad
import pyautodiff.nn.functional as F
from gradcheck import check_grad, layouts

ACTS = [None, "relu", "tanh", "sigmoid"]
NP_ACT = {None: lambda z: z, "relu": lambda z: np.maximum(z, 0), "tanh": np.tanh,
          "sigmoid": lambda z: 1 / (1 + np.exp(-z))}


def unfused(x, w, b, act):
    y = x @ w.t()
    if b is not None:
        y = y + b
    return y if act is None else getattr(y, act)()


def _w_layouts(n, k, rng):
    """weight (n, k) as contiguous, transposed and sliced views"""
    return [("contiguous", rng.standard_normal((n, k)), lambda t: t),
            ("transposed", rng.standard_normal((k, n)), lambda t: t.t()),
            ("sliced", rng.standard_normal((n, 2 * k)), lambda t: t[:, ::2])]


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("dtype", [ad.float32, ad.float64])
def test_forward_matches_numpy_every_layout(act, dtype):
    rng = np.random.default_rng(0)
    m, k, n = 6, 5, 7
    npdt = np.float32 if dtype == ad.float32 else np.float64
    for xname, xa, xmake in layouts((m, k), rng):
        for wname, wa, wmake in _w_layouts(n, k, rng):
            for bias in (None, rng.standard_normal(n), rng.standard_normal(()),
                         rng.standard_normal(1)):
                x = xmake(ad.tensor(xa, dtype=dtype))
                w = wmake(ad.tensor(wa, dtype=dtype))
                b = None if bias is None else ad.tensor(bias, dtype=dtype)
                y = F.linear(x, w, b, activation=act)
                xn, wn = np.asarray(x).astype(np.float64), np.asarray(w).astype(np.float64)
                ref = NP_ACT[act](xn @ wn.T + (0 if bias is None else bias))
                assert y.shape == (m, n) and y.dtype == dtype
                tol = 1e-5 if dtype == ad.float32 else 1e-12
                np.testing.assert_allclose(np.asarray(y), ref.astype(npdt), rtol=tol,
                                           atol=tol, err_msg=f"x {xname}, w {wname}")


@pytest.mark.parametrize("shape", [(3, 4, 5), (2, 1, 3, 5), (5,), (0, 5), (2, 0, 5), (4, 0)])
@pytest.mark.parametrize("act", ["relu", None])
def test_forward_any_rank_and_empty(shape, act):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape)
    w = rng.standard_normal((3, shape[-1]))
    b = rng.standard_normal(3)
    y = F.linear(ad.tensor(x), ad.tensor(w), ad.tensor(b), activation=act)
    assert y.shape == shape[:-1] + (3,)
    np.testing.assert_allclose(np.asarray(y), NP_ACT[act](x @ w.T + b), rtol=1e-12,
                               atol=1e-12)


def test_leading_dims_that_do_not_merge():
    """a 3-d x whose leading dims have no single row stride is copied once"""
    rng = np.random.default_rng(2)
    base = rng.standard_normal((4, 3, 5))
    x = ad.tensor(base).transpose(0, 1)  # (3, 4, 5), leading strides (5, 15)
    w = rng.standard_normal((6, 5))
    y = F.linear(x, ad.tensor(w), activation="tanh")
    np.testing.assert_allclose(np.asarray(y), np.tanh(np.swapaxes(base, 0, 1) @ w.T),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("m,k,n", [(128, 784, 512), (128, 512, 10), (1, 300, 200),
                                   (200, 300, 1), (3, 2, 4), (37, 70, 45), (5, 0, 3),
                                   (6, 300, 700)])
@pytest.mark.parametrize("act", ACTS)
def test_fused_equals_unfused_bitwise(m, k, n, act, threads):
    """2-d x: the product runs the same GEMM path as x @ w.t(), and the epilogue
    the same expressions (and SIMD maps) as the add and activation ops"""
    rng = np.random.default_rng(3)
    for dt in (np.float32, np.float64):
        x = ad.from_numpy(rng.standard_normal((m, k)).astype(dt))
        w = ad.from_numpy(rng.standard_normal((n, k)).astype(dt))
        b = ad.from_numpy(rng.standard_normal(n).astype(dt))
        for bias in (b, None):
            got = np.asarray(F.linear(x, w, bias, activation=act))
            want = np.asarray(unfused(x, w, bias, act))
            assert np.array_equal(got, want), (dt, bias is None)
            # the transposed weight (a (k, n) matrix viewed as (n, k)) too
            wt = ad.from_numpy(np.ascontiguousarray(np.asarray(w).T)).t()
            assert np.array_equal(np.asarray(F.linear(x, wt, bias, activation=act)),
                                  np.asarray(unfused(x, wt, bias, act)))


@pytest.mark.parametrize("act", ACTS)
def test_gradcheck_layouts(act):
    rng = np.random.default_rng(4)
    m, k, n = 4, 3, 5
    for xname, xa, xmake in layouts((m, k), rng):
        for wname, wa, wmake in _w_layouts(n, k, rng):
            ba = rng.standard_normal(n)
            check_grad(lambda x, w, b: F.linear(x, w, b, activation=act), [xa, wa, ba],
                       make=lambda i, t: (xmake, wmake, lambda v: v)[i](t))
            check_grad(lambda x, w: F.linear(x, w, activation=act), [xa, wa],
                       make=lambda i, t: (xmake, wmake)[i](t))


@pytest.mark.parametrize("act", ["relu", "sigmoid", None])
def test_gradcheck_bias_broadcast_and_nd(act):
    rng = np.random.default_rng(5)
    # a one-element bias broadcasts over the outputs; its gradient is the sum
    check_grad(lambda x, w, b: F.linear(x, w, b, activation=act),
               [rng.standard_normal((2, 3, 4)), rng.standard_normal((5, 4)),
                rng.standard_normal(())])
    check_grad(lambda x, w, b: F.linear(x, w, b, activation=act),
               [rng.standard_normal(4), rng.standard_normal((5, 4)), rng.standard_normal(1)])
    # a bias viewed through a broadcast
    check_grad(lambda x, w, b: F.linear(x, w, b.broadcast_to((5,)), activation=act),
               [rng.standard_normal((3, 4)), rng.standard_normal((5, 4)),
                rng.standard_normal(1)])


@pytest.mark.parametrize("act", ACTS)
def test_backward_matches_unfused(act, threads):
    """the MLP layer's shapes, float32: the fused backward (mask and bias sums in
    one pass, w's gradient as g^T x) against the unfused ops' gradients"""
    rng = np.random.default_rng(6)
    x = ad.Var(rng.standard_normal((128, 784)).astype(np.float32))
    w = ad.Var((rng.standard_normal((512, 784)) * 0.05).astype(np.float32))
    b = ad.Var(rng.standard_normal(512).astype(np.float32))
    gy = ad.from_numpy(rng.standard_normal((128, 512)).astype(np.float32))
    ga = (F.linear(x, w, b, activation=act) * gy).sum().backward()
    gb = (unfused(x, w, b, act) * gy).sum().backward()
    for v in (x, w, b):
        np.testing.assert_allclose(np.asarray(ga[v]), np.asarray(gb[v]), rtol=2e-5,
                                   atol=2e-5)
    # a broadcast incoming gradient (from sum) takes the same path
    ga = F.linear(x, w, b, activation=act).sum().backward()
    gb = unfused(x, w, b, act).sum().backward()
    for v in (x, w, b):
        np.testing.assert_allclose(np.asarray(ga[v]), np.asarray(gb[v]), rtol=2e-5,
                                   atol=2e-5)


def test_relu_gradient_is_zero_where_the_output_is_zero():
    x = ad.Var(np.array([[1.0, -1.0]]))
    w = ad.Var(np.array([[1.0, 1.0], [2.0, 0.0]]))  # pre-activations 0 and 2
    b = ad.Var(np.array([0.0, 0.0]))
    g = F.linear(x, w, b, activation="relu").sum().backward()
    np.testing.assert_array_equal(np.asarray(g[b]), [0.0, 1.0])
    np.testing.assert_array_equal(np.asarray(g[w]), [[0.0, 0.0], [1.0, -1.0]])
    np.testing.assert_array_equal(np.asarray(g[x]), [[2.0, 0.0]])


def test_only_the_tracked_inputs_get_gradients():
    rng = np.random.default_rng(7)
    x = ad.tensor(rng.standard_normal((3, 4)))
    w = ad.tensor(rng.standard_normal((2, 4)))
    b = ad.Var(rng.standard_normal(2))
    g = F.linear(x, w, b, activation="tanh").sum().backward()
    y = np.tanh(np.asarray(x) @ np.asarray(w).T + np.asarray(b))
    np.testing.assert_allclose(np.asarray(g[b]), (1 - y * y).sum(0), rtol=1e-12)
    wv = ad.Var(np.asarray(w))
    g = F.linear(x, wv).sum().backward()
    np.testing.assert_allclose(np.asarray(g[wv]), np.ones((3, 2)).T @ np.asarray(x),
                               rtol=1e-12)


def test_module_runs_the_fused_op():
    lin = ad.nn.Linear(4, 3)
    x = ad.tensor(np.random.default_rng(8).standard_normal((2, 4)), dtype=ad.float32)
    y = lin(x)
    assert y.op == "linear"
    np.testing.assert_array_equal(np.asarray(y), np.asarray(x @ lin.weight.t() + lin.bias))
    lin0 = ad.nn.Linear(4, 3, bias=False)
    np.testing.assert_array_equal(np.asarray(lin0(x)), np.asarray(x @ lin0.weight.t()))


def test_errors_name_the_function_and_shapes():
    x = ad.zeros((2, 3))
    with pytest.raises(ad.ShapeError, match=r"linear: input .*\(2, 3\).* weight .*\(4, 5\)"):
        F.linear(x, ad.zeros((4, 5)))
    with pytest.raises(ad.ShapeError, match=r"linear: bias .*\(3,\).* must have shape \(4,\)"):
        F.linear(x, ad.zeros((4, 3)), ad.zeros(3))
    with pytest.raises(ad.ShapeError, match="must be 2-d"):
        F.linear(x, ad.zeros((1, 4, 3)))
    with pytest.raises(ad.DTypeError, match="linear"):
        F.linear(x, ad.zeros((4, 3), dtype=ad.float64))
    with pytest.raises(ad.DTypeError, match="linear"):
        F.linear(ad.zeros((2, 3), dtype=ad.int64), ad.zeros((4, 3), dtype=ad.int64))
    with pytest.raises(ad.InvalidArgumentError, match="activation"):
        F.linear(x, ad.zeros((4, 3)), activation="gelu")
    with pytest.raises(ad.ShapeError, match="linear"):
        F.linear(ad.zeros(()), ad.zeros((4, 3)))


def test_native_entry_rejects_bad_arguments():
    from pyautodiff._lib import lib
    from pyautodiff.tensor import _call

    x, w = ad.zeros((2, 3)), ad.zeros((4, 3))
    with pytest.raises(ad.Error, match="activation 9"):
        _call(lib.AD_OP_LINEAR_ACT, (x, w), (9,), ())
    with pytest.raises(ad.Error, match="linear"):
        _call(lib.AD_OP_LINEAR, (x,), (), ())
    with pytest.raises(ad.Error, match="linear"):
        _call(lib.AD_OP_LINEAR, (x, w, ad.zeros(4), ad.zeros(4)), (), ())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("act", ACTS)
def test_strided_and_flipped_bias_and_input(dtype, act):
    # a bias of any stride (a slice with a step, a flipped one) and an input
    # whose leading dims step backwards (flip) give numpy's values: the
    # epilogue read b[j] whatever the stride (past the end of a flipped bias)
    # and a flipped input's rows as row 0 or past its buffer
    rng = np.random.default_rng(31)
    n, k = 37, 20
    w = rng.standard_normal((n, k)).astype(dtype)
    wide = rng.standard_normal(3 * n).astype(dtype)
    xs = rng.standard_normal((2, 5, k)).astype(dtype)
    tw = ad.tensor(w)
    biases = [(ad.tensor(wide)[::3], wide[::3]), (ad.tensor(wide)[n - 1::-1], wide[n - 1::-1]),
              (ad.tensor(wide)[2 * n - 1:n - 1:-1], wide[2 * n - 1:n - 1:-1]), (None, None)]
    inputs = [(ad.flip(ad.tensor(xs[0]), 0), xs[0][::-1]), (ad.flip(ad.tensor(xs), 1), xs[:, ::-1]),
              (ad.flip(ad.tensor(xs), 0), xs[::-1]), (ad.tensor(xs), xs)]
    tol = dict(rtol=2e-5, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    for tb, b in biases:
        for tx, x in inputs:
            z = x.astype(np.float64) @ w.T.astype(np.float64) + (0 if b is None else b)
            got = F.linear(tx, tw, tb, activation=act).numpy()
            np.testing.assert_allclose(got, NP_ACT[act](z), **tol)
    check_grad(lambda x, w, b: F.linear(ad.flip(x, 0), w, b[::2], activation=act),
               [rng.standard_normal((4, 3)), rng.standard_normal((5, 3)),
                rng.standard_normal(10)])
